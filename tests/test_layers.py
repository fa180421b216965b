"""One-way layers: every import between the project's packages points down (docs/ARCHITECTURE.md).

    draft_models, recipes                 0   architectures, losses, packing; recipe configs
    splitserve.data, splitserve.checkpoint 1  conversations; the checkpoint layout
    splitserve.target                     2   the target side: models, capture, chat, backends
    splitserve (the trainer), serving     3   siblings: neither imports the other

The test reads every module's source (ast), including imports inside functions, and fails on an
edge to the same or a higher layer between different components, naming both modules.
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
