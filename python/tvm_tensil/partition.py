"""A compiled partition as the runtime receives it: the program, the DRAM1 recipes, the DRAM0
placements of its inputs and outputs, their scales, and the report. The BYOC codegen embeds it as
JSON in the module; the runtime rebuilds the Tensil model from it and the weights TVM delivers. It
lives below the compiler and the runtime, which both use it."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from .arch import Architecture
from .isa.layout import layout_of
from .isa.program import Program
from .model import ConstsEntry, TensilModel, TensorEntry
from .packing import ConstRecipe, derive_constants, pack_consts
from .placement import TensorPlacement


@dataclass
class CompiledPartition:
    """A compiled partition: the Tensil model plus what the runtime needs to rebuild it."""

    name: str
    arch: Architecture
    program: Program
    recipes: list[ConstRecipe]
    inputs: dict[str, TensorPlacement]
    outputs: dict[str, TensorPlacement]
    report: dict[str, Any] = field(default_factory=dict)
    # Each input's and output's shape in the framework's layout (NCHW or (batch, features)), if known.
    user_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    constants: list | None = None  # the float weights, when compiled in this process
    # Each input's and output's shift (stored = value * 2**shift; 0 when not listed), and the
    # constants derived from the model's weights for the scaled graph ((source, shift) each).
    shifts: dict[str, int] = field(default_factory=dict)
    derived: list = field(default_factory=list)
    # Where each input comes from in the framework's model ("model input 'x'", "the result of ..."),
    # for messages about it.
    sources: dict[str, str] = field(default_factory=dict)
    description: dict | None = None  # what the runtime stub embeds (set by the BYOC codegen)
    # The constants calibration rounded for their layers' outputs (indices into ``constants``):
    # the partition function must carry these values in place of the model's.
    rounded: tuple[int, ...] = ()

    def model(self, constants) -> TensilModel:
        """The Tensil model with DRAM1 packed from ``constants`` (a list of float arrays); with
        ``constants=None``, the model without its DRAM1 image (enough to check its DRAM0 maps)."""
        consts, dram0_consts = [], []
        if constants is not None:
            given = derive_constants(constants, self.derived)
            _, data = pack_consts(self.recipes, given, self.arch)
            consts = [(ConstsEntry(f"{self.name}.tdata", 0, data.shape[0]), data)] if data.shape[0] else []
            base, data0 = pack_consts(self.recipes, given, self.arch, bank=0)
            if len(data0):
                dram0_consts = [(ConstsEntry(f"{self.name}.dram0.tdata", base, data0.shape[0]), data0)]
        extras = {
            kind: {
                name: {
                    "shape": list(p.patches.source if p.patches else p.shape),
                    "channels_padded": p.channels_padded,
                    "layout": "block-major",
                }
                | ({"patches": p.patches.to_json()} if p.patches else {})
                | ({"user_shape": list(self.user_shapes[name])} if name in self.user_shapes else {})
                | ({"shift": self.shifts[name]} if self.shifts.get(name) else {})
                | ({"source": self.sources[name]} if kind == "inputs" and name in self.sources else {})
                for name, p in table.items()
            }
            for kind, table in (("inputs", self.inputs), ("outputs", self.outputs))
        }
        extras["report"] = self.report
        return TensilModel(
            name=self.name,
            arch=self.arch,
            program=self.program,
            consts=consts,
            dram0_consts=dram0_consts,
            inputs=[TensorEntry(n, p.base, p.size) for n, p in self.inputs.items()],
            outputs=[TensorEntry(n, p.base, p.size) for n, p in self.outputs.items()],
            extras=extras,
        )

    def to_json(self) -> dict[str, Any]:
        return (
            {
                "name": self.name,
                "arch": self.arch.to_dict(),
                "program": base64.b64encode(self.program.data).decode(),
                "recipes": [r.to_json() for r in self.recipes],
                "inputs": {k: p.to_json() for k, p in self.inputs.items()},
                "outputs": {k: p.to_json() for k, p in self.outputs.items()},
                "user_shapes": {k: list(v) for k, v in self.user_shapes.items()},
                "report": self.report,
            }
            | ({"sources": self.sources} if self.sources else {})
            | (
                {"shifts": self.shifts, "derived": [list(d) for d in self.derived]}
                if self.derived or any(self.shifts.values())
                else {}
            )
        )

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "CompiledPartition":
        arch = Architecture.from_dict(d["arch"])
        n = arch.array_size
        return cls(
            name=d["name"],
            arch=arch,
            program=Program(base64.b64decode(d["program"]), layout_of(arch), d["name"]),
            recipes=[ConstRecipe.from_json(r) for r in d["recipes"]],
            inputs={k: TensorPlacement.from_json(p, n) for k, p in d["inputs"].items()},
            outputs={k: TensorPlacement.from_json(p, n) for k, p in d["outputs"].items()},
            report=d.get("report", {}),
            user_shapes={k: tuple(v) for k, v in d.get("user_shapes", {}).items()},
            shifts={k: int(v) for k, v in d.get("shifts", {}).items()},
            derived=[tuple(int(x) for x in e) for e in d.get("derived", [])],
            sources=dict(d.get("sources", {})),
        )
