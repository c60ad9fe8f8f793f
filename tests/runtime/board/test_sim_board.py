"""The board path without a board: driver -> shared memory -> `tvm-tensil serve` process -> Verilated
core (python/tvm_tensil/runtime/board/), bit-identical with the emulator, and its failure cases."""

import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from tvm_tensil.arch import Architecture
from tvm_tensil.isa import DataMove, Direction, MatMul, Program
from tvm_tensil.isa.layout import layout_of
from tvm_tensil.runtime import DeviceError, Emulator, get_device
from tvm_tensil.runtime.board import Driver, DriverError
from tvm_tensil.runtime.board.sim_board import SimBoardTransport
from tvm_tensil.runtime.differential import compare, random_programs

ARCH = Architecture("FP16BP8", 4, 256, 256, 64, 32, stride0_depth=4, stride1_depth=4, name="board_4x4")


def start_server(arch, *extra):
    folder = tempfile.mkdtemp(prefix="tvm_tensil_test_")
    sock = os.path.join(folder, "board.sock")
    tarch = os.path.join(folder, "arch.tarch")
    with open(tarch, "w") as f:
        f.write(arch.to_json())
    proc = subprocess.Popen(
        [sys.executable, "-m", "tvm_tensil.cli", "serve", "--arch", tarch, "--socket", sock, *extra],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not os.path.exists(sock):
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    return proc, sock


@pytest.fixture(scope="module")
def server():
    proc, sock = start_server(ARCH)
    yield sock
    proc.terminate()
    proc.wait(10)


def test_random_programs_match_the_emulator_over_shared_memory(server):
    dev = get_device("sim-board", ARCH, socket_path=server)
    emu = Emulator(ARCH)
    for i, body, dram in random_programs(ARCH, 60, seed=7):
        diff = compare(emu, dev, body, dram)
        assert diff is None, f"program {i}: {diff}"
    dev.close()


def test_driver_layout_preamble_padding_and_probe(server):
    """What the PYNQ transport shares with this one: 64 KiB windows, Configure offsets, NoOp padding,
    the completion probe."""
    transport = SimBoardTransport(ARCH, server)
    driver = Driver(ARCH, transport, probe=True)
    for buf in driver.dram:
        assert buf.physical_address % (1 << 16) == 0 and buf.physical_address > 0
    assert driver.dram[1].physical_address >= driver.dram[0].physical_address + driver.dram[0].array.size
    program = Program.from_instructions(
        [
            DataMove(Direction.DRAM0_TO_LOCAL, 0, 3, 2),
            MatMul(0, 0, 2, accumulate=False),
            DataMove(Direction.LOCAL_TO_DRAM1, 0, 9, 2),
        ],
        layout_of(ARCH),
    )
    stream = driver.stream_bytes_for(program)
    assert len(stream) % transport.stream_bytes == 0
    words = Program(stream, layout_of(ARCH)).instructions()
    head = [(w.register, w.value) for w in words[:3]]
    assert head[0] == (0, driver.dram[0].physical_address >> 16)  # DRAM0 offset
    assert head[1] == (4, driver.dram[1].physical_address >> 16)  # DRAM1 offset
    assert words[3:6] == program.instructions()
    last = ARCH.dram0_depth - 1
    assert words[6:8] == [
        DataMove(Direction.DRAM0_TO_LOCAL, ARCH.local_depth - 1, last, 1),
        DataMove(Direction.LOCAL_TO_DRAM0, ARCH.local_depth - 1, last - 1, 1),
    ]
    assert all(type(w).__name__ == "NoOp" for w in words[8:])
    # The probe's two vectors are the driver's; the rest of DRAM0 is the user's.
    with pytest.raises(DriverError, match="last two hold the completion probe"):
        driver.write(0, ARCH.dram0_depth - 2, np.zeros((1, 4)))
    data = np.arange(8).reshape(2, 4) * 256
    driver.write(0, 3, data)
    driver.run(program)
    assert (driver.read(1, 9, 2) == driver.read(0, 3, 2)).all()  # copied through local memory
    driver.run(program)  # a second run: a fresh marker, the probe still completes
    transport.close()


def test_a_program_that_raises_the_error_flag_is_a_failed_run(server):
    """An opcode the core does not know (what a corrupted stream would hold) sets the core's error
    flag; the server reports the run as failed, with the flag's meaning, and resets the core."""
    transport = SimBoardTransport(ARCH, server)
    lay = layout_of(ARCH)
    bad = (0x6 << (lay.instruction_bytes * 8 - 4)).to_bytes(lay.instruction_bytes, "little")
    transport.stream(bad + bytes(-len(bad) % transport.stream_bytes))
    with pytest.raises(DriverError, match=r"raised its error flag \(an invalid opcode or DataMove direction\)"):
        transport.wait(lambda: True, 60)
    transport.close()


def test_an_oversized_input_is_rejected_before_anything_is_written(server):
    dev = get_device("sim-board", ARCH, socket_path=server)
    dev.write_dram(1, 250, np.full((6, 4), 7))
    with pytest.raises(ValueError, match="outside the bank"):
        dev.write_dram(1, 250, np.full((7, 4), 9))
    assert (dev.read_dram(1, 250, 6) == 7).all()
    dev.close()


def test_a_core_without_the_architectures_extensions_is_refused(server):
    """A model built for the window MatMul and the SIMD ReLU flag, on a plain core (a bitstream
    built without them): the device is refused when made, one line for each, not wrong numbers."""
    from tvm_tensil.runtime.board.device import BoardDevice

    claims = ARCH.replace(window_matmul=True, simd_relu=True, name="board_4x4_extended")
    with pytest.raises(DeviceError) as e:
        BoardDevice(claims, SimBoardTransport(ARCH, server))
    relu, window = str(e.value).splitlines()
    assert "lacks the SIMD ReLU flag that architecture 'board_4x4_extended' has" in relu
    assert "other numbers than the emulator" in relu  # a plain core ignores the flag
    assert "lacks the window MatMul" in window and "error flag" in window  # and skips a window MatMul
    SimBoardTransport(ARCH, server, connect_timeout=30).close()  # the refused device let the board go


def test_a_second_client_waits_until_the_first_leaves(server):
    first = SimBoardTransport(ARCH, server)
    with pytest.raises(DriverError, match="did not greet within 1 s .*busy with another client"):
        SimBoardTransport(ARCH, server, connect_timeout=1.0)  # queued: no greeting while the first is on
    first.close()
    second = SimBoardTransport(ARCH, server, connect_timeout=30)  # served once the first is gone
    second.close()


def test_the_server_survives_a_client_killed_mid_run(server):
    # A client that streams a long program and is killed while it runs.
    script = f"""
import sys, time
from tvm_tensil.arch import Architecture
from tvm_tensil.runtime.board import Driver
from tvm_tensil.runtime.board.sim_board import SimBoardTransport
from tvm_tensil.isa import MatMul, Program
from tvm_tensil.isa.layout import layout_of
arch = Architecture.from_dict({ARCH.to_dict()!r})
driver = Driver(arch, SimBoardTransport(arch, {server!r}))
program = Program.from_instructions([MatMul(0, 0, 30, zeroes=True)] * 200000, layout_of(arch))
driver.transport.stream(driver.stream_bytes_for(program))
print("streaming", flush=True)
time.sleep(60)
"""
    client = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert client.stdout.readline().strip() == "streaming"
    time.sleep(0.5)
    client.send_signal(signal.SIGKILL)
    client.wait(10)
    # The next client gets a fresh core and correct results.
    dev = get_device("sim-board", ARCH, socket_path=server)
    emu = Emulator(ARCH)
    for i, body, dram in random_programs(ARCH, 5, seed=11):
        assert compare(emu, dev, body, dram) is None
    dev.close()


def test_a_hung_core_times_out_with_a_clear_error_and_the_server_recovers():
    proc, sock = start_server(ARCH, "--read-latency", "1000000000", "--stall-limit", "2000000000")
    try:
        dev = get_device("sim-board", ARCH, socket_path=sock, timeout=3.0)
        program = Program.from_instructions([DataMove(Direction.DRAM0_TO_LOCAL, 0, 0, 4)], layout_of(ARCH))
        start = time.monotonic()
        with pytest.raises(DeviceError, match="did not complete within 3 s"):
            dev.execute(program)
        assert time.monotonic() - start < 30
        # The server dropped that run and serves the next client.
        SimBoardTransport(ARCH, sock, connect_timeout=30).close()
    finally:
        proc.terminate()
        proc.wait(10)
    # Terminated, the server removed its socket file and did not linger (it skips TVM's teardown).
    assert proc.returncode == 0 and not os.path.exists(sock)


def test_a_stopped_server_is_a_clear_error_within_the_time_limit():
    """A server stopped (SIGSTOP) after accepting: connecting and greeting fail within the client's
    limit, naming the server, instead of hanging."""
    import signal

    proc, sock = start_server(ARCH)
    try:
        proc.send_signal(signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(DriverError, match=f"simulated board at {sock} did not greet within 2 s"):
            SimBoardTransport(ARCH, sock, connect_timeout=2)
        assert time.monotonic() - start < 20
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        # (SIGTERM may land on another thread than the main one: see the next test)
        proc.wait(30)


def test_a_server_whose_sigterm_lands_on_another_thread_still_ends():
    """A signal sent to the process may be delivered to any of its threads (numpy's BLAS pool
    among them); the idle server, blocked waiting for a client, still runs its handler and ends."""
    import ctypes
    import platform

    tgkill = {"x86_64": 234, "aarch64": 131}.get(platform.machine())
    if tgkill is None:
        pytest.skip(f"tgkill's system call number on {platform.machine()} is not listed here")
    proc, sock = start_server(ARCH)
    try:
        others = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
        if not others:
            pytest.skip("the server has one thread: every signal reaches its main thread")
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(tgkill, proc.pid, others[0], signal.SIGTERM) == 0, os.strerror(ctypes.get_errno())
        proc.wait(30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0 and not os.path.exists(sock)


def test_a_server_for_another_architecture_is_refused(server):
    other = ARCH.replace(local_depth=128)
    with pytest.raises(DriverError, match="runs architecture 'board_4x4'"):
        SimBoardTransport(other, server)


@pytest.mark.parametrize("model", ["small_cnn", "resnet20v2"])
def test_models_run_bit_identical_through_the_simulated_board(model):
    """Driver -> shared memory -> server process -> Verilated core, against the in-process emulator."""
    import zoo

    from helpers import outputs_on_devices

    onnx_model, shape = {
        "small_cnn": (zoo.small_cnn(), (1, 3, 16, 16)),
        "resnet20v2": (zoo.resnet20v2(), (1, 3, 32, 32)),
    }[model]
    outs = outputs_on_devices(onnx_model, shape, ("emulator", "sim-board"), seed=3).outputs
    assert np.array_equal(outs["emulator"], outs["sim-board"])


def test_a_private_server_ends_with_its_client():
    """device("sim-board") without a socket starts its own server, which must not outlive the process."""
    script = f"""
import os
from tvm_tensil.arch import Architecture
from tvm_tensil.runtime import get_device
dev = get_device("sim-board", Architecture.from_dict({ARCH.to_dict()!r}))
print(dev.transport.process.pid, flush=True)
os._exit(0)  # no cleanup of any kind
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    pid = int(r.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError("the private server outlived its client")


def test_the_server_frees_its_core_once_even_if_closed_from_a_signal_handler(tmp_path):
    """SIGTERM's handler calls close() and then ends the process; it may land while the server is
    freeing its core (closing after its client, or making a new core for the next): the core is freed
    exactly once."""
    from tvm_tensil.runtime.board.serve import SimBoardServer

    for freeing in ("close", "new_core"):
        server = SimBoardServer(ARCH, str(tmp_path / f"{freeing}.sock"))
        server.new_core()
        real, freed = server.lib, []

        class Interrupted:  # the library, with a SIGTERM arriving as the core is freed
            def __getattr__(self, name):
                return getattr(real, name)

            def tcu_sim_free(self, core):
                freed.append(core)
                server.close()  # the handler
                raise SystemExit(0)  # ... and os._exit: the interrupted call never goes on

        server.lib = Interrupted()
        with pytest.raises(SystemExit):
            getattr(server, freeing)()
        assert len(freed) == 1, freeing
        real.tcu_sim_free(freed[0])


def test_a_client_that_sees_the_socket_file_can_connect(tmp_path, monkeypatch):
    """The socket file appears only once the server listens: a client started alongside the server
    (waiting for the file, as `start_server` does) is never refused, however slow the server is
    between binding and listening."""
    import socket as sockets
    import threading

    from tvm_tensil.runtime.board import serve

    class SlowToListen(sockets.socket):
        def listen(self, *args):
            time.sleep(1.0)  # a loaded machine, between bind and listen
            return super().listen(*args)

    monkeypatch.setattr(serve.socket, "socket", SlowToListen)
    path = str(tmp_path / "board.sock")
    server = serve.SimBoardServer(ARCH, path, log=lambda msg: None)
    # (daemon: a server still waiting for a client that was refused does not hold up pytest's exit)
    thread = threading.Thread(target=server.serve_forever, kwargs={"max_clients": 1}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        SimBoardTransport(ARCH, path, connect_timeout=10).close()
    finally:
        thread.join(30)
    assert not thread.is_alive()  # it served its one client


def test_weights_streamed_from_dram0_stay_correct_run_after_run():
    """A model with constants in DRAM0 (a dense layer streaming its weights from both banks): they
    sit below DRAM0's last page, which the driver's completion probe writes every run, so the
    second and third runs (constants not written again) give the emulator's bits too (the third's
    products round to ties)."""
    from helpers import dense_graph, tie_bound, tie_input
    from tvm_tensil.arch import PRESETS
    from tvm_tensil.compiler import CompileOptions, compile_graph

    arch = PRESETS["pynqz1"]
    graph, x, _ = dense_graph(120, 40, True, seed=5)
    model = compile_graph(graph, arch, "dense", options=CompileOptions(stream_dense=(0, 1))).model(graph.constants)
    ((entry, _),) = model.dram0_consts
    assert entry.base + entry.size <= arch.dram0_depth - 2  # clear of the probe's vectors
    board, emu = get_device("sim-board", arch), Emulator(arch)
    try:
        w, b = graph.constants
        # Three inputs, the constants written once: two computed exactly, one whose products tie.
        for given, on_grid in ((x, True), (-x, True), (tie_input(120, seed=5), False)):
            y = board.run_model(model, {"x": given})["y"]
            np.testing.assert_array_equal(y, emu.run_model(model, {"x": given})["y"])
            error = np.abs(y.reshape(1, -1) - (given.reshape(1, -1) @ w + b))
            assert (error == 0).all() if on_grid else (error <= tie_bound(given, w)).all()
        assert board.resident_dram0.writes == 1
    finally:
        board.close()
