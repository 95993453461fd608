"""The "Streaming from Python" snippets of docs/api.md, run as written (only the host and the
model id are filled in), each against a real server and the fake provider."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlstream.testing.fake_openai import DEFAULT_TEXT

from ..support.clients import Client
from ..support.connectors import openai_connector

PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def snippets() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## Streaming from Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.DOTALL)


def test_the_section_has_its_three_snippets():
    assert len(snippets()) == 3


@pytest.mark.parametrize("index", range(3), ids=["requests", "opensearch-py-connection", "opensearch-py-serializer"])
def test_a_snippet_prints_the_streamed_answer(server, fake, capsys, index):
    model_id = Client(server.url).model_for(openai_connector(fake))
    code = snippets()[index].replace("http://localhost:9200", server.url).replace("<your_model_id>", model_id)
    exec(compile(code, f"docs/api.md snippet {index + 1}", "exec"), {"__name__": "readme_snippet"})  # noqa: S102
    assert capsys.readouterr().out == DEFAULT_TEXT
    assert len(fake.stats.requests) == 1 and fake.stats.requests[0].body["stream"] is True
