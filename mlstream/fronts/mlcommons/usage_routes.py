"""mlstream's own routes for usage and keys, and ml-commons' model controllers.

    GET    /_plugins/_mlstream/usage            sums, grouped (any key: its own usage only)
    GET    /_plugins/_mlstream/usage/records    single records, newest first (same rule)
    POST   /_plugins/_mlstream/keys             create a key; the answer carries its secret, once
    GET    /_plugins/_mlstream/keys             every key (never a secret)
    GET    /_plugins/_mlstream/keys/<name>      one key, with its spend in the current period
    PUT    /_plugins/_mlstream/keys/<name>      change the fields the body names
    DELETE /_plugins/_mlstream/keys/<name>      revoke it (refused from the next request on)
    POST|PUT|GET|DELETE /_plugins/_ml/controllers/<model_id>

Every key and controller route is admin-only.
"""

from __future__ import annotations

import time
from typing import Any

from ...access.keys import KeyStore
from ...access.budgets import Accountant
from ...access.controllers import Controllers
from ...errors import BadRequest, Forbidden
from ...server.routing import Reply, Request, Router
from ...usage.records import (
    UsageQuery,
    group_value,
    iso_ms,
    parse_usage_query,
    period_bounds,
    usage_body,
)
from ...usage.recorder import UsageRecorder
from ...usage.tables import UsageTables

PREFIX = "/_plugins/_mlstream"
# A query waits at most this long for this process's queued records to be written, so a
# caller reads its own calls back (a store that is down answers with what it has).
READ_YOUR_WRITES_SECONDS = 1.0


def add_usage_routes(router: Router, keys: KeyStore, tables: UsageTables, recorder: UsageRecorder,
                     accountant: Accountant, controllers: Controllers) -> None:
    def add(method: str, template: str, role: str = "admin"):
        def register(function):
            router.add(method, template, function, role)
            return function
        return register

    def visible(req: Request, query: UsageQuery) -> UsageQuery:
        """An admin key (or an open server) sees every key; a user key only its own."""
        key = req.key
        if key is None or key.role == "admin":
            return query
        if query.key_name is not None and query.key_name != key.name:
            raise Forbidden(f"API key [{key.name}] may read only its own usage, not [{query.key_name}]")
        return UsageQuery(query.from_ms, query.to_ms, None, key.key_id, query.model_id, query.group_by, query.size)

    @add("GET", f"{PREFIX}/usage", role="user")
    def usage(req: Request) -> Reply:
        query = visible(req, parse_usage_query(req.query, _now_ms()))
        recorder.flush(READ_YOUR_WRITES_SECONDS)
        rows, totals = tables.summarize(query)
        shown = [({field: group_value(field, value) for field, value in groups.items()}, sums)
                 for groups, sums in rows]
        return Reply(200, usage_body(query, shown, totals))

    @add("GET", f"{PREFIX}/usage/records", role="user")
    def usage_records(req: Request) -> Reply:
        query = visible(req, parse_usage_query(req.query, _now_ms(), records=True))
        recorder.flush(READ_YOUR_WRITES_SECONDS)
        records = tables.records(query)
        return Reply(200, {"from": iso_ms(query.from_ms), "to": iso_ms(query.to_ms), "size": query.size,
                           "records": [record.to_body() for record in records]})

    @add("POST", f"{PREFIX}/keys")
    def create_key(req: Request) -> Reply:
        key, secret = keys.create_from_body(_object(req.body))
        return Reply(200, {**key.to_body(), "key": secret})

    @add("GET", f"{PREFIX}/keys")
    def list_keys(req: Request) -> Reply:
        return Reply(200, {"keys": [key.to_body() for key in keys.list()]})

    @add("GET", f"{PREFIX}/keys/{{name}}")
    def get_key(req: Request) -> Reply:
        key = keys.get(req.params["name"])
        body: dict[str, Any] = key.to_body()
        now = _now_ms()
        start, end = period_bounds(key.limits.budget_period, now)
        body["spend"] = {"period": key.limits.budget_period, "from": iso_ms(start), "to": iso_ms(end),
                         "cost": accountant.spent(key.key_id, start, end)}
        return Reply(200, body)

    @add("PUT", f"{PREFIX}/keys/{{name}}")
    def update_key(req: Request) -> Reply:
        return Reply(200, keys.update(req.params["name"], _object(req.body)).to_body())

    @add("DELETE", f"{PREFIX}/keys/{{name}}")
    def delete_key(req: Request) -> Reply:
        key = keys.delete(req.params["name"])
        return Reply(200, {"result": "deleted", "key_id": key.key_id, "name": key.name})

    controller = "/_plugins/_ml/controllers/{model_id}"

    @add("POST", controller)
    def create_controller(req: Request) -> Reply:
        return Reply(200, controllers.create(req.params["model_id"], _object(req.body)))

    @add("PUT", controller)
    def update_controller(req: Request) -> Reply:
        return Reply(200, controllers.update(req.params["model_id"], _object(req.body)))

    @add("GET", controller)
    def get_controller(req: Request) -> Reply:
        return Reply(200, controllers.get(req.params["model_id"]))

    @add("DELETE", controller)
    def delete_controller(req: Request) -> Reply:
        return Reply(200, controllers.delete(req.params["model_id"]))


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def _now_ms() -> int:
    return int(time.time() * 1000)
