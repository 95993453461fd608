"""ml-commons' model controllers: per-user rate limits on one model.

    POST   /_plugins/_ml/controllers/<model_id>  {"user_rate_limiter": {"<user>": {"limit": "4", "unit": "MINUTES"}}}
    PUT    /_plugins/_ml/controllers/<model_id>  the users it names merged into the controller
    GET    /_plugins/_ml/controllers/<model_id>  {"model_id", "user_rate_limiter"}
    DELETE /_plugins/_ml/controllers/<model_id>

As ml-commons (``CreateControllerTransportAction``, ``UpdateControllerTransportAction``,
``MLController``, ``MLRateLimiter``): POST writes the whole controller (a user left out
loses its limit) and answers ``{"model_id", "status": "CREATED"}`` (``"UPDATED"`` when it
replaced one); PUT changes only the users it names, and within a user only the fields
given, and is a 409 when the model has no controller; a model that does not exist is a
404; limits are stored as strings. A user is an API key's *name*. Each user's limit is a
token bucket per (model, user), enforced next to the model's own ``rate_limiter``:
the stricter of the two refuses first.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import BadRequest, Conflict, NotFound, Overloaded
from ..usage.limits import RateLimit, RateLimiter, parse_rate_limiter
from ..store.sqlite import Record, Store

INDEX = ".plugins-ml-controller"
_USER_THROTTLED = ("Request is throttled at user level. If you think there's an issue, please contact your "
                   "cluster admin.")


class Controllers:
    def __init__(self, store: Store, limiter: RateLimiter) -> None:
        self._store = store
        self._limiter = limiter
        # Guards the cache below: dict operations only. A miss reads the store unlocked.
        self._lock = threading.Lock()
        self._cache: dict[str, dict[str, RateLimit]] = {}  # model id -> user -> limit
        self._seen_counter: int | None = None

    # --- the routes --------------------------------------------------------------------

    def create(self, model_id: str, body: Any) -> dict[str, Any]:
        users = _user_limiters(body, partial=False)
        with self._store.transaction():
            self._model(model_id, "create")
            existed = self._store.get("controller", model_id) is not None
            self._store.put("controller", Record(model_id, {"model_id": model_id, "user_rate_limiter": users}))
        return {"model_id": model_id, "status": "UPDATED" if existed else "CREATED"}

    def update(self, model_id: str, body: Any) -> dict[str, Any]:
        changes = _user_limiters(body, partial=True)
        with self._store.transaction():
            self._model(model_id, "update")
            record = self._store.get("controller", model_id)
            if record is None:
                raise Conflict("Model controller haven't been created for the model. Consider calling create "
                               f"model controller api instead. Model ID: {model_id}")
            users = dict(record.doc.get("user_rate_limiter") or {})
            for user, fields in changes.items():
                merged = {**users.get(user, {}), **fields}
                limit = parse_rate_limiter(merged)  # a user new to the controller needs both fields
                users[user] = {"limit": limit.limit_text, "unit": limit.unit} if limit else merged
            self._store.put("controller", Record(model_id, {"model_id": model_id, "user_rate_limiter": users}))
        return _write_result(model_id, "updated")

    def get(self, model_id: str) -> dict[str, Any]:
        record = self._store.get("controller", model_id)
        if record is None:
            raise NotFound("Failed to find model controller with the provided model ID")
        return {"model_id": model_id, "user_rate_limiter": record.doc.get("user_rate_limiter") or {}}

    def delete(self, model_id: str) -> dict[str, Any]:
        with self._store.transaction():
            if not self._store.delete("controller", model_id):
                raise NotFound("Failed to find model controller with the provided model ID")
        return _write_result(model_id, "deleted")

    # --- the request path ------------------------------------------------------------------

    def check(self, model_id: str, user: str | None) -> None:
        """Take one request from ``user``'s limit on ``model_id``, or raise Overloaded (429,
        ml-commons' message, ``Retry-After``). No controller, no user, or a user the
        controller does not name: nothing to take."""
        if user is None:
            return
        limit = self._limits(model_id).get(user)
        if limit is None:
            return
        try:
            self._limiter.acquire(f"controller|{model_id}|{user}", limit)
        except Overloaded as exc:
            raise Overloaded(_USER_THROTTLED,
                             retry_after_seconds=int(exc.headers.get("Retry-After", "1"))) from None

    def _limits(self, model_id: str) -> dict[str, RateLimit]:
        counter = self._store.change_counter()
        with self._lock:
            if counter != self._seen_counter:
                self._cache.clear()
                self._seen_counter = counter
            cached = self._cache.get(model_id)
        if cached is not None:
            return cached
        record = self._store.get("controller", model_id)
        limits: dict[str, RateLimit] = {}
        for user, raw in ((record.doc.get("user_rate_limiter") or {}) if record else {}).items():
            try:
                limit = parse_rate_limiter(raw)
            except BadRequest:
                limit = None  # ml-commons keeps a half-given limiter and does not enforce it
            if limit is not None:
                limits[user] = limit
        with self._lock:
            if counter == self._seen_counter:
                self._cache[model_id] = limits
        return limits

    def _model(self, model_id: str, doing: str) -> None:
        if self._store.get("model", model_id) is None:
            raise NotFound(f"Failed to find model to {doing} the corresponding model controller with the "
                           f"provided model ID: {model_id}")


def _user_limiters(body: Any, *, partial: bool) -> dict[str, dict[str, str]]:
    """``user_rate_limiter`` of a body, each limit checked (``limit`` a positive number kept as
    ml-commons' string, ``unit`` a Java TimeUnit). ``partial``: a user may give one field."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - {"user_rate_limiter", "model_id"})
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in the model controller")
    raw = body.get("user_rate_limiter")
    if not isinstance(raw, dict):
        raise BadRequest("[user_rate_limiter] is required: an object of user names to {limit, unit}")
    users: dict[str, dict[str, str]] = {}
    for user, limiter in raw.items():
        if not user.strip():
            raise BadRequest("a user in [user_rate_limiter] must have a non-empty name")
        if not isinstance(limiter, dict) or set(limiter) - {"limit", "unit"}:
            raise BadRequest(f"[user_rate_limiter.{user}] must be an object {{limit, unit}}")
        if not limiter:
            continue  # as ml-commons: an empty limiter is dropped
        if partial and len(limiter) == 1:
            filled = {"limit": "1", "unit": "SECONDS", **limiter}  # check the one field given
            checked = parse_rate_limiter(filled)
            assert checked is not None
            users[user] = ({"limit": checked.limit_text} if "limit" in limiter else {"unit": checked.unit})
            continue
        checked = parse_rate_limiter(limiter)
        assert checked is not None
        users[user] = {"limit": checked.limit_text, "unit": checked.unit}
    return users


def _write_result(model_id: str, result: str) -> dict[str, Any]:
    return {"_index": INDEX, "_id": model_id, "_version": 1, "result": result, "forced_refresh": True,
            "_shards": {"total": 1, "successful": 1, "failed": 0}, "_seq_no": 0, "_primary_term": 1}
