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

from ...memory.conversations import Conversations
from ...server.routing import Reply, Request, Router

BASE = "/_plugins/_ml/memory"


def add_memory_routes(router: Router, memories: Conversations) -> None:
    def add(methods: tuple[str, ...], template: str):
        def register(function):
            for method in methods:
                router.add(method, template, function, "user")
            return function
        return register

    # The literal paths first: the router takes the first route that fits.
    @add(("POST", "GET"), f"{BASE}/_search")
    def search_memories(req: Request) -> Reply:
        return Reply(200, memories.search(req.body, req.caller))

    @add(("GET",), f"{BASE}/message/{{message_id}}/traces")
    def traces(req: Request) -> Reply:
        return Reply(200, memories.traces(req.params["message_id"], req.caller, req.query))

    @add(("GET",), f"{BASE}/message/{{message_id}}")
    def get_message(req: Request) -> Reply:
        return Reply(200, memories.get_message(req.params["message_id"], req.caller))

    @add(("PUT",), f"{BASE}/message/{{message_id}}")
    def update_message(req: Request) -> Reply:
        return Reply(200, memories.update_message(req.params["message_id"], req.body, req.caller))

    @add(("POST",), BASE)
    def create(req: Request) -> Reply:
        return Reply(200, {"memory_id": memories.create(req.body, req.caller)})

    @add(("GET",), BASE)
    def list_memories(req: Request) -> Reply:
        return Reply(200, memories.list(req.caller, req.query))

    @add(("GET",), f"{BASE}/{{memory_id}}")
    def get(req: Request) -> Reply:
        return Reply(200, memories.get(req.params["memory_id"], req.caller))

    @add(("PUT",), f"{BASE}/{{memory_id}}")
    def update(req: Request) -> Reply:
        return Reply(200, memories.update(req.params["memory_id"], req.body, req.caller))

    @add(("DELETE",), f"{BASE}/{{memory_id}}")
    def delete(req: Request) -> Reply:
        return Reply(200, memories.delete(req.params["memory_id"], req.caller))

    @add(("POST",), f"{BASE}/{{memory_id}}/messages")
    def add_message(req: Request) -> Reply:
        return Reply(200, {"message_id": memories.add_message(req.params["memory_id"], req.body, req.caller)})

    @add(("GET",), f"{BASE}/{{memory_id}}/messages")
    def messages(req: Request) -> Reply:
        return Reply(200, memories.messages(req.params["memory_id"], req.caller, req.query))

    @add(("POST", "GET"), f"{BASE}/{{memory_id}}/_search")
    def search_messages(req: Request) -> Reply:
        return Reply(200, memories.search_messages(req.params["memory_id"], req.body, req.caller))
