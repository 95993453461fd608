"""The pure parts of batch predict: ml-commons' state regexes, the actions it derives from a
connector's batch_predict action, the parameters of a status call, the body, and the
Bedrock job-ARN post-process function."""

from __future__ import annotations

import pytest

from mlstream.inference.batch import action_for, derived_action, job_parameters, parse_batch_input, provider_of, task_state
from mlstream.models.connectors import parse_connector
from mlstream.errors import BadRequest, UpstreamError
from mlstream.processing import post_process
from mlstream.settings.server import CLUSTER_SETTING_DEFAULTS

ML = "plugins.ml_commons."
FIELDS = CLUSTER_SETTING_DEFAULTS[ML + "remote_job.status_field"]
REGEXES = {key: CLUSTER_SETTING_DEFAULTS[ML + f"remote_job.status_regex.{key}"]
           for key in ("completed", "cancelled", "cancelling", "expired", "failed")}


@pytest.mark.parametrize("job, state", [
    # OpenAI's statuses
    ({"status": "validating"}, None), ({"status": "in_progress"}, None), ({"status": "finalizing"}, None),
    ({"status": "completed"}, "COMPLETED"), ({"status": "failed"}, "FAILED"), ({"status": "expired"}, "EXPIRED"),
    ({"status": "cancelling"}, "CANCELLING"), ({"status": "cancelled"}, "CANCELLED"),
    # Bedrock's
    ({"status": "Submitted"}, None), ({"status": "InProgress"}, None), ({"status": "PartiallyCompleted"}, "COMPLETED"),
    ({"status": "Stopping"}, "CANCELLING"), ({"status": "Stopped"}, "CANCELLED"), ({"status": "Expired"}, "EXPIRED"),
    # SageMaker's
    ({"TransformJobStatus": "InProgress"}, None), ({"TransformJobStatus": "Completed"}, "COMPLETED"),
    ({"TransformJobStatus": "Failed"}, "FAILED"), ({"TransformJobStatus": "Stopped"}, "CANCELLED"),
    # found anywhere in the value, case-insensitive; the later field wins; other fields ignored
    ({"status": "JOB_TIMEOUT"}, "EXPIRED"), ({"status": "completed", "TransformJobStatus": "Failed"}, "FAILED"),
    ({"state": "completed"}, None), ({"status": None}, None),
], ids=repr)
def test_task_state_from_the_providers_status(job, state):
    assert task_state(job, FIELDS, REGEXES) == state


def test_cancelling_is_tried_before_cancelled_and_completed():
    regexes = {**REGEXES, "completed": "(.*)"}
    assert task_state({"status": "cancelling"}, FIELDS, regexes) == "CANCELLING"
    assert task_state({"status": "stopped"}, FIELDS, regexes) == "CANCELLED"
    assert task_state({"status": "failed"}, FIELDS, regexes) == "COMPLETED"


def connector(url: str, action: dict | None = None) -> object:
    return parse_connector({"name": "c", "protocol": "http", "parameters": {"region": "us-east-1"},
                            "actions": [{"action_type": "batch_predict", "method": "POST", "url": url,
                                         "headers": {"content-type": "application/json"}, "request_body": "{}"},
                                        *([action] if action else [])]})


@pytest.mark.parametrize("url, provider", [
    ("https://api.openai.com/v1/batches", "openai"), ("https://api.cohere.ai/v1/embed-jobs", "cohere"),
    ("https://api.sagemaker.us-east-1.amazonaws.com/CreateTransformJob", "sagemaker"),
    ("https://bedrock.${parameters.region}.amazonaws.com/model-invocation-job", "bedrock"),
    ("http://127.0.0.1:9/v1/batches", "openai"), ("http://127.0.0.1:9/model-invocation-job", "bedrock"),
    ("http://127.0.0.1:9/CreateTransformJob", "sagemaker"), ("http://127.0.0.1:9/jobs", None),
])
def test_provider_of_a_batch_url(url, provider):
    assert provider_of(url) == provider


