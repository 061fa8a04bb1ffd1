"""dpedu's layout: one package per part of the course, which never import one another, and no import circle."""

import ast
from pathlib import Path

import dpedu

PACKAGE = Path(dpedu.__file__).resolve().parent
CONTENT = {"sgd", "data_parallel", "cluster", "beyond"}  # the parts of the course
MACHINERY = {"runtime", "notebook"}


def _imports() -> dict[str, set[str]]:
    """Each module of dpedu (dotted) -> the modules of dpedu it imports, at the top or inside a function."""
    modules = {".".join(("dpedu", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): path
               for path in PACKAGE.rglob("*.py")}
    found = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dpedu"):
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                            for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("dpedu")}
        found[name] = {t for t in targets if t in modules and t != name}
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else "top"


def test_content_packages_never_import_one_another_and_runtime_imports_none_of_them():
    crossings = [f"{module} -> {target}" for module, targets in _imports().items() for target in targets
                 if (_part(module) in CONTENT and _part(target) in CONTENT and _part(module) != _part(target))
                 or (_part(module) in MACHINERY and _part(target) in CONTENT)]
    assert not crossings


def test_no_module_imports_itself_through_a_circle():
    graph = _imports()
    graph = {m: {t for t in targets if t != "dpedu"} for m, targets in graph.items()}  # the package's face
    circles = []

    def visit(module, path):
        for target in graph[module]:
            if target in path:
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in done:
                visit(target, [*path, target])
        done.add(module)

    done: set[str] = set()
    for module in graph:
        if module not in done:
            visit(module, [module])
    assert not circles
