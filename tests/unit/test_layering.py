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
    for name in ("streaming", "store"):
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text("")
    (package / "streaming" / "channel.py").write_text("from ..errors import X\n")
    (package / "store" / "sqlite.py").write_text("from ..streaming.channel import Channel\n")  # store -> streaming: up
    monkeypatch.setattr(check_layers, "PACKAGE", package)
    monkeypatch.setattr(check_layers, "BENCH", tmp_path / "bench")
    problems = check_layers.check()
    assert len(problems) == 1 and "mlstream.store.sqlite (store) imports mlstream.streaming.channel" in problems[0]


def test_folders_that_import_each_other_are_a_cycle() -> None:
    graph = {"": set(), "errors": set(), "__main__": {"app.cli"}, "app.cli": {"errors", "store.sqlite"},
             "store.sqlite": {"store.postgres"}, "store.postgres": {"access.keys"}, "access.keys": {"store"},
             "store": set()}
    folders = check_layers.folder_graph(graph)
    assert folders["__main__"] == {"app"} and folders["app"] == {"", "store"}  # root modules are folder ""
    assert check_layers.find_cycle(folders) == ["store", "access", "store"]
    del graph["store.postgres"]
    assert check_layers.find_cycle(check_layers.folder_graph(graph)) is None


def test_a_cycle_in_bench_is_a_violation(tmp_path: Path, monkeypatch) -> None:
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "__init__.py").write_text("")
    (bench / "scenarios.py").write_text("def later():\n    from .router import cost\n")  # inside a function counts
    (bench / "router.py").write_text("from .scenarios import Env\n")
    monkeypatch.setattr(check_layers, "BENCH", bench)
    assert check_layers.check() == ["import cycle in bench: bench.router -> bench.scenarios -> bench.router"]


def test_an_import_into_a_sealed_package_is_a_violation(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "mlstream"
    (package / "painless").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "painless" / "__init__.py").write_text("from .values import X\n")    # inside: allowed
    (package / "painless" / "values.py").write_text("")
    (package / "processing.py").write_text("from .painless import X\nfrom .painless.values import X\n")
    monkeypatch.setattr(check_layers, "PACKAGE", package)
    monkeypatch.setattr(check_layers, "BENCH", tmp_path / "bench")
    problems = check_layers.check()
    assert len(problems) == 1 and "mlstream.processing imports mlstream.painless.values" in problems[0]
