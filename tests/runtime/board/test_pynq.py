"""The PYNQ transport's code that runs without a board (python/tvm_tensil/runtime/board/pynq.py): a fake
`pynq` module stands in for the board's allocator and DMA."""

import sys
import types

import numpy as np
import pytest

from tvm_tensil.arch import PRESETS
from tvm_tensil.isa import DataMove, Direction, Program
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.runtime.board import Driver, DriverError
from tvm_tensil.runtime.board.pynq import PynqTransport, aligned_window


class FakeBuffer(np.ndarray):
    flushed = invalidated = freed = 0

    def flush(self):
        FakeBuffer.flushed += 1

    def invalidate(self):
        FakeBuffer.invalidated += 1

    def freebuffer(self):
        FakeBuffer.freed += 1


def fake_pynq(monkeypatch, sent):
    mod = types.ModuleType("pynq")
    next_address = [0x1F01_2340]  # CMA addresses are page-aligned at best, not 64 KiB aligned

    def allocate(shape, dtype):
        buf = np.zeros(shape, dtype).view(FakeBuffer)
        buf.physical_address = next_address[0]
        next_address[0] += (buf.nbytes + 4095) // 4096 * 4096
        return buf

    class Channel:
        def transfer(self, buf):
            sent.append(bytes(buf))

        def wait(self):
            pass

    class Overlay:
        def __init__(self, bitstream, download=True):
            self.axi_dma_0 = types.SimpleNamespace(sendchannel=Channel())
            self.ip_dict = {"axi_dma_0": {}}

    mod.allocate, mod.Overlay = allocate, Overlay
    mod.PL = types.SimpleNamespace(bitfile_name="loaded.bit")
    monkeypatch.setitem(sys.modules, "pynq", mod)


def test_aligned_window_math():
    assert aligned_window(0x1000_0000, 100) == (0, 100 + 65536)
    off, size = aligned_window(0x1F01_2340, 4096)
    assert (0x1F01_2340 + off) % 65536 == 0 and off + 4096 <= size


def test_driver_over_the_pynq_transport(monkeypatch):
    sent = []
    fake_pynq(monkeypatch, sent)
    arch = PRESETS["pynqz1"].replace(dram0_depth=4096, dram1_depth=4096)
    transport = PynqTransport(arch, bitstream="tensil_pynqz1.bit")
    driver = Driver(arch, transport, timeout=1.0)
    assert driver.use_probe  # a PYNQ overlay shows completion only through DRAM
    for buf in driver.dram:
        assert buf.physical_address % 65536 == 0
    program = Program.from_instructions([DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 1)], layout_of(arch))
    # Nothing runs the stream here, so the probe never lands: a clear timeout.
    with pytest.raises(DriverError, match="did not complete within 1 s"):
        driver.run(program)
    (stream,) = sent
    assert len(stream) % 8 == 0  # whole 64-bit beats
    words = Program(stream, layout_of(arch)).instructions()
    assert words[0].value == driver.dram[0].physical_address >> 16
    assert FakeBuffer.flushed >= 2  # the windows were flushed before streaming
    transport.close()
    assert FakeBuffer.freed >= 2


def test_the_wrong_dma_name_lists_the_overlay_ip(monkeypatch):
    fake_pynq(monkeypatch, [])
    with pytest.raises(DriverError, match="no AXI DMA named 'dma_x'.*axi_dma_0"):
        PynqTransport(PRESETS["pynqz1"], dma="dma_x")


def test_without_pynq_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynq", None)
    with pytest.raises(DriverError, match="pip install 'tvm-tensil\\[board\\]'"):
        PynqTransport(PRESETS["pynqz1"])
