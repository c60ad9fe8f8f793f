"""Alternatives compared as values: the fastest one's instructions and constants are kept, nothing
of the others."""

from tvm_tensil.arch import PRESETS
from tvm_tensil.compiler import CompileOptions, Graph, Node, Tensor
from tvm_tensil.compiler.lir import LIR
from tvm_tensil.compiler.memory import ConstTable
from tvm_tensil.compiler.schedule import NOTHING, Context, HandOver, Out, lower_node
from tvm_tensil.compiler.schedule.search import cheapest
from tvm_tensil.isa.instructions import Direction

ARCH = PRESETS["pynqz1"]


def context(following=None):
    graph = Graph({"x": Tensor("x", (1, 1, 1, 8))}, [], ["x"], ["x"], [])
    return Context(ARCH, graph, {}, frozenset(), following=following)


def alternative(vectors: int, fill: float, leaves: HandOver = NOTHING):
    """Loads ``vectors`` from DRAM0 and places a constant ``fill``."""

    def lower(ctx, given, out):
        out.consts.add("fill", [], values=[fill])
        out.lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 0, vectors)
        return leaves

    return lower


def counted(tried: list, vectors: int):
    """``alternative(vectors, vectors)`` that appends ``vectors`` to ``tried`` when lowered."""
    inner = alternative(vectors, float(vectors))

    def lower(ctx, given, out):
        tried.append(vectors)
        return inner(ctx, given, out)

    return lower


def test_the_fastest_is_kept_with_its_constants_only():
    out = Out(LIR(ARCH), ConstTable(ARCH))
    out.consts.add("fill", [], values=[9.0])  # placed before: stays
    left = cheapest([alternative(400, 1.0), alternative(20, 2.0, HandOver({"y": (0, 1)})), alternative(300, 3.0)],
                    context(), NOTHING, out)  # fmt: skip
    assert left.holds("y")
    assert [r.args["values"] for r in out.consts.recipes] == [[9.0], [2.0]]
    program = out.lir.program()
    assert len(program) == 1 and program.fields().operand2[0] + 1 == 20


def test_stop_when_worse_ends_the_search_at_the_first_loss_after_two():
    tried = []

    out = Out(LIR(ARCH), ConstTable(ARCH))
    cheapest([counted(tried, v) for v in (300, 200, 250, 10)], context(), NOTHING, out, stop_when_worse=True)
    assert tried == [300, 200, 250]  # 10 would have been fastest, but the bands stopped gaining
    assert out.lir.program().fields().operand2[0] + 1 == 200


def test_a_hand_over_is_looked_through_the_next_node():
    """A slower alternative that leaves the next conv's input in local memory wins when the pair
    is faster: the next conv then need not load its input."""
    nxt = Node("global_avg_pool", ["y"], "z", {})
    ctx = context(following=nxt)
    graph = Graph({"y": Tensor("y", (1, 4, 4, 8)), "z": Tensor("z", (1, 1, 1, 8))}, [nxt], ["y"], ["z"], [])
    from tvm_tensil.compiler.compile import place_tensors

    place, dram0 = place_tensors(graph, ARCH)
    ctx = Context(ARCH, graph, place, frozenset({"y"}), dram0, following=nxt, lower_next=lower_node)
    keeps = HandOver({"y": (0, 16)}, (("y", ((Direction.LOCAL_TO_DRAM0, 0, place["y"].base, 16),)),))
    out = Out(LIR(ARCH), ConstTable(ARCH))
    left = cheapest([alternative(16, 1.0), alternative(30, 2.0, keeps)], ctx, NOTHING, out)
    assert left is keeps
    alone = Out(LIR(ARCH), ConstTable(ARCH))
    ctx_greedy = Context(ARCH, graph, place, frozenset({"y"}), dram0, following=None)
    assert cheapest([alternative(16, 1.0), alternative(30, 2.0, keeps)], ctx_greedy, NOTHING, alone) is NOTHING


def test_the_winner_is_named_and_replays_into_another_fork():
    """``won`` names the alternative kept; ``lowered`` replays one already lowered into a fork as an
    alternative of a second search (the pipelined tiles are tried for the fastest tiling only)."""
    from tvm_tensil.compiler.schedule.search import lowered

    out = Out(LIR(ARCH), ConstTable(ARCH))
    first, won = out.fork(), []
    left = cheapest([alternative(400, 1.0), alternative(20, 2.0), alternative(300, 3.0)], context(), NOTHING, first,
                    won=won)  # fmt: skip
    assert won == [1]
    won = []
    cheapest([alternative(100, 4.0), lowered(first, left)], context(), NOTHING, out, won=won)
    assert won == [1]
    assert [r.args["values"] for r in out.consts.recipes] == [[2.0]]
    assert out.lir.program().fields().operand2[0] + 1 == 20


