"""The shape of the house (docs/architecture.md), checked from the source's import statements.

An AST scan of ``dni_lab/`` builds the import graph between its files: every
``import``/``from`` statement, also those inside functions (a deferred import is
still a dependency), but not those under ``if TYPE_CHECKING:`` (never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dni_lab"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package ``__init__``)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _import_nodes(
    tree: ast.Module, type_checking: bool = False
) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            skip = not type_checking and isinstance(child, ast.If)
            if skip and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(ast.Module(body=[sub], type_ignores=[]))
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def import_graph(type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the ``dni_lab`` modules it imports (``from pkg import sub`` names ``pkg.sub``);
    with ``type_checking``, also the imports under ``if TYPE_CHECKING:``."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        package = name if is_pkg else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _import_nodes(ast.parse(path.read_text(), str(path)), type_checking):
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in mods}
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module in mods:
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    targets.add(sub if sub in mods else module)
        graph[name] = targets - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_scan_sees_the_package(graph):
    # a scan that resolved nothing would pass every check below
    assert len(graph) > 50
    assert "dni_lab.backend.extraction.models" in graph["dni_lab.backend.extraction.extract"]
    assert "dni_lab.backend.verify.common" in graph["dni_lab.backend.verify.ablate"]
    assert "dni_lab.backend.examples.scoring" in graph["dni_lab.backend.examples.queries"]


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_files(graph):
    assert cycles(graph) == []


def test_no_cycle_even_through_type_only_imports():
    # examples/index.py and index_file.py needed each other through a TYPE_CHECKING import
    # (NeuronIndex <-> load_index/save_index): the file module now knows named fields only
    typed = import_graph(type_checking=True)
    assert cycles(typed) == []
    assert "dni_lab.backend.examples.index" not in typed["dni_lab.backend.examples.index_file"]


def imports_between(graph, sources: str, targets: tuple[str, ...]) -> set[tuple[str, str]]:
    """(importer, imported) pairs from modules under ``sources`` to modules under ``targets``."""
    return {
        (src, dst)
        for src, dsts in graph.items()
        if src.startswith(sources)
        for dst in dsts
        if dst.startswith(targets)
    }


def test_backend_never_imports_widgets_or_magic(graph):
    front = ("dni_lab.widgets", "dni_lab.magic", "dni_lab.cli")
    assert not imports_between(graph, "dni_lab.backend", front)


def reachable(graph: dict[str, set[str]], sources: str) -> dict[str, str]:
    """Every module reachable from modules under ``sources``, with the module it was reached
    from (to show the chain in a failure)."""
    parent: dict[str, str] = {}
    todo = [m for m in graph if m.startswith(sources)]
    while todo:
        v = todo.pop()
        for w in graph.get(v, ()):
            if w not in parent and not w.startswith(sources):
                parent[w] = v
                todo.append(w)
    return parent


def chain(parent: dict[str, str], module: str) -> str:
    path = [module]
    while path[-1] in parent:
        path.append(parent[path[-1]])
    return " <- ".join(path)


def test_widgets_see_the_engines_face_not_its_adapters(graph):
    # panels run inspections through api/run; the Hugging Face and Ray adapters register
    # themselves from dni_lab/__init__.py, so no chain of imports leads a widget to them
    parent = reachable(graph, "dni_lab.widgets")
    adapters = sorted(m for m in parent if m.startswith(("dni_lab.backend.hf",
                                                         "dni_lab.backend.cluster")))
    assert adapters == [], [chain(parent, m) for m in adapters]
    assert "dni_lab.backend.engine.inspection" in parent  # the engine is reached (the scan works)


def test_widgets_run_no_model_themselves(graph):
    # widgets reach models only through the public API and the behaviors service
    internals = (
        "dni_lab.backend.extraction.extract",
        "dni_lab.backend.extraction.models",
        "dni_lab.backend.hypothesis.hypotheses",
    )
    assert not imports_between(graph, "dni_lab.widgets", internals)
    # the helper itself finds what it should
    toy = {"a.x": {"b.y", "c"}, "b.y": {"a.x"}}
    assert imports_between(toy, "a", ("b",)) == {("a.x", "b.y")}


def test_backend_is_rooms_not_a_flat_folder():
    # the face (api, errors) sits at the top; everything else lives in a room named after
    # its step of the flow (docs/architecture.md), so a new module has to pick one
    backend = PACKAGE / "backend"
    flat = sorted(p.name for p in backend.glob("*.py"))
    assert flat == ["__init__.py", "api.py", "errors.py"]
    rooms = {p.name for p in backend.iterdir() if (p / "__init__.py").exists()}
    assert {"engine", "extraction", "hypothesis", "measures"} <= rooms
