"""``_batch_predict``, batch tasks and their polling, against the fake batch APIs.

Written from ml-commons' MLPredictTaskRunner (the task), GetTaskTransportAction (the
status call and its state regexes), CancelBatchJobTransportAction,
ConnectorUtils.createConnectorAction (the actions it derives) and
MLBatchTaskUpdateProcessor (the poller); the two published batch blueprints run in
test_blueprints.py.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mlstream.access.keys import KeyStore
from mlstream.app.compose import Server
from mlstream.testing.fake_batch import FakeBedrockBatch, FakeOpenAIBatches

from ..support.aws import isolate_aws_environment
from ..support.clients import Client
from ..support.connectors import host, openai_batch_connector

TASKS = "/_plugins/_ml/tasks"


@pytest.fixture(autouse=True)
def _isolated_aws_environment(monkeypatch, tmp_path):
    isolate_aws_environment(monkeypatch, tmp_path)


@pytest.fixture
def batches() -> Iterator[FakeOpenAIBatches]:
    with FakeOpenAIBatches() as fake:
        yield fake


@pytest.fixture
def bedrock_jobs() -> Iterator[FakeBedrockBatch]:
    with FakeBedrockBatch() as fake:
        yield fake


@pytest.fixture
def api(server: Server) -> Client:
    return Client(server.url)


def bedrock_batch_connector(fake: FakeBedrockBatch) -> dict[str, Any]:
    """Bedrock model invocation jobs as ml-commons' ConnectorUtils tests write them."""
    return {"name": "Bedrock batch", "description": "batch inference", "version": "1", "protocol": "aws_sigv4",
            "credential": {"access_key": fake.access_key, "secret_key": fake.secret_key},
            "parameters": {"region": fake.region, "service_name": "bedrock", "model": "amazon.titan-embed-text-v2:0",
                           "role_arn": "arn:aws:iam::123456789012:role/batch", "job_name": "batch-job-1",
                           "input_s3Uri": "s3://bucket/in.jsonl", "output_s3Uri": "s3://bucket/out/"},
            "actions": [{
                "action_type": "batch_predict", "method": "POST", "url": f"http://{host(fake)}/model-invocation-job",
                "headers": {"content-type": "application/json"},
                "request_body": "{\"inputDataConfig\":{\"s3InputDataConfig\":{\"s3Uri\":\"${parameters.input_s3Uri}\"}},"
                                "\"jobName\":\"${parameters.job_name}\",\"modelId\":\"${parameters.model}\","
                                "\"outputDataConfig\":{\"s3OutputDataConfig\":{\"s3Uri\":\"${parameters.output_s3Uri}\"}},"
                                "\"roleArn\":\"${parameters.role_arn}\"}",
                "post_process_function": "connector.post_process.bedrock.batch_job_arn"}]}


