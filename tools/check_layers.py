"""Checks mlstream's import graph: no cycle, and no import running back up a floor.

    python tools/check_layers.py        # prints the floors; exit status 1 on a violation

Every ``mlstream`` import counts, wherever it is written (inside a function, under
``TYPE_CHECKING``): a cycle that only type checkers follow is still a knot to read.
A module may import modules of its own floor or lower floors; within a floor the
graph must still be acyclic. The floors, bottom to top, are the architecture in
brief (docs/architecture.md). A sealed package's modules are imported only from inside it.
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "mlstream"

# Bottom to top; a pattern names modules (fnmatch on dotted names without "mlstream.").
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("", "errors", "speedups", "logs", "redaction")),
    ("wire formats and values", ("sse", "templating", "jsonpath", "framing", "filterpath", "search", "settings",
                                 "config", "endpoints", "connectors", "processing", "processing.*", "painless",
                                 "painless.*", "ratelimit", "routing", "signing", "retry", "usage", "token_counts", "interfaces",
                                 "model_fields", "javaregex", "percolate", "guardrails")),
    ("fake providers", ("testing", "testing.*")),
    ("state", ("usage_store", "store", "store_postgres", "stores", "credentials", "auth", "cluster", "registry",
               "model_ttl", "metrics", "usage_recorder", "controllers", "budgets", "stopwords")),
    ("providers", ("aws_credentials", "upstream", "providers", "providers.*", "telemetry", "telemetry.*")),
    ("streaming core", ("streaming", "streaming.*")),
    ("predictor", ("predict", "batch")),
    ("HTTP transport", ("server", "server.routing", "server.responses", "server.sse_writer", "server.deadlines",
                        "server.hangups", "server.transport", "server.workers")),
    ("fronts", ("fronts", "fronts.*")),
    ("server", ("server.app",)),
    ("command line", ("demo", "cli", "__main__")),
]
# Packages whose modules only the package itself imports: others use what its __init__
# exports, so that its insides can be rearranged without touching them.
SEALED = ("painless",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The mlstream modules ``path`` imports (short names, "" for the package itself)."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [part for part in package if part]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and (node.module == "mlstream" or node.module.startswith("mlstream.")):
                target = node.module.removeprefix("mlstream").lstrip(".")
            else:
                continue
            for alias in node.names:  # "from .x import y" may import the module x.y
                child = f"{target}.{alias.name}" if target else alias.name
                found.add(child if child in modules else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "mlstream" or alias.name.startswith("mlstream."):
                    found.add(alias.name.removeprefix("mlstream").lstrip("."))
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


def check() -> list[str]:
    """Every violation, as a sentence; empty when the layering holds."""
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): imports_of(path, modules) for path in paths}
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
    return problems


def main() -> int:
    for index, (title, patterns) in reversed(list(enumerate(FLOORS))):
        print(f"{index}  {title:24s} {' '.join(p or '(mlstream)' for p in patterns)}")
    problems = check()
    for problem in problems:
        print("FAIL", problem)
    print("OK: no cycle, every import points down or across, none into a sealed package" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
