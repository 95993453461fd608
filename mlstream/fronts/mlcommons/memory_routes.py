"""ml-commons' conversation memory API (``memory.conversations``), for any key, each on its own:

    POST   /_plugins/_ml/memory                              create a memory: {"memory_id"}
    GET    /_plugins/_ml/memory                              the caller's memories (max_results, next_token)
    POST|GET /_plugins/_ml/memory/_search                    search them (the query language of _search)
    GET    /_plugins/_ml/memory/<memory_id>                  one memory
    PUT    /_plugins/_ml/memory/<memory_id>                  change its name or additional_info
    DELETE /_plugins/_ml/memory/<memory_id>                  delete it and its messages: {"success": true}
    POST   /_plugins/_ml/memory/<memory_id>/messages         add a message: {"message_id"}
    GET    /_plugins/_ml/memory/<memory_id>/messages         its messages, oldest first
    POST|GET /_plugins/_ml/memory/<memory_id>/_search        search its messages
    GET    /_plugins/_ml/memory/message/<message_id>         one message
    PUT    /_plugins/_ml/memory/message/<message_id>         change its response or additional_info
    GET    /_plugins/_ml/memory/message/<message_id>/traces  its traces, in trace order
"""

from __future__ import annotations

from typing import Any, Callable

from ...memory.conversations import Conversations
from ...server.routing import Reply, Request, Router

BASE = "/_plugins/_ml/memory"


def add_memory_routes(router: Router, memories: Conversations) -> None:
    def message(req: Request) -> str:
        return req.params["message_id"]

    def memory(req: Request) -> str:
        return req.params["memory_id"]

    # (methods, path, the answer): the literal paths first, the router takes the first that fits.
    routes: list[tuple[tuple[str, ...], str, Callable[[Request], Any]]] = [
        (("POST", "GET"), "/_search", lambda req: memories.search(req.body, req.caller)),
        (("GET",), "/message/{message_id}/traces", lambda req: memories.traces(message(req), req.caller, req.query)),
        (("GET",), "/message/{message_id}", lambda req: memories.get_message(message(req), req.caller)),
        (("PUT",), "/message/{message_id}", lambda req: memories.update_message(message(req), req.body, req.caller)),
        (("POST",), "", lambda req: {"memory_id": memories.create(req.body, req.caller)}),
        (("GET",), "", lambda req: memories.list(req.caller, req.query)),
        (("GET",), "/{memory_id}", lambda req: memories.get(memory(req), req.caller)),
        (("PUT",), "/{memory_id}", lambda req: memories.update(memory(req), req.body, req.caller)),
        (("DELETE",), "/{memory_id}", lambda req: memories.delete(memory(req), req.caller)),
        (("POST",), "/{memory_id}/messages",
         lambda req: {"message_id": memories.add_message(memory(req), req.body, req.caller)}),
        (("GET",), "/{memory_id}/messages", lambda req: memories.messages(memory(req), req.caller, req.query)),
        (("POST", "GET"), "/{memory_id}/_search", lambda req: memories.search_messages(memory(req), req.body,
                                                                                       req.caller)),
    ]
    for methods, path, answer in routes:
        for method in methods:
            router.add(method, BASE + path, lambda req, answer=answer: Reply(200, answer(req)), "user")