def start_job(api: Client, model_id: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    return api.ok("POST", f"/_plugins/_ml/models/{model_id}/_batch_predict", body or {"parameters": {}})


def stored(api: Client, task_id: str) -> dict[str, Any]:
    """The task as stored, without the status call a GET makes."""
    hits = api.ok("POST", f"{TASKS}/_search", {"query": {"ids": {"values": [task_id]}}})["hits"]["hits"]
    return hits[0]["_source"]


def test_openai_status_and_cancel_actions_of_the_connector(batches, api):
    model_id = api.model_for(openai_batch_connector(batches))
    started = start_job(api, model_id)
    batch_id, task_id = started["remote_job"]["id"], started["task_id"]
    assert api.ok("POST", f"{TASKS}/{task_id}/_cancel") == {"status": "OK"}
    assert batches.stats.requests[-1].path == f"/v1/batches/{batch_id}/cancel"
    assert stored(api, task_id)["state"] == "RUNNING"  # as ml-commons: the next status call tells
    assert api.ok("GET", f"{TASKS}/{task_id}")["state"] == "CANCELLING"
    batches.set_status(batch_id, "cancelled")
    assert api.ok("GET", f"{TASKS}/{task_id}")["state"] == "CANCELLED"


@pytest.mark.parametrize("status, state", [("failed", "FAILED"), ("expired", "EXPIRED"), ("finalizing", "RUNNING"),
                                           ("completed", "COMPLETED")])
def test_provider_status_to_task_state(batches, api, status, state):
    model_id = api.model_for(openai_batch_connector(batches))
    started = start_job(api, model_id)
    batches.set_status(started["remote_job"]["id"], status)
    task = api.ok("GET", f"{TASKS}/{started['task_id']}")
    assert task["state"] == state and task["remote_job"]["status"] == status


def test_status_regexes_and_fields_are_cluster_settings(batches, api):
    api.ok("PUT", "/_cluster/settings", {"persistent": {
        "plugins.ml_commons.remote_job.status_regex.completed": "(finalizing)"}})
    model_id = api.model_for(openai_batch_connector(batches))
    started = start_job(api, model_id)
    batches.set_status(started["remote_job"]["id"], "finalizing")
    assert api.ok("GET", f"{TASKS}/{started['task_id']}")["state"] == "COMPLETED"


def test_bedrock_model_invocation_job(bedrock_jobs, api):
    model_id = api.model_for(bedrock_batch_connector(bedrock_jobs))
    started = start_job(api, model_id, {"parameters": {"job_name": "nightly-1"}})
    job = started["remote_job"]
    arn = job["jobArn"]
    assert job == {"jobArn": arn, "processedJobArn": arn.replace("/", "%2F"), "dlq": None}
    assert bedrock_jobs.stats.requests[-1].body["jobName"] == "nightly-1"
    task = api.ok("GET", f"{TASKS}/{started['task_id']}")
    # ml-commons' own status action: GET <batch url>/<processedJobArn>, one path segment.
    assert bedrock_jobs.stats.requests[-1].path == "/model-invocation-job/" + arn.replace(":", "%3A").replace(
        "/", "%2F")
    assert task["state"] == "RUNNING" and task["remote_job"]["status"] == "Submitted"
    assert api.ok("POST", f"{TASKS}/{started['task_id']}/_cancel_batch") == {"status": "OK"}
    assert bedrock_jobs.stats.requests[-1].path.endswith("/stop")
    assert api.ok("GET", f"{TASKS}/{started['task_id']}")["state"] == "CANCELLING"
    bedrock_jobs.set_status(arn, "Stopped")
    done = api.ok("GET", f"{TASKS}/{started['task_id']}")
    assert done["state"] == "CANCELLED" and done["remote_job"]["processedJobArn"] == job["processedJobArn"]
    assert bedrock_jobs.secret_key not in json.dumps(done)


def test_the_poller_updates_running_tasks_and_leaves_finished_ones(batches, server, api):
    model_id = api.model_for(openai_batch_connector(batches))
    first, second = start_job(api, model_id), start_job(api, model_id)
    batches.set_status(first["remote_job"]["id"], "completed")
    batches.stats.reset()
    assert server.app.batch.poll_now()
    assert stored(api, first["task_id"])["state"] == "COMPLETED"
    assert stored(api, second["task_id"])["state"] == "RUNNING"
    assert len(batches.stats.requests) == 2
    batches.stats.reset()
    assert server.app.batch.poll_now()
    assert [r.path for r in batches.stats.requests] == [f"/v1/batches/{second['remote_job']['id']}"]


def test_tasks_survive_a_restart_and_are_polled_again(batches, make_server: Callable[..., Server]):
    first = make_server()
    api = Client(first.url)
    started = start_job(api, api.model_for(openai_batch_connector(batches)))
    first.stop(drain_timeout=0)
    batches.set_status(started["remote_job"]["id"], "completed")
    again = make_server()
    assert again.app.batch.poll_now()
    assert stored(Client(again.url), started["task_id"])["state"] == "COMPLETED"


def test_a_failed_status_call_changes_no_task_but_the_pollers_count(batches, server, api, caplog):
    model_id = api.model_for(openai_batch_connector(batches))
    started = start_job(api, model_id)
    task_id = started["task_id"]
    before = stored(api, task_id)
    batches.stop()
    reply = api.call("GET", f"{TASKS}/{task_id}")
    assert reply.status == 502, reply.body
    assert stored(api, task_id) == before
    with caplog.at_level(logging.INFO):
        for round_ in range(1, 12):
            assert server.app.batch.poll_now()
            assert stored(api, task_id)["remote_job"]["num_of_retries"] == round_
    task = stored(api, task_id)
    assert task["state"] == "UNREACHABLE" and task["error"]
    assert server.app.batch.poll_now()  # no longer polled
    assert stored(api, task_id)["remote_job"]["num_of_retries"] == 11
    assert batches.api_key not in caplog.text and batches.api_key not in json.dumps(task)


def test_a_refused_batch_predict_stores_no_task(batches, api):
    model_id = api.model_for(openai_batch_connector(batches))
    reply = api.call("POST", f"/_plugins/_ml/models/{model_id}/_batch_predict",
                     {"parameters": {"endpoint": "/v1/nope"}})
    assert reply.status == 400 and "Supported values are" in reply.body["error"]["reason"], reply.body
    assert api.ok("POST", f"{TASKS}/_search", {"query": {"term": {"task_type": "BATCH_PREDICTION"}}})[
        "hits"]["total"]["value"] == 0
    assert batches.api_key not in json.dumps(reply.body)


def test_settings_turn_batch_predict_off_and_bound_the_running_jobs(batches, api):
    model_id = api.model_for(openai_batch_connector(batches))
    started = start_job(api, model_id)
    api.ok("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons.max_batch_inference_tasks": 1}})
    sent = len(batches.stats.requests)
    reply = api.call("POST", f"/_plugins/_ml/models/{model_id}/_batch_predict", {"parameters": {}})
    assert reply.status == 429 and reply.body["error"]["reason"] == (
        "Exceeded maximum limit for BATCH_PREDICTION tasks. To increase the limit, update the "
        "plugins.ml_commons.max_batch_inference_tasks setting."), reply.body
    assert len(batches.stats.requests) == sent
    api.ok("PUT", "/_cluster/settings", {"persistent": {"plugins.ml_commons.offline_batch_inference_enabled": False}})
    for method, path in (("POST", f"/_plugins/_ml/models/{model_id}/_batch_predict"),
                         ("GET", f"{TASKS}/{started['task_id']}")):
        reply = api.call(method, path, {"parameters": {}} if method == "POST" else None)
        assert reply.status == 400 and reply.body["error"]["reason"].startswith(
            "Offline Batch Inference is currently disabled."), reply.body


