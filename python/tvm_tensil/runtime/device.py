"""The device interface every TCU backend implements (emulator, Verilated RTL, boards).

A device owns DRAM0/DRAM1 and executes programs. Subclasses implement four primitives;
``run_model`` (load constants and inputs, execute, read outputs) is shared, so a model
runs the same way on every device.
"""

from __future__ import annotations

import time
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar, Mapping

import numpy as np

from ..arch import Architecture
from ..isa.instructions import Opcode
from ..isa.program import Program, ProgramError, ProgramSummary
from ..model import ModelError, TensilModel, tensor_to_vectors, vectors_for_shape, vectors_to_tensor
from ..numbers import SaturationCounter
from .weights import ResidentDram0Consts, ResidentWeights

__all__ = ["Device", "HostDramDevice", "RunStats", "SaturationWarning", "DeviceError", "as_vectors"]


def as_vectors(vectors, n: int) -> np.ndarray:
    """``vectors`` as a (k, n) array, or ValueError naming the shape expected."""
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape[1] != n:
        raise ValueError(f"DRAM writes take (k, {n}) arrays of vectors, got shape {vectors.shape}")
    return vectors


class DeviceError(RuntimeError):
    """A device could not run a program (not an invalid program: that is ProgramError)."""


class SaturationWarning(UserWarning):
    """Values were clipped to the data type's range during a run (silent in hardware)."""


@dataclass
class RunStats:
    """What one program run did."""

    instructions: int = 0
    per_opcode: dict[str, int] = field(default_factory=dict)  # instructions by opcode name
    vectors: dict[str, int] = field(default_factory=dict)  # vectors moved/processed by opcode
    saturations: dict[str, int] = field(default_factory=dict)  # clipped scalars by opcode
    cycles: int | None = None  # devices that model time report cycles
    seconds: float = 0.0  # wall time of the run
    busy: dict[str, int] = field(default_factory=dict)  # cycles each unit was busy (RTL devices)
    # Devices that only have the core's sticky saturation flag (no counts) set this instead.
    saturation_flag: bool = False
    clock_mhz: float | None = None  # the architecture's clock, to turn cycles into time

    @classmethod
    def for_program(cls, summary: ProgramSummary, arch: Architecture | None = None) -> "RunStats":
        """Instructions and vectors per opcode of a checked program (``Program.check()``) run on
        a device for ``arch``."""
        stats = cls(instructions=summary.instructions, clock_mhz=arch.clock_mhz if arch is not None else None)
        for op in Opcode:
            stats.per_opcode[op.name.lower()] = int(summary.counts[int(op)])
            stats.vectors[op.name.lower()] = int(summary.vectors[int(op)])
        return stats

    @property
    def milliseconds(self) -> float | None:
        """The cycles at the architecture's clock (None without either)."""
        if self.cycles is None or not self.clock_mhz:
            return None
        return self.cycles / (self.clock_mhz * 1e3)

    @property
    def saturated(self) -> int:
        return sum(self.saturations.values())

    def summary(self) -> str:
        """A readable table: totals, then per opcode the instructions, vectors and saturated scalars,
        then per unit the share of cycles it was busy (devices that count cycles)."""
        head = f"{self.instructions} instructions"
        if self.cycles is not None:
            head += f", {self.cycles} cycles"
            if self.milliseconds is not None:
                head += f" ({self.milliseconds:.3f} ms at {self.clock_mhz:g} MHz)"
        lines = [head + f"; {self.seconds:.3f} s on the device"]
        rows = [(op, n, self.vectors.get(op, 0), self.saturations.get(op, 0)) for op, n in self.per_opcode.items() if n]
        if rows:
            lines.append(f"  {'opcode':<12}{'instructions':>13}{'vectors':>10}{'saturated':>11}")
            lines += [f"  {op:<12}{n:>13}{v:>10}{s:>11}" for op, n, v, s in sorted(rows)]
        if self.busy and self.cycles:
            lines.append("  busy: " + ", ".join(f"{k} {v / self.cycles:.0%}" for k, v in self.busy.items()))
        if self.saturated:
            lines.append(f"  saturated scalars: {self.saturated}")
        elif self.saturation_flag:
            lines.append("  saturated scalars: some (the core's flag says so; it does not count them)")
        else:
            lines.append("  saturated scalars: 0")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the table
        printer.text(self.summary())


