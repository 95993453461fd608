"""ml-commons' agents over HTTP: register, get, update, search, delete, and a flow agent's
run through MLModelTool against the fake provider (what it sent, what it answered, usage,
access), and the tools and types mlstream does not run refused by name."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlstream.agents.agents import ASYNC_WORKERS
from mlstream.testing.fake_openai import FakeOpenAI
from tests.support.connectors import prompt_chat_connector
from tests.support.clients import Client, bearer, client_with
from tests.support.timeouts import HANG_GUARD, poll_until

AGENTS = "/_plugins/_ml/agents"
MEMORY = "/_plugins/_ml/memory"
MLS = "/_plugins/_mlstream"


def chat_bodies(fake: FakeOpenAI) -> list[Any]:
    return [r.body for r in fake.stats.requests if r.path.endswith("/chat/completions")]


class Setup:
    def __init__(self, server: Any, fake: FakeOpenAI) -> None:
        self.url, self.fake = server.url, fake
        admin = Client(server.url).call("POST", f"{MLS}/keys", {"name": "ops", "role": "admin"})
        assert admin.status == 200, admin.body
        self.admin = client_with(server.url, bearer(admin.body["key"]))

    def model(self, text: str, name: str = "llm", **scenario: Any) -> str:
        return self.admin.register(self.admin.create_connector(prompt_chat_connector(self.fake, text, **scenario)),
                                   name=name)

    def key(self, name: str, **fields: Any) -> Client:
        secret = self.admin.ok("POST", f"{MLS}/keys", {"name": name, **fields})["key"]
        return client_with(self.url, bearer(secret))


@pytest.fixture
def setup(make_server, fake) -> Setup:
    return Setup(make_server(), fake)


def flow_agent(model_id: str, **tool: Any) -> dict[str, Any]:
    return {"name": "Test_Agent_For_RAG", "type": "flow", "description": "this is a test agent",
            "tools": [{"type": "MLModelTool", "description": "A general tool to answer any question",
                       "parameters": {"model_id": model_id, "prompt": "Answer briefly: ${parameters.question}"},
                       **tool}]}


def test_a_flow_agent_with_one_model_tool_answers_as_ml_commons(setup: Setup) -> None:
    model_id = setup.model("Paris is the capital")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", flow_agent(model_id))["agent_id"]
    agent = setup.admin.ok("GET", f"{AGENTS}/{agent_id}")
    assert agent["name"] == "Test_Agent_For_RAG" and agent["type"] == "flow"
    assert agent["tools"][0]["include_output_in_agent_response"] is False
    assert isinstance(agent["created_time"], int) and agent["last_updated_time"] == agent["created_time"]

    answer = setup.admin.ok("POST", f"{AGENTS}/{agent_id}/_execute",
                            {"parameters": {"question": "What is the capital of \"France\"?"}})
    assert answer == {"inference_results": [{"output": [{"name": "response", "result": "Paris is the capital"}]}]}
    sent = chat_bodies(setup.fake)[-1]
    assert sent["messages"] == [{"role": "user", "content": 'Answer briefly: What is the capital of "France"?'}]


def test_a_flow_of_two_tools_hands_the_first_output_to_the_second(setup: Setup) -> None:
    first = setup.model("step one says hi", name="first")
    second = setup.model("final words", name="second")
    body = {"name": "two steps", "type": "flow", "tools": [
        {"type": "MLModelTool", "name": "draft", "include_output_in_agent_response": True,
         "parameters": {"model_id": first, "prompt": "Draft: ${parameters.question}"}},
        {"type": "MLModelTool", "name": "polish",
         "parameters": {"model_id": second, "prompt": "Polish: ${parameters.draft.output}"}}]}
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", body)["agent_id"]
    answer = setup.admin.ok("POST", f"{AGENTS}/{agent_id}/_execute", {"parameters": {"question": "go"}})
    assert answer["inference_results"][0]["output"] == [{"name": "draft", "result": "step one says hi"},
                                                        {"name": "polish", "result": "final words"}]
    assert [b["messages"][0]["content"] for b in chat_bodies(setup.fake)[-2:]] == [
        "Draft: go", "Polish: step one says hi"]
    # a request parameter named <tool>.<key> is that tool's alone
    setup.admin.ok("POST", f"{AGENTS}/{agent_id}/_execute",
                   {"parameters": {"question": "go", "polish.prompt": "Only: ${parameters.draft.output}"}})
    assert [b["messages"][0]["content"] for b in chat_bodies(setup.fake)[-2:]] == [
        "Draft: go", "Only: step one says hi"]


def test_tool_calls_are_the_callers_usage_and_need_its_access(setup: Setup) -> None:
    model_id = setup.model("ok")
    other = setup.model("never", name="other")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", flow_agent(model_id))["agent_id"]
    denied_id = setup.admin.ok("POST", f"{AGENTS}/_register", {**flow_agent(other), "name": "denied"})["agent_id"]
    user = setup.key("agent-user", models=[model_id], rpm=5)
    assert user.ok("POST", f"{AGENTS}/{agent_id}/_execute", {"parameters": {"question": "q"}})
    records = setup.admin.ok("GET", f"{MLS}/usage/records?key=agent-user")["records"]
    assert [(r["route"], r["model"], r["outcome"]) for r in records] == [
        ("/_plugins/_ml/agents/{agent_id}/_execute", model_id, "ok")]
    calls = len(chat_bodies(setup.fake))
    refused = user.call("POST", f"{AGENTS}/{denied_id}/_execute", {"parameters": {"question": "q"}})
    assert refused.status == 403 and "privilege" in refused.body["error"]["reason"], refused.body
    assert len(chat_bodies(setup.fake)) == calls  # nothing sent
    # a user key reads and runs agents, but does not register, change or delete them
    assert user.call("POST", f"{AGENTS}/_register", flow_agent(model_id)).status == 403
    assert user.call("PUT", f"{AGENTS}/{agent_id}", {"description": "mine"}).status == 403
    assert user.call("DELETE", f"{AGENTS}/{agent_id}").status == 403
    assert user.ok("GET", f"{AGENTS}/{agent_id}")["name"] == "Test_Agent_For_RAG"


def test_update_search_and_delete(setup: Setup) -> None:
    model_id = setup.model("x")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", flow_agent(model_id))["agent_id"]
    updated = setup.admin.ok("PUT", f"{AGENTS}/{agent_id}", {"description": "changed"})
    assert updated["_id"] == agent_id and updated["result"] == "updated"
    assert setup.admin.ok("GET", f"{AGENTS}/{agent_id}")["description"] == "changed"
    refused = setup.admin.call("PUT", f"{AGENTS}/{agent_id}", {"type": "conversational"})
    assert refused.status == 400 and "type" in refused.body["error"]["reason"]
    hits = setup.admin.ok("POST", f"{AGENTS}/_search", {"query": {"term": {"type": "flow"}}})["hits"]
    assert [hit["_id"] for hit in hits["hits"]] == [agent_id] and hits["hits"][0]["_index"] == ".plugins-ml-agent"
    deleted = setup.admin.ok("DELETE", f"{AGENTS}/{agent_id}")
    assert deleted["result"] == "deleted"
    missing = setup.admin.call("GET", f"{AGENTS}/{agent_id}")
    assert missing.status == 404 and missing.body["error"]["reason"] == (
        f"Failed to find agent with the provided agent id: {agent_id}")


@pytest.mark.parametrize("body, words", [
    ({"type": "flow"}, "Agent name can't be null"),
    ({"name": "", "type": "flow"}, "Agent name cannot be empty"),
    ({"name": "x" * 129, "type": "flow"}, "exceed max length of 128"),
    ({"name": "a"}, "Agent type can't be null"),
    ({"name": "a", "type": "robot"}, "Invalid Agent Type"),
    ({"name": "a", "type": "conversational"}, "We need model information"),
    ({"name": "a", "type": "flow", "tools": [{"type": "MLModelTool"}, {"type": "MLModelTool"}]},
     "Duplicate tool defined"),
    ({"name": "a", "type": "flow", "tools": [{"name": "t"}]}, "tool type is null"),
    ({"name": "a", "type": "flow", "tools": "MLModelTool"}, "tools"),
])
def test_a_bad_agent_is_ml_commons_400_and_nothing_is_registered(setup: Setup, body: Any, words: str) -> None:
    reply = setup.admin.call("POST", f"{AGENTS}/_register", body)
    assert reply.status == 400 and words in reply.body["error"]["reason"], reply.body
    assert setup.admin.ok("POST", f"{AGENTS}/_search", {"query": {"match_all": {}}})["hits"]["total"]["value"] == 0


@pytest.mark.parametrize("tools, words", [
    ([{"type": "VectorDBTool", "name": "kb", "parameters": {"index": "docs"}}], "[kb] of type [VectorDBTool] needs"),
    ([{"type": "SearchIndexTool"}], "SearchIndexTool] needs an OpenSearch index"),
    ([{"type": "CalculatorTool"}], "[CalculatorTool] is not served here"),
    ([{"type": "MLModelTool", "parameters": {"prompt": "x"}}], "Model ID can't be null or empty"),
    ([], "no tool configured"),
])
def test_tools_that_cannot_run_here_are_named_in_a_400_before_anything_runs(setup: Setup, tools: Any,
                                                                             words: str) -> None:
    model_id = setup.model("unused")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", {"name": "t", "type": "flow", "tools": [
        {"type": "MLModelTool", "name": "first", "parameters": {"model_id": model_id, "prompt": "p"}}, *tools]}
        if tools else {"name": "t", "type": "flow"})["agent_id"]
    calls = len(chat_bodies(setup.fake))
    reply = setup.admin.call("POST", f"{AGENTS}/{agent_id}/_execute", {"parameters": {"question": "q"}})
    assert reply.status == 400 and words in reply.body["error"]["reason"], reply.body
    assert len(chat_bodies(setup.fake)) == calls


def test_agent_types_not_run_here_are_a_400_and_a_bad_execute_body_too(setup: Setup) -> None:
    model_id = setup.model("x")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", {"name": "chat", "type": "conversational",
                                                              "llm": {"model_id": model_id}})["agent_id"]
    reply = setup.admin.call("POST", f"{AGENTS}/{agent_id}/_execute", {"parameters": {"question": "q"}})
    assert reply.status == 400 and "[conversational] agent" in reply.body["error"]["reason"]
    flow_id = setup.admin.ok("POST", f"{AGENTS}/_register", flow_agent(model_id))["agent_id"]
    for body in ({"question": "q"}, [], {"parameters": "q"}):
        bad = setup.admin.call("POST", f"{AGENTS}/{flow_id}/_execute", body)
        assert bad.status == 400 and "parameters" in json.dumps(bad.body), bad.body


def conversational_agent(model_id: str, **extra: Any) -> dict[str, Any]:
    # RAG_with_conversational_flow_agent.md's shape, with a model tool only
    return {"name": "population data analysis agent", "type": "conversational_flow", "app_type": "rag",
            "memory": {"type": "conversation_index"},
            "tools": [{"type": "MLModelTool", "name": "bedrock_claude_model",
                       "parameters": {"model_id": model_id,
                                      "prompt": "${parameters.chat_history:-}Human:${parameters.question}\n\n"
                                                "Assistant:"}}], **extra}


def test_a_conversational_flow_keeps_its_conversation_in_memory(setup: Setup) -> None:
    model_id = setup.model("It is 8 million.")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", conversational_agent(model_id))["agent_id"]
    user = setup.key("analyst")
    first = user.ok("POST", f"{AGENTS}/{agent_id}/_execute",
                    {"parameters": {"question": "What's the population of New York City?"}})
    output = first["inference_results"][0]["output"]
    assert [tensor["name"] for tensor in output] == ["memory_id", "parent_message_id", "bedrock_claude_model"]
    memory_id, parent_id = output[0]["result"], output[1]["result"]
    assert output[2]["result"] == "It is 8 million."
    assert user.ok("GET", f"{MEMORY}/{memory_id}")["name"] == "What's the population of New York City?"
    messages = user.ok("GET", f"{MEMORY}/{memory_id}/messages")["messages"]
    assert [(m["message_id"], m["input"], m["response"]) for m in messages] == [
        (parent_id, "What's the population of New York City?", "It is 8 million.")]
    traces = user.ok("GET", f"{MEMORY}/message/{parent_id}/traces")["traces"]
    assert [(t["origin"], t["trace_number"], t["response"]) for t in traces] == [
        ("bedrock_claude_model", 1, "It is 8 million.")]

    second = user.ok("POST", f"{AGENTS}/{agent_id}/_execute",
                     {"parameters": {"question": "And Seattle?", "memory_id": memory_id}})
    assert second["inference_results"][0]["output"][0]["result"] == memory_id
    prompt = chat_bodies(setup.fake)[-1]["messages"][0]["content"]
    assert prompt == ("Below is Chat History between Human and AI which sorted by time with asc order:\n"
                      "Human:What's the population of New York City?\nAssistant:It is 8 million.\n"
                      "Human:And Seattle?\n\nAssistant:")
    assert len(user.ok("GET", f"{MEMORY}/{memory_id}/messages")["messages"]) == 2
    # the history is bounded by message_history_limit (the turn in flight counts, as in
    # ml-commons: its root message is saved first), and traces can be left out
    user.ok("POST", f"{AGENTS}/{agent_id}/_execute", {"parameters": {
        "question": "Third?", "memory_id": memory_id, "message_history_limit": "2", "disable_trace": "true"}})
    prompt = chat_bodies(setup.fake)[-1]["messages"][0]["content"]
    assert "Human:And Seattle?" in prompt and "New York" not in prompt
    third = user.ok("GET", f"{MEMORY}/{memory_id}/messages")["messages"][-1]
    assert user.ok("GET", f"{MEMORY}/message/{third['message_id']}/traces")["traces"] == []
    # another key's memory is not found, and nothing is asked of the model
    other = setup.key("stranger")
    calls = len(chat_bodies(setup.fake))
    refused = other.call("POST", f"{AGENTS}/{agent_id}/_execute",
                         {"parameters": {"question": "peek", "memory_id": memory_id}})
    assert refused.status == 404 and refused.body["error"]["reason"] == f"Memory [{memory_id}] not found"
    assert len(chat_bodies(setup.fake)) == calls


def test_a_flow_agent_with_memory_keeps_its_outputs_on_the_turn(setup: Setup) -> None:
    model_id = setup.model("flowed")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register",
                              {**flow_agent(model_id), "memory": {"type": "conversation_index"}})["agent_id"]
    answer = setup.admin.ok("POST", f"{AGENTS}/{agent_id}/_execute", {"parameters": {"question": "q?"}})
    assert answer["inference_results"][0]["output"] == [{"name": "response", "result": "flowed"}]
    memories = setup.admin.ok("GET", MEMORY)["memories"]
    assert [m["name"] for m in memories] == ["q?"]
    turn = setup.admin.ok("GET", f"{MEMORY}/{memories[0]['memory_id']}/messages")["messages"][0]
    assert turn["input"] == "q?" and turn["additional_info"] == {"MLModelTool.output": "flowed"}
    bad = setup.admin.ok("POST", f"{AGENTS}/_register",
                         {**flow_agent(model_id), "name": "remote", "memory": {"type": "remote_agentic_memory"}})
    refused = setup.admin.call("POST", f"{AGENTS}/{bad['agent_id']}/_execute", {"parameters": {"question": "q"}})
    assert refused.status == 400 and "remote_agentic_memory" in refused.body["error"]["reason"]


def test_an_asynchronous_run_is_a_task_of_its_callers_that_gets_the_answer(setup: Setup) -> None:
    model_id = setup.model("Paris is the capital")
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", conversational_agent(model_id))["agent_id"]
    user = setup.key("async-user")
    started = user.ok("POST", f"{AGENTS}/{agent_id}/_execute?async=true", {"parameters": {"question": "Capital?"}})
    assert started["status"] == "RUNNING" and set(started["response"]) == {"memory_id", "parent_interaction_id"}
    task_path = f"/_plugins/_ml/tasks/{started['task_id']}"
    assert poll_until(lambda: user.ok("GET", task_path)["state"] != "RUNNING", HANG_GUARD)
    task = user.ok("GET", task_path)
    assert task["state"] == "COMPLETED" and task["task_type"] == "AGENT_EXECUTION" and task["is_async"] is True
    output = task["response"]["inference_results"][0]["output"]
    assert output[-1] == {"name": "bedrock_claude_model", "result": "Paris is the capital"}
    assert task["response"]["memory_id"] == started["response"]["memory_id"] == output[0]["result"]
    # the task is its creator's: another key finds nothing
    assert setup.key("other-async").call("GET", task_path).status == 404
    # a run that fails ends as a FAILED task with the reason
    denied = setup.key("narrow", models=["nothing"])
    failing = denied.ok("POST", f"{AGENTS}/{agent_id}/_execute?async=true", {"parameters": {"question": "q"}})
    failed_path = f"/_plugins/_ml/tasks/{failing['task_id']}"
    assert poll_until(lambda: denied.ok("GET", failed_path)["state"] != "RUNNING", HANG_GUARD)
    failed = denied.ok("GET", failed_path)
    assert failed["state"] == "FAILED" and "privilege" in failed["response"]["error_message"]
    # what a run checks before it starts is answered at once
    refused = user.call("POST", f"{AGENTS}/{agent_id}/_execute?async=true", {"question": "q"})
    assert refused.status == 400


def test_runs_not_over_when_the_server_stops_end_as_failed_tasks(make_server, fake) -> None:
    server = make_server()
    setup = Setup(server, fake)
    model_id = setup.model("late", first_delay_ms=3000)
    agent_id = setup.admin.ok("POST", f"{AGENTS}/_register", flow_agent(model_id))["agent_id"]
    tasks = [setup.admin.ok("POST", f"{AGENTS}/{agent_id}/_execute?async=true", {"parameters": {"question": "q"}})
             ["task_id"] for _ in range(ASYNC_WORKERS + 2)]
    going = fake.stats.wait_for(lambda stats: sum(1 for r in stats.requests if r.path.endswith("/chat/completions"))
                                >= ASYNC_WORKERS, HANG_GUARD)
    assert going  # 4 runs going, 2 waiting
    admin_key = setup.admin.http.headers["Authorization"]
    server.stop(drain_timeout=0)
    again = client_with(make_server().url, {"Authorization": admin_key})
    ends = [again.ok("GET", f"/_plugins/_ml/tasks/{task_id}") for task_id in tasks]
    assert [task["state"] for task in ends] == ["FAILED"] * len(tasks)
    reasons = sorted(task["response"]["error_message"] for task in ends)
    assert reasons == ["the server stopped before the agent run"] * 2 + \
        ["the server stopped during the agent run"] * ASYNC_WORKERS