def test_dlq_is_checked_and_kept_in_the_remote_job(batches, api):
    model_id = api.model_for(openai_batch_connector(batches))
    reply = api.call("POST", f"/_plugins/_ml/models/{model_id}/_batch_predict", {"dlq": {"bucket": "b"}})
    assert reply.status == 400 and reply.body["error"]["reason"] == "DLQ bucketName or region cannot be null"
    started = start_job(api, model_id, {"parameters": {}, "dlq": {"bucket": "b", "region": "us-east-1"}})
    assert started["remote_job"]["dlq"] == {"bucket": "b", "region": "us-east-1"}


def test_cancel_and_delete_of_tasks(batches, api):
    model_id = api.model_for(openai_batch_connector(batches))
    reply = api.call("POST", f"{TASKS}/nope/_cancel")
    assert reply.status == 404 and reply.body["error"]["reason"] == "Fail to find task"
    register_task = api.ok("POST", f"{TASKS}/_search", {"query": {"term": {"task_type": "REGISTER_MODEL"}}})[
        "hits"]["hits"][0]["_id"]
    reply = api.call("POST", f"{TASKS}/{register_task}/_cancel")
    assert reply.status == 400 and reply.body["error"]["reason"] == (
        "The task ID you provided does not have any associated batch job")
    started = start_job(api, model_id)
    reply = api.call("DELETE", f"{TASKS}/{started['task_id']}")
    assert reply.status == 409 and "running state" in reply.body["error"]["reason"]
    batches.set_status(started["remote_job"]["id"], "completed")
    api.ok("GET", f"{TASKS}/{started['task_id']}")
    api.ok("DELETE", f"{TASKS}/{started['task_id']}")


