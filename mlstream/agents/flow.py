"""ml-commons' flow agent (``MLFlowAgentRunner``): its tools run in order, each one's output
kept as ``${parameters.<tool name>.output}`` for the ones after it. Pure: a tool's model call
is the caller's ``call_model``.

    a tool's parameters   its own ``parameters``, then the request's over them (a request key
                          ``<tool name>.<key>`` is that tool's ``<key>``; ``<tool type>.<key>``
                          none of them), then its ``config`` over all (``buildToolParameters``)
    the answer            one tool: its output as a ``response`` tensor; several: a tensor for
                          each tool with ``include_output_in_agent_response`` and for the last,
                          named after the tool (``<tool>.output`` under an ``output_filter``)

Tools served: ``MLModelTool`` (a model's ``_predict`` with the tool's parameters; its answer's
``dataAsMap[response_field]``, ``response`` by default, else the whole map as JSON). Tools
that need an index, and any other, are refused with a 400 naming the tool before any runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import BadRequest
from ..processing.escaping import escape_json_text
from ..wire.jsonpath import JsonPathError, PathNotFound, compile_path
from ..wire.templating import render

SERVED_TOOLS = ("MLModelTool", "McpStreamableHttpTool")
MCP_TOOL = "McpStreamableHttpTool"
# ml-commons' tools that read or write an index: mlstream has none to give them.
INDEX_TOOLS = frozenset({"SearchIndexTool", "VectorDBTool", "NeuralSparseSearchTool", "RAGTool", "IndexMappingTool",
                         "ListIndexTool", "AgenticSearchTool", "QueryPlanningTool", "PPLTool", "SearchAlertsTool",
                         "SearchMonitorsTool", "SearchAnomalyDetectorsTool", "SearchAnomalyResultsTool",
                         "CreateAnomalyDetectorTool", "LogPatternTool", "VisualizationTool", "IndexInsightTool",
                         "DataDistributionTool", "ReadFromScratchPadTool", "WriteToScratchPadTool"})
OUTPUT_FILTER = "output_filter"
DEFAULT_RESPONSE_FIELD = "response"
# (model id, parameters) -> the model's first output tensor's dataAsMap
CallModel = Callable[[str, dict[str, str]], Mapping[str, Any]]
# (an MCP tool's name, its arguments) -> its result's content list
CallMcp = Callable[[str, dict[str, Any]], list[dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class Tensor:
    """One output tensor of the agent's answer: ``{"name", "result"}``."""

    name: str
    result: Any

    def to_doc(self) -> dict[str, Any]:
        return {"name": self.name, "result": self.result}


def tool_name(spec: Mapping[str, Any]) -> str:
    return spec.get("name") or spec["type"]


def check_runnable(tools: list[Mapping[str, Any]]) -> None:
    """A 400 naming the first tool this flow cannot run, before any runs."""
    if not tools:
        raise BadRequest("no tool configured")
    for spec in tools:
        kind = spec["type"]
        if kind in INDEX_TOOLS:
            raise BadRequest(f"tool [{tool_name(spec)}] of type [{kind}] needs an OpenSearch index: mlstream has "
                             f"none, so it cannot run here (tools served: {', '.join(SERVED_TOOLS)})")
        if kind not in SERVED_TOOLS:
            raise BadRequest(f"tool [{tool_name(spec)}] of type [{kind}] is not served here "
                             f"(tools served: {', '.join(SERVED_TOOLS)})")
        if kind == "MLModelTool" and not (spec.get("parameters") or {}).get("model_id"):
            raise BadRequest(f"tool [{tool_name(spec)}]: Model ID can't be null or empty")


def tool_parameters(request: Mapping[str, str], spec: Mapping[str, Any]) -> dict[str, str]:
    """``ToolUtils.buildToolParameters``."""
    out: dict[str, str] = dict(spec.get("parameters") or {})
    out.update(request)
    name, kind = tool_name(spec), spec["type"]
    for key, value in request.items():
        if key.startswith(name + ".") and key != name + ".description":
            out[key[len(name) + 1:]] = value
            out.pop(key, None)
        elif key.startswith(kind + "."):
            out.pop(key, None)
    out.update(spec.get("config") or {})
    return out


