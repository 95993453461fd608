"""Checks the import graphs of mlstream and bench: no cycle, no import running back up a floor.

    python tools/check_layers.py        # prints the floors; exit status 1 on a violation

Every import counts, wherever it is written (inside a function, under ``TYPE_CHECKING``):
a cycle that only type checkers follow is still a knot to read. mlstream's floors are its
folders, bottom to top (docs/architecture.md): a module may import its own folder or a
folder on a lower floor, so no two folders import each other in a circle; within a
folder the module graph must still be acyclic. A sealed package's modules are imported
only from inside it. bench/ has no floors, only the rule of no cycle.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mlstream"
BENCH = ROOT / "bench"


def folder(name: str) -> tuple[str, str]:
    """The patterns of one folder: its face (__init__) and its modules."""
    return (name, f"{name}.*")


# Bottom to top; a pattern names modules (fnmatch on dotted names without "mlstream.").
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("", "errors", "speedups", "logs", "redaction", "metrics")),
    ("wire formats", folder("wire")),
    ("script language", folder("painless")),
    ("processing", folder("processing")),
    ("usage", folder("usage")),
    ("fake providers", folder("testing")),
    ("settings", folder("settings")),
    ("cache rules", folder("caching")),
    ("store", folder("store")),
    ("access", folder("access")),
    ("guard", folder("guard")),
    ("models", folder("models")),
    ("conversation memory", folder("memory")),
    ("providers", folder("providers")),
    ("telemetry", folder("telemetry")),
    ("upstream", folder("upstream")),
    ("streaming core", folder("streaming")),
    ("inference", folder("inference")),
    ("agents", folder("agents")),
    ("HTTP transport", folder("server")),
    ("fronts", folder("fronts")),
    ("composition root", folder("app")),
    ("command line", ("__main__",)),
]
# Packages whose modules only the package itself imports: others use what its __init__
# exports, so that its insides can be rearranged without touching them.
SEALED = ("painless",)


def module_name(path: Path, package: Path | None = None) -> str:
    parts = list(path.relative_to(package or PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: set[str], package_root: Path | None = None) -> set[str]:
    """The modules of ``path``'s own package it imports (short names, "" for the package itself)."""
    root = package_root or PACKAGE
    top = root.name
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [part for part in package if part]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == top or node.module.startswith(top + ".")):
                target = node.module.removeprefix(top).lstrip(".")
            else:
                continue
            for alias in node.names:  # "from .x import y" may import the module x.y
                child = f"{target}.{alias.name}" if target else alias.name
                found.add(child if child in modules else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == top or alias.name.startswith(top + "."):
                    found.add(alias.name.removeprefix(top).lstrip("."))
    found.discard(name)
    return found


def floor_of(module: str) -> int:
    for index, (_, patterns) in enumerate(FLOORS):
        if any(fnmatch.fnmatchcase(module, pattern) for pattern in patterns):
            return index
    raise LookupError(f"module mlstream.{module} is on no floor: add it to FLOORS in {__file__}")


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for child in sorted(graph.get(node, ())):
            if state.get(child) == 1:
                return path[path.index(child):] + [child]
            if child not in state and (cycle := visit(child)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def graph_of(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of that package it imports."""
    paths = sorted(package.rglob("*.py"))
    modules = {module_name(path, package) for path in paths}
    return {module_name(path, package): imports_of(path, modules, package) for path in paths}


def folder_of(module: str) -> str:
    """The folder a module lives in: "" for the package's root modules, but __main__ is
    the entry point above every folder, not a part of the root's foundation."""
    top = module.split(".")[0]
    return top if "." in module or (PACKAGE / top).is_dir() or top == "__main__" else ""


def folder_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to folders, without a folder's imports of itself."""
    folders: dict[str, set[str]] = {}
    for module, imported in graph.items():
        source = folder_of(module)
        folders.setdefault(source, set()).update(folder_of(t) for t in imported if folder_of(t) != source)
    return folders


def check() -> list[str]:
    """Every violation, as a sentence; empty when the layering holds."""
    graph = graph_of(PACKAGE)
    problems: list[str] = []
    for module, imported in sorted(graph.items()):
        try:
            floor = floor_of(module)
            for target in sorted(imported):
                if floor_of(target) > floor:
                    problems.append(f"mlstream.{module} ({FLOORS[floor][0]}) imports mlstream.{target} "
                                    f"({FLOORS[floor_of(target)][0]}), a floor above it")
        except LookupError as exc:
            problems.append(str(exc))
        for target in sorted(imported):
            sealed = target.split(".")[0]
            if sealed in SEALED and "." in target and module.split(".")[0] != sealed:
                problems.append(f"mlstream.{module} imports mlstream.{target}, inside the sealed package "
                                f"mlstream.{sealed}: import what mlstream.{sealed} exports")
    cycle = find_cycle(graph)
    if cycle:
        problems.append("import cycle: " + " -> ".join(f"mlstream.{m}" if m else "mlstream" for m in cycle))
    cycle = find_cycle(folder_graph(graph))
    if cycle:
        problems.append("folder cycle: " + " -> ".join(f"mlstream/{m}/" if m else "mlstream/*.py" for m in cycle).replace("/__main__/", "/__main__.py"))
    if BENCH.is_dir() and (cycle := find_cycle(graph_of(BENCH))):
        problems.append("import cycle in bench: " + " -> ".join(f"bench.{m}" if m else "bench" for m in cycle))
    return problems


def main() -> int:
    for index, (title, patterns) in reversed(list(enumerate(FLOORS))):
        print(f"{index}  {title:24s} {' '.join(p or '(mlstream)' for p in patterns)}")
    problems = check()
    for problem in problems:
        print("FAIL", problem)
    print("OK: no cycle of modules or folders, every import points down or across, none into a sealed package" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
