"""Fake batch-job APIs on loopback: what ml-commons' ``_batch_predict`` connectors call.

Three control planes, each speaking its provider's own protocol, proven by that
provider's SDK (``tests/integration/test_fake_batch.py``):

``FakeOpenAIBatches``  the OpenAI Batch API: ``POST /v1/batches``, ``GET /v1/batches``,
                       ``GET /v1/batches/{id}``, ``POST /v1/batches/{id}/cancel``; a Bearer
                       key; OpenAI's error body. A new batch is ``validating``.
``FakeBedrockBatch``   Bedrock model invocation jobs (service ``bedrock``, REST-JSON,
                       SigV4): ``POST /model-invocation-job``, ``GET
                       /model-invocation-job/{jobIdentifier}``, ``POST .../{jobIdentifier}/stop``;
                       the identifier is the job ARN (percent-encoded as one path segment)
                       or its id. A new job is ``Submitted``.
``FakeSageMakerBatch`` SageMaker batch transform (service ``sagemaker``, AWS JSON 1.1,
                       SigV4): ``CreateTransformJob``, ``DescribeTransformJob``,
                       ``StopTransformJob`` named by ``X-Amz-Target`` on ``POST /`` as the
                       SDK sends them, or by the path (``POST /CreateTransformJob``) as
                       ml-commons' batch blueprint writes its URL. A new job is ``InProgress``.

Nothing moves by itself: a test moves a job with ``set_status(job, status)`` (which stamps
the provider's time fields for that status) and waits on nothing else. A cancel moves the
job to the provider's cancelling status (``cancelling``, ``Stopping``); the test finishes
it. ``stats.requests`` records every request.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from . import sigv4
from .fake_server import BadBody, FakeServer, json_or_none
from .scripted import RecordedRequest, ScriptedHandler, ScriptedStats

__all__ = ["ACCOUNT", "FakeBedrockBatch", "FakeOpenAIBatches", "FakeSageMakerBatch"]

ACCOUNT = "123456789012"
OPENAI_ENDPOINTS = ("/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions")
OPENAI_STATUSES = ("validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling",
                   "cancelled")
OPENAI_TERMINAL = ("failed", "completed", "expired", "cancelled")
BEDROCK_STATUSES = ("Submitted", "Validating", "Scheduled", "InProgress", "Completed", "PartiallyCompleted",
                    "Failed", "Stopping", "Stopped", "Expired")
BEDROCK_TERMINAL = ("Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired")
SAGEMAKER_STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")
# What OpenAI stamps when a batch reaches each status.
_OPENAI_STAMPS = {"in_progress": "in_progress_at", "finalizing": "finalizing_at", "completed": "completed_at",
                  "failed": "failed_at", "expired": "expired_at", "cancelling": "cancelling_at",
                  "cancelled": "cancelled_at"}


class _Jobs:
    """Jobs by id, changed by the fake's handlers and by the test.

    The lock guards the dict and the documents in it; nothing blocks under it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[str, Any]] = {}

    def add(self, job_id: str, doc: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self._jobs[job_id] = doc
            return dict(doc)

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            doc = self._jobs.get(job_id)
            return None if doc is None else json.loads(json.dumps(doc))

    def change(self, job_id: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            if job_id not in self._jobs:
                raise KeyError(f"no job {job_id!r}")
            self._jobs[job_id].update(fields)
            return dict(self._jobs[job_id])

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(doc) for doc in self._jobs.values()]


class _JobHandler(ScriptedHandler):
    """The request line and body of one call, recorded; answers in JSON."""

    fake: Any

    def _received(self) -> tuple[str, str, dict[str, str], bytes, Any] | None:
        try:
            raw = self.read_body()
        except BadBody as error:
            self._fail(error.status, "ValidationException", error.reason)
            return None
        headers = self.lowered_headers()
        body = json_or_none(raw)
        self.fake.stats._record(RecordedRequest(self.command, self.path, headers, body, raw))
        path, _, query = self.path.partition("?")
        return path, query, headers, raw, body

    def _signed(self, path: str, query: str, headers: dict[str, str], raw: bytes, service: str) -> bool:
        fake = self.fake
        wire_path = path.encode("latin-1").decode("utf-8", "surrogateescape")
        result = sigv4.verify(self.command, wire_path, query, headers, raw, access_key=fake.access_key,
                              secret_key=fake.secret_key, region=fake.region, service=service,
                              session_token=fake.session_token)
        if not result.ok:
            fake.stats._add(auth_failures=1)
            self._fail(403, result.error_type or sigv4.INVALID_SIGNATURE, result.reason)
        return result.ok

    def _fail(self, status: int, error_type: str, message: str) -> None:
        raise NotImplementedError


# ------------------------------------------------------------------------------- OpenAI


def _openai_error(message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


class _OpenAIHandler(_JobHandler):
    server_version = "FakeOpenAIBatches/1.0"
    fake: FakeOpenAIBatches

    def serve(self) -> None:
        received = self._received()
        if received is None:
            return
        path, _, headers, _, body = received
        key = headers.get("authorization", "").partition(" ")[2].strip()
        if not secrets.compare_digest(key.encode(), self.fake.api_key.encode()):
            self.fake.stats._add(auth_failures=1)
            self.send_json(401, _openai_error("Incorrect API key provided. You can find your API key at "
                                              "https://platform.openai.com/account/api-keys.",
                                              code="invalid_api_key"))
            return
        parts = path.rstrip("/").split("/")[1:]
        if parts[:2] != ["v1", "batches"] or len(parts) > 4:
            self.send_json(404, _openai_error(f"Invalid URL ({self.command} {path})"))
        elif len(parts) == 2 and self.command == "POST":
            self._create(body)
        elif len(parts) == 2 and self.command == "GET":
            batches = sorted(self.fake.jobs.all(), key=lambda b: b["created_at"], reverse=True)
            self.send_json(200, {"object": "list", "data": batches, "has_more": False,
                                 "first_id": batches[0]["id"] if batches else None,
                                 "last_id": batches[-1]["id"] if batches else None})
        elif len(parts) == 3 and self.command == "GET":
            self._known(parts[2], lambda batch: self.send_json(200, batch))
        elif len(parts) == 4 and parts[3] == "cancel" and self.command == "POST":
            self._known(parts[2], self._cancel)
        else:
            self.send_json(404, _openai_error(f"Invalid URL ({self.command} {path})"))

    def _create(self, body: Any) -> None:
        if not isinstance(body, dict):
            self.send_json(400, _openai_error("We could not parse the JSON body of your request."))
            return
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(body.get(name), str) or not body[name]:
                self.send_json(400, _openai_error(f"Missing required parameter: '{name}'.", name,
                                                  "missing_required_parameter"))
                return
        if body["endpoint"] not in OPENAI_ENDPOINTS:
            self.send_json(400, _openai_error(f"Invalid value: '{body['endpoint']}'. Supported values are: "
                                              f"{', '.join(repr(e) for e in OPENAI_ENDPOINTS)}.", "endpoint",
                                              "invalid_value"))
            return
        if body["completion_window"] != "24h":
            self.send_json(400, _openai_error("Invalid value: completion_window must be '24h'.",
                                              "completion_window", "invalid_value"))
            return
        now = int(time.time())
        batch_id = "batch_" + secrets.token_hex(12)
        batch = {"id": batch_id, "object": "batch", "endpoint": body["endpoint"], "errors": None,
                 "input_file_id": body["input_file_id"], "completion_window": "24h", "status": "validating",
                 "output_file_id": None, "error_file_id": None, "created_at": now, "in_progress_at": None,
                 "expires_at": now + 86400, "finalizing_at": None, "completed_at": None, "failed_at": None,
                 "expired_at": None, "cancelling_at": None, "cancelled_at": None,
                 "request_counts": {"total": 0, "completed": 0, "failed": 0},
                 "metadata": body.get("metadata")}
        self.send_json(200, self.fake.jobs.add(batch_id, batch))

    def _known(self, batch_id: str, then: Any) -> None:
        batch = self.fake.jobs.get(batch_id)
        if batch is None:
            self.send_json(404, _openai_error(f"No batch found with id '{batch_id}'."))
            return
        then(batch)

    def _cancel(self, batch: dict[str, Any]) -> None:
        if batch["status"] in OPENAI_TERMINAL or batch["status"] == "cancelling":
            self.send_json(409, _openai_error(f"Cannot cancel a batch with status '{batch['status']}'."))
            return
        self.send_json(200, self.fake.set_status(batch["id"], "cancelling"))

    def _fail(self, status: int, error_type: str, message: str) -> None:
        self.send_json(status, _openai_error(message))


class FakeOpenAIBatches(FakeServer):
    """The OpenAI Batch API on loopback (``api_key`` is the Bearer key it takes)."""

    handler = _OpenAIHandler
    stats: ScriptedStats

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, api_key: str = "sk-fake-batch-key") -> None:
        self.api_key = api_key
        self.jobs = _Jobs()
        super().__init__(host=host, port=port, stats=ScriptedStats())

    def set_status(self, batch_id: str, status: str) -> dict[str, Any]:
        """Move a batch to ``status``, stamping its time field; ``completed`` also gives it
        an output file and request counts, ``failed`` an error list."""
        if status not in OPENAI_STATUSES:
            raise ValueError(f"status must be one of {OPENAI_STATUSES}, got {status!r}")
        fields: dict[str, Any] = {"status": status}
        if status in _OPENAI_STAMPS:
            fields[_OPENAI_STAMPS[status]] = int(time.time())
        if status == "completed":
            fields.update(output_file_id="file-" + secrets.token_hex(12),
                          request_counts={"total": 3, "completed": 3, "failed": 0})
        if status == "failed":
            fields["errors"] = {"object": "list", "data": [
                {"code": "invalid_json_line", "message": "This line is not parseable as valid JSON.",
                 "param": None, "line": 1}]}
        return self.jobs.change(batch_id, **fields)


# ------------------------------------------------------------------------------ Bedrock


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


_BEDROCK_REQUIRED = ("jobName", "roleArn", "modelId", "inputDataConfig", "outputDataConfig")


class _BedrockHandler(_JobHandler):
    server_version = "FakeBedrockBatch/1.0"
    fake: FakeBedrockBatch

    def serve(self) -> None:
        received = self._received()
        if received is None:
            return
        path, query, headers, raw, body = received
        if not self._signed(path, query, headers, raw, "bedrock"):
            return
        parts = path.split("/")[1:]  # the identifier's "/" arrives as %2F: still one segment
        if parts == ["model-invocation-job"] and self.command == "POST":
            self._create(body)
            return
        if parts[:1] != ["model-invocation-job"] or len(parts) not in (2, 3):
            self._fail(404, "UnknownOperationException", f"No route for {self.command} {path}")
            return
        job_id = self.fake.job_id(unquote(parts[1]))
        job = None if job_id is None else self.fake.jobs.get(job_id)
        if job is None:
            self._fail(404, "ResourceNotFoundException", f"Could not find job {unquote(parts[1])}")
        elif len(parts) == 2 and self.command == "GET":
            self.send_json(200, job)
        elif len(parts) == 3 and parts[2] == "stop" and self.command == "POST":
            if job["status"] in BEDROCK_TERMINAL or job["status"] == "Stopping":
                self._fail(400, "ValidationException", f"Job with status {job['status']} cannot be stopped")
                return
            self.fake.set_status(job_id, "Stopping")
            self.send_json(200, {})
        else:
            self._fail(404, "UnknownOperationException", f"No route for {self.command} {path}")

    def _create(self, body: Any) -> None:
        if not isinstance(body, dict):
            self._fail(400, "ValidationException", "The request body must be a JSON object.")
            return
        missing = [name for name in _BEDROCK_REQUIRED if body.get(name) in (None, "")]
        if missing:
            self._fail(400, "ValidationException", f"1 validation error detected: Value null at '{missing[0]}' "
                                                   "failed to satisfy constraint: Member must not be null")
            return
        job_id = secrets.token_hex(6)
        arn = f"arn:aws:bedrock:{self.fake.region}:{ACCOUNT}:model-invocation-job/{job_id}"
        now = time.time()
        job = {"jobArn": arn, "jobName": body["jobName"], "modelId": body["modelId"],
               "roleArn": body["roleArn"], "status": "Submitted", "submitTime": _iso(now),
               "lastModifiedTime": _iso(now), "inputDataConfig": body["inputDataConfig"],
               "outputDataConfig": body["outputDataConfig"],
               "timeoutDurationInHours": body.get("timeoutDurationInHours", 24),
               "jobExpirationTime": _iso(now + 3600 * body.get("timeoutDurationInHours", 24))}
        if isinstance(body.get("clientRequestToken"), str):
            job["clientRequestToken"] = body["clientRequestToken"]
        self.fake.jobs.add(job_id, job)
        self.send_json(200, {"jobArn": arn})

    def _fail(self, status: int, error_type: str, message: str) -> None:
        self.send_json(status, {"message": message}, {"x-amzn-ErrorType": f"{error_type}:http://internal.amazon.com/"
                                                      "coral/com.amazon.bedrock/"})


class FakeBedrockBatch(FakeServer):
    """Bedrock's control plane for model invocation jobs on loopback; SigV4 checked
    against the given credentials (service ``bedrock``)."""

    handler = _BedrockHandler
    stats: ScriptedStats

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, access_key: str = "AKIDFAKEBEDROCKBATCH",
                 secret_key: str = "fake-bedrock-batch-secret", session_token: str | None = None,
                 region: str = "us-east-1") -> None:
        self.access_key, self.secret_key, self.session_token = access_key, secret_key, session_token
        self.region = region
        self.jobs = _Jobs()
        super().__init__(host=host, port=port, stats=ScriptedStats())

    @staticmethod
    def job_id(identifier: str) -> str | None:
        """The job id in an identifier (the job's ARN or the id itself)."""
        match = re.fullmatch(r"(?:arn:aws:bedrock:[^:]+:\d{12}:model-invocation-job/)?([a-z0-9]{12})", identifier)
        return match[1] if match else None

    def set_status(self, job: str, status: str, message: str | None = None) -> dict[str, Any]:
        """Move a job (its id or ARN) to ``status``; a final status stamps ``endTime``."""
        if status not in BEDROCK_STATUSES:
            raise ValueError(f"status must be one of {BEDROCK_STATUSES}, got {status!r}")
        job_id = self.job_id(job) or job
        now = _iso(time.time())
        fields: dict[str, Any] = {"status": status, "lastModifiedTime": now}
        if status in BEDROCK_TERMINAL:
            fields["endTime"] = now
        if message is not None:
            fields["message"] = message
        return self.jobs.change(job_id, **fields)