@dataclass(frozen=True, slots=True)
class FlowResult:
    tensors: list[Tensor]      # the answer's tensors
    outputs: dict[str, str]    # "<tool>.output" -> its filtered output, for the tensors answered
    last_output: str           # the last tool's filtered output (a conversation's response)


# (tool name, its filtered output) after each tool: a conversational flow's trace
OnStep = Callable[[str, str], None]


def run_flow(tools: list[Mapping[str, Any]], request: Mapping[str, str], call_model: CallModel,
             on_step: OnStep | None = None, *, conversational: bool = False,
             call_mcp: CallMcp | None = None) -> FlowResult:
    """The flow's answer (``check_runnable`` first): a flow agent's one tool's output as a
    ``response`` tensor; several tools' (and a conversational flow's, however many) named
    as ``MLFlowAgentRunner`` and ``MLConversationalFlowAgentRunner`` name them."""
    check_runnable(tools)
    params = dict(request)
    tensors: list[Tensor] = []
    outputs: dict[str, str] = {}
    filtered = ""
    for index, spec in enumerate(tools):
        executed = tool_parameters(params, spec)
        output = run_tool(spec, executed, call_model, call_mcp)
        name = tool_name(spec)
        filtered = _filtered(executed, output)
        params[f"{name}.output"] = escape_json_text(filtered)
        if on_step is not None:
            on_step(name, filtered)
        if spec.get("include_output_in_agent_response") or index == len(tools) - 1:
            outputs[f"{name}.output"] = filtered
            if len(tools) == 1 and not conversational:
                tensors.append(_as_response(output))
            elif OUTPUT_FILTER in executed:
                tensors.append(Tensor(f"{name}.output", filtered))
            else:
                tensors.append(Tensor(name, _json_text(output)))
    return FlowResult(tensors, outputs, filtered)


def run_tool(spec: Mapping[str, Any], parameters: dict[str, str], call_model: CallModel,
             call_mcp: CallMcp | None = None) -> Any:
    """``MLModelTool.run``: the model's answer's response field, or the whole map as JSON
    (a flow's step, or an MCP server's ``tools/call``). ``McpStreamableHttpTool.run``: the
    MCP tool of the tool's name called with ``parameters.input`` (a JSON object, its
    ``${parameters.x}`` filled) as its arguments; its result's content list as JSON."""
    if spec["type"] == MCP_TOOL:
        assert call_mcp is not None
        return _json_text(call_mcp(tool_name(spec), _mcp_arguments(parameters)))
    data = call_model(parameters["model_id"], parameters)
    field = parameters.get("response_field", DEFAULT_RESPONSE_FIELD)
    if field in data:
        return data[field]
    return _json_text(dict(data))


def _mcp_arguments(parameters: Mapping[str, str]) -> dict[str, Any]:
    """``ToolUtils.extractInputParameters`` then ``StringUtils.fromJson(input)``."""
    text = parameters.get("input")
    if text is None:
        return {}
    try:
        filled = render(text, parameters, {}, where="input", keep_missing=True)
        arguments = json.loads(filled)
    except (ValueError, BadRequest):
        raise BadRequest(f"an MCP tool's [input] must be a JSON object, got [{text[:100]}]") from None
    if not isinstance(arguments, dict):
        raise BadRequest(f"an MCP tool's [input] must be a JSON object, got [{text[:100]}]")
    return arguments


def _filtered(parameters: Mapping[str, str], output: Any) -> str:
    """``filterToolOutput`` then ``parseResponse``: an ``output_filter`` JSONPath applied to
    the output's JSON (a path that is not there leaves the output whole, as ml-commons logs
    and goes on)."""
    text = _json_text(output)
    path = parameters.get(OUTPUT_FILTER)
    if path is None:
        return text
    try:
        document = json.loads(text)
        return _json_text(compile_path(path).read(document))
    except (ValueError, PathNotFound, JsonPathError):
        return text


def _json_text(value: Any) -> str:
    """``StringUtils.toJson``: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _as_response(output: Any) -> Tensor:
    """``MLAgentExecutor.processOutput`` for one tool's output: a ``response`` tensor."""
    return Tensor("response", _json_text(output))
