"""The OpenAI front: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``,
``/v1/models`` over the same registry, keys, pool and streaming core as ml-commons' routes.

    model (id or name) -> ResolvedModel -> its interface (providers.dialect_for), chosen once
      openai/v1/chat/completions, openai/v1/completions, an /embeddings URL
          relayed: the connector's request_body rendered with the client's fields as
          parameters, then each client field but model and stream set on it
          (``wire.overlay``); the answer and the stream's chunks as the provider sent them
      bedrock/converse, anthropic/v1/messages, gemini/v1beta/generatecontent (chat)
          translated (``translations.TRANSLATIONS``): the request's fields in the provider's
          API set on the rendered body, the answer back as chat.completion, or chunks built
          from the provider's normalized stream events (``events``)
      sagemaker/tgi, sagemaker/lmi (chat)
          the containers' own chat completions schema (``messages``, OpenAI's fields) in place
          of the rendered prompt body (``sagemaker``); the answer and its chunks normalized
          the same way
      an embedding blueprint with process functions (Bedrock Titan, Cohere, ...)
          ml-commons' own predict (``text_docs``), its tensors as OpenAI's embeddings

Errors are OpenAI's body (``errors``), chosen by the routes' front.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from ... import processing
from ...errors import BadRequest, InvalidField
from ...inference.predict import Ask, Bound, Predictor, Prepared
from ...providers import StreamKind, dialect_for
from ...providers.openai import OPENAI_CHAT, OPENAI_COMPLETIONS
from ...models.registry import Registry, ResolvedModel, RouterModel
from ...server.routing import Reply, Request, Router, StreamReply
from ..chat import chat_cache_use
from ..models import ModelFinder
from . import wire
from .errors import OPENAI_FRONT
from .events import OpenAIChatEvents
from .translations import TRANSLATIONS

PREFIX = "/v1"
JSON = "application/json"


def add_openai_routes(router: Router, registry: Registry, predictor: Predictor) -> None:
    router.claim_prefix(PREFIX, OPENAI_FRONT)

    def add(method: str, template: str) -> Callable:
        def register(function: Callable) -> Callable:
            router.add(method, PREFIX + template, function, "user", OPENAI_FRONT)
            return function
        return register

    models = ModelFinder(registry)

    @add("POST", "/chat/completions")
    def chat_completions(req: Request) -> Reply | StreamReply:
        return _completions(req, chat=True)

    @add("POST", "/completions")
    def completions(req: Request) -> Reply | StreamReply:
        return _completions(req, chat=False)

    def _completions(req: Request, *, chat: bool) -> Reply | StreamReply:
        body = wire.object_body(req.body)
        reference = wire.model_reference(body)
        stream = wire.stream_flag(body)
        usage = wire.include_usage(body)
        if chat:
            wire.check_messages(body)
        elif not isinstance(body.get("prompt"), (str, list)):
            raise InvalidField("you must provide a prompt", param="prompt")
        model = models.find_for(req, reference)
        question = wire.last_user_text(body) if chat else _prompt_text(body["prompt"])  # for a model guardrail
        # A router's targets may speak different APIs: each one's chunks are read as chat
        # deltas then, never relayed as they are.
        routed = isinstance(model, RouterModel)
        completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        relayed: list[bool] = []  # whether the first model bound relays its chunks (then every one does)

        def bind(target: ResolvedModel) -> Bound:
            dialect = dialect_for(target.connector.parameters, target.connector)
            if dialect is (OPENAI_CHAT if chat else OPENAI_COMPLETIONS):
                fields = wire.client_fields(body)
                if not stream:
                    fields.pop("stream_options", None)  # the provider refuses it without stream
                kind = StreamKind.CHAT if routed and chat else StreamKind.RELAY
                relayed.append(kind is StreamKind.RELAY)
                return Bound(Ask(fields, reshape=lambda rendered: wire.overlay(rendered, fields), question=question),
                             dialect, kind, lambda prepared: predictor.exchange(prepared).decode("utf-8", "replace"))
            translation = TRANSLATIONS.get(dialect) if chat else None
            if translation is None:
                route = "chat completions" if chat else "text completions"
                raise BadRequest(f"model [{target.model_id}] speaks {dialect.name}: the OpenAI front serves {route} "
                                 "for " + ("every LLM interface but openai/v1/completions" if chat
                                           else "openai/v1/completions models"))
            fields = translation.request(body, stream)
            # The template renders with the translated fields as parameters too (ml-commons'
            # Gemini blueprint is {"contents": ${parameters.contents}}), and the last user text
            # as ${parameters.inputs}; then the fields are set on what it rendered.
            parameters = {**fields, "inputs": wire.last_user_text(body)}
            relayed.append(False)

            def run(prepared: Prepared) -> dict[str, Any]:
                return translation.answer(wire.loads_answer(predictor.exchange(prepared)),
                                          completion_id=completion_id, created=created, model=reference)
            return Bound(Ask(parameters, reshape=lambda rendered: translation.body(rendered, fields),
                             question=question), dialect, StreamKind.CHAT, run)

        # Chat completions are cached when the model says so (text completions are not).
        cache = chat_cache_use("openai/v1/chat/completions", body, relayed_chunks=True, model=reference) \
            if chat else None
        if not stream:
            answer = predictor.call(model, bind, req.meter, cache)
            return Reply(200, answer, content_type=JSON) if isinstance(answer, str) else Reply(200, answer)
        pending = predictor.stream(model, bind, req.meter, cache)
        relay = relayed[0] if pending.replay_relays is None else pending.replay_relays
        events = OpenAIChatEvents(completion_id=completion_id, created=created, model=reference, include_usage=usage,
                                  relay=relay)
        return StreamReply(pending, events)

    @add("POST", "/embeddings")
    def embeddings(req: Request) -> Reply:
        body = wire.object_body(req.body)
        reference = wire.model_reference(body)
        texts = wire.check_embedding_input(body)
        encoding = wire.encoding_format(body)
        model = models.find_for(req, reference)

        def bind(target: ResolvedModel) -> Bound:
            url = target.connector.action("predict").url.split("?", 1)[0].rstrip("/")
            if url.endswith("/embeddings"):  # OpenAI or Azure OpenAI: the client's request goes through
                fields = wire.client_fields(body)
                return Bound(Ask({**fields, "input": texts}, reshape=lambda rendered: wire.overlay(rendered, fields)),
                             run=lambda prepared: predictor.exchange(prepared).decode("utf-8", "replace"))
            if body.get("dimensions") is not None:
                raise InvalidField(f"model [{target.model_id}] does not take 'dimensions': its connector is not an "
                                   "OpenAI embeddings one", param="dimensions")

            def run(prepared: Prepared) -> dict[str, Any]:
                vectors = wire.embedding_vectors(predictor.predict(prepared).body)
                if len(vectors) != len(texts):
                    raise BadRequest(f"model [{target.model_id}] answered {len(vectors)} embeddings for {len(texts)} "
                                     "inputs: is it an embedding model?")
                return wire.embeddings_list(vectors, encoding, reference)
            return Bound(Ask({}, processing.TextDocs(tuple(texts))), run=run)

        answer = predictor.call(model, bind, req.meter)
        return Reply(200, answer, content_type=JSON) if isinstance(answer, str) else Reply(200, answer)

    @add("GET", "/models")
    def list_models(req: Request) -> Reply:
        data = [wire.model_entry(model_id, doc) for model_id, doc in models.listed(req.caller)]
        return Reply(200, {"object": "list", "data": sorted(data, key=lambda entry: entry["created"])})

    @add("GET", "/models/{model}")
    def get_model(req: Request) -> Reply:
        # Never deploys: only deployed models are listed. A name may hold spaces, sent as %20.
        return Reply(200, wire.model_entry(*models.deployed(unquote(req.params["model"]), by_id=True,
                                                            caller=req.caller)))


def _prompt_text(prompt: Any) -> str:
    """A completions prompt (a string or a list of them) as one text."""
    return prompt if isinstance(prompt, str) else "\n".join(p for p in prompt if isinstance(p, str))
