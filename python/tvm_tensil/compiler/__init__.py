"""The Tensil compiler: graph (HIR input) -> memory manager -> scheduler -> LIR -> backend.

Independent of TVM; ``tvm_tensil.byoc`` turns Relax partitions into ``Graph``s.
"""

from ..partition import CompiledPartition
from .compile import compile_graph, fuse
from .graph import Graph, Node, Tensor
from .schedule import CompileOptions, ScheduleError

__all__ = ["CompileOptions", "CompiledPartition", "compile_graph", "fuse", "Graph", "Node", "Tensor", "ScheduleError"]
