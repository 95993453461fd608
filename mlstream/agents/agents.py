"""ml-commons' agents: registered, read, updated, deleted and searched as records of the
store (kind ``agent``), and run (``execute``).

Registering, updating and deleting an agent is an admin's; reading, searching and running
one any key's. Running calls the tools' models as the caller: its access to each model
(a model it may not use is refused as on ``_predict``), its limits and budget; each model
call is a usage record of its own on the route ``/_plugins/_ml/agents/{agent_id}/_execute``
(the first takes the request's rpm place, the others none).

Served: ``flow`` and ``conversational_flow`` agents (``agents.flow``), with conversation
memory (``memory.conversations``) when the agent has ``"memory": {"type":
"conversation_index"}``, as ml-commons' agent executor and runners use it: a turn's root
message, a conversational flow's chat history (``${parameters.chat_history}``), each tool's
trace, the answer. Other types register as in ml-commons and are refused with a 400 when run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..access.keys import Caller
from ..errors import BadRequest, NotFound, UpstreamError
from ..inference.predict import Ask, Bound, Predictor
from ..models.registry import AnyModel, new_id
from ..models.search import INDEX_OF, run_search
from ..store.sqlite import Record, Store
from ..telemetry.hooks import RequestTrace
from ..memory.conversations import Conversations
from .flow import check_runnable, run_flow
from .spec import checked_agent, checked_update

EXECUTE_ROUTE = "/_plugins/_ml/agents/{agent_id}/_execute"
RUNNABLE_TYPES = ("flow", "conversational_flow")
CONVERSATION_INDEX = "conversation_index"  # the one memory type served (MLMemoryType.CONVERSATION_INDEX)
MEMORY_ID, PARENT_INTERACTION_ID, QUESTION = "memory_id", "parent_interaction_id", "question"
CHAT_HISTORY = "chat_history"
CHAT_HISTORY_HEAD = "Below is Chat History between Human and AI which sorted by time with asc order:\n"
DEFAULT_HISTORY = 10  # ConversationIndexMemory.LAST_N_INTERACTIONS


@dataclass(frozen=True, slots=True)
class Turn:
    memory_id: str
    parent_id: str  # the turn's root message


class Agents:
    def __init__(self, store: Store, predictor: Predictor, resolve: Callable[[str, Caller | None], AnyModel],
                 memories: Conversations, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._memories = memories
        self._predictor = predictor
        self._resolve = resolve  # a model by id, as the caller may use it (the registry's)
        self._clock = clock

    def register(self, body: Any) -> dict[str, Any]:
        doc = checked_agent(body)
        now = int(self._clock() * 1000)
        doc.update(created_time=now, last_updated_time=now)
        agent_id = new_id()
        self._store.put("agent", Record(agent_id, doc))
        return {"agent_id": agent_id}

    def get(self, agent_id: str) -> dict[str, Any]:
        return self._record(agent_id).doc

    def update(self, agent_id: str, body: Any) -> dict[str, Any]:
        with self._store.transaction():
            doc = checked_update(body, self._record(agent_id).doc)
            doc["last_updated_time"] = int(self._clock() * 1000)
            self._store.put("agent", Record(agent_id, doc))
        return _write_response(agent_id, "updated")

    def delete(self, agent_id: str) -> dict[str, Any]:
        with self._store.transaction():
            self._record(agent_id)
            self._store.delete("agent", agent_id)
        return _write_response(agent_id, "deleted")

    def search(self, body: Any) -> dict[str, Any]:
        return run_search("agent", [(record.id, record.doc) for record in self._store.scan("agent")], body)

    def execute(self, agent_id: str, body: Any, caller: Caller | None,
                trace: RequestTrace | None = None) -> dict[str, Any]:
        agent = self._record(agent_id).doc
        parameters = _parameters(body)
        kind = agent["type"].lower()
        if kind not in RUNNABLE_TYPES:
            raise BadRequest(f"agent [{agent_id}] is a [{kind}] agent: mlstream runs {', '.join(RUNNABLE_TYPES)} "
                             "agents only")
        tools = agent.get("tools") or []
        check_runnable(tools)
        turn = self._turn(agent, parameters, caller)
        on_step = None
        conversing = kind == "conversational_flow" and turn is not None and agent.get("app_type") is not None
        if conversing:
            assert turn is not None
            history = self._memories.history(turn.memory_id, caller, _history_limit(parameters))
            said = [m for m in history if m.get("response")]  # the turn in flight has none yet
            if said:
                parameters[CHAT_HISTORY] = CHAT_HISTORY_HEAD + "".join(
                    f"Human:{m.get('input')}\nAssistant:{m['response']}\n" for m in said)
            if parameters.get("disable_trace", "").lower() != "true":
                on_step = self._tracer(turn, parameters.get(QUESTION), caller)
        result = run_flow(tools, parameters, self._call_model(caller, trace), on_step, conversational=kind != "flow")
        tensors = [tensor.to_doc() for tensor in result.tensors]
        if turn is not None:
            # The root message: a conversation's answer; a flow's outputs as its additional_info.
            changes = {"response": result.last_output, "additional_info": {}} if conversing else \
                {"additional_info": result.outputs}
            self._memories.finish_turn(turn.parent_id, changes, caller)
            if conversing:
                tensors = [{"name": "memory_id", "result": turn.memory_id},
                           {"name": "parent_message_id", "result": turn.parent_id}, *tensors]
        return {"inference_results": [{"output": tensors}]}

    def _tracer(self, turn: Turn, question: str | None, caller: Caller | None) -> Callable[[str, str], None]:
        """Each tool's output a trace of the turn's root message, numbered from 1."""
        numbers = iter(range(1, 1 << 31))

        def trace(tool: str, output: str) -> None:
            self._memories.add_trace(turn.memory_id, turn.parent_id, next(numbers), question, output, tool, caller)
        return trace

    def _turn(self, agent: Mapping[str, Any], parameters: dict[str, str], caller: Caller | None) -> Turn | None:
        """The conversation an agent with memory answers in (``memory_id``, or a new one) and
        the root message of this turn (``parent_interaction_id``, or a new one), as ml-commons'
        agent executor makes them; None for an agent without memory."""
        memory = agent.get("memory")
        if memory is None:
            return None
        if memory["type"].lower() != CONVERSATION_INDEX:
            raise BadRequest(f"memory type [{memory['type']}] is not served here (only {CONVERSATION_INDEX})")
        memory_id, parent_id = parameters.get(MEMORY_ID), parameters.get(PARENT_INTERACTION_ID)
        if memory_id is None or parent_id is None:
            memory_id, parent_id = self._memories.start_turn(memory_id, parameters.get(QUESTION),
                                                             agent.get("app_type"), caller)
        parameters[MEMORY_ID], parameters[PARENT_INTERACTION_ID] = memory_id, parent_id
        return Turn(memory_id, parent_id)

    def _call_model(self, caller: Caller | None,
                    trace: RequestTrace | None) -> Callable[[str, dict[str, str]], Mapping[str, Any]]:
        """``MLModelTool``'s model call as the caller; the first of a run takes its rpm place."""
        calls = 0

        def call_model(model_id: str, tool_parameters: dict[str, str]) -> Mapping[str, Any]:
            nonlocal calls
            calls += 1
            model = self._resolve(model_id, caller)
            result = self._predictor.call_recorded(
                model, lambda target: Bound(Ask(tool_parameters), run=self._predictor.predict), caller,
                route=EXECUTE_ROUTE, counts_request=calls == 1, trace=trace)
            try:
                return result.body["inference_results"][0]["output"][0]["dataAsMap"]
            except (KeyError, IndexError, TypeError):
                raise UpstreamError(f"model [{model_id}] returns wrong or empty tensors for the agent") from None
        return call_model

    def _record(self, agent_id: str) -> Record:
        record = self._store.get("agent", agent_id)
        if record is None:
            raise NotFound(f"Failed to find agent with the provided agent id: {agent_id}")
        return record


def _parameters(body: Any) -> dict[str, str]:
    """``{"parameters": {...}}``: each value a string (others as their JSON text), as ml-commons'
    ``RemoteInferenceInputDataSet`` keeps them."""
    if not isinstance(body, dict) or not isinstance(body.get("parameters"), dict):
        raise BadRequest('the request body must be {"parameters": {...}}')
    return {str(key): value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            for key, value in body["parameters"].items()}


def _history_limit(parameters: Mapping[str, str]) -> int:
    text = parameters.get("message_history_limit")
    if text is None:
        return DEFAULT_HISTORY
    if not text.strip().isdigit():
        raise BadRequest(f"[message_history_limit] must be a whole number, got [{text[:40]}]")
    return int(text)


def _write_response(agent_id: str, result: str) -> dict[str, Any]:
    """OpenSearch's document write response, as ml-commons answers an agent's update and delete."""
    return {"_index": INDEX_OF["agent"], "_id": agent_id, "_version": 1, "result": result,
            "forced_refresh": True, "_shards": {"total": 1, "successful": 1, "failed": 0}, "_seq_no": 0,
            "_primary_term": 1}