# ----------------------------------------------------------------------------- SageMaker

_SAGEMAKER_REQUIRED = ("TransformJobName", "ModelName", "TransformInput", "TransformOutput", "TransformResources")
_SAGEMAKER_OPERATIONS = ("CreateTransformJob", "DescribeTransformJob", "StopTransformJob")


class _SageMakerHandler(_JobHandler):
    server_version = "FakeSageMakerBatch/1.0"
    fake: FakeSageMakerBatch

    def serve(self) -> None:
        received = self._received()
        if received is None:
            return
        path, query, headers, raw, body = received
        if not self._signed(path, query, headers, raw, "sagemaker"):
            return
        target = headers.get("x-amz-target", "")
        operation = target.removeprefix("SageMaker.") if path == "/" else path.strip("/")
        if self.command != "POST" or operation not in _SAGEMAKER_OPERATIONS:
            self._fail(400, "UnknownOperationException", f"Unknown operation {operation or path}")
            return
        if not isinstance(body, dict):
            self._fail(400, "SerializationException", "The request body must be a JSON object.")
            return
        if operation == "CreateTransformJob":
            self._create(body)
            return
        name = body.get("TransformJobName")
        job = self.fake.jobs.get(name.lower()) if isinstance(name, str) else None
        if job is None:
            self._fail(400, "ValidationException", f"Could not find requested job with name {name}")
        elif operation == "DescribeTransformJob":
            self.send_json(200, job)
        elif job["TransformJobStatus"] != "InProgress":
            self._fail(400, "ValidationException",
                       f"The transform job {name} is not in progress, it is {job['TransformJobStatus']}")
        else:
            self.fake.set_status(job["TransformJobName"], "Stopping")
            self.send_json(200, {})

    def _create(self, body: dict[str, Any]) -> None:
        missing = [name for name in _SAGEMAKER_REQUIRED if body.get(name) in (None, "")]
        if missing:
            self._fail(400, "ValidationException", f"1 validation error detected: Value null at '{missing[0]}' "
                                                   "failed to satisfy constraint: Member must not be null")
            return
        name = body["TransformJobName"]
        arn = f"arn:aws:sagemaker:{self.fake.region}:{ACCOUNT}:transform-job/{str(name).lower()}"
        if self.fake.jobs.get(str(name).lower()) is not None:  # names are case-insensitive
            self._fail(400, "ResourceInUse", "Job name must be unique within an AWS account and region, and a job "
                                             f"with this name already exists ({arn})")
            return
        job = {"TransformJobName": name, "TransformJobArn": arn, "TransformJobStatus": "InProgress",
               "ModelName": body["ModelName"], "TransformInput": body["TransformInput"],
               "TransformOutput": body["TransformOutput"], "TransformResources": body["TransformResources"],
               "CreationTime": time.time()}
        for optional in ("BatchStrategy", "DataProcessing", "Environment", "MaxPayloadInMB",
                         "MaxConcurrentTransforms"):
            if optional in body:
                job[optional] = body[optional]
        self.fake.jobs.add(str(name).lower(), job)
        self.send_json(200, {"TransformJobArn": arn})

    def _fail(self, status: int, error_type: str, message: str) -> None:
        self.send_json(status, {"__type": error_type, "message": message}, {"x-amzn-ErrorType": error_type})


