"""Tensil model files: ``.tmodel`` (JSON), ``.tprog`` (program), ``.tdata`` (constants).

The format is the one existing Tensil tools read and write (docs/isa.md, "Model files"): same keys, same
units (program size in bytes, constants and tensors in vectors). Our extra information
(tensor shapes, cycle estimates) sits under a ``"tvm_tensil"`` key that other readers ignore.

Tensors live in DRAM with the channel axis cut into vectors of N scalars, zero padded
(docs/isa.md): a tensor (..., C) takes prod(...) * ceil(C / N) vectors. Tensil's own models store
them channel block fastest (``(..., C)`` in order); models compiled here record the layout
``"block-major"`` (our extension): block by block, each block's vectors in pixel order.
``tensor_to_vectors`` and ``vectors_to_tensor`` convert either way.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .arch import Architecture, ArchitectureError
from .isa.layout import InstructionLayout, layout_of
from .isa.program import Program, ProgramError
from .placement import Patches

__all__ = [
    "ModelError",
    "TensorEntry",
    "ConstsEntry",
    "TensilModel",
    "tensor_to_vectors",
    "vectors_to_tensor",
    "vectors_for_shape",
    "from_user_layout",
    "to_user_layout",
]

EXTENSION_KEY = "tvm_tensil"


class ModelError(ValueError):
    """A model file that is malformed or does not fit its architecture; names file and key."""


@dataclass(frozen=True)
class TensorEntry:
    """A run of ``size`` vectors of a named tensor in DRAM0, starting at vector ``base``."""

    name: str
    base: int
    size: int


@dataclass(frozen=True)
class ConstsEntry:
    """A ``.tdata`` file placed in DRAM1 at vector ``base``; ``size`` in vectors."""

    file_name: str
    base: int
    size: int


# -- tensor layout --------------------------------------------------------------------------


def vectors_for_shape(shape: Sequence[int], array_size: int, channels_padded: int | None = None) -> int:
    """Vectors a tensor of ``shape`` (..., C) takes in DRAM (``channels_padded`` per pixel if given)."""
    shape = tuple(int(s) for s in shape)
    if not shape:
        return 1
    return math.prod(shape[:-1]) * math.ceil((channels_padded or shape[-1]) / array_size)


def tensor_to_vectors(
    x: np.ndarray, array_size: int, channels_padded: int | None = None, block_major: bool = False
) -> np.ndarray:
    """(..., C) -> (vectors, N): channel axis cut into blocks of N, zero padded
    (to ``channels_padded`` channels per pixel when given); ``block_major``: block by block."""
    x = np.asarray(x)
    if x.ndim == 0:
        x = x.reshape(1)
    c = x.shape[-1]
    blocks = math.ceil((channels_padded or c) / array_size)
    flat = x.reshape(-1, c)
    if blocks * array_size != c:
        flat = np.concatenate([flat, np.zeros((flat.shape[0], blocks * array_size - c), dtype=flat.dtype)], axis=1)
    if block_major:
        return flat.reshape(-1, blocks, array_size).transpose(1, 0, 2).reshape(-1, array_size)
    return flat.reshape(-1, array_size)


def vectors_to_tensor(
    v: np.ndarray, shape: Sequence[int], array_size: int, channels_padded: int | None = None, block_major: bool = False
) -> np.ndarray:
    """(vectors, N) -> tensor of ``shape``, dropping channel padding (``block_major``: stored block
    by block)."""
    shape = tuple(int(s) for s in shape) or (1,)
    c = shape[-1]
    blocks = math.ceil((channels_padded or c) / array_size)
    v = np.asarray(v)
    want = vectors_for_shape(shape[:-1] + (blocks * array_size,), array_size)
    if v.shape != (want, array_size):
        raise ModelError(
            f"{v.shape[0]} vectors do not hold a tensor of shape {shape} ({want} vectors of {array_size} expected)"
        )
    if block_major:
        v = v.reshape(blocks, -1, array_size).transpose(1, 0, 2)
    return v.reshape(-1, blocks * array_size)[:, :c].reshape(shape)


# -- the model ------------------------------------------------------------------------------


def from_user_layout(x: np.ndarray, user_shape: Sequence[int]) -> np.ndarray:
    """A tensor in the framework's layout (NCHW, (batch, features) or (batch, steps, features)) ->
    the model's (n, h, w, c)."""
    if len(user_shape) == 4:
        return np.ascontiguousarray(np.asarray(x).transpose(0, 2, 3, 1))
    return np.asarray(x).reshape((1,) * (4 - np.ndim(x)) + np.shape(x))


