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

import logging
import threading
import time
from functools import partial
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..access.keys import Caller
from ..access.policy import owner_of
from ..errors import BadRequest, MLStreamError, NotFound, Overloaded, ShuttingDown, UpstreamError
from ..inference.predict import Ask, Bound, Predictor
from ..models.registry import NODE_ID, AnyModel, new_id
from ..models.search import INDEX_OF, document_written, run_search
from ..store.sqlite import Record, Store
from ..telemetry.hooks import RequestTrace
from ..memory.conversations import Conversations
from .flow import MCP_TOOL, check_runnable, run_flow, tool_name
from .mcp_connectors import McpConnectors
from .spec import checked_agent, checked_update, string_map

log = logging.getLogger(__name__)

EXECUTE_ROUTE = "/_plugins/_ml/agents/{agent_id}/_execute"
RUNNABLE_TYPES = ("flow", "conversational_flow")
CONVERSATION_INDEX = "conversation_index"  # the one memory type served (MLMemoryType.CONVERSATION_INDEX)
MEMORY_ID, PARENT_INTERACTION_ID, QUESTION = "memory_id", "parent_interaction_id", "question"
CHAT_HISTORY = "chat_history"
CHAT_HISTORY_HEAD = "Below is Chat History between Human and AI which sorted by time with asc order:\n"
DEFAULT_HISTORY = 10  # ConversationIndexMemory.LAST_N_INTERACTIONS


# Asynchronous runs (``?async=true``) waiting or running at most, and the workers running them.
MAX_ASYNC = 64
ASYNC_WORKERS = 4


@dataclass(frozen=True, slots=True)
class Turn:
    memory_id: str
    parent_id: str  # the turn's root message


@dataclass(frozen=True, slots=True)
class Run:
    """An agent's run, checked and with its turn saved, before any tool runs."""

    agent: Mapping[str, Any]
    kind: str
    tools: list[Mapping[str, Any]]
    parameters: dict[str, str]
    turn: Turn | None
    mcp: Mapping[str, Any] = field(default_factory=dict)  # an MCP tool's name -> its connector


