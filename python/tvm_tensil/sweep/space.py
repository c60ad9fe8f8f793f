"""A design space: a base architecture and the values to try for some of its parameters.

``space.json``::

    {
      "base": "pynqz1",                      # a preset name or a .tarch path
      "parameters": {                        # every combination is a point
        "array_size": [4, 8, 16, 32],
        "part": ["xc7z020clg400-1", "xczu3eg-sbva484-1-i"]
      },
      "synthesis": true,                     # Yosys resources per point (default true)
      "rtl": true,                           # confirm the Pareto points on the RTL (default true)
      "time_limit": 3600                     # seconds per point (default 3600)
    }
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..arch import Architecture, ArchitectureError, load_arch

# The parameters a space may vary (every Architecture field but the names).
PARAMETERS = (
    "array_size",
    "data_type",
    "local_depth",
    "accumulator_depth",
    "dram0_depth",
    "dram1_depth",
    "simd_registers_depth",
    "stride0_depth",
    "stride1_depth",
    "axi_data_width",
    "clock_mhz",
    "part",
)


class SweepError(ValueError):
    """A sweep that cannot start; the message names what to change."""


class SpaceError(SweepError):
    """A space file that cannot be swept; the message names the key."""


@dataclass(frozen=True)
class Point:
    """One architecture of a space: the parameter values that make it, and its stable id."""

    id: str  # the same in every run of the space (results are resumed by it)
    params: dict[str, Any]
    arch: Architecture | None  # None: the values make no valid architecture
    invalid: str | None = None  # why not


def point_id(base: Architecture, params: dict[str, Any]) -> str:
    text = json.dumps([base.to_dict(), params], sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


@dataclass
class Space:
    base: Architecture
    parameters: dict[str, list[Any]]
    synthesis: bool = True
    rtl: bool = True
    time_limit: float = 3600.0
    source: dict[str, Any] = field(default_factory=dict)  # as given (written beside the results)

    @classmethod
    def load(cls, space: "str | os.PathLike | dict") -> "Space":
        """From a JSON file or a dict; every problem is a SpaceError naming the key."""
        if isinstance(space, dict):
            d, where = space, "space"
        else:
            where = str(space)
            try:
                d = json.loads(Path(space).read_text())
            except OSError as e:
                raise SpaceError(f"cannot read the space file {where}: {e.strerror}") from None
            except json.JSONDecodeError as e:
                raise SpaceError(f"{where} is not JSON: {e}") from None
        if not isinstance(d, dict):
            raise SpaceError(f"{where}: the space is a JSON object with 'base' and 'parameters'")
        unknown = sorted(set(d) - {"base", "parameters", "synthesis", "rtl", "time_limit"})
        if unknown:
            raise SpaceError(
                f"{where}: unknown key(s) {unknown}; allowed: base, parameters, synthesis, rtl, time_limit"
            )
        try:
            base = load_arch(d.get("base", "pynqz1"))
        except ArchitectureError as e:
            raise SpaceError(f"{where}: key 'base': {e}") from None
        params = d.get("parameters")
        if not isinstance(params, dict) or not params:
            raise SpaceError(f"{where}: key 'parameters' must map parameter names to lists of values")
        for name, values in params.items():
            if name not in PARAMETERS:
                raise SpaceError(f"{where}: 'parameters.{name}' is not a parameter; allowed: {', '.join(PARAMETERS)}")
            if not isinstance(values, list) or not values:
                raise SpaceError(f"{where}: 'parameters.{name}' must be a non-empty list of values")
        limit = d.get("time_limit", 3600)
        if not isinstance(limit, (int, float)) or isinstance(limit, bool) or limit <= 0:
            raise SpaceError(f"{where}: 'time_limit' must be a positive number of seconds, got {limit!r}")
        for key in ("synthesis", "rtl"):
            if not isinstance(d.get(key, True), bool):
                raise SpaceError(f"{where}: '{key}' must be true or false")
        return cls(base, params, d.get("synthesis", True), d.get("rtl", True), float(limit), dict(d))

    def points(self) -> list[Point]:
        """Every combination of the values, in the order the space lists them."""
        names = list(self.parameters)
        out = []
        for values in itertools.product(*(self.parameters[n] for n in names)):
            params = dict(zip(names, values))
            pid = point_id(self.base, params)
            try:
                arch = self.base.replace(**params, name=f"{self.base.name or 'custom'}-{pid}")
                out.append(Point(pid, params, arch))
            except (ArchitectureError, TypeError, ValueError) as e:
                out.append(Point(pid, params, None, str(e)))
        return out
