"""The resolved-model cache against a concurrent change: a real store of each backend, no sockets."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

from mlstream.access.credentials import AESGCMCodec
from mlstream.settings.endpoints import EndpointPolicy
from mlstream.models.registry import Registry

from ..support.stores import StoreFactory
from ..support.timeouts import HANG_GUARD


class Pausing:
    """In front of a real store: can hold one thread right after its transaction commits."""

    pause_thread: int | None = None
    paused: threading.Event
    resume: threading.Event

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with super().transaction():  # type: ignore[misc]
            yield
        if threading.get_ident() == self.pause_thread:
            self.pause_thread = None
            self.paused.set()
            assert self.resume.wait(HANG_GUARD)


def connector(model: str) -> dict:
    return {
        "name": "chat", "protocol": "http",
        "parameters": {"endpoint": "api.openai.com", "model": model},
        "credential": {"openAI_key": "sk-test-0123456789"},
        "actions": [{"action_type": "predict", "method": "POST",
                     "url": "https://${parameters.endpoint}/v1/chat/completions",
                     "headers": {"Authorization": "Bearer ${credential.openAI_key}"},
                     "request_body": "{ \"model\": \"${parameters.model}\", \"messages\": ${parameters.messages} }"}],
    }


def test_a_model_read_before_a_connector_update_does_not_fill_the_cache_after_it(make_store: StoreFactory) -> None:
    store = make_store(Pausing)
    store.paused, store.resume = threading.Event(), threading.Event()
    registry = Registry(store, AESGCMCodec(os.urandom(32)), lambda: EndpointPolicy((".*",), False))
    connector_id = registry.create_connector(connector("model-v1"))
    model_id = registry.register_model({"name": "m", "connector_id": connector_id}, deploy=True)["model_id"]

    resolved: list = []

    def predict() -> None:
        store.pause_thread = threading.get_ident()
        resolved.append(registry.resolve(model_id))

    reader = threading.Thread(target=predict, daemon=True)
    reader.start()
    assert store.paused.wait(HANG_GUARD)       # it has read model-v1, not yet cached it
    registry.update_connector(connector_id, {"parameters": {"model": "model-v2"}})
    store.resume.set()
    reader.join(HANG_GUARD)
    assert resolved[0].connector.parameters["model"] == "model-v1"  # what it read, fair enough
    assert registry.resolve(model_id).connector.parameters["model"] == "model-v2"
    store.close()
