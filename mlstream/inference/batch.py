"""Batch predict: ml-commons' offline batch inference through a connector's batch actions.

    POST .../models/<id>/_batch_predict   the connector's ``batch_predict`` action starts a
                                          job at the provider; its answer is stored as the
                                          ``remote_job`` of a BATCH_PREDICTION task (RUNNING)
    GET  .../tasks/<id>                   ``batch_predict_status`` asked, its answer merged
                                          into ``remote_job``, the task's state read from
                                          the provider's status (ml-commons' regexes)
    POST .../tasks/<id>/_cancel           ``cancel_batch_predict`` (``_cancel_batch``: the
                                          route's first name, in ml-commons 2.17)
    the poller (a thread)                 every POLL_INTERVAL, the same status call for
                                          each RUNNING or CANCELLING batch task

As ml-commons (MLPredictTaskRunner, GetTaskTransportAction, CancelBatchJobTransportAction,
ConnectorUtils.createConnectorAction, MLBatchTaskUpdateProcessor): the status and cancel
calls take the ``remote_job``'s string fields as parameters (SageMaker's
``TransformJobName`` from its ``TransformJobArn``); a connector without a status or cancel
action gets the one ml-commons derives from its ``batch_predict`` URL (SageMaker's
``DescribeTransformJob``/``StopTransformJob``, OpenAI's and Cohere's ``/{id}`` and
``/{id}/cancel``, Bedrock's ``/{processedJobArn}`` and ``/stop``). The provider is named
by its name in the URL as ml-commons finds it, or (beyond ml-commons, for proxies and
compatible hosts) by the URL's shape. A client's request that fails changes no task; the
poller's failures count in ``remote_job.num_of_retries``, and past MAX_POLL_RETRIES the
task is UNREACHABLE.

Tasks live in the store, so they survive a restart; the poller starts with the server
when a batch task is still running, or with the first batch job.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from typing import Any, Mapping

from ..access.policy import Owner
from ..store.cluster import ClusterSettings
from ..models.connectors import Action, Connector, action_url_with_connector_parameters
from ..errors import BadRequest, MLStreamError, NotFound, Overloaded, UpstreamError
from .predict import CallMeter, Predictor
from ..models.registry import NODE_ID, Registry, ResolvedModel, now_ms
from ..settings.server import ML

log = logging.getLogger(__name__)

BATCH_PREDICTION = "BATCH_PREDICTION"
# MLBatchTaskUpdateProcessor: the tasks its job polls; MLTaskManager.checkMaxBatchJobTask:
# the ones that count against max_batch_inference_tasks.
POLLED_STATES = ("RUNNING", "CANCELLING")
ACTIVE_STATES = ("CREATED", "RUNNING")
# ml-commons' BATCH_TASK_UPDATE job runs once a minute and reads 100 tasks a run.
POLL_INTERVAL = 60.0
POLL_BATCH = 100
# GetTaskTransportAction: a status call the poller could not make this many times over
# marks the task UNREACHABLE.
MAX_POLL_RETRIES = 10
# How long close() waits for a poll round under way (each call is bounded by its
# connector's timeouts; the thread is a daemon and stops at its next check).
CLOSE_WAIT_SECONDS = 5.0

ENABLED = ML + "offline_batch_inference_enabled"
MAX_TASKS = ML + "max_batch_inference_tasks"
STATUS_FIELDS = ML + "remote_job.status_field"
# The order ml-commons tries them in (GetTaskTransportAction.updateTaskState).
STATE_REGEXES = (("CANCELLING", "cancelling"), ("CANCELLED", "cancelled"), ("COMPLETED", "completed"),
                 ("EXPIRED", "expired"), ("FAILED", "failed"))

DISABLED = ("Offline Batch Inference is currently disabled. To enable it, update the setting "
            "\"plugins.ml_commons.offline_batch_inference_enabled\" to true.")


# ------------------------------------------------------------------------- pure parts


def parse_batch_input(body: Any) -> tuple[dict[str, Any], dict[str, str] | None]:
    """A ``_batch_predict`` body: its ``parameters`` and ``dlq``. As ml-commons'
    RemoteInferenceMLInput, other fields are ignored (``action_type`` among them)."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object with [parameters]")
    parameters = body.get("parameters")
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise BadRequest("[parameters] must be a JSON object")
    dlq = body.get("dlq")
    if dlq is not None:
        if not isinstance(dlq, dict):
            raise BadRequest("[dlq] must be a JSON object with [bucket] and [region]")
        if dlq.get("bucket") is None or dlq.get("region") is None:
            raise BadRequest("DLQ bucketName or region cannot be null")
        dlq = {str(key): value if isinstance(value, str) else str(value) for key, value in dlq.items()}
    return parameters, dlq


