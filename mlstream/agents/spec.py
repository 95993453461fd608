"""An agent as ml-commons registers it (``MLAgent``, ``MLToolSpec``), checked; pure values.

    {"name", "type": flow | conversational_flow | conversational | plan_execute_and_reflect | ag_ui,
     "description"?, "llm"? {"model_id", "parameters"?}, "tools"? [{"type", "name"?, "description"?,
     "parameters"?, "attributes"?, "include_output_in_agent_response"?, "config"?}],
     "parameters"?, "memory"? {"type"}, "app_type"?}

Registration takes every type and tool ml-commons does; running is where a type or tool
mlstream does not serve is refused (``RUNNABLE_TYPES``, ``agents.flow.SERVED_TOOLS``).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from ..errors import BadRequest

AGENT_TYPES = ("flow", "conversational", "conversational_flow", "plan_execute_and_reflect", "ag_ui")
AGENT_NAME_MAX_LENGTH = 128  # MLAgent.AGENT_NAME_MAX_LENGTH
AGENT_FIELDS = ("name", "type", "description", "llm", "model", "tools", "parameters", "memory", "app_type",
                "context_management_name", "context_management")
TOOL_FIELDS = ("type", "name", "description", "parameters", "attributes", "include_output_in_agent_response",
               "config", "runtime_resources")
# MLAgentUpdateInput's fields (name and type of an agent stay).
UPDATE_FIELDS = ("name", "description", "llm", "model", "tools", "parameters", "memory", "app_type",
                 "context_management_name", "context_management")


def checked_agent(body: Any) -> dict[str, Any]:
    """A register body as the stored agent document (times added by the caller), or the
    BadRequest ml-commons answers for it."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    doc = {name: body[name] for name in AGENT_FIELDS if body.get(name) is not None}
    name = doc.get("name")
    if name is None:
        raise BadRequest("Agent name can't be null")
    if not isinstance(name, str) or not name.strip() or len(name) > AGENT_NAME_MAX_LENGTH:
        raise BadRequest(f"Agent name cannot be empty or exceed max length of {AGENT_NAME_MAX_LENGTH} characters")
    kind = doc.get("type")
    if kind is None:
        raise BadRequest("Agent type can't be null")
    if not isinstance(kind, str) or kind.lower() not in AGENT_TYPES:
        raise BadRequest("Invalid Agent Type")
    if kind.lower() in ("conversational", "plan_execute_and_reflect") and "llm" not in doc and "model" not in doc:
        raise BadRequest("We need model information for the conversational agent type")
    _check_common(doc)
    return doc


def checked_update(body: Any, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The stored agent with an update's fields replacing its own."""
    if not isinstance(body, dict) or not body:
        raise BadRequest("Update agent request has empty body")
    unknown = sorted(set(body) - set(UPDATE_FIELDS))
    if "type" in unknown:
        raise BadRequest("Agent type cannot be updated")
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in the agent update")
    doc = {**stored, **{name: value for name, value in body.items() if value is not None}}
    name = doc.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > AGENT_NAME_MAX_LENGTH:
        raise BadRequest(f"Agent name cannot be empty or exceed max length of {AGENT_NAME_MAX_LENGTH} characters")
    _check_common(doc)
    return doc


def _check_common(doc: dict[str, Any]) -> None:
    for field in ("description", "app_type", "context_management_name"):
        if field in doc and not isinstance(doc[field], str):
            raise BadRequest(f"[{field}] must be a string")
    if "parameters" in doc:
        doc["parameters"] = string_map(doc["parameters"], "parameters")
    llm = doc.get("llm")
    if llm is not None:
        if not isinstance(llm, dict) or not isinstance(llm.get("model_id"), str) or not llm["model_id"]:
            raise BadRequest("[llm] must be an object with a [model_id]")
        if "parameters" in llm:
            llm["parameters"] = string_map(llm["parameters"], "llm.parameters")
    memory = doc.get("memory")
    if memory is not None and (not isinstance(memory, dict) or not isinstance(memory.get("type"), str)):
        raise BadRequest('[memory] must be an object with a [type], such as {"type": "conversation_index"}')
    tools = doc.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise BadRequest("[tools] must be a list of tools")
        doc["tools"] = [_checked_tool(tool) for tool in tools]
        names = [tool.get("name") or tool["type"] for tool in doc["tools"]]
        if len(set(names)) != len(names):
            raise BadRequest("Duplicate tool defined in agent configuration")


def _checked_tool(tool: Any) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise BadRequest("each of [tools] must be an object")
    if tool.get("type") is None:
        raise BadRequest("tool type is null")
    if not isinstance(tool["type"], str):
        raise BadRequest("a tool's [type] must be a string")
    unknown = sorted(set(tool) - set(TOOL_FIELDS) - {"tenant_id"})
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in tool [{tool['type']}]")
    checked = {name: tool[name] for name in TOOL_FIELDS if tool.get(name) is not None}
    for field in ("name", "description"):
        if field in checked and not isinstance(checked[field], str):
            raise BadRequest(f"a tool's [{field}] must be a string")
    for field in ("parameters", "config"):
        if field in checked:
            checked[field] = string_map(checked[field], f"{tool['type']}.{field}")
    if "attributes" in checked and not isinstance(checked["attributes"], dict):
        raise BadRequest(f"[{tool['type']}.attributes] must be an object")
    include = checked.get("include_output_in_agent_response", False)
    if not isinstance(include, bool):
        raise BadRequest("[include_output_in_agent_response] must be true or false")
    checked["include_output_in_agent_response"] = include
    return checked


def string_map(value: Any, field: str) -> dict[str, str]:
    """A map of strings, as ml-commons keeps parameters (other values as their JSON text)."""
    if not isinstance(value, dict):
        raise BadRequest(f"[{field}] must be an object")
    return {str(key): item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
            for key, item in value.items()}