def test_a_shortcut_kept_for_the_next_conv_is_measured_two_nodes_ahead():
    """Keeping ``y`` (the next conv's shortcut) whole pays only when that conv keeps its own result
    whole for the node after it, which then drops its stores: measured through the next node alone,
    those stores count in full at its end and the alternative that keeps nothing wins; two nodes
    ahead the chain wins (the next conv choosing with the node after it as its own next). Where
    what is kept is the next conv's first input, the search looks one node ahead only."""
    b = Node("conv2d", ["x", "y"], "z", {})  # z = conv(x) + y
    c = Node("conv2d", ["z"], "w", {})
    graph = Graph({t: Tensor(t, (1, 8, 8, 8)) for t in "xyzw"}, [b, c], ["x", "y"], ["w"], [])
    seen = []

    def lower(node, ctx, given, out):
        seen.append((node.output, ctx.following and ctx.following.output, ctx.looking_ahead))
        if node is b:
            if not given.holds("y") and not given.holds("x"):
                out.lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 0, 100)
                return NOTHING
            out.lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 0, 10)
            return HandOver({"z": (0, 500)}, (("z", ((Direction.LOCAL_TO_DRAM0, 0, 0, 500),)),))
        if given.holds("z"):  # the only reader of z: its stores are dropped
            out.lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 0, 10)
            return NOTHING
        given.issue(out.lir)
        out.lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 0, 100)
        return NOTHING

    def pick(depth, kept):
        seen.clear()
        options = CompileOptions(look_ahead=depth)
        ctx = Context(ARCH, graph, {}, frozenset(), options=options, following=b, lower_next=lower)
        out = Out(LIR(ARCH), ConstTable(ARCH))
        return cheapest([alternative(20, 1.0), alternative(60, 2.0, kept)], ctx, NOTHING, out)

    keeps_y, keeps_x = HandOver({"y": (0, 64)}), HandOver({"x": (0, 64)})
    assert pick(1, keeps_y) is NOTHING
    assert all(following is None for _, following, _ in seen) and ("w", None, 1) not in seen
    assert pick(2, keeps_y) is keeps_y
    assert ("z", "w", 1) in seen and ("w", None, 2) in seen
    assert pick(2, keeps_x) is NOTHING and all(output == "z" for output, _, _ in seen)


def test_a_lowering_met_again_replays_its_decisions():
    """``decided_once``: the first lowering under a key searches and records what it kept (the
    nested search's choice inside the outer one's); the same key again lowers only the alternatives
    kept, into the same instructions."""
    from tvm_tensil.compiler.schedule.search import Choice, decided_once, fastest_of

    tried = []

    def nested(ctx, given, out):  # (a search inside an alternative)
        return cheapest([counted(tried, 50), counted(tried, 10), counted(tried, 30)], ctx, given, out)

    def lowering(out):
        out.lir.datamove(Direction.DRAM0_TO_LOCAL, 0, 0, 8 * (1 + fastest_of(2, lambda i: (5, 1)[i])))
        return cheapest([counted(tried, 400), nested], context(), NOTHING, out)

    decisions, programs = {}, []
    for _ in range(2):
        out = Out(LIR(ARCH), ConstTable(ARCH))
        tried.clear()
        decided_once(decisions, "group", lowering, out)
        programs.append((out.lir.program().data, tried[:]))
    assert decisions == {"group": (Choice(1), Choice(1, (Choice(1),)))}
    assert programs[0][1] == [400, 50, 10, 30] and programs[1][1] == [10]
    assert programs[0][0] == programs[1][0]
    assert list(out.lir.program().fields().operand2 + 1) == [16, 10]  # (fastest_of kept index 1: 16 vectors)


def test_a_recording_that_does_not_fit_is_searched_anew():
    """A replayed lowering that meets a search its recording lacks (here: fewer alternatives than
    the index kept) is lowered again with its searches, nothing of the replay kept."""
    from tvm_tensil.compiler.schedule.search import Choice, decided_once

    decisions = {"group": (Choice(2),)}
    out = Out(LIR(ARCH), ConstTable(ARCH))
    decided_once(decisions, "group", lambda o: cheapest([alternative(40, 1.0), alternative(20, 2.0)], context(),
                                                         NOTHING, o), out)  # fmt: skip
    assert decisions == {"group": (Choice(1),)}
    assert [r.args["values"] for r in out.consts.recipes] == [[2.0]]
    assert len(out.lir.program()) == 1


def test_an_alternative_replayed_from_another_keeps_its_decisions():
    """An alternative that reuses what another one lowered (``lowered``, as a chain's in-turn
    sequence reuses its plain one where nothing pairs) records that one's decisions, so that a
    replay, lowering it anew, is decided the same way."""
    from tvm_tensil.compiler.schedule.search import Choice, decided_once, decisions_so_far, lowered

    tried, saved = [], []

    def plain(ctx, given, out):
        left = cheapest([counted(tried, 50), counted(tried, 10)], ctx, given, out)
        saved.append((out, left, decisions_so_far()))
        return left

    def reusing(ctx, given, out):
        if saved:
            return lowered(*saved[0])(ctx, given, out)
        return cheapest([counted(tried, 50), counted(tried, 10)], ctx, given, out)

    decisions, runs = {}, []
    for _ in range(2):
        tried.clear(), saved.clear()
        measured = iter([2, 1])  # (the reusing one measures faster)
        out = Out(LIR(ARCH), ConstTable(ARCH))

        def search(o, measured=measured):
            return cheapest([plain, reusing], context(), NOTHING, o, measure=lambda lir, left: next(measured))

        decided_once(decisions, "chain", search, out)
        runs.append((tried[:], out.lir.program().data))
    assert decisions == {"chain": (Choice(1, (Choice(1),)),)}
    assert runs[0][0] == [50, 10] and runs[1][0] == [10]  # replayed: the reusing one lowers anew, as decided
    assert runs[0][1] == runs[1][1]
