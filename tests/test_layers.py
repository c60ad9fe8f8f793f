"""The import graph: the layers the architecture describes hold (the runtime below the compiler and
the TVM side), and no module imports itself through others (no circle, lazy imports included)."""

import ast
from pathlib import Path

import tvm_tensil

PACKAGE = Path(tvm_tensil.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("tvm_tensil",) + path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def import_graph() -> dict[str, set[str]]:
    """Each tvm_tensil module -> the tvm_tensil modules it imports anywhere (lazy ones too, not those
    for type checking only); ``from package import name`` counts as the submodule when there is one,
    and a module of another package also runs that package's ``__init__``."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(
                        package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                    )
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            if _type_checking_only(node, parents):
                continue
            for t in targets:
                # Importing a module of another package runs that package's __init__ first.
                parts = t.split(".")
                runs = [".".join(parts[:k]) for k in range(2, len(parts))] + [t]
                edges |= {r for r in runs if r in modules and r != name and not name.startswith(r + ".")}
        graph[name] = edges
    return graph


def test_the_runtime_imports_nothing_from_the_compiler_or_the_tvm_side():
    graph = import_graph()
    bad = {
        (m, t)
        for m, targets in graph.items()
        if m.startswith("tvm_tensil.runtime")
        for t in targets
        if t.startswith(("tvm_tensil.compiler", "tvm_tensil.byoc"))
    }
    assert not bad, bad


def test_the_lower_layers_import_nothing_above_them():
    graph = import_graph()
    layers = {  # module -> what it may import from the package
        "tvm_tensil.numbers": set(),
        "tvm_tensil.arch": {"tvm_tensil.numbers"},
        "tvm_tensil.placement": set(),
        "tvm_tensil.packing": {"tvm_tensil.arch", "tvm_tensil.numbers"},
    }
    for module, allowed in layers.items():
        assert graph[module] <= allowed, (module, graph[module] - allowed)
    for module, targets in graph.items():
        if module.startswith("tvm_tensil.isa"):
            assert all(t.startswith(("tvm_tensil.isa", "tvm_tensil.arch", "tvm_tensil.numbers")) for t in targets), (
                module
            )


def test_no_import_circle():
    graph = import_graph()
    # Tarjan's strongly connected components: a component of more than one module is a circle.
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, circles
