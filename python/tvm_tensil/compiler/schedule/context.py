"""The values every lowering shares: what it may read (``Context``), what it writes into (``Out``),
and what one node leaves the next (``HandOver``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from ...arch import Architecture
from ...placement import TensorPlacement
from ..graph import Graph, Node
from ..lir import LIR
from ..memory import ConstTable


class ScheduleError(ValueError):
    """A node that cannot be scheduled on this architecture (the message says why)."""


@dataclass(frozen=True)
class CompileOptions:
    """Choices a caller (a test, a benchmark) may turn off to see what they gain, and the output
    error calibration aims for."""

    # How far a conv's alternatives are measured when one of them leaves an input of the next node
    # in local memory: 0, not at all (each node takes its own fastest schedule); 1, through the next
    # node; 2, also through the node after it where what is left is the next conv's shortcut (a
    # projection kept for the residual conv pays only if that conv keeps its own result whole too).
    look_ahead: int = 2
    # A global average pool reads a map the conv before it left whole in local memory.
    pool_hand_over: bool = True
    # A fused residual's shortcut enters the accumulators by a move ("move"), by a MatMul with
    # identity weights ("array"), or whichever the latency model finds faster (None).
    shortcut: str | None = None
    # With calibration: the largest output error, as a share of the outputs' range, a build aims
    # for. Where the simulation on calibration samples finds more, layers compute their weights in
    # two parts (a second MatMul each: their MACs doubled) until it is met. None: never.
    error_target: float | None = 0.01
    # A partition input read only by a conv whose windows hold few channels (an RGB image's first
    # conv) is written by the host as those windows (``placement.Patches``): the conv becomes a 1x1
    # conv over a few channel blocks in place of one nearly empty block per tap.
    input_patches: bool = True
    # A banked, double-buffered conv's last epilogue of a tile runs beside the next tile's MatMuls
    # (True), never (False), or where the latency model finds it faster (None).
    pipeline_tiles: bool | None = None
    # A conv's deferred DRAM moves paced by both the array's and the accumulator engine's work,
    # going out between pieces of its epilogues (True), by the MatMuls with each epilogue counted
    # when queued (False), or where the accumulator engine is about as busy as the array, whichever
    # the latency model finds faster (None).
    paced_epilogues: bool | None = None
    # Each node's first loads move up into the node before, where the latency model finds it faster
    # (``compiler.prefetch``).
    prefetch: bool = True
    # Each node's last stores move down into the node after, where the latency model finds it
    # faster (``compiler.sink``).
    sink_stores: bool = True
    # A residual conv uses the shortcut the conv before left whole in local memory where it lies
    # (``schedule.conv``; whether the conv before keeps it whole, the latency model decides).
    shortcut_in_place: bool = True
    # A residual conv's shortcut loaded before a tile's MatMuls goes out block by block beside them,
    # each block's before it enters the accumulators (else all of it before the first MatMul).
    defer_shortcut: bool = True
    # On a core with the window MatMul, a depthwise conv runs a window MatMul per kernel row and
    # output row (else one diagonal weight block per tap, as on plain Tensil).
    window_matmul: bool = True
    # A chain of convs whose maps between them do not fit local memory runs band by band of output
    # rows, those maps kept in local memory (``compiler.bands``): always (True), never (False), or
    # where the latency model finds it faster (None).
    row_bands: bool | None = None
    # In a band, a conv and the depthwise conv that reads it emit their output blocks in turn (one
    # block's epilogue beside the other conv's MatMuls; ``schedule.conv.emit_in_turn``): where the
    # latency model finds it faster (None), wherever they fit (True), or never (False).
    in_turn: bool | None = None
    # A dense conv's weight blocks without their bias rows (``schedule.conv.bare_blocks``: a read
    # less per block, a zero shifted in for it): where the latency model finds it faster (None),
    # always (True), or never (False).
    bare_blocks: bool | None = None
    # A dense layer of one output vector with its weights streamed through the array
    # (``schedule.dense``): where the latency model finds it faster (None), never (False), or always
    # where it fits, its weights from these DRAM banks in turn ((1,) or (0, 1)).
    stream_dense: tuple[int, ...] | bool | None = None
    # Each window of the finished program merged again across the engines' instruction streams
    # where the latency model finds it faster (``compiler.interleave``): always (True), never
    # (False), or in programs of at most ``interleave.AUTO_LIMIT`` instructions (None; the pass takes
    # a few microseconds an instruction).
    interleave: bool | None = None


# A DataMove's arguments, as ``LIR.datamove`` takes them.
Move = tuple


@dataclass(frozen=True)
class HandOver:
    """What a node leaves to the next: tensors it left whole in local memory ({name: (local
    address, vectors)}) and its stores of them to DRAM0 not issued yet ((name, moves) in order),
    which the next node issues beside its own compute (or drops, for a tensor only it reads)."""

    in_local: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    carried: tuple[tuple[str, tuple[Move, ...]], ...] = ()

    def holds(self, name: str) -> bool:
        return name in self.in_local

    @property
    def key(self) -> tuple:
        """The hand-over as a hashable value."""
        return tuple(sorted(self.in_local.items())), self.carried

    def carries(self, name: str) -> bool:
        return any(n == name for n, _ in self.carried)

    def without(self, name: str) -> "HandOver":
        """The same, but ``name`` neither held nor stored (a node that consumes it in place)."""
        return HandOver(
            {k: v for k, v in self.in_local.items() if k != name}, tuple(c for c in self.carried if c[0] != name)
        )

    def issue(self, lir: LIR) -> "HandOver":
        """Issue every carried store now; nothing is left in local memory after that."""
        for _, moves in self.carried:
            for move in moves:
                lir.datamove(*move)
        return NOTHING

    def _hole(self) -> tuple[int, int] | None:
        """The span from the lowest to the highest vector held in local memory (None: nothing)."""
        spans = [(a, a + n) for a, n in self.in_local.values()]
        return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else None

    def most_beside(self, arch: Architecture, consts: int) -> int:
        """The most vectors ``room_beside`` can place (the larger free span below or above)."""
        hole, limit = self._hole(), arch.local_depth - consts
        return limit if hole is None else max(0, hole[0], limit - hole[1])

    def room_beside(self, arch: Architecture, own: int, consts: int) -> int | None:
        """Where ``own`` vectors of local memory fit below or above everything held in local
        memory, the top ``consts`` vectors kept free (constants pass through them); else None."""
        hole, limit = self._hole(), arch.local_depth - consts
        if hole is None:
            return 0 if own <= limit else None
        if hole[1] > limit:
            return None
        return 0 if own <= hole[0] else hole[1] if hole[1] + own <= limit else None


NOTHING = HandOver()


@dataclass(frozen=True)
class Context:
    """What a lowering reads: the architecture, the graph, every tensor's DRAM0 placement, the
    intermediates only one node reads, where temporaries come from, the options, the node lowered
    after this one (a search looks ahead into it), how many look-aheads this lowering is inside and
    how to lower the next node (the dispatch table's ``lower_node``; without it a search does not
    look ahead)."""

    arch: Architecture
    graph: Graph
    place: Mapping[str, TensorPlacement]
    read_once: frozenset[str]
    dram0: object = None  # Dram0Allocator, for temporaries
    options: CompileOptions = CompileOptions()
    following: Node | None = None
    looking_ahead: int = 0
    lower_next: Callable[[Node, "Context", "HandOver", "Out"], "HandOver"] | None = None
    # The maps between a chain's convs in a band (``bands``): each is one tile, handed to the next
    # conv in local memory (tiles of a band's map stored and read back defeat the band).
    band_maps: frozenset[str] = frozenset()
    # The look-ahead's lowerings of a next node, by what it was handed (a search meets the same
    # hand-over again in its nested comparisons): (instructions, what it leaves).
    looked_ahead: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def n(self) -> int:
        return self.arch.array_size

    def before(self, following: Node | None) -> "Context":
        return replace(self, following=following)

    def nodes_after(self, node: Node) -> tuple[Node, ...]:
        """The graph's nodes lowered after ``node`` (matched by its output: a lowering may rebuild
        the node), none for a node the graph does not hold."""
        outputs = [other.output for other in self.graph.nodes]
        return tuple(self.graph.nodes[outputs.index(node.output) + 1 :]) if node.output in outputs else ()

    def node_after(self, node: Node | None) -> Node | None:
        """The graph's node lowered after ``node`` (None after the last, or for a node the graph
        does not hold)."""
        nodes = self.graph.nodes
        k = next((i for i, other in enumerate(nodes) if other is node), None)
        return nodes[k + 1] if k is not None and k + 1 < len(nodes) else None


@dataclass
class Out:
    """Where a lowering writes: its instructions and the constants it places in DRAM1. A search
    gives each alternative its own (``fork``) and keeps the fastest."""

    lir: LIR
    consts: ConstTable

    def fork(self) -> "Out":
        return Out(LIR(self.lir.arch), self.consts.fork())


@dataclass(frozen=True)
class Tile:
    """A block of output pixels of one image."""

    image: int
    y0: int
    rows: int
    x0: int
    cols: int

    @property
    def pixels(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True)
class Window:
    """A sliding window: kernel size, strides, dilation."""

    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    dh: int = 1
    dw: int = 1

    @property
    def taps(self) -> list[tuple[int, int]]:
        return [(y, x) for y in range(self.kh) for x in range(self.kw)]

    @property
    def pointwise(self) -> bool:
        return self.kh == self.kw == self.sh == self.sw == 1