@pytest.mark.parametrize("url, kind, method, want_url, body", [
    ("https://api.openai.com/v1/batches", "batch_predict_status", "GET",
     "https://api.openai.com/v1/batches/${parameters.id}", None),
    ("https://api.openai.com/v1/batches", "cancel_batch_predict", "POST",
     "https://api.openai.com/v1/batches/${parameters.id}/cancel", None),
    ("https://bedrock.us-east-1.amazonaws.com/model-invocation-job", "batch_predict_status", "GET",
     "https://bedrock.us-east-1.amazonaws.com/model-invocation-job/${parameters.processedJobArn}", None),
    ("https://bedrock.us-east-1.amazonaws.com/model-invocation-job", "cancel_batch_predict", "POST",
     "https://bedrock.us-east-1.amazonaws.com/model-invocation-job/${parameters.processedJobArn}/stop", None),
    ("https://api.sagemaker.us-east-1.amazonaws.com/CreateTransformJob", "batch_predict_status", "POST",
     "https://api.sagemaker.us-east-1.amazonaws.com/DescribeTransformJob",
     '{ "TransformJobName" : "${parameters.TransformJobName}"}'),
    ("https://api.sagemaker.us-east-1.amazonaws.com/CreateTransformJob", "cancel_batch_predict", "POST",
     "https://api.sagemaker.us-east-1.amazonaws.com/StopTransformJob",
     '{ "TransformJobName" : "${parameters.TransformJobName}"}'),
])
def test_derived_actions_as_connector_utils_makes_them(url, kind, method, want_url, body):
    action = derived_action(connector(url), kind)
    assert (action.action_type, action.method, action.url, action.request_body) == (kind, method, want_url, body)
    assert action.headers == {"content-type": "application/json"}  # the batch_predict action's


def test_the_connectors_own_action_wins_and_an_unknown_provider_needs_one():
    own = {"action_type": "batch_predict_status", "method": "GET", "url": "http://127.0.0.1:9/jobs/${parameters.id}"}
    assert action_for(connector("http://127.0.0.1:9/jobs", own), "batch_predict_status").url == own["url"]
    with pytest.raises(BadRequest, match="get the batch job details"):
        action_for(connector("http://127.0.0.1:9/jobs"), "batch_predict_status")
    with pytest.raises(BadRequest, match="cancel the batch job"):
        action_for(connector("http://127.0.0.1:9/jobs"), "cancel_batch_predict")


def test_status_call_parameters():
    arn = "arn:aws:sagemaker:us-east-1:123456789012:transform-job/sm-job"
    assert job_parameters({"TransformJobArn": arn, "dlq": None, "request_counts": {"total": 1}}) == {
        "TransformJobArn": arn, "TransformJobName": "sm-job"}
    assert job_parameters({"TransformJobArn": arn, "TransformJobName": "Given"})["TransformJobName"] == "Given"


def test_batch_body():
    assert parse_batch_input({"parameters": {"a": 1}, "action_type": "batch_predict", "x": 1}) == ({"a": 1}, None)
    assert parse_batch_input({"dlq": {"bucket": "b", "region": "r"}}) == ({}, {"bucket": "b", "region": "r"})
    for bad in ([], {"parameters": []}, {"dlq": "b"}, {"dlq": {"region": "r"}}):
        with pytest.raises(BadRequest):
            parse_batch_input(bad)


def test_bedrock_batch_job_arn_post_process():
    arn = "arn:aws:bedrock:us-east-1:123456789012:model-invocation-job/abc123def456"
    assert post_process("connector.post_process.bedrock.batch_job_arn", {"jobArn": arn}, None) == [
        {"name": "response", "dataAsMap": {
            "jobArn": arn, "processedJobArn": "arn:aws:bedrock:us-east-1:123456789012:model-invocation-job%2Fabc123def456"}}]
    with pytest.raises(UpstreamError, match="job arn is missing"):
        post_process("connector.post_process.bedrock.batch_job_arn", {"other": 1}, None)
