"""ml-commons' agent API (``agents.agents``):

    POST   /_plugins/_ml/agents/_register        register an agent: {"agent_id"} (admin)
    POST|GET /_plugins/_ml/agents/_search        search agents (any key)
    GET    /_plugins/_ml/agents/<agent_id>       the agent (any key)
    PUT    /_plugins/_ml/agents/<agent_id>       change it (admin)
    DELETE /_plugins/_ml/agents/<agent_id>       delete it (admin)
    POST   /_plugins/_ml/agents/<agent_id>/_execute   run it: {"parameters": {...}} (any key);
                                                      ?async=true: a task of the run
"""

from __future__ import annotations

from ...agents.agents import Agents
from ...server.routing import Reply, Request, Router

BASE = "/_plugins/_ml/agents"


def add_agent_routes(router: Router, agents: Agents) -> None:
    router.add("POST", f"{BASE}/_register", lambda req: Reply(200, agents.register(req.body)), "admin")
    for method in ("POST", "GET"):
        router.add(method, f"{BASE}/_search", lambda req: Reply(200, agents.search(req.body)), "user")
    router.add("GET", f"{BASE}/{{agent_id}}", lambda req: Reply(200, agents.get(req.params["agent_id"])), "user")
    router.add("PUT", f"{BASE}/{{agent_id}}", lambda req: Reply(200, agents.update(req.params["agent_id"], req.body)),
               "admin")
    router.add("DELETE", f"{BASE}/{{agent_id}}", lambda req: Reply(200, agents.delete(req.params["agent_id"])),
               "admin")
    def execute(req: Request) -> Reply:
        agent_id = req.params["agent_id"]
        if req.flag("async"):
            return Reply(200, agents.execute_async(agent_id, req.body, req.caller))
        return Reply(200, agents.execute(agent_id, req.body, req.caller,
                                         req.meter.trace if req.meter is not None else None))

    router.add("POST", f"{BASE}/{{agent_id}}/_execute", execute, "user")
