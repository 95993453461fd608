"""The flow agent without sockets: ml-commons' tool parameters, outputs handed on, filters."""

from __future__ import annotations

from typing import Any

import pytest

from mlstream.agents.flow import run_flow, tool_parameters
from mlstream.agents.spec import checked_agent
from mlstream.errors import BadRequest

TOOL = {"type": "MLModelTool", "name": "ask", "parameters": {"model_id": "m", "prompt": "p", "keep": "tool"},
        "config": {"pinned": "config"}}


@pytest.mark.parametrize("request_, expected", [
    ({}, {"model_id": "m", "prompt": "p", "keep": "tool", "pinned": "config"}),
    ({"prompt": "request"}, {"model_id": "m", "prompt": "request", "keep": "tool", "pinned": "config"}),
    ({"ask.prompt": "mine"}, {"model_id": "m", "prompt": "mine", "keep": "tool", "pinned": "config"}),
    ({"ask.description": "d"}, {"model_id": "m", "prompt": "p", "keep": "tool", "pinned": "config",
                                "ask.description": "d"}),
    ({"MLModelTool.prompt": "x"}, {"model_id": "m", "prompt": "p", "keep": "tool", "pinned": "config"}),
    ({"pinned": "request"}, {"model_id": "m", "prompt": "p", "keep": "tool", "pinned": "config"}),
])
def test_tool_parameters_are_ml_commons_build_tool_parameters(request_: dict, expected: dict) -> None:
    assert tool_parameters(request_, TOOL) == expected


def test_outputs_are_handed_on_escaped_filtered_and_named() -> None:
    seen: list[dict[str, str]] = []
    answers = iter([{"response": 'say "hi"'}, {"other": [1, 2]}, {"response": {"a": {"b": 7}}}])

    def call_model(model_id: str, parameters: dict[str, str]) -> Any:
        seen.append(parameters)
        return next(answers)

    tools = [{"type": "MLModelTool", "name": "one", "parameters": {"model_id": "m1"}},
             {"type": "MLModelTool", "name": "two", "include_output_in_agent_response": True,
              "parameters": {"model_id": "m2"}},
             {"type": "MLModelTool", "name": "three", "parameters": {"model_id": "m3", "output_filter": "$.a.b"}}]
    out = run_flow(tools, {"question": "q"}, call_model)
    assert seen[1]["one.output"] == 'say \\"hi\\"'        # escaped for a JSON string
    assert seen[2]["two.output"] == '{\\"other\\":[1,2]}'  # no response field: the whole map
    assert [t.to_doc() for t in out.tensors] == [{"name": "two", "result": '{"other":[1,2]}'},
                                         {"name": "three.output", "result": "7"}]


def test_one_tool_answers_a_response_tensor_and_its_response_field_is_chosen() -> None:
    out = run_flow([{"type": "MLModelTool", "parameters": {"model_id": "m", "response_field": "text"}}], {},
                   lambda model_id, parameters: {"text": "chosen", "response": "not this"})
    assert [t.to_doc() for t in out.tensors] == [{"name": "response", "result": "chosen"}]


def test_an_agent_body_is_checked_and_its_parameters_kept_as_strings() -> None:
    doc = checked_agent({"name": "a", "type": "FLOW", "parameters": {"n": 3, "s": "x"},
                         "tools": [{"type": "MLModelTool", "parameters": {"model_id": "m", "k": 1}}]})
    assert doc["parameters"] == {"n": "3", "s": "x"} and doc["tools"][0]["parameters"]["k"] == "1"
    with pytest.raises(BadRequest, match="unknown field"):
        checked_agent({"name": "a", "type": "flow", "tools": [{"type": "MLModelTool", "colour": "red"}]})