def to_user_layout(y: np.ndarray, user_shape: Sequence[int]) -> np.ndarray:
    """The model's (n, h, w, c) -> the framework's layout of ``user_shape``."""
    if len(user_shape) == 4:
        n, c, h, w = user_shape
        return np.asarray(y).reshape(n, h, w, c).transpose(0, 3, 1, 2)
    return np.asarray(y).reshape(tuple(user_shape))


def _int(d: dict, key: str, where: str, lo: int = 0) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ModelError(f"{where}: key '{key}' must be an integer >= {lo}, got {v!r}")
    return v


def _str(d: dict, key: str, where: str) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not v:
        raise ModelError(f"{where}: key '{key}' must be a non-empty string, got {v!r}")
    return v


@dataclass
class TensilModel:
    """A compiled Tensil model: program, constants and the DRAM0 map of inputs/outputs."""

    name: str
    arch: Architecture
    program: Program
    consts: list[tuple[ConstsEntry, np.ndarray]] = field(default_factory=list)
    # Constants the program reads from DRAM0 (our extension, listed under the extension key as
    # "dram0_consts"): a second stream of weights beside DRAM1's. Written before the model runs.
    dram0_consts: list[tuple[ConstsEntry, np.ndarray]] = field(default_factory=list)
    inputs: list[TensorEntry] = field(default_factory=list)
    outputs: list[TensorEntry] = field(default_factory=list)
    load_consts_to_local: bool = False
    extras: dict[str, Any] = field(default_factory=dict)

    # -- queries -------------------------------------------------------------------------
    def input_names(self) -> list[str]:
        return list(dict.fromkeys(e.name for e in self.inputs))

    def output_names(self) -> list[str]:
        return list(dict.fromkeys(e.name for e in self.outputs))

    def entries(self, name: str, outputs: bool = False) -> list[TensorEntry]:
        return [e for e in (self.outputs if outputs else self.inputs) if e.name == name]

    def tensor_shape(self, name: str, outputs: bool = False) -> tuple[int, ...] | None:
        """The tensor's logical shape if the model records it (our extension), else None."""
        info = self._tensor_info(name, outputs)
        if isinstance(info.get("shape"), list):
            return tuple(int(s) for s in info["shape"])
        return None

    def channels_padded(self, name: str, outputs: bool = False) -> int | None:
        """Channels per pixel in DRAM when the model pads channel blocks (our extension)."""
        v = self._tensor_info(name, outputs).get("channels_padded")
        return int(v) if isinstance(v, int) else None

    def block_major(self, name: str, outputs: bool = False) -> bool:
        """Whether the tensor is stored block by block (our extension; Tensil's models are not)."""
        return self._tensor_info(name, outputs).get("layout") == "block-major"

    def patches(self, name: str) -> Patches | None:
        """How the host writes an input as a conv's windows (our extension), if it does."""
        info = self._tensor_info(name, False).get("patches")
        if not isinstance(info, dict):
            return None
        try:
            return Patches.from_json(info)
        except (KeyError, TypeError, ValueError) as e:
            raise ModelError(f"model '{self.name}': input '{name}' has a malformed 'patches' entry ({e})") from None

    def user_shape(self, name: str, outputs: bool = False) -> tuple[int, ...] | None:
        """The tensor's shape in the framework's layout (NCHW or (batch, features)) if the model
        records it (our extension: models compiled from TVM do), else None."""
        info = self._tensor_info(name, outputs)
        if isinstance(info.get("user_shape"), list):
            return tuple(int(s) for s in info["user_shape"])
        return None

    def shift(self, name: str, outputs: bool = False) -> int:
        """The tensor's power-of-two scale (our extension): ``value * 2**shift`` is stored."""
        v = self._tensor_info(name, outputs).get("shift", 0)
        return int(v) if isinstance(v, int) else 0

    def source(self, name: str) -> str:
        """Where an input comes from in the framework's model (our extension), as `` (...)``, or ""."""
        v = self._tensor_info(name, False).get("source")
        return f" ({v})" if isinstance(v, str) and v else ""

    def _tensor_info(self, name: str, outputs: bool) -> dict:
        table = self.extras.get("outputs" if outputs else "inputs", {})
        info = table.get(name) if isinstance(table, dict) else None
        return info if isinstance(info, dict) else {}

    def validate(self) -> None:
        """Check the maps against the architecture: everything inside its DRAM bank."""
        arch = self.arch
        for entry, data in self.consts:
            if entry.base + entry.size > arch.dram1_depth:
                raise ModelError(
                    f"model '{self.name}': consts '{entry.file_name}' at vector {entry.base} "
                    f"with {entry.size} vectors overflows DRAM1 (dram1_depth = {arch.dram1_depth})"
                )
            if data.shape != (entry.size, arch.array_size):
                raise ModelError(
                    f"model '{self.name}': consts '{entry.file_name}' holds {data.shape[0]} "
                    f"vectors, the .tmodel says {entry.size}"
                )
        for entry, data in self.dram0_consts:
            if entry.base + entry.size > arch.dram0_depth or data.shape != (entry.size, arch.array_size):
                raise ModelError(
                    f"model '{self.name}': DRAM0 consts '{entry.file_name}' at vector {entry.base} with "
                    f"{entry.size} vectors ({data.shape[0]} in the data) does not fit DRAM0 (dram0_depth = "
                    f"{arch.dram0_depth}) or its data"
                )
            for e in self.inputs + self.outputs:
                if e.base < entry.base + entry.size and entry.base < e.base + e.size:
                    raise ModelError(f"model '{self.name}': DRAM0 consts '{entry.file_name}' overlap tensor '{e.name}'")
        if not self.outputs:
            raise ModelError(f"model '{self.name}' has no outputs: a program whose results nobody reads")
        for kind, entries in (("input", self.inputs), ("output", self.outputs)):
            for e in entries:
                if e.size < 1 or e.base + e.size > arch.dram0_depth:
                    raise ModelError(
                        f"model '{self.name}': {kind} '{e.name}' at vector {e.base} with {e.size} "
                        f"vectors does not fit DRAM0 (dram0_depth = {arch.dram0_depth})"
                    )
        # An output over an input (or another output) would be overwritten while being read.
        ranges = [("input", e) for e in self.inputs] + [("output", e) for e in self.outputs]
        for i, (kind_a, a) in enumerate(ranges):
            for kind_b, b in ranges[i + 1 :]:
                if "output" in (kind_a, kind_b) and a.base < b.base + b.size and b.base < a.base + a.size:
                    raise ModelError(
                        f"model '{self.name}': {kind_a} '{a.name}' (DRAM0 {a.base}..{a.base + a.size - 1}) and "
                        f"{kind_b} '{b.name}' ({b.base}..{b.base + b.size - 1}) overlap"
                    )

    # -- files ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "prog": {"file_name": f"{self.name}.tprog", "size": len(self.program.data)},
            "consts": [{"file_name": e.file_name, "base": e.base, "size": e.size} for e, _ in self.consts],
            "inputs": [{"name": e.name, "base": e.base, "size": e.size} for e in self.inputs],
            "outputs": [{"name": e.name, "base": e.base, "size": e.size} for e in self.outputs],
            "arch": self.arch.to_dict(plain=True),
            "load_consts_to_local": self.load_consts_to_local,
        }
        extras = self.extras | (
            {"dram0_consts": [{"file_name": e.file_name, "base": e.base, "size": e.size} for e, _ in self.dram0_consts]}
            if self.dram0_consts
            else {}
        )
        if extras:
            d[EXTENSION_KEY] = extras
        return d

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``<name>.tmodel``, ``.tprog`` and the ``.tdata`` files into ``directory``.

        All files are written under temporary names first and renamed at the end, so a
        failure leaves no half-written model behind. Returns the .tmodel path.
        """
        self.validate()
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        dt = self.arch.data_type
        files: dict[str, bytes] = {f"{self.name}.tprog": self.program.data}
        for entry, data in self.consts + self.dram0_consts:
            files[entry.file_name] = dt.to_bytes(data)
        files[f"{self.name}.tmodel"] = (json.dumps(self.to_dict(), indent=2) + "\n").encode()
        tmp_paths = []
        try:
            for fname, blob in files.items():
                tmp = directory / f".{fname}.tmp{os.getpid()}"
                tmp.write_bytes(blob)
                tmp_paths.append((tmp, directory / fname))
            for tmp, final in tmp_paths:
                os.replace(tmp, final)
        finally:
            for tmp, _ in tmp_paths:
                if tmp.exists():
                    tmp.unlink()
        return directory / f"{self.name}.tmodel"

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TensilModel":
        path = Path(path)
        where = str(path)
        try:
            d = json.loads(path.read_text())
        except OSError as e:
            raise ModelError(f"cannot read model file {path}: {e.strerror}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ModelError(f"{where}: not a .tmodel JSON file ({e})") from None
        if not isinstance(d, dict):
            raise ModelError(f"{where}: a .tmodel is a JSON object")
        for key in ("name", "prog", "consts", "inputs", "outputs", "arch"):
            if key not in d:
                raise ModelError(f"{where}: missing key '{key}'")
        try:
            arch = Architecture.from_dict(d["arch"], source=f"{where}: key 'arch'")
        except ArchitectureError as e:
            raise ModelError(str(e)) from None
        layout: InstructionLayout = layout_of(arch)
        folder = path.parent

        prog = d["prog"]
        if not isinstance(prog, dict):
            raise ModelError(f"{where}: key 'prog' must be an object with file_name and size")
        prog_file = folder / _str(prog, "file_name", f"{where}: prog")
        try:
            data = prog_file.read_bytes()
        except OSError as e:
            raise ModelError(f"{where}: cannot read program {prog_file}: {e.strerror}") from None
        if "size" in prog:
            size = _int(prog, "size", f"{where}: prog")
            if size != len(data):
                raise ModelError(
                    f"{where}: prog size is {size} bytes but {prog_file.name} has {len(data)} "
                    f"(truncated or replaced file?)"
                )
        try:
            program = Program(data, layout, name=str(prog_file))
        except ProgramError as e:
            raise ModelError(str(e)) from None

        def const_files(listed, key: str) -> list[tuple[ConstsEntry, np.ndarray]]:
            if not isinstance(listed, list):
                raise ModelError(f"{where}: key '{key}' must be a list")
            out = []
            for i, c in enumerate(listed):
                cw = f"{where}: {key}[{i}]"
                if not isinstance(c, dict):
                    raise ModelError(f"{cw}: must be an object with file_name, base, size")
                entry = ConstsEntry(_str(c, "file_name", cw), _int(c, "base", cw), _int(c, "size", cw))
                cfile = folder / entry.file_name
                try:
                    blob = cfile.read_bytes()
                except OSError as e:
                    raise ModelError(f"{cw}: cannot read {cfile}: {e.strerror}") from None
                want = entry.size * arch.vector_bytes
                if len(blob) != want:
                    raise ModelError(
                        f"{cw}: {cfile.name} has {len(blob)} bytes; {entry.size} vectors of "
                        f"{arch.vector_bytes} bytes ({arch.array_size} x {arch.data_type.name}) need {want}"
                    )
                out.append((entry, arch.data_type.from_bytes(blob).reshape(entry.size, arch.array_size)))
            return out

        consts = const_files(d["consts"], "consts")

        def tensors(key: str) -> list[TensorEntry]:
            if not isinstance(d[key], list):
                raise ModelError(f"{where}: key '{key}' must be a list")
            out = []
            for i, t in enumerate(d[key]):
                tw = f"{where}: {key}[{i}]"
                if not isinstance(t, dict):
                    raise ModelError(f"{tw}: must be an object with name, base, size")
                out.append(TensorEntry(_str(t, "name", tw), _int(t, "base", tw), _int(t, "size", tw, 1)))
            return out

        extras = d.get(EXTENSION_KEY, {})
        extras = dict(extras) if isinstance(extras, dict) else {}
        dram0_consts = const_files(extras.pop("dram0_consts", []), f"{EXTENSION_KEY}.dram0_consts")
        model = cls(
            name=_str(d, "name", where),
            arch=arch,
            program=program,
            consts=consts,
            dram0_consts=dram0_consts,
            inputs=tensors("inputs"),
            outputs=tensors("outputs"),
            load_consts_to_local=bool(d.get("load_consts_to_local", False)),
            extras=extras,
        )
        if model.load_consts_to_local:
            raise ModelError(
                f"{where}: load_consts_to_local is true; this runtime loads constants to DRAM1 "
                "only. Recompile the model with constants in DRAM1."
            )
        model.validate()
        return model
