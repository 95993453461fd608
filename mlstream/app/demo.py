"""``mlstream demo``: the whole product on one machine, no account needed.

Starts the built-in fake OpenAI provider and a real mlstream server on free
loopback ports (state in a temporary directory), registers the seed's connector
and model through the HTTP API, streams one answer to the terminal as it
arrives, embeds two documents with a model on ml-commons' OpenAI embedding
blueprint, then prints curl commands for the running server.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import urllib3

from ..settings.server import ServerSettings
from ..wire.sse import SSEDecoder
from ..testing.fake_openai import FakeOpenAI

log = logging.getLogger(__name__)

QUESTION = "Can you summarize Prince Hamlet of William Shakespeare in around 1000 words?"
DOCUMENTS = ["What is the meaning of life?", "To be, or not to be, that is the question."]
# The fake answers word by word at this pace, so the stream is visible.
DEMO_DELAY_MS = 40


def connector_body(fake: FakeOpenAI) -> dict[str, Any]:
    """The seed's OpenAI connector, verbatim but for the endpoint (the fake)."""
    return {
        "name": "OpenAI Chat Connector",
        "description": "The connector to public OpenAI model service for GPT 3.5",
        "version": 1,
        "protocol": "http",
        "parameters": {"endpoint": fake.url.removeprefix("http://"), "model": "gpt-3.5-turbo"},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": "http://${parameters.endpoint}/v1/chat/completions",
            "headers": {"Authorization": "Bearer ${credential.openAI_key}",
                        "X-Fake-Delay-Ms": str(DEMO_DELAY_MS)},
            "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }",
        }],
    }


def embedding_connector_body(fake: FakeOpenAI) -> dict[str, Any]:
    """ml-commons' OpenAI embedding blueprint, verbatim but for the URL (the fake)."""
    return {
        "name": "OpenAI embedding connector",
        "description": "The connector to OpenAI's embedding model",
        "version": 1,
        "protocol": "http",
        "parameters": {"model": "text-embedding-ada-002"},
        "credential": {"openAI_key": fake.api_key},
        "actions": [{
            "action_type": "predict",
            "method": "POST",
            "url": f"{fake.url}/v1/embeddings",
            "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
            "request_body": "{ \"input\": ${parameters.input}, \"model\": \"${parameters.model}\" }",
            "pre_process_function": "connector.pre_process.openai.embedding",
            "post_process_function": "connector.post_process.openai.embedding",
        }],
    }


def predict_body(stream: bool) -> dict[str, Any]:
    parameters: dict[str, Any] = {"messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": QUESTION},
    ]}
    if stream:
        parameters["_llm_interface"] = "openai/v1/chat/completions"
    return {"parameters": parameters}


def run_demo(*, port: int = 0, once: bool = False) -> int:
    from .compose import Server

    out = sys.stdout
    with tempfile.TemporaryDirectory(prefix="mlstream-demo-") as data_dir, FakeOpenAI() as fake:
        settings = ServerSettings(port=port, data_dir=Path(data_dir), allow_private_endpoints=True,
                                  trusted_endpoints=(r"^http://127\.0\.0\.1:\d+/.*$",), drain_timeout=1.0)
        server = Server(settings).start()
        try:
            http = urllib3.PoolManager()
            connector_id = _call(http, "POST", f"{server.url}/_plugins/_ml/connectors/_create",
                                 connector_body(fake))["connector_id"]
            model_id = _call(http, "POST", f"{server.url}/_plugins/_ml/models/_register?deploy=true", {
                "name": "openai gpt 3.5 turbo", "function_name": "remote",
                "description": "openai model", "connector_id": connector_id})["model_id"]
            out.write(f"mlstream is serving on {server.url} (fake OpenAI provider on {fake.url})\n")
            out.write(f"connector {connector_id}, model {model_id}\n\n> {QUESTION}\n\n")
            out.flush()
            _stream_to(out, http, f"{server.url}/_plugins/_ml/models/{model_id}/_predict/stream")
            embedding_model_id = _embed(out, http, server.url, fake)
            if once:
                return 0
            out.write(_curl_guide(server.url, model_id, embedding_model_id))
            out.write("\nServing until Ctrl-C.\n")
            out.flush()
            stop = threading.Event()
            for signum in (signal.SIGTERM, signal.SIGINT):  # both end cleanly: temp dir removed
                signal.signal(signum, lambda *_: stop.set())
            stop.wait()
            out.write("\n")
            return 0
        finally:
            server.stop(drain_timeout=1.0)


