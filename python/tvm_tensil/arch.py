"""TCU architecture: the one hardware description that drives every part (docs/isa.md).

An ``Architecture`` is what a ``.tarch`` JSON file holds. The compiler, the emulator, the RTL
parameter generator and the drivers all take one; nothing copies its values by hand.

Our extensions (board name, clock, AXI data width) live under a ``"tvm_tensil"`` key, which
other Tensil readers ignore; ``to_dict(plain=True)`` leaves it out.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .numbers import DATA_TYPES, DataType, data_type

__all__ = [
    "Architecture",
    "ArchitectureError",
    "PRESETS",
    "BENCHMARK_PRESETS",
    "load_arch",
    "preset_names",
]

# The keys of a Tensil .tarch file, in the order Tensil writes them.
TARCH_KEYS = (
    "data_type",
    "array_size",
    "dram0_depth",
    "dram1_depth",
    "local_depth",
    "accumulator_depth",
    "simd_registers_depth",
    "stride0_depth",
    "stride1_depth",
    "number_of_threads",
    "thread_queue_depth",
)
EXTENSION_KEY = "tvm_tensil"
EXTENSION_FIELDS = ("name", "board", "part", "clock_mhz", "axi_data_width", "window_matmul", "simd_relu")
# Extensions of the instruction set: a program using one cannot run without it, so they stay in
# the architecture a model file carries.
ISA_EXTENSION_FIELDS = ("window_matmul", "simd_relu")

# Allowed ranges, inclusive. Local/accumulator depths follow the Tensil reference
# (up to 2**16 vectors); DRAM banks are addressed with at most 32 bits.
_INT_RANGES = {
    "array_size": (2, 256),
    "dram0_depth": (2, 1 << 32),
    "dram1_depth": (2, 1 << 32),
    "local_depth": (2, 1 << 16),
    "accumulator_depth": (2, 1 << 16),
    "simd_registers_depth": (0, 16),
    "stride0_depth": (1, 32),
    "stride1_depth": (1, 32),
    "number_of_threads": (1, 1),
    "thread_queue_depth": (1, 1 << 16),
}
_AXI_WIDTHS = (32, 64, 128, 256, 512)

# DRAM timing seen by the core, in core cycles: the Verilator device's memory model and the
# compiler's latency model share it. Assumed defaults, not measurements of a board
# (docs/verilator.md): first read beat 32 cycles after the request, write response 16 cycles after
# the last beat, up to 8 read bursts in flight.
MEMORY_TIMING = {"read_latency": 32, "write_latency": 16, "max_reads": 8}


# The memories instructions address, and the field that holds each one's depth in vectors.
DEPTH_FIELDS = {"local": "local_depth", "acc": "accumulator_depth", "dram0": "dram0_depth", "dram1": "dram1_depth"}


class ArchitectureError(ValueError):
    """An architecture file or value is invalid; the message names the key and the fix."""


@dataclass(frozen=True)
class Architecture:
    """The parameters of one TCU (docs/isa.md). Memory depths count vectors."""

    data_type: DataType
    array_size: int
    dram0_depth: int
    dram1_depth: int
    local_depth: int
    accumulator_depth: int
    simd_registers_depth: int = 1
    stride0_depth: int = 8
    stride1_depth: int = 8
    number_of_threads: int = 1
    thread_queue_depth: int = 8
    # -- ours: not part of a plain Tensil .tarch ----------------------------------------
    name: str | None = field(default=None, compare=False)
    board: str | None = field(default=None, compare=False)
    # FPGA part of the board (e.g. xc7z020clg400-1): picks the synthesis family and capacities.
    part: str | None = field(default=None, compare=False)
    clock_mhz: float | None = field(default=None, compare=False)
    axi_data_width: int | None = field(default=None, compare=False)
    # The window MatMul (docs/isa.md): an instruction set extension, so it takes part in equality.
    window_matmul: bool = False
    # The SIMD ReLU flag (docs/isa.md): likewise.
    simd_relu: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_type", _check_data_type(self.data_type, self._where()))
        for key, (lo, hi) in _INT_RANGES.items():
            _check_int(getattr(self, key), key, lo, hi, self._where())
        if self.clock_mhz is not None and not (
            isinstance(self.clock_mhz, (int, float))
            and not isinstance(self.clock_mhz, bool)
            and 0 < self.clock_mhz <= 2000
        ):
            raise ArchitectureError(
                f"{self._where()}key '{EXTENSION_KEY}.clock_mhz': {self.clock_mhz!r} is not a "
                "clock rate; allowed: a number of MHz in (0, 2000]"
            )
        if self.part is not None and not (isinstance(self.part, str) and self.part.strip()):
            raise ArchitectureError(
                f"{self._where()}key '{EXTENSION_KEY}.part': {self.part!r} is not an FPGA part "
                'name; give a string such as "xc7z020clg400-1"'
            )
        for key in ISA_EXTENSION_FIELDS:
            if not isinstance(getattr(self, key), bool):
                raise ArchitectureError(
                    f"{self._where()}key '{EXTENSION_KEY}.{key}': {getattr(self, key)!r} is not true or false"
                )
        if self.axi_data_width is not None and self.axi_data_width not in _AXI_WIDTHS:
            raise ArchitectureError(
                f"{self._where()}key '{EXTENSION_KEY}.axi_data_width': "
                f"{self.axi_data_width!r} is not an AXI data width; allowed: "
                f"{', '.join(map(str, _AXI_WIDTHS))} bits"
            )

    def _where(self) -> str:
        return f"architecture '{self.name}': " if self.name else ""

    # -- derived values, all computed here ------------------------------------------------
    @property
    def vector_bytes(self) -> int:
        """Bytes one vector occupies in DRAM (N scalars of the storage type)."""
        return self.array_size * self.data_type.storage_bytes

    @property
    def dram0_constants_top(self) -> int:
        """Where constants placed in DRAM0 end (they grow down from here): below DRAM0's last 4 KiB
        page, whose last vectors a board driver's completion probe writes (runtime/board/driver.py)."""
        return max(0, self.dram0_depth - max(2, 4096 // self.vector_bytes))

    @property
    def dram0_bytes(self) -> int:
        return self.dram0_depth * self.vector_bytes

    @property
    def dram1_bytes(self) -> int:
        return self.dram1_depth * self.vector_bytes

    def depth(self, memory: str) -> int:
        """Vectors in ``memory``: "local", "acc" (the accumulators), "dram0" or "dram1"."""
        return getattr(self, DEPTH_FIELDS[memory])

    @property
    def macs_per_cycle(self) -> int:
        return self.array_size * self.array_size

    def bram36_estimate(self) -> dict[str, int]:
        """Xilinx 36 Kb block RAMs the local memory and accumulators need.

        Each BRAM36 is used as 2048 x 18 bits (the widest configuration that keeps a
        true dual port); a memory ``depth`` vectors deep and ``N * width`` bits wide takes
        ``ceil(bits / 18) * ceil(depth / 2048)`` of them. An estimate for picking depths,
        not a synthesis result.
        """
        width_bits = self.array_size * self.data_type.width
        columns = math.ceil(width_bits / 18)
        local = columns * math.ceil(self.local_depth / 2048)
        acc = columns * math.ceil(self.accumulator_depth / 2048)
        return {"local": local, "accumulators": acc, "total": local + acc}

    # -- serialisation ----------------------------------------------------------------------
    def to_dict(self, plain: bool = False) -> dict[str, Any]:
        """The .tarch JSON object; ``plain=True`` leaves out our extension key but for the
        instruction set extensions a program may use (``window_matmul``)."""
        d: dict[str, Any] = {k: getattr(self, k) for k in TARCH_KEYS}
        d["data_type"] = self.data_type.name
        ext = {k: getattr(self, k) for k in EXTENSION_FIELDS if getattr(self, k) not in (None, False)}
        if plain:
            ext = {k: v for k, v in ext.items() if k in ISA_EXTENSION_FIELDS}
        if ext:
            d[EXTENSION_KEY] = ext
        return d

    def to_json(self, plain: bool = False) -> str:
        return json.dumps(self.to_dict(plain), indent=4) + "\n"

    def save(self, path: str | os.PathLike, plain: bool = False) -> None:
        _atomic_write_text(Path(path), self.to_json(plain))

    @classmethod
    def from_dict(cls, d: Any, source: str | None = None) -> "Architecture":
        """Build from a .tarch object, naming the offending key on any error."""
        where = f"{source}: " if source else ""
        if not isinstance(d, dict):
            raise ArchitectureError(
                f"{where}an architecture is a JSON object with keys {', '.join(TARCH_KEYS)}; got {type(d).__name__}"
            )
        allowed = set(TARCH_KEYS) | {EXTENSION_KEY}
        for key in d:
            if key not in allowed:
                hint = difflib.get_close_matches(str(key), sorted(allowed), n=1)
                raise ArchitectureError(
                    f"{where}unknown key '{key}'"
                    + (f"; did you mean '{hint[0]}'?" if hint else "")
                    + f" Allowed keys: {', '.join(TARCH_KEYS)} (and '{EXTENSION_KEY}' for ours)"
                )
        missing = [k for k in TARCH_KEYS if k not in d]
        if missing:
            raise ArchitectureError(
                f"{where}missing key{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(m) for m in missing)}: a .tarch file must give all of "
                f"{', '.join(TARCH_KEYS)}"
            )
        ext = d.get(EXTENSION_KEY, {})
        if not isinstance(ext, dict):
            raise ArchitectureError(f"{where}key '{EXTENSION_KEY}' must be a JSON object")
        for key in ext:
            if key not in EXTENSION_FIELDS:
                raise ArchitectureError(
                    f"{where}unknown key '{EXTENSION_KEY}.{key}'; allowed: {', '.join(EXTENSION_FIELDS)}"
                )
        kwargs = {k: d[k] for k in TARCH_KEYS}
        kwargs.update(ext)
        name = kwargs.get("name") or (Path(source).stem if source else None)
        kwargs["name"] = name
        try:
            return cls(**kwargs)
        except ArchitectureError as e:
            if source and not str(e).startswith(where):
                raise ArchitectureError(f"{where}{e}") from None
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Architecture":
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise ArchitectureError(f"cannot read architecture file {path}: {e.strerror}") from None
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ArchitectureError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
        return cls.from_dict(d, source=str(path))

    def replace(self, **changes: Any) -> "Architecture":
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """A readable summary (``isa.layout.layout_of(arch).describe()`` adds the instruction layout)."""
        lines = [f"architecture {self.name or '(unnamed)'}"]
        if self.board:
            lines.append(f"  board                {self.board}")
        if self.part:
            lines.append(f"  FPGA part            {self.part}")
        if self.clock_mhz:
            lines.append(f"  clock                {self.clock_mhz:g} MHz")
        if self.axi_data_width:
            lines.append(f"  DRAM AXI data width  {self.axi_data_width} bits")
        for k in TARCH_KEYS:
            v = getattr(self, k)
            lines.append(f"  {k:<21}{v.name if isinstance(v, DataType) else v}")
        lines.append(f"  vector bytes         {self.vector_bytes}")
        bram = self.bram36_estimate()
        lines.append(
            f"  BRAM36 estimate      {bram['total']} (local {bram['local']}, accumulators {bram['accumulators']})"
        )
        return "\n".join(lines)


def _check_data_type(value: Any, where: str) -> DataType:
    try:
        return data_type(value)
    except ValueError:
        raise ArchitectureError(
            f"{where}key 'data_type': {value!r} is not a data type; allowed: {', '.join(DATA_TYPES)}"
        ) from None


def _check_int(value: Any, key: str, lo: int, hi: int, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArchitectureError(f"{where}key '{key}': {value!r} is not an integer; allowed: integers {lo}..{hi}")
    if not lo <= value <= hi:
        extra = " (multi-threaded TCUs are not supported)" if key == "number_of_threads" else ""
        raise ArchitectureError(f"{where}key '{key}': {value} is out of range; allowed: integers {lo}..{hi}{extra}")


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


# -- presets --------------------------------------------------------------------------------


def _load_presets() -> dict[str, Architecture]:
    out = {}
    folder = resources.files(__package__) / "presets"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".tarch"):
            arch = Architecture.from_dict(json.loads(entry.read_text()), source=entry.name)
            out[entry.name[: -len(".tarch")]] = arch
    return out


PRESETS: dict[str, Architecture] = _load_presets()
# The boards of the published Tensil benchmark table (ResNet-20 v2: 21 ms, 14 ms, 4 ms).
BENCHMARK_PRESETS = ("arty_a7_35", "pynqz1_12x12", "ultra96v2_300mhz")


def preset_names() -> list[str]:
    return list(PRESETS)


def load_arch(arch: "str | os.PathLike | Architecture | dict") -> Architecture:
    """An architecture from a preset name, a .tarch path, a dict or an Architecture."""
    if isinstance(arch, Architecture):
        return arch
    if isinstance(arch, dict):
        return Architecture.from_dict(arch)
    s = os.fspath(arch)
    if s in PRESETS:
        return PRESETS[s]
    if s.endswith(".tarch") or os.sep in s or os.path.exists(s):
        return Architecture.load(s)
    hint = difflib.get_close_matches(s, PRESETS, n=1)
    raise ArchitectureError(
        f"unknown architecture '{s}'"
        + (f"; did you mean '{hint[0]}'?" if hint else "")
        + f" Presets: {', '.join(PRESETS)}; or give the path of a .tarch file"
    )
