"""The Responses front: ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/<id>``
over the same registry, keys, pool and streaming core as every other route.

    body -> chat request (``wire``): the stored conversation of ``previous_response_id``,
            this request's input, its instructions and settings
         -> ``fronts.chat``: bound to the model's provider API (the OpenAI front's
            translations), prepared and sent by the predictor as on every front
         -> the answer as a ``response`` (non-stream) or as Responses events (``events``)

``store`` (default true, as OpenAI) keeps the finished response, and the conversation it
ends, for ``responses_ttl_days``: ``previous_response_id`` continues it, ``GET`` returns it,
``DELETE`` removes it. Keeping is best effort and off the answer's path (``keeper``): a
store that fails is logged, and the answer still goes out.
"""

from __future__ import annotations

import time
from typing import Any

from ...access.policy import may_see_owned, owner_of, stored_owner
from ...errors import InvalidField, NotFound
from ...inference.predict import Bound, Predictor
from ...models.registry import Registry, ResolvedModel
from ...server.routing import Reply, Request, Router, StreamReply
from ..chat import chat_cache_use, chat_call, read_completion
from ..models import ModelFinder
from ..openai.wire import object_body
from . import wire
from .errors import RESPONSES_FRONT
from .events import ResponseEvents, new_item_id
from .keeper import ResponseKeeper

PREFIX = "/v1/responses"
SECONDS_PER_DAY = 86400


def add_responses_routes(router: Router, registry: Registry, predictor: Predictor, keeper: ResponseKeeper,
                         ttl_days: float) -> None:
    router.claim_prefix(PREFIX, RESPONSES_FRONT)
    models = ModelFinder(registry)

    def stored(req: Request, response_id: str) -> dict[str, Any] | None:
        """A kept response the caller may see (its own; its tenant's for a tenant_admin); another's is
        answered as one that does not exist."""
        found = keeper.get(response_id)
        return found if found is not None and may_see_owned(req.caller, stored_owner(found)) else None

    def create(req: Request) -> Reply | StreamReply:
        body = object_body(req.body)
        reference = wire.model_reference(body)
        wire.check_request(body)
        stream = wire.flag(body, "stream", False)
        keep_it = wire.flag(body, "store", True)
        earlier: list[dict[str, Any]] = []
        previous = wire.previous_id(body)
        if previous is not None:
            found = stored(req, previous)
            if found is None:
                raise InvalidField(f"Previous response with id '{previous}' not found.", param="previous_response_id")
            earlier = found.get("conversation") or []
        conversation = earlier + wire.input_messages(body)
        model = models.find_for(req, reference)
        chat = wire.chat_request(body, conversation)

        def bind(target: ResolvedModel) -> Bound:
            return chat_call(target, chat, stream=stream, api="Responses", exchange=predictor.exchange)

        response_id, created_at = new_item_id("resp"), int(time.time())
        # Keyed on the conversation as the model gets it (earlier turns resolved), not the id naming them.
        cache = chat_cache_use("openai/v1/responses", chat)

        def keep(response: dict[str, Any]) -> None:
            if not keep_it:
                return
            doc = {"response": response,
                   "conversation": conversation + wire.items_to_messages(response["output"], "output"),
                   **owner_of(req.caller).to_doc()}
            keeper.keep(response_id, doc, time.time() + ttl_days * SECONDS_PER_DAY)

        if stream:
            events = ResponseEvents(body, response_id=response_id, created_at=created_at, model=reference, keep=keep)
            return StreamReply(predictor.stream(model, bind, req.meter, cache), events)
        answer = read_completion(predictor.call(model, bind, req.meter, cache))
        status, incomplete = wire.status_of(answer.finish_reason)
        response = wire.response(body, response_id=response_id, created_at=created_at, model=reference,
                                 status=status, output=wire.output_items(answer, new_item_id),
                                 usage_counts=wire.usage(answer.usage), incomplete=incomplete)
        keep(response)
        return Reply(200, response)

    def get(req: Request) -> Reply:
        response_id = req.params["response_id"]
        found = stored(req, response_id)
        if found is None:
            raise NotFound(f"Response with id '{response_id}' not found.")
        return Reply(200, found["response"])

    def delete(req: Request) -> Reply:
        response_id = req.params["response_id"]
        if stored(req, response_id) is None or not keeper.delete(response_id):
            raise NotFound(f"Response with id '{response_id}' not found.")
        return Reply(200, {"id": response_id, "object": "response", "deleted": True})

    router.add("POST", PREFIX, create, "user", RESPONSES_FRONT)
    router.add("GET", PREFIX + "/{response_id}", get, "user", RESPONSES_FRONT)
    router.add("DELETE", PREFIX + "/{response_id}", delete, "user", RESPONSES_FRONT)