class Device(ABC):
    """A TCU that holds DRAM0/DRAM1 and runs programs for one architecture."""

    name: ClassVar[str]

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.last_stats: RunStats | None = None
        # The models whose constants DRAM1 holds: run_model writes them once per model, not per call.
        # Any other write to DRAM1 (by write_dram or by a program) forgets the models it overwrites.
        self.resident_weights = ResidentWeights(arch)
        # Likewise the models whose DRAM0 constants DRAM0 holds (forgotten when written over).
        self.resident_dram0 = ResidentDram0Consts()

    # -- primitives --------------------------------------------------------------------------
    @abstractmethod
    def write_dram(self, bank: int, base: int, vectors: np.ndarray) -> None:
        """Write (k, N) fixed-point integers to DRAM ``bank`` (0 or 1) at vector ``base``."""

    @abstractmethod
    def read_dram(self, bank: int, base: int, size: int) -> np.ndarray:
        """Read ``size`` vectors from DRAM ``bank`` as (size, N) int64."""

    @abstractmethod
    def execute(self, program: Program) -> RunStats:
        """Run a program to completion. Invalid programs raise before anything executes."""

    def reset(self) -> None:
        """Return the device to its power-on state (override if it keeps more)."""

    # -- shared helpers ----------------------------------------------------------------------
    def check(self, program: Program) -> ProgramSummary:
        """Every check a device makes before running anything; the program's summary."""
        if program.layout.arch != self.arch:
            raise ProgramError(f"{program.name} was encoded for another architecture than this {self.name} device's")
        summary = program.check()
        if summary.writes_dram1:
            self.resident_weights.clear()
        if summary.dram0_writes is not None:
            first, end = summary.dram0_writes
            self.resident_dram0.forget(first, end - first)
        if summary.first_loadlut is not None:
            pc = summary.first_loadlut
            raise ProgramError(
                f"{program.name}: pc {pc}: LoadLUT: the TCU has no lookup tables "
                "(no architecture parameter provides them); remove the instruction",
                pc=pc,
            )
        return summary

    def _overwritten(self, bank: int, base: int, size: int) -> None:
        """DRAM ``bank`` vectors ``base .. base+size-1`` are written: the constants there are gone."""
        if bank == 1:
            self.resident_weights.forget(base, size)
        else:
            self.resident_dram0.forget(base, size)

    def _check_range(self, bank: int, base: int, size: int) -> None:
        if bank not in (0, 1):
            raise ValueError(f"DRAM bank must be 0 or 1, got {bank!r}")
        depth = self.arch.dram0_depth if bank == 0 else self.arch.dram1_depth
        if base < 0 or size < 0 or base + size > depth:
            raise ValueError(
                f"DRAM{bank} access of {size} vectors at {base} is outside the bank (dram{bank}_depth = {depth})"
            )

    def run_model(
        self,
        model: TensilModel,
        inputs: Mapping[str, np.ndarray],
        warn_saturation: bool = True,
    ) -> dict[str, np.ndarray]:
        """Run a Tensil model on float inputs; returns float outputs by name.

        Inputs are converted to the model's fixed-point type and laid out as the model's
        DRAM0 map says (docs/isa.md). If the model records output shapes, outputs come
        back in those shapes; otherwise as (vectors, N).
        """
        if model.arch != self.arch:
            raise DeviceError(
                f"model '{model.name}' was compiled for a different architecture than this "
                f"{self.name} device ({model.arch.name or 'unnamed'} vs {self.arch.name or 'unnamed'})"
            )
        dt = self.arch.data_type
        n = self.arch.array_size
        names = model.input_names()
        missing = [k for k in names if k not in inputs]
        extra = [k for k in inputs if k not in names]
        if missing or extra:
            raise ModelError(
                f"model '{model.name}' takes inputs {names}; "
                + (f"missing {missing}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"unknown {extra}" if extra else "")
            )
        # Convert every input before touching DRAM: a bad input writes nothing.
        staged = []
        for name in names:
            entries = model.entries(name)
            total = sum(e.size for e in entries)
            given = np.asarray(inputs[name])
            if not (np.issubdtype(given.dtype, np.number) or given.dtype == np.bool_):
                raise ModelError(f"input '{name}' holds {given.dtype} values, not numbers")
            x = given.astype(np.float64)
            shape = model.tensor_shape(name)
            if shape is not None and tuple(x.shape) != shape:
                raise ModelError(f"input '{name}' has shape {tuple(x.shape)}; the model expects {shape}")
            cpad = model.channels_padded(name)
            patches = model.patches(name)
            stored = patches.shape if patches else x.shape
            need = vectors_for_shape(stored, n, cpad)
            if need != total:
                raise ModelError(
                    f"input '{name}' of shape {tuple(x.shape)} takes {need} "
                    f"vectors of {n}; the model's DRAM0 map holds {total}"
                )
            if np.isnan(x).any():
                raise ModelError(f"input '{name}' holds NaN values; the TCU's fixed-point numbers have no NaN")
            clipped = SaturationCounter()
            scale = 2.0 ** model.shift(name)
            q = dt.from_float(x * scale, clipped)  # (saturation counted once per value, before the windows)
            vec = tensor_to_vectors(patches.gather(q) if patches else q, n, cpad, model.block_major(name))
            if warn_saturation and clipped.count:
                warnings.warn(
                    SaturationWarning(
                        f"model '{model.name}' on {self.name}: input '{name}'{model.source(name)} has "
                        f"{clipped.count} values outside its range [{dt.min_float / scale:g}, "
                        f"{dt.max_float / scale:g}] ({dt.name}"
                        + (f" at scale 2^{model.shift(name)}" if scale != 1 else "")
                        + f"), clipped to it. {_fix(model)}"
                    ),
                    stacklevel=2,
                )
            staged.append((entries, vec))
        self.reset()
        program = self.resident_weights.program_for(model, lambda base, data: self.write_dram(1, base, data))
        self.resident_dram0.ensure(model, lambda base, data: self.write_dram(0, base, data))
        for entries, vec in staged:
            pos = 0
            for e in entries:
                self.write_dram(0, e.base, vec[pos : pos + e.size])
                pos += e.size
        start = time.perf_counter()
        stats = self.execute(program)
        stats.seconds = time.perf_counter() - start
        self.last_stats = stats
        if warn_saturation and (stats.saturated or stats.saturation_flag):
            how_many = (
                f"{stats.saturated} values saturated"
                if stats.saturated
                else "values saturated (the core's flag says so; it does not count them)"
            )
            by_op = ", ".join(f"{k} {v}" for k, v in stats.saturations.items() if v)
            warnings.warn(
                SaturationWarning(
                    f"model '{model.name}' on {self.name}: {how_many} at "
                    f"the {dt.name} range [{dt.min_float:g}, {dt.max_float:g}]"
                    + (f" ({by_op})" if by_op else "")
                    + f"; outputs may be clipped. {_fix(model)}"
                ),
                stacklevel=2,
            )
        outputs = {}
        for name in model.output_names():
            vec = np.concatenate([self.read_dram(0, e.base, e.size) for e in model.entries(name, True)])
            values = dt.to_float(vec) / 2.0 ** model.shift(name, outputs=True)
            shape = model.tensor_shape(name, outputs=True)
            cpad = model.channels_padded(name, outputs=True)
            outputs[name] = (
                vectors_to_tensor(values, shape, n, cpad, model.block_major(name, outputs=True))
                if shape is not None
                else values
            )
        return outputs


def _fix(model: TensilModel) -> str:
    """What to do about values beyond the data type's range."""
    if model.extras.get("report", {}).get("calibration_samples"):
        return (
            "These inputs go beyond the calibration samples' range: calibrate with inputs like these, or use a "
            "wider data type (e.g. FP32BP16)."
        )
    return (
        "Build with calibration=sample inputs like these (each tensor then gets a scale that fits its range), "
        "or use a wider data type (e.g. FP32BP16)."
    )


class HostDramDevice(Device):
    """A device whose DRAM banks are host numpy arrays ``dram0``/``dram1`` of (depth, N) scalars in
    the data type's storage format (the emulator's, and the Verilator harness's, which reads them in
    place)."""

    dram0: np.ndarray
    dram1: np.ndarray

    def _make_banks(self) -> None:
        # np.zeros maps pages lazily: untouched DRAM costs no memory. Little-endian, as in DRAM.
        store = np.dtype(self.arch.data_type.storage).newbyteorder("<")
        self.dram0 = np.zeros((self.arch.dram0_depth, self.arch.array_size), dtype=store)
        self.dram1 = np.zeros((self.arch.dram1_depth, self.arch.array_size), dtype=store)

    def _bank(self, bank: int) -> np.ndarray:
        return self.dram0 if bank == 0 else self.dram1

    def write_dram(self, bank: int, base: int, vectors: np.ndarray) -> None:
        vectors = as_vectors(vectors, self.arch.array_size)
        self._check_range(bank, base, vectors.shape[0])
        self._overwritten(bank, base, vectors.shape[0])
        self._bank(bank)[base : base + vectors.shape[0]] = self.arch.data_type.to_storage(vectors)

    def read_dram(self, bank: int, base: int, size: int) -> np.ndarray:
        self._check_range(bank, base, size)
        return self.arch.data_type.sign_extend(self._bank(bank)[base : base + size].astype(np.int64))