def test_connectors_without_the_actions_batch_predict_needs(batches, api):
    plain = openai_batch_connector(batches)
    plain["actions"][0]["action_type"] = "predict"
    reply = api.call("POST", f"/_plugins/_ml/models/{api.model_for(plain)}/_batch_predict", {"parameters": {}})
    assert reply.status == 400 and "no batch_predict action" in reply.body["error"]["reason"], reply.body
    # A provider ml-commons cannot name and a connector without a status action.
    odd = openai_batch_connector(batches, with_status=False)
    odd["actions"][0]["url"] = f"http://{host(batches)}/v1/batches?via=proxy"
    started = start_job(api, api.model_for(odd))
    reply = api.call("GET", f"{TASKS}/{started['task_id']}")
    assert reply.status == 400 and reply.body["error"]["reason"] == (
        "Please configure the action type to get the batch job details in the connector"), reply.body


def test_the_documented_polling_loop_runs_as_written(batches, server, api, capsys):
    """docs/api.md, "Batch predict": the Python polling loop (the job already done, so it
    never sleeps)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split("\n## Batch predict\n", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    started = start_job(api, api.model_for(openai_batch_connector(batches)))
    batches.set_status(started["remote_job"]["id"], "completed")
    code = snippet.replace("http://localhost:9200", server.url)
    exec(compile(code, "docs/api.md batch snippet", "exec"), {"task_id": started["task_id"]})  # noqa: S102
    assert capsys.readouterr().out == "COMPLETED\n"


def test_the_poller_starts_with_the_first_job_and_stops_with_the_server(batches, make_server):
    server = make_server()
    assert not server.app.batch.polling  # no batch task: no thread
    api = Client(server.url)
    start_job(api, api.model_for(openai_batch_connector(batches)))
    assert server.app.batch.polling
    server.stop(drain_timeout=0)
    assert not server.app.batch.polling
    requests = len(batches.stats.requests)
    server.app.batch.poll_now(timeout=1.0)  # stopped: no round begins
    assert len(batches.stats.requests) == requests


def test_batch_routes_take_any_key_and_each_sees_its_own_tasks(batches, make_server):
    server = make_server()
    keys = KeyStore(server.app.store)
    admin = {"Authorization": f"Bearer {keys.create('admin')[1]}"}
    user = {"Authorization": f"Bearer {keys.create('user')[1]}"}
    api = Client(server.url)
    reply = api.call("POST", "/_plugins/_ml/connectors/_create", openai_batch_connector(batches), headers=admin)
    model = api.call("POST", "/_plugins/_ml/models/_register",
                     {"name": "batch", "function_name": "remote", "connector_id": reply.body["connector_id"]},
                     headers=admin).body["model_id"]
    assert api.call("POST", f"{TASKS}/x/_cancel", headers=user).status == 404
    mine = api.call("POST", f"/_plugins/_ml/models/{model}/_batch_predict", {"parameters": {}}, headers=user)
    assert mine.status == 200, mine.body
    theirs = api.call("POST", f"/_plugins/_ml/models/{model}/_batch_predict", {"parameters": {}}, headers=admin)
    assert theirs.status == 200
    listed = api.call("POST", f"{TASKS}/_search", {"query": {"match_all": {}}}, headers=user).body["hits"]
    assert [hit["_id"] for hit in listed["hits"]] == [mine.body["task_id"]]  # the admin's job is not the user's
    assert api.call("GET", f"{TASKS}/{theirs.body['task_id']}", headers=user).status == 404
    assert api.call("GET", f"{TASKS}/{mine.body['task_id']}", headers=admin).status == 200
    # the submission is a call of the key's: in its usage records
    records = api.call("GET", "/_plugins/_mlstream/usage/records", headers=user).body["records"]
    assert [(r["interface"], r["input_tokens"]) for r in records] == [("batch_predict", 0)]
