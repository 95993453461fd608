"""ml-commons' agents: registered, read, updated, deleted and searched as records of the
store (kind ``agent``), and run (``execute``).

Registering, updating and deleting an agent is an admin's; reading, searching and running
one any key's. Running calls the tools' models as the caller: its access to each model
(a model it may not use is refused as on ``_predict``), its limits and budget; each model
call is a usage record of its own on the route ``/_plugins/_ml/agents/{agent_id}/_execute``
(the first takes the request's rpm place, the others none).

Served: ``flow`` agents (``agents.flow``). Other types register as in ml-commons and are
refused with a 400 when run.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Mapping

from ..access.keys import Caller
from ..errors import BadRequest, NotFound, UpstreamError
from ..inference.predict import Ask, Bound, Predictor
from ..models.registry import AnyModel, new_id
from ..models.search import INDEX_OF, run_search
from ..store.sqlite import Record, Store
from .flow import run_flow
from .spec import checked_agent, checked_update

EXECUTE_ROUTE = "/_plugins/_ml/agents/{agent_id}/_execute"
RUNNABLE_TYPES = ("flow",)


class Agents:
    def __init__(self, store: Store, predictor: Predictor, resolve: Callable[[str, Caller | None], AnyModel],
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
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

    def execute(self, agent_id: str, body: Any, caller: Caller | None) -> dict[str, Any]:
        agent = self._record(agent_id).doc
        parameters = _parameters(body)
        kind = agent["type"].lower()
        if kind not in RUNNABLE_TYPES:
            raise BadRequest(f"agent [{agent_id}] is a [{kind}] agent: mlstream runs {', '.join(RUNNABLE_TYPES)} "
                             "agents only")
        calls = 0

        def call_model(model_id: str, tool_parameters: dict[str, str]) -> Mapping[str, Any]:
            nonlocal calls
            calls += 1
            model = self._resolve(model_id, caller)
            result = self._predictor.call_recorded(
                model, lambda target: Bound(Ask(tool_parameters), run=self._predictor.predict), caller,
                route=EXECUTE_ROUTE, counts_request=calls == 1)
            try:
                return result.body["inference_results"][0]["output"][0]["dataAsMap"]
            except (KeyError, IndexError, TypeError):
                raise UpstreamError(f"model [{model_id}] returns wrong or empty tensors for the agent") from None

        tensors = run_flow(agent.get("tools") or [], parameters, call_model)
        return {"inference_results": [{"output": [tensor.to_doc() for tensor in tensors]}]}

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


def _write_response(agent_id: str, result: str) -> dict[str, Any]:
    """OpenSearch's document write response, as ml-commons answers an agent's update and delete."""
    return {"_index": INDEX_OF["agent"], "_id": agent_id, "_version": 1, "result": result,
            "forced_refresh": True, "_shards": {"total": 1, "successful": 1, "failed": 0}, "_seq_no": 0,
            "_primary_term": 1}