class FakeSageMakerBatch(FakeServer):
    """SageMaker's control plane for batch transform jobs on loopback; SigV4 checked
    against the given credentials (service ``sagemaker``)."""

    handler = _SageMakerHandler
    stats: ScriptedStats

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, access_key: str = "AKIDFAKESAGEMAKERBATCH",
                 secret_key: str = "fake-sagemaker-batch-secret", session_token: str | None = None,
                 region: str = "us-east-1") -> None:
        self.access_key, self.secret_key, self.session_token = access_key, secret_key, session_token
        self.region = region
        self.jobs = _Jobs()
        super().__init__(host=host, port=port, stats=ScriptedStats())

    def set_status(self, name: str, status: str, failure_reason: str | None = None) -> dict[str, Any]:
        """Move the job named ``name`` (in any case, as SageMaker's names) to ``status``; a
        final status stamps its end time."""
        if status not in SAGEMAKER_STATUSES:
            raise ValueError(f"status must be one of {SAGEMAKER_STATUSES}, got {status!r}")
        fields: dict[str, Any] = {"TransformJobStatus": status}
        if status in ("Completed", "Failed", "Stopped"):
            fields["TransformEndTime"] = time.time()
        if failure_reason is not None:
            fields["FailureReason"] = failure_reason
        return self.jobs.change(name.lower(), **fields)