def _embed(out: Any, http: urllib3.PoolManager, url: str, fake: FakeOpenAI) -> str:
    """Register the embedding model, embed DOCUMENTS, print the tensors in short; its id."""
    connector_id = _call(http, "POST", f"{url}/_plugins/_ml/connectors/_create",
                         embedding_connector_body(fake))["connector_id"]
    model_id = _call(http, "POST", f"{url}/_plugins/_ml/models/_register?deploy=true", {
        "name": "openai text-embedding-ada-002", "function_name": "remote",
        "description": "openai embedding model", "connector_id": connector_id})["model_id"]
    answer = _call(http, "POST", f"{url}/_plugins/_ml/_predict/text_embedding/{model_id}",
                   {"text_docs": DOCUMENTS})
    out.write(f"\nembedding model {model_id}: POST /_plugins/_ml/_predict/text_embedding/{model_id} "
              f"{{\"text_docs\": {json.dumps(DOCUMENTS)}}}\n")
    for document, tensor in zip(DOCUMENTS, answer["inference_results"][0]["output"]):
        head = ", ".join(f"{value:.4f}" for value in tensor["data"][:3])
        out.write(f"  {tensor['name']} {tensor['data_type']} shape {tensor['shape']} [{head}, ...]  "
                  f"<- {document!r}\n")
    out.flush()
    return model_id


def _call(http: urllib3.PoolManager, method: str, url: str, body: Any) -> dict[str, Any]:
    response = http.request(method, url, json=body, timeout=30.0, retries=False)
    data = json.loads(response.data)
    if response.status != 200:
        raise RuntimeError(f"{method} {url} failed with {response.status}: {data}")
    return data


def _stream_to(out: Any, http: urllib3.PoolManager, url: str) -> None:
    response = http.request("POST", url, json=predict_body(stream=True), preload_content=False,
                            timeout=urllib3.Timeout(connect=10.0, read=60.0), retries=False)
    if response.status != 200:
        raise RuntimeError(f"streaming failed with {response.status}: {response.read()!r}")
    decoder = SSEDecoder()
    try:
        for data in response.stream(1024, decode_content=True):
            for event in decoder.feed(data):
                message = json.loads(event.data)
                if "error" in message:
                    out.write(f"\n[stream failed: {message['error']}]\n")
                    return
                result = message["inference_results"][0]["output"][0]["dataAsMap"]
                out.write(str(result["content"]))
                out.flush()
                if result["is_last"]:
                    out.write("\n")
                    return
    finally:
        response.release_conn()


def _curl_guide(url: str, model_id: str, embedding_model_id: str) -> str:
    body = json.dumps(predict_body(stream=True), indent=2)
    plain = json.dumps(predict_body(stream=False))
    docs = json.dumps({"text_docs": DOCUMENTS})
    return (
        "\nTry it yourself:\n\n"
        f"curl -N -X POST \"{url}/_plugins/_ml/models/{model_id}/_predict/stream\" "
        f"-H \"Content-Type: application/json\" -d '{body}'\n\n"
        f"curl -X POST \"{url}/_plugins/_ml/models/{model_id}/_predict\" "
        f"-H \"Content-Type: application/json\" -d '{plain}'\n\n"
        f"curl -X POST \"{url}/_plugins/_ml/_predict/text_embedding/{embedding_model_id}\" "
        f"-H \"Content-Type: application/json\" -d '{docs}'\n\n"
        f"curl \"{url}/_plugins/_ml/models/{model_id}\"\n"
        f"curl \"{url}/metrics\"\n")
