"""One-way layers: every import between the project's packages points down (docs/ARCHITECTURE.md).

    draft_models, recipes                 0   architectures, losses, packing; recipe configs
    splitserve.data, splitserve.checkpoint 1  conversations; the checkpoint layout
    splitserve.target                     2   the target side: models, capture, chat, backends
    splitserve (the trainer), serving     3   siblings: neither imports the other

The test reads every module's source (ast), including imports inside functions, and fails on an
edge to the same or a higher layer between different components, naming both modules; and on any
import cycle between project modules (within a component too), naming the modules around it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("draft_models", "recipes", "splitserve", "serving")

# (module prefix, component, layer); a module belongs to the longest matching prefix.
LAYERS = [
    ("draft_models", "draft_models", 0),
    ("recipes", "recipes", 0),
    ("splitserve.data", "data", 1),
    ("splitserve.checkpoint", "checkpoint", 1),
    ("splitserve.run_metrics", "run_metrics", 1),
    ("splitserve.target", "target", 2),
    ("splitserve", "trainer", 3),
    ("serving", "serving", 3),
]


def modules(root: Path = ROOT) -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports (absolute or relative, at any depth of the file)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod when it is one
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` where only a.b is ours, etc.
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def place(module: str, layers=LAYERS) -> tuple[str, int]:
    matches = [
        (prefix, comp, layer)
        for prefix, comp, layer in layers
        if module == prefix or module.startswith(prefix + ".")
    ]
    if not matches:
        raise AssertionError(
            f"module {module} belongs to no layer: add it to LAYERS in tests/test_layers.py"
        )
    _, comp, layer = max(matches, key=lambda m: len(m[0]))
    return comp, layer


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def bad_edges(edges: dict[str, set[str]], layers=LAYERS) -> list[str]:
    """'a -> b (component x, layer i -> component y, layer j)' for every edge that does not point
    down."""
    out = []
    for src, dsts in sorted(edges.items()):
        src_comp, src_layer = place(src, layers)
        for dst in sorted(dsts):
            dst_comp, dst_layer = place(dst, layers)
            if dst_comp != src_comp and dst_layer >= src_layer:
                kind = "sideways" if dst_layer == src_layer else "upward"
                out.append(
                    f"{src} -> {dst} ({kind}: {src_comp} L{src_layer} -> {dst_comp} L{dst_layer})"
                )
    return out


def cycles(edges: dict[str, set[str]]) -> list[str]:
    """'a -> b -> ... -> a' for each group of modules that import each other round (a strongly
    connected component, Tarjan's algorithm): its shortest cycle through its first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = {stack.pop()}
            while v not in group:
                group.add(stack.pop())
            if len(group) > 1:  # `imports` leaves out a module's import of itself
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for group in groups:
        start = min(group)
        parent, frontier, end = {start: start}, [start], None
        while end is None:  # breadth first, so the first way back to start is a shortest one
            nxt = []
            for v in frontier:
                if start in edges[v]:
                    end = v
                    break
                for w in sorted(edges[v] & group - parent.keys()):
                    parent[w] = v
                    nxt.append(w)
            frontier = nxt
        path = [end]
        while path[-1] != start:
            path.append(parent[path[-1]])
        out.append(" -> ".join([*reversed(path), start]))
    return sorted(out)


def test_every_import_points_down():
    edges = graph()
    assert sum(len(d) for d in edges.values()) > 50  # the walk sees the real graph
    assert bad_edges(edges) == []


def test_the_check_catches_upward_sideways_and_function_level_imports(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "draft_models" / "low.py").write_text("def f():\n    from serving import high\n")
    (tmp_path / "serving" / "high.py").write_text(
        "from splitserve import trainer_part\nfrom . import other\n"
    )
    (tmp_path / "serving" / "other.py").write_text("import draft_models.low\n")
    (tmp_path / "splitserve" / "trainer_part.py").write_text("")
    found = bad_edges(graph(tmp_path))
    assert found == [
        "draft_models.low -> serving.high (upward: draft_models L0 -> serving L3)",
        "serving.high -> splitserve.trainer_part (sideways: serving L3 -> trainer L3)",
    ]


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_the_cycle_check_names_cycles_of_any_length_and_function_level_imports(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    dm = tmp_path / "draft_models"
    (dm / "a.py").write_text("from . import b\n")
    (dm / "b.py").write_text("def f():\n    from .c import thing\n")
    (dm / "c.py").write_text("import draft_models.a\nfrom . import d\n")
    (dm / "d.py").write_text("")  # imported, imports nothing: in no cycle
    (tmp_path / "serving" / "x.py").write_text("from serving import y\n")
    (tmp_path / "serving" / "y.py").write_text("def g():\n    import serving.x\n")
    assert cycles(graph(tmp_path)) == [
        "draft_models.a -> draft_models.b -> draft_models.c -> draft_models.a",
        "serving.x -> serving.y -> serving.x",
    ]
