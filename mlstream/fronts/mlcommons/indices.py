"""The OpenSearch document API of stop-word indices, only as much as guardrails need
(``stopwords``): create, read and delete an index; index, read and delete a document;
``_bulk``. Every route is admin-only, like the other writes.

Index names that start with ``_`` or name one of mlstream's own routes never reach these
routes (their paths stay mlstream's), so ``PUT /healthz`` is still a 405.
"""

from __future__ import annotations

from urllib.parse import unquote

from ...errors import BadRequest
from ...server.routing import Reply, Request, Router
from ...guard.stopwords import RESERVED_NAMES, StopWordIndices

# One path segment that can be an index: not _-prefixed (OpenSearch's own APIs), not one of
# mlstream's own single-segment routes.
INDEX_SEGMENT = "(?!_)(?!(?:" + "|".join(sorted(RESERVED_NAMES)) + ")$)[^/]+"


def add_index_routes(router: Router, indices: StopWordIndices) -> None:
    shapes = {"index": INDEX_SEGMENT}

    def add(method: str, template: str, *, raw_body: bool = False):
        def register(function):
            router.add(method, template, function, "admin", segments=shapes, raw_body=raw_body)
            return function
        return register

    for method in ("POST", "PUT"):
        @add(method, "/_bulk", raw_body=True)
        @add(method, "/{index}/_bulk", raw_body=True)
        def bulk(req: Request) -> Reply:
            return Reply(200, indices.bulk(req.params.get("index"), req.body))

    @add("PUT", "/{index}")
    def create_index(req: Request) -> Reply:
        return Reply(200, indices.create_index(req.params["index"], req.body))

    @add("GET", "/{index}")
    def get_index(req: Request) -> Reply:
        return Reply(200, indices.get_index(req.params["index"]))

    @add("DELETE", "/{index}")
    def delete_index(req: Request) -> Reply:
        return Reply(200, indices.delete_index(req.params["index"]))

    @add("PUT", "/{index}/_doc/{doc_id}")
    @add("POST", "/{index}/_doc/{doc_id}")
    def put_document(req: Request) -> Reply:
        create = _op_type(req) == "create"
        return Reply(*indices.put_document(req.params["index"], unquote(req.params["doc_id"]), req.body, create=create))

    @add("PUT", "/{index}/_create/{doc_id}")
    @add("POST", "/{index}/_create/{doc_id}")
    def create_document(req: Request) -> Reply:
        return Reply(*indices.put_document(req.params["index"], unquote(req.params["doc_id"]), req.body, create=True))

    @add("POST", "/{index}/_doc")
    def add_document(req: Request) -> Reply:
        return Reply(*indices.put_document(req.params["index"], None, req.body))

    @add("GET", "/{index}/_doc/{doc_id}")
    def get_document(req: Request) -> Reply:
        return Reply(*indices.get_document(req.params["index"], unquote(req.params["doc_id"])))

    @add("DELETE", "/{index}/_doc/{doc_id}")
    def delete_document(req: Request) -> Reply:
        return Reply(*indices.delete_document(req.params["index"], unquote(req.params["doc_id"])))


def _op_type(req: Request) -> str:
    op_type = req.query.get("op_type", "index")
    if op_type not in ("index", "create"):
        raise BadRequest(f"opType must be 'create' or 'index', found: [{op_type}]")
    return op_type
