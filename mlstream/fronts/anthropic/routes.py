"""The Anthropic front: ``POST /v1/messages`` and ``/v1/messages/count_tokens`` over the
same registry, keys, pool and streaming core as every other route.

    model (id or name) -> ResolvedModel -> its interface, chosen once
      anthropic/v1/messages   relayed: the client's fields (all but model and stream) set on
                              the connector's rendered body, thinking blocks and all; the
                              answer and the stream's events as the provider sent them
      any other chat model    the request as a chat request (``wire.chat_request``), sent with
                              the OpenAI front's translations (``fronts.chat``); the answer
                              as a ``message``, the stream as Anthropic's events (``events``)

The client authenticates with ``x-api-key`` or ``Authorization: Bearer`` (an mlstream key);
``anthropic-version`` and ``anthropic-beta`` are accepted and not forwarded (the connector
sets the provider's). Errors are Anthropic's body (``errors``).
"""

from __future__ import annotations

import uuid

from ...inference.cache import CacheUse
from ...inference.predict import Ask, Bound, Predictor
from ...providers import StreamKind, dialect_for
from ...providers.anthropic import ANTHROPIC_MESSAGES
from ...models.registry import Registry, ResolvedModel
from ...server.routing import Reply, Request, Router, StreamReply
from ..chat import chat_cache_use, chat_call, read_completion
from ..models import ModelFinder
from ..openai.wire import object_body, overlay
from . import wire
from .errors import ANTHROPIC_FRONT
from .events import MessagesEvents

PREFIX = "/v1/messages"
JSON = "application/json"


def add_anthropic_routes(router: Router, registry: Registry, predictor: Predictor) -> None:
    router.claim_prefix(PREFIX, ANTHROPIC_FRONT)
    models = ModelFinder(registry)

    def messages(req: Request) -> Reply | StreamReply:
        body = object_body(req.body)
        reference = wire.model_reference(body)
        stream = wire.stream_flag(body)
        wire.check_request(body)
        model = models.find_for(req, reference)
        if isinstance(model, ResolvedModel) and dialect_for(model.connector.parameters,
                                                            model.connector) is ANTHROPIC_MESSAGES:
            fields = wire.relay_fields(body)
            # The template renders with the client's fields as parameters and the last user
            # text as ${parameters.inputs} (as ml-commons' Anthropic blueprints want), then
            # the client's fields are set on what it rendered.
            parameters = {**fields, "inputs": wire.last_user_text(body)}
            # Relayed as the provider answers: a stream's entry is its events, a non-stream
            # one its message, each served only to a request of its own kind.
            relayed = CacheUse(f"anthropic/v1/messages relayed {'stream' if stream else 'message'}", body)
            prepared = predictor.prepare(model, Ask(parameters, reshape=lambda rendered: overlay(rendered, fields)),
                                         req.meter, stream=stream, dialect=ANTHROPIC_MESSAGES, cache=relayed)
            if not stream:
                answer = predictor.run_cached(prepared, lambda ready: predictor.exchange(ready).decode("utf-8",
                                                                                                       "replace"))
                return Reply(200, answer, content_type=JSON)
            events = MessagesEvents(message_id="", model=reference, relay=True)
            return StreamReply(predictor.open_stream(prepared, StreamKind.RELAY), events)
        # Any other model, and a router's every target (even an Anthropic one): as a chat.
        chat = wire.chat_request(body)

        def bind(target: ResolvedModel) -> Bound:
            return chat_call(target, chat, stream=stream, api="Anthropic Messages", exchange=predictor.exchange)

        message_id = f"msg_{uuid.uuid4().hex}"
        cache = chat_cache_use("anthropic/v1/messages", body)
        if not stream:
            answer = read_completion(predictor.call(model, bind, req.meter, cache))
            return Reply(200, wire.message(answer, message_id=message_id, model=reference))
        events = MessagesEvents(message_id=message_id, model=reference, relay=False)
        return StreamReply(predictor.stream(model, bind, req.meter, cache), events)

    def count_tokens(req: Request) -> Reply:
        body = object_body(req.body)
        models.find(wire.model_reference(body))  # an unknown model is a 404, as on /v1/messages
        return Reply(200, {"input_tokens": wire.estimate_tokens(body)})

    router.add("POST", PREFIX, messages, "user", ANTHROPIC_FRONT)
    router.add("POST", PREFIX + "/count_tokens", count_tokens, "user", ANTHROPIC_FRONT)
