"""Does a core have the instruction set extensions its architecture says it has?

A core without one does not refuse the instructions that use it: a plain core skips a Configure of
the window register and a window MatMul (raising only its error flag, which a board's driver cannot
see) and ignores the SIMD ReLU flag. A model built for the extension would then run to completion
with wrong numbers. Boards are checked when their device is made: each extension the architecture
has runs a small program on the core, and the result must equal the emulator's bit for bit. The
programs are made so that a skipped or flagless instruction leaves a different result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arch import Architecture
from ..isa.asm import assemble
from ..isa.instructions import TapWindow
from ..isa.layout import layout_of
from .device import Device, DeviceError


@dataclass(frozen=True)
class ExtensionProbe:
    """A program using one extension: DRAM0 holds ``inputs`` from vector 0, the result is read from
    ``result`` (base, size) in DRAM0."""

    field: str  # the architecture's field (docs/isa.md)
    what: str
    text: str
    inputs: np.ndarray
    result: tuple[int, int]


def _mixed_signs(arch: Architecture, rows: int, seed: int) -> np.ndarray:
    """(rows, N) raw values of magnitude 1/4 .. 5/4, signs alternating along and across vectors."""
    n = arch.array_size
    k = np.arange(rows * n).reshape(rows, n) + seed
    sign = np.where((np.arange(rows)[:, None] + np.arange(n)[None, :] + seed) % 2, -1, 1)
    return sign * ((k % 5) + 1) * (arch.data_type.one // 4)


def probes(arch: Architecture) -> list[ExtensionProbe]:
    """One probe for each instruction set extension ``arch`` has."""
    found = []
    n = arch.array_size
    if arch.simd_relu:
        found.append(
            ExtensionProbe(
                "simd_relu",
                "the SIMD ReLU flag",
                """
                datamove dram0_to_local local=0 dram0=0 size=1
                datamove local_to_acc local=0 acc=0 size=1
                datamove local_to_acc local=0 acc=1 size=1  ; a skipped or flagless SIMD leaves x
                simd move read write relu dest=out left=in acc_read=0 acc_write=1
                datamove acc_to_local local=1 acc=1 size=1
                datamove local_to_dram0 local=1 dram0=1 size=1
                """,
                _mixed_signs(arch, 1, 0),
                (1, 1),
            )
        )
    if arch.window_matmul:
        window = TapWindow(3, 1, 1, 1)
        outputs = 4
        x = n + 1  # the weights (bias row, then one row a tap) come first
        found.append(
            ExtensionProbe(
                "window_matmul",
                "the window MatMul",
                f"""
                datamove dram0_to_local local=0 dram0=0 size={n + 1 + outputs}
                loadweights local=0 size={n + 1}
                datamove local_to_acc local={x} acc=0 size={outputs}  ; a skipped MatMul leaves x
                configure window value={window.value}
                matmul window accumulate local={x} acc=0 size={outputs}
                datamove acc_to_local local={x + outputs} acc=0 size={outputs}
                datamove local_to_dram0 local={x + outputs} dram0={x + outputs} size={outputs}
                """,
                _mixed_signs(arch, n + 1 + outputs, 1),
                (x + outputs, outputs),
            )
        )
    return found


def _run(device: Device, probe: ExtensionProbe) -> np.ndarray:
    program = assemble(probe.text, layout_of(device.arch), name=f"{probe.field} probe")
    device.write_dram(0, 0, probe.inputs)
    device.execute(program)
    return device.read_dram(0, *probe.result)


def missing_extensions(device: Device) -> list[tuple[ExtensionProbe, str]]:
    """(probe, what went wrong) for each probe of ``device``'s architecture that failed on the device
    or gave other numbers than the emulator (DRAM0's first vectors are overwritten)."""
    from .emulator import Emulator

    reference = Emulator(device.arch)
    missing = []
    for probe in probes(device.arch):
        try:
            got = _run(device, probe)
        except DeviceError as e:  # e.g. the core's error flag, where the transport sees it
            missing.append((probe, f"its test program failed: {str(e).splitlines()[0]}"))
            continue
        if not np.array_equal(got, _run(reference, probe)):
            missing.append((probe, "its test program gave other numbers than the emulator"))
    return missing


def check_extensions(device: Device) -> None:
    """Raise ``DeviceError`` (one line for each) if the core lacks an extension its architecture has."""
    missing = missing_extensions(device)
    if missing:
        raise DeviceError(
            "\n".join(
                f"the {device.name} device's core lacks {p.what} that architecture "
                f"'{device.arch.name or 'custom'}' has (tvm_tensil.{p.field}; {why}): load a bitstream "
                "built for this architecture, or build the model for an architecture without it"
                for p, why in missing
            )
        )