def job_parameters(remote_job: Mapping[str, Any]) -> dict[str, str]:
    """The parameters of a status or cancel call: the job's string fields, and SageMaker's
    ``TransformJobName`` from its ``TransformJobArn`` when the job has no name."""
    parameters = {key: value for key, value in remote_job.items() if isinstance(value, str)}
    arn = parameters.get("TransformJobArn")
    if "TransformJobName" not in parameters and arn is not None:
        parameters["TransformJobName"] = arn[arn.rfind("/") + 1:]
    return parameters


def provider_of(url: str) -> str | None:
    """The batch API a ``batch_predict`` URL calls: ml-commons' rule first (the first of
    sagemaker, openai, bedrock, cohere named in the URL), then the URL's shape."""
    for name in ("sagemaker", "openai", "bedrock", "cohere"):
        if name in url:
            return name
    if "CreateTransformJob" in url:
        return "sagemaker"
    if re.search(r"/model-invocation-job/?$", url):
        return "bedrock"
    if re.search(r"/v1/batches/?$", url):
        return "openai"
    return None


def derived_action(connector: Connector, action_type: str) -> Action:
    """``ConnectorUtils.createConnectorAction``: the status or cancel action ml-commons
    makes from the connector's ``batch_predict`` action when the connector has none."""
    batch = connector.action("batch_predict")
    cancel = action_type == "cancel_batch_predict"
    provider = provider_of(action_url_with_connector_parameters(connector, batch))
    url, method, body = batch.url, "POST", None
    if provider == "sagemaker":
        url = url.replace("CreateTransformJob", "StopTransformJob" if cancel else "DescribeTransformJob")
        body = '{ "TransformJobName" : "${parameters.TransformJobName}"}'
    elif provider in ("openai", "cohere"):
        url, method = url.rstrip("/") + ("/${parameters.id}/cancel" if cancel else "/${parameters.id}"), \
            "POST" if cancel else "GET"
    elif provider == "bedrock":
        url, method = url.rstrip("/") + ("/${parameters.processedJobArn}/stop" if cancel
                                         else "/${parameters.processedJobArn}"), "POST" if cancel else "GET"
    else:
        raise BadRequest("Please configure the action type to cancel the batch job in the connector" if cancel
                         else "Please configure the action type to get the batch job details in the connector")
    return Action(action_type=action_type, method=method, url=url, headers=batch.headers, request_body=body)


def action_for(connector: Connector, action_type: str) -> Action:
    """The connector's own action of this type, else the derived one."""
    own = next((a for a in connector.actions if a.action_type == action_type), None)
    return own if own is not None else derived_action(connector, action_type)


@functools.lru_cache(maxsize=64)
def _pattern(regex: str) -> re.Pattern[str]:
    return re.compile(regex, re.IGNORECASE)


def task_state(remote_job: Mapping[str, Any], status_fields: list[str],
               regexes: Mapping[str, str]) -> str | None:
    """The task state the provider's status gives, or None to keep the task's own:
    each status field the job has, in order (a later one wins), against ml-commons'
    regexes (case-insensitive, found anywhere in the value) in their order."""
    state = None
    for field in status_fields:
        if field not in remote_job:
            continue
        value = "null" if remote_job[field] is None else str(remote_job[field])
        for name, key in STATE_REGEXES:
            if _pattern(regexes[key]).search(value):
                state = name
                break
    return state


