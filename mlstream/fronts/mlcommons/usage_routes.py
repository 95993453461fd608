"""mlstream's own routes for usage and keys, and ml-commons' model controllers.

    GET    /_plugins/_mlstream/usage            sums, grouped (a user key: its own usage only;
                                                a tenant_admin: its tenant's)
    GET    /_plugins/_mlstream/usage/records    single records, newest first (same rule)
    POST   /_plugins/_mlstream/keys             create a key; the answer carries its secret, once
    GET    /_plugins/_mlstream/keys             every key (never a secret)
    GET    /_plugins/_mlstream/keys/<name>      one key, with its spend in the current period
    PUT    /_plugins/_mlstream/keys/<name>      change the fields the body names
    DELETE /_plugins/_mlstream/keys/<name>      revoke it (refused from the next request on)
    POST   /_plugins/_mlstream/tenants          create a tenant (admin)
    GET    /_plugins/_mlstream/tenants[/<name>] every tenant, or one with its spend (admin)
    PUT    /_plugins/_mlstream/tenants/<name>   change the fields the body names (admin)
    DELETE /_plugins/_mlstream/tenants/<name>   delete it and revoke its keys (admin)
    GET    /_plugins/_mlstream/cache            the response cache's entries and bytes (admin)
    DELETE /_plugins/_mlstream/cache            its entries: all, ?model=<id>, ?tenant=<name> (admin)
    POST|PUT|GET|DELETE /_plugins/_ml/controllers/<model_id>

The key routes take an admin or a tenant_admin key: a tenant_admin sees and manages the
keys of its own tenant only (another tenant's key is a 404, as a missing one), and makes
no admin keys. Tenant and controller routes are admin-only.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from ...access.keys import ApiKey, KeyStore
from ...access.tenants import TenantStore
from ...access.budgets import Accountant
from ...access.controllers import Controllers
from ...errors import BadRequest, Forbidden, NotFound
from ...inference.cache import ResponseCache
from ...server.routing import Reply, Request, Router
from ...usage.records import (
    UsageQuery,
    group_value,
    iso_ms,
    parse_usage_query,
    period_bounds,
    tenant_scope,
    usage_body,
)
from ...usage.recorder import UsageRecorder
from ...usage.tables import UsageTables

PREFIX = "/_plugins/_mlstream"
# A query waits at most this long for this process's queued records to be written, so a
# caller reads its own calls back (a store that is down answers with what it has).
READ_YOUR_WRITES_SECONDS = 1.0


def add_usage_routes(router: Router, keys: KeyStore, tables: UsageTables, recorder: UsageRecorder,
                     accountant: Accountant, controllers: Controllers, tenants: TenantStore,
                     cache: ResponseCache | None = None) -> None:
    def add(method: str, template: str, role: str = "admin"):
        def register(function):
            router.add(method, template, function, role)
            return function
        return register

    def visible(req: Request, query: UsageQuery) -> UsageQuery:
        """An admin key (or an open server) sees every key; a tenant_admin its tenant's; a
        user key only its own."""
        caller = req.caller
        if caller is None or caller.is_admin:
            return query
        tenant = caller.tenant.name
        if query.tenant is not None and query.tenant != tenant:
            raise Forbidden(f"API key [{caller.key.name}] may read only the usage of tenant [{tenant}]")
        if caller.role == "tenant_admin":
            return replace(query, tenant=tenant)
        key = caller.key
        if query.key_name is not None and query.key_name != key.name:
            raise Forbidden(f"API key [{key.name}] may read only its own usage, not [{query.key_name}]")
        return replace(query, key_name=None, key_id=key.key_id, tenant=tenant)

    def tenant_of_caller(req: Request) -> str | None:
        """The tenant a tenant_admin is confined to; None for an admin (or an open server)."""
        caller = req.caller
        return None if caller is None or caller.is_admin else caller.tenant.name

    def own_key(req: Request) -> ApiKey:
        """The URL's key, when the caller may manage it: another tenant's is a 404."""
        key = keys.get(req.params["name"])
        confined = tenant_of_caller(req)
        if confined is not None and key.tenant != confined:
            raise NotFound(f"no API key named [{req.params['name']}]")
        return key

    def check_key_fields(req: Request, body: dict[str, Any], current: ApiKey | None = None) -> None:
        """What a tenant_admin may not set: another tenant, or role admin."""
        confined = tenant_of_caller(req)
        if confined is None:
            return
        if body.get("tenant", confined) != confined:
            raise Forbidden(f"a tenant_admin manages the keys of tenant [{confined}] only")
        if body.get("role") == "admin" or (current is not None and current.role == "admin"):
            raise Forbidden("a tenant_admin cannot make or change an admin key")

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

    @add("POST", f"{PREFIX}/keys", role="tenant_admin")
    def create_key(req: Request) -> Reply:
        body = _object(req.body)
        check_key_fields(req, body)
        confined = tenant_of_caller(req)
        key, secret = keys.create_from_body(body if confined is None else {"tenant": confined, **body})
        return Reply(200, {**key.to_body(), "key": secret})

    @add("GET", f"{PREFIX}/keys", role="tenant_admin")
    def list_keys(req: Request) -> Reply:
        tenant = tenant_of_caller(req) or req.query.get("tenant") or None
        return Reply(200, {"keys": [key.to_body() for key in keys.list(tenant)]})

    @add("GET", f"{PREFIX}/keys/{{name}}", role="tenant_admin")
    def get_key(req: Request) -> Reply:
        key = own_key(req)
        return Reply(200, {**key.to_body(), "spend": spend(key.key_id, key.limits.budget_period)})

    @add("PUT", f"{PREFIX}/keys/{{name}}", role="tenant_admin")
    def update_key(req: Request) -> Reply:
        body = _object(req.body)
        check_key_fields(req, body, own_key(req))
        return Reply(200, keys.update(req.params["name"], body).to_body())

    @add("DELETE", f"{PREFIX}/keys/{{name}}", role="tenant_admin")
    def delete_key(req: Request) -> Reply:
        check_key_fields(req, {}, own_key(req))
        key = keys.delete(req.params["name"])
        return Reply(200, {"result": "deleted", "key_id": key.key_id, "name": key.name})

    def spend(scope_id: str, period: str) -> dict[str, Any]:
        start, end = period_bounds(period, _now_ms())
        return {"period": period, "from": iso_ms(start), "to": iso_ms(end),
                "cost": accountant.spent(scope_id, start, end)}

    @add("POST", f"{PREFIX}/tenants")
    def create_tenant(req: Request) -> Reply:
        return Reply(200, tenants.create(_object(req.body)).to_body())

    @add("GET", f"{PREFIX}/tenants")
    def list_tenants(req: Request) -> Reply:
        return Reply(200, {"tenants": [tenant.to_body() for tenant in tenants.list()]})

    @add("GET", f"{PREFIX}/tenants/{{name}}")
    def get_tenant(req: Request) -> Reply:
        tenant = tenants.get(req.params["name"])
        return Reply(200, {**tenant.to_body(), "keys": len(keys.list(tenant.name)),
                           "spend": spend(tenant_scope(tenant.name), tenant.limits.budget_period)})

    @add("PUT", f"{PREFIX}/tenants/{{name}}")
    def update_tenant(req: Request) -> Reply:
        return Reply(200, tenants.update(req.params["name"], _object(req.body)).to_body())

    @add("DELETE", f"{PREFIX}/tenants/{{name}}")
    def delete_tenant(req: Request) -> Reply:
        tenant, revoked = tenants.delete(req.params["name"])
        return Reply(200, {"result": "deleted", "name": tenant.name, "keys_revoked": revoked})

    @add("GET", f"{PREFIX}/cache")
    def cache_stats(req: Request) -> Reply:
        if cache is None:
            raise BadRequest("the response cache is not served here")
        entries, size = cache.stats()
        return Reply(200, {"entries": entries, "bytes": size})

    @add("DELETE", f"{PREFIX}/cache")
    def clear_cache(req: Request) -> Reply:
        """Every entry, a model's (``?model=<id>``), a tenant's (``?tenant=``), or both."""
        if cache is None:
            raise BadRequest("the response cache is not served here")
        unknown = sorted(set(req.query) - {"model", "tenant"})
        if unknown:
            raise BadRequest(f"DELETE {PREFIX}/cache takes model and tenant; got [{', '.join(unknown)}]")
        deleted = cache.delete(req.query.get("model") or None, req.query.get("tenant") or None)
        return Reply(200, {"result": "deleted", "deleted": deleted})

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
