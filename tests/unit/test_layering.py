"""The import graph has no cycle, no import running back up a floor and none into a sealed
package (tools/check_layers.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_layers.py"
spec = importlib.util.spec_from_file_location("check_layers", TOOL)
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)  # type: ignore[union-attr]


def test_mlstream_imports_point_down_and_never_in_a_circle() -> None:
    assert check_layers.check() == []


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert check_layers.find_cycle(graph) == ["a", "b", "c", "a"]
    assert check_layers.find_cycle({"a": {"b"}, "b": set()}) is None


def test_an_upward_import_is_a_violation(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "mlstream"
    (package / "streaming").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text("")
    (package / "streaming" / "__init__.py").write_text("")
    (package / "streaming" / "channel.py").write_text("from ..errors import X\n")
    (package / "store.py").write_text("from .streaming.channel import Channel\n")  # state -> streaming: up
    monkeypatch.setattr(check_layers, "PACKAGE", package)
    problems = check_layers.check()
    assert len(problems) == 1 and "mlstream.store (state) imports mlstream.streaming.channel" in problems[0]


def test_an_import_into_a_sealed_package_is_a_violation(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "mlstream"
    (package / "painless").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "painless" / "__init__.py").write_text("from .values import X\n")    # inside: allowed
    (package / "painless" / "values.py").write_text("")
    (package / "processing.py").write_text("from .painless import X\nfrom .painless.values import X\n")
    monkeypatch.setattr(check_layers, "PACKAGE", package)
    problems = check_layers.check()
    assert len(problems) == 1 and "mlstream.processing imports mlstream.painless.values" in problems[0]
