"""Checks that tests share ``tests/support`` and never each other.

    python tools/check_tests.py        # prints each problem; exit status 1 if any

A module under ``tests/`` may not import a test module (``test_*``) or a ``conftest``
(those hold fixtures and hooks, which pytest hands out by name), and may not redefine
what ``tests/support`` holds: a hang guard (a module-level name containing
``HANG_GUARD``, outside ``support/timeouts.py``), a set of hypothesis settings bound to
a module-level name (outside ``support/fuzz.py``), or a class of the support package.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def module_parts(path: Path) -> list[str]:
    """``tests/unit/test_x.py`` -> ["tests", "unit", "test_x"] (a package: its directory)."""
    parts = list(path.relative_to(TESTS.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return parts


def imported_modules(path: Path, tree: ast.Module) -> list[tuple[int, list[str]]]:
    """(line, dotted parts) of every module ``path`` imports, relative imports resolved;
    for ``from m import n`` both ``m`` and ``m.n`` (n may be a module)."""
    package = module_parts(path) if path.name == "__init__.py" else module_parts(path)[:-1]
    found: list[tuple[int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - (node.level - 1)] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            found.append((node.lineno, target))
            found += [(node.lineno, target + [alias.name]) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")) for alias in node.names]
    return found


def is_test_or_conftest(parts: list[str]) -> bool:
    if not parts:
        return False
    inside = parts[0] == "tests" or len(parts) == 1   # "import conftest" (rootdir-relative)
    return inside and (parts[-1] == "conftest" or parts[-1].startswith("test_"))


def support_classes() -> set[str]:
    names: set[str] = set()
    for path in (TESTS / "support").glob("*.py"):
        names |= {node.name for node in ast.parse(path.read_text(encoding="utf-8")).body
                  if isinstance(node, ast.ClassDef)}
    return names


def _is_settings_call(value: ast.expr | None) -> bool:
    return (isinstance(value, ast.Call)
            and (isinstance(value.func, ast.Name) and value.func.id == "settings"
                 or isinstance(value.func, ast.Attribute) and value.func.attr == "settings"))


def redefinitions(path: Path, tree: ast.Module, classes: set[str]) -> list[tuple[int, str]]:
    """(line, what) for every module-level definition that belongs in tests/support."""
    relative = path.relative_to(TESTS).as_posix()
    found: list[tuple[int, str]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in classes and not relative.startswith("support/"):
            found.append((node.lineno, f"class {node.name} (tests/support has one)"))
        if not isinstance(node, ast.Assign | ast.AnnAssign):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for name in (target.id for target in targets if isinstance(target, ast.Name)):
            if "HANG_GUARD" in name and relative != "support/timeouts.py":
                found.append((node.lineno, f"{name} (a hang guard: tests/support/timeouts.py)"))
            elif _is_settings_call(node.value) and relative != "support/fuzz.py":
                found.append((node.lineno, f"{name} (hypothesis settings: tests/support/fuzz.py)"))
    return found


def check() -> list[str]:
    """Every problem, as ``path:line: text``; empty when the tests are in order."""
    classes = support_classes()
    problems: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        shown = path.relative_to(TESTS.parent).as_posix()
        reported: set[int] = set()
        for line, parts in imported_modules(path, tree):
            if is_test_or_conftest(parts) and line not in reported:   # one problem per import
                reported.add(line)
                problems.append(f"{shown}:{line}: imports {'.'.join(parts)}; share it through tests/support")
        for line, what in redefinitions(path, tree, classes):
            problems.append(f"{shown}:{line}: defines {what}")
    return sorted(set(problems))


def main() -> int:
    problems = check()
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