# --------------------------------------------------------------------------- the jobs


class BatchJobs:
    """Batch tasks: submit, refresh on GET, cancel, and the poller thread."""

    def __init__(self, registry: Registry, predictor: Predictor, cluster: ClusterSettings, *,
                 poll_interval: float = POLL_INTERVAL) -> None:
        self._registry = registry
        self._predictor = predictor
        self._cluster = cluster
        self._interval = poll_interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        # Guards the thread handle and the round counters; nothing blocks under it
        # (poll_now waits on it, which releases it).
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._rounds_begun = 0
        self._rounds_ended = 0

    # --- requests

    def submit(self, model: ResolvedModel, body: Any, request_id: str = "", owner: Owner = Owner(),
               meter: CallMeter | None = None) -> dict[str, Any]:
        """``_batch_predict``: the job started at the provider, its task stored with its owner."""
        self._check_enabled()
        parameters, dlq = parse_batch_input(body)
        active = sum(1 for _, doc in self._batch_tasks() if doc.get("state") in ACTIVE_STATES)
        if active >= int(self._cluster.value(MAX_TASKS)):
            raise Overloaded("Exceeded maximum limit for BATCH_PREDICTION tasks. To increase the limit, update "
                             "the plugins.ml_commons.max_batch_inference_tasks setting.", retry_after_seconds=60)
        answer = self._predictor.call_action(model, model.connector.action("batch_predict"), parameters,
                                             request_id=request_id, rate_limited=True, meter=meter)
        data = answer.output[0].get("dataAsMap") if answer.output else None
        if not isinstance(data, dict) or not 200 <= answer.status < 300:
            raise NotFound("Unable to create batch transform job")
        remote_job = {**data, "dlq": dlq}
        stamp = now_ms()
        task_id = self._registry.create_task({
            "model_id": model.model_id, "task_type": BATCH_PREDICTION, "function_name": "REMOTE",
            "state": "RUNNING", "input_type": "REMOTE", "worker_node": [NODE_ID], "create_time": stamp,
            "last_update_time": stamp, "is_async": False, "remote_job": remote_job, **owner.to_doc()})
        self._ensure_started()
        return {"task_id": task_id, "status": "CREATED", "remote_job": remote_job}

    def task(self, task_id: str) -> dict[str, Any]:
        """``GET .../tasks/<id>``: a batch task refreshed from its provider first."""
        doc = self._registry.get_task(task_id)
        if doc.get("task_type") != BATCH_PREDICTION:
            return doc
        self._check_enabled()
        if doc.get("function_name") != "REMOTE":
            return doc
        return self._refresh(task_id, doc, by_client=True) or doc

    def cancel(self, task_id: str) -> dict[str, Any]:
        """``POST .../tasks/<id>/_cancel``: the provider asked to stop the job. The task
        changes when the provider says the job is cancelling (the next status call)."""
        try:
            doc = self._registry.get_task(task_id)
        except NotFound:
            raise NotFound("Fail to find task") from None
        if doc.get("task_type") == BATCH_PREDICTION:
            self._check_enabled()
        if doc.get("task_type") != BATCH_PREDICTION or doc.get("function_name") != "REMOTE":
            raise BadRequest("The task ID you provided does not have any associated batch job")
        model = self._model(doc)
        action = action_for(model.connector, "cancel_batch_predict")
        answer = self._predictor.call_action(model, action, job_parameters(doc.get("remote_job") or {}))
        if answer.status != 200:
            raise UpstreamError("Couldn't cancel the transform job. Please try again",
                                upstream_status=answer.status)
        return {"status": "OK"}

    # --- the poller

    def start(self) -> None:
        """Start polling now if a stored batch task is still running (after a restart)."""
        if any(doc.get("state") in POLLED_STATES for _, doc in self._batch_tasks()):
            self._ensure_started()

    @property
    def polling(self) -> bool:
        """Whether the poller thread is running."""
        with self._cond:
            return self._thread is not None and self._thread.is_alive()

    def poll_now(self, timeout: float = 10.0) -> bool:
        """Wake the poller and wait until a round begun after this call has ended (False
        on timeout). For tests and operators: the poller otherwise runs every POLL_INTERVAL."""
        self._ensure_started()
        with self._cond:
            wanted = self._rounds_begun + 1
        self._wake.set()
        with self._cond:
            return self._cond.wait_for(lambda: self._rounds_ended >= wanted or self._stop.is_set(), timeout)

    def close(self) -> None:
        """Stop the poller: no round begins after this; one under way ends at its next task."""
        self._stop.set()
        self._wake.set()
        with self._cond:
            thread = self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(CLOSE_WAIT_SECONDS)

    def poll_once(self) -> int:
        """One round: each polled batch task (at most POLL_BATCH) refreshed; how many."""
        done = 0
        for task_id, doc in self._batch_tasks():
            if self._stop.is_set() or done >= POLL_BATCH:
                break
            if doc.get("state") not in POLLED_STATES or doc.get("function_name") != "REMOTE":
                continue
            done += 1
            try:
                self._refresh(task_id, doc, by_client=False)
            except MLStreamError as error:
                log.info("batch task %s: status not updated: %s", task_id, error.reason)
        return done

    def _ensure_started(self) -> None:
        with self._cond:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="batch-poller", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._cond:
                self._rounds_begun += 1
            try:
                if self._cluster.value(ENABLED):
                    self.poll_once()
            except Exception:  # noqa: BLE001 - the poller outlives any one round's failure
                log.exception("batch poll round failed")
            with self._cond:
                self._rounds_ended += 1
                self._cond.notify_all()

    # --- helpers

    def _refresh(self, task_id: str, doc: dict[str, Any], *, by_client: bool) -> dict[str, Any] | None:
        """Ask the provider for the job's status and store what it says: the task as
        stored then (None if it was deleted meanwhile). A client's failed call changes
        nothing; the poller's counts a retry."""
        remote_job = dict(doc.get("remote_job") or {})
        try:
            model = self._model(doc)
            action = action_for(model.connector, "batch_predict_status")
            answer = self._predictor.call_action(model, action, job_parameters(remote_job))
        except MLStreamError as error:
            if not by_client and not self._stop.is_set():
                self._count_retry(task_id, remote_job, error)
            raise
        status = answer.output[0].get("dataAsMap") if answer.output else None
        if not isinstance(status, dict):
            raise NotFound("Couldn't fetch status of the transform job")
        remote_job.update(status)
        fields: dict[str, Any] = {"remote_job": remote_job}
        state = task_state(remote_job, list(self._cluster.value(STATUS_FIELDS)),
                           {key: self._cluster.value(ML + f"remote_job.status_regex.{key}")
                            for _, key in STATE_REGEXES})
        if state is not None:
            fields["state"] = state
        return self._registry.update_task(task_id, fields)

    def _count_retry(self, task_id: str, remote_job: dict[str, Any], error: MLStreamError) -> None:
        retries = int(remote_job.get("num_of_retries") or 0) + 1
        fields: dict[str, Any] = {"remote_job": {**remote_job, "num_of_retries": retries}}
        if retries > MAX_POLL_RETRIES:
            log.warning("batch task %s: the provider could not be reached %d times: UNREACHABLE",
                        task_id, retries)
            fields.update(state="UNREACHABLE", error=error.reason)
        self._registry.update_task(task_id, fields)

    def _model(self, doc: Mapping[str, Any]) -> ResolvedModel:
        try:
            return self._registry.connector_of(str(doc.get("model_id")))
        except NotFound:
            raise NotFound("Failed to retrieve the ML model for the given task ID") from None

    def _batch_tasks(self) -> list[tuple[str, dict[str, Any]]]:
        return [(task_id, doc) for task_id, doc in self._registry.tasks()
                if doc.get("task_type") == BATCH_PREDICTION]

    def _check_enabled(self) -> None:
        if not self._cluster.value(ENABLED):
            raise BadRequest(DISABLED)


__all__ = ["BATCH_PREDICTION", "BatchJobs", "action_for", "derived_action", "job_parameters", "parse_batch_input",
           "provider_of", "task_state"]