class Agents:
    def __init__(self, store: Store, predictor: Predictor, resolve: Callable[[str, Caller | None], AnyModel],
                 memories: Conversations, mcp: McpConnectors | None = None, clock: Callable[[], float] = time.time
                 ) -> None:
        self._store = store
        self._mcp = mcp  # MCP connectors' tools; None: none served
        self._memories = memories
        # Threads start only when an asynchronous run first comes.
        self._workers = ThreadPoolExecutor(max_workers=ASYNC_WORKERS, thread_name_prefix="mlstream-agent")
        self._async_slots = threading.Semaphore(MAX_ASYNC)
        self._closed = threading.Event()
        # The tasks of runs not over (the task, whether its run started): close fails them.
        self._active: dict[str, tuple[dict[str, Any], bool]] = {}
        self._active_lock = threading.Lock()  # guards _active: a dict change under it
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
        return document_written(INDEX_OF["agent"], agent_id, "updated")

    def delete(self, agent_id: str) -> dict[str, Any]:
        with self._store.transaction():
            self._record(agent_id)
            self._store.delete("agent", agent_id)
        return document_written(INDEX_OF["agent"], agent_id, "deleted")

    def search(self, body: Any) -> dict[str, Any]:
        return run_search("agent", [(record.id, record.doc) for record in self._store.scan("agent")], body)

    def close(self) -> None:
        """Every run not over ends as a FAILED task: one not started is dropped, one going on
        is let finish but its answer is no longer kept (the store closes after this)."""
        self._closed.set()
        self._workers.shutdown(wait=False, cancel_futures=True)
        with self._active_lock:
            ended, self._active = self._active, {}
        for task_id, (task, started) in ended.items():
            when = "during" if started else "before"
            self._end_task(task_id, task, "FAILED",
                           {**task["response"], "error_message": f"the server stopped {when} the agent run"})

    def execute(self, agent_id: str, body: Any, caller: Caller | None,
                trace: RequestTrace | None = None) -> dict[str, Any]:
        run = self._prepared(agent_id, body, caller)
        return {"inference_results": [{"output": self._run(run, caller, trace)}]}

    def execute_async(self, agent_id: str, body: Any, caller: Caller | None) -> dict[str, Any]:
        """``?async=true``: checked and its turn saved as for a run, then an
        ``AGENT_EXECUTION`` task answered at once (``RUNNING``), the run on a worker of its
        own; the task gets the answer, or the error, when it ends. Past ``MAX_ASYNC`` runs
        waiting or running, a 429."""
        if not self._async_slots.acquire(blocking=False):
            raise Overloaded(f"{MAX_ASYNC} agent runs are waiting or running: try again later")
        try:
            run = self._prepared(agent_id, body, caller)
            now = int(self._clock() * 1000)
            started = {key: value for key, value in (
                (MEMORY_ID, run.turn.memory_id if run.turn else None),
                (PARENT_INTERACTION_ID, run.turn.parent_id if run.turn else None)) if value}
            task_id = new_id()
            task = {"task_type": "AGENT_EXECUTION", "function_name": "AGENT", "state": "RUNNING",
                    "worker_node": [NODE_ID], "create_time": now, "last_update_time": now, "is_async": True,
                    "response": started, **owner_of(caller).to_doc()}
            if self._closed.is_set():
                raise ShuttingDown("the server is shutting down: no agent run is started")
            self._store.put("task", Record(task_id, task))
            with self._active_lock:
                self._active[task_id] = (task, False)
            try:
                self._workers.submit(self._run_task, task_id, task, run, caller)
            except RuntimeError:  # closed since the check above
                with self._active_lock:
                    left = self._active.pop(task_id, None)
                if left is not None:
                    self._end_task(task_id, task, "FAILED", {**started, "error_message": "the server stopped "
                                                             "before the agent run"})
                raise ShuttingDown("the server is shutting down: no agent run is started") from None
        except BaseException:
            self._async_slots.release()
            raise
        return {"task_id": task_id, "status": "RUNNING", **({"response": started} if started else {})}

    def _run_task(self, task_id: str, task: dict[str, Any], run: Run, caller: Caller | None) -> None:
        with self._active_lock:
            if task_id not in self._active:
                self._async_slots.release()
                return  # dropped by close
            self._active[task_id] = (task, True)
        try:
            response = {**task["response"], "inference_results": [{"output": self._run(run, caller, None)}]}
            state = "COMPLETED"
        except MLStreamError as error:
            response, state = {**task["response"], "error_message": error.reason}, "FAILED"
        except Exception as error:  # noqa: BLE001 - a task must end, whatever its run did
            log.exception("agent task [%s] failed", task_id)
            response, state = {**task["response"], "error_message": type(error).__name__}, "FAILED"
        finally:
            self._async_slots.release()
        with self._active_lock:
            if self._active.pop(task_id, None) is None:
                return  # ended by close
        self._end_task(task_id, task, state, response)

    def _end_task(self, task_id: str, task: dict[str, Any], state: str, response: dict[str, Any]) -> None:
        try:
            self._store.put("task", Record(task_id, {**task, "state": state, "response": response,
                                                     "last_update_time": int(self._clock() * 1000)}))
        except MLStreamError as error:  # the store closing under it: nothing else to do
            log.warning("agent task [%s] could not be marked %s: %s", task_id, state, error.reason)

    def _prepared(self, agent_id: str, body: Any, caller: Caller | None) -> Run:
        """A run checked (the agent, its type, its tools, the body) and its turn saved:
        nothing is asked of a model yet."""
        agent = self._record(agent_id).doc
        parameters = _parameters(body)
        kind = agent["type"].lower()
        if kind not in RUNNABLE_TYPES:
            raise BadRequest(f"agent [{agent_id}] is a [{kind}] agent: mlstream runs {', '.join(RUNNABLE_TYPES)} "
                             "agents only")
        tools = agent.get("tools") or []
        check_runnable(tools)
        _history_limit(parameters)
        mcp = self._mcp_tools(agent, tools)
        turn = self._turn(agent, parameters, caller)
        return Run(agent, kind, tools, parameters, turn, mcp)

    def _mcp_tools(self, agent: Mapping[str, Any], tools: list[Mapping[str, Any]]) -> Mapping[str, Any]:
        """The connector of each MCP tool the agent names, from its ``mcp_connectors`` (an
        MCP tool no connector lists is a 400 before anything runs, as in ml-commons)."""
        wanted = [tool_name(tool) for tool in tools if tool["type"] == MCP_TOOL]
        if not wanted:
            return {}
        if self._mcp is None:
            raise BadRequest("MCP tools are not served here")
        served = self._mcp.resolve(agent.get("parameters") or {})
        for name in wanted:
            if name not in served:
                raise BadRequest(f"MCP tool [{name}] configured in agent is not available in the MCP connector(s). "
                                 "Check connector configuration or MCP server logs.")
        return served

    def _run(self, run: Run, caller: Caller | None, trace: RequestTrace | None) -> list[dict[str, Any]]:
        """The run's answer tensors (its turn's memory kept up to date)."""
        parameters, turn = run.parameters, run.turn
        on_step = None
        conversing = run.kind == "conversational_flow" and turn is not None and run.agent.get("app_type") is not None
        if conversing:
            assert turn is not None
            history = self._memories.history(turn.memory_id, caller, _history_limit(parameters))
            said = [m for m in history if m.get("response")]  # the turn in flight has none yet
            if said:
                parameters[CHAT_HISTORY] = CHAT_HISTORY_HEAD + "".join(
                    f"Human:{m.get('input')}\nAssistant:{m['response']}\n" for m in said)
            if parameters.get("disable_trace", "").lower() != "true":
                on_step = self._tracer(turn, parameters.get(QUESTION), caller)
        call_mcp = None if self._mcp is None else partial(self._mcp.call, run.mcp)
        result = run_flow(run.tools, parameters, self.model_caller(caller, trace), on_step,
                          conversational=run.kind != "flow", call_mcp=call_mcp)
        tensors = [tensor.to_doc() for tensor in result.tensors]
        if turn is not None:
            # The root message: a conversation's answer; a flow's outputs as its additional_info.
            changes = {"response": result.last_output, "additional_info": {}} if conversing else \
                {"additional_info": result.outputs}
            self._memories.finish_turn(turn.parent_id, changes, caller)
            if conversing:
                tensors = [{"name": "memory_id", "result": turn.memory_id},
                           {"name": "parent_message_id", "result": turn.parent_id}, *tensors]
        return tensors

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

    def model_caller(self, caller: Caller | None,
                     trace: RequestTrace | None = None) -> Callable[[str, dict[str, str]], Mapping[str, Any]]:
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
    return string_map(body["parameters"], "parameters")


def _history_limit(parameters: Mapping[str, str]) -> int:
    text = parameters.get("message_history_limit")
    if text is None:
        return DEFAULT_HISTORY
    if not text.strip().isdigit():
        raise BadRequest(f"[message_history_limit] must be a whole number, got [{text[:40]}]")
    return int(text)
