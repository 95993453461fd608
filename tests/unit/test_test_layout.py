"""Tests share tests/support and never each other (tools/check_tests.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_tests.py"
spec = importlib.util.spec_from_file_location("check_tests", TOOL)
check_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_tests)  # type: ignore[union-attr]


def test_no_test_module_imports_another_or_a_conftest_or_redefines_support() -> None:
    assert check_tests.check() == []


@pytest.fixture
def tests_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty tests tree with a support package of one class and one hang guard."""
    tests = tmp_path / "tests"
    for package in (tests, tests / "unit", tests / "support"):
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text("")
    (tests / "support" / "timeouts.py").write_text("HANG_GUARD = 20.0\n")
    (tests / "support" / "clocks.py").write_text("class FakeClock:\n    pass\n")
    (tests / "conftest.py").write_text("from .support.timeouts import HANG_GUARD\n")
    monkeypatch.setattr(check_tests, "TESTS", tests)
    return tests


def test_support_imports_are_fine(tests_dir: Path) -> None:
    (tests_dir / "unit" / "test_a.py").write_text("from ..support.timeouts import HANG_GUARD\n"
                                                 "from tests.support.clocks import FakeClock\n")
    assert check_tests.check() == []


@pytest.mark.parametrize("source, imported", [
    ("from .test_b import helper\n", "tests.unit.test_b"),
    ("from . import test_b\n", "tests.unit.test_b"),
    ("from ..conftest import StoreFactory\n", "tests.conftest"),
    ("from .conftest import Client\n", "tests.unit.conftest"),
    ("import tests.unit.test_b\n", "tests.unit.test_b"),
    ("from tests.conftest import x\n", "tests.conftest"),
    ("def f():\n    from .test_b import helper\n", "tests.unit.test_b"),
])
def test_importing_a_test_module_or_a_conftest_is_a_problem(tests_dir: Path, source: str, imported: str) -> None:
    (tests_dir / "unit" / "test_a.py").write_text(source)
    problems = check_tests.check()
    assert problems and all(problem.startswith("tests/unit/test_a.py:") for problem in problems), problems
    assert any(f"imports {imported};" in problem for problem in problems), problems


@pytest.mark.parametrize("source, what", [
    ("HANG_GUARD = 10.0\n", "HANG_GUARD"),
    ("SLOW_HANG_GUARD: float = 30.0\n", "SLOW_HANG_GUARD"),
    ("from hypothesis import settings\nFUZZ = settings(deadline=None)\n", "FUZZ"),
    ("import hypothesis\nFAST = hypothesis.settings(max_examples=5)\n", "FAST"),
    ("class FakeClock:\n    now = 0.0\n", "class FakeClock"),
])
def test_redefining_what_support_holds_is_a_problem(tests_dir: Path, source: str, what: str) -> None:
    (tests_dir / "unit" / "test_a.py").write_text(source)
    problems = check_tests.check()
    assert len(problems) == 1 and problems[0].startswith("tests/unit/test_a.py:") and f"defines {what}" in problems[0]


def test_a_conftest_importing_a_test_module_is_a_problem_too(tests_dir: Path) -> None:
    (tests_dir / "conftest.py").write_text("from .unit.test_a import helper\n")
    (tests_dir / "unit" / "test_a.py").write_text("def helper():\n    pass\n")
    assert check_tests.check() == ["tests/conftest.py:1: imports tests.unit.test_a; share it through tests/support"]
