"""How every front finds the model a request names: by id (any registered model,
deployed on first use, as ``_predict`` does), else by a name that exactly one deployed
model has. Shared by the OpenAI, Anthropic and Responses fronts."""

from __future__ import annotations

from typing import Any

from ..errors import AccessDenied, ModelNotFound, NotFound
from ..access.keys import Caller
from ..models.registry import AnyModel, Registry
from ..server.routing import Request


class ModelFinder:
    """Only among the models the caller may use (``access.policy``): one it may not use is
    answered exactly as one that does not exist, so that names cannot be probed."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def listed(self, caller: Caller | None) -> list[tuple[str, dict[str, Any]]]:
        """The deployed models the caller may use: what ``/v1/models`` lists."""
        return self._registry.usable_models(caller, self._registry.deployed_models())

    def deployed(self, reference: str, *, by_id: bool, caller: Caller | None = None) -> tuple[str, dict[str, Any]]:
        """The one deployed model with this name (or id, when ``by_id``) that the caller may
        use: 404 for none or several."""
        models = self.listed(caller)
        found = [(model_id, doc) for model_id, doc in models if by_id and model_id == reference]
        found = found or [(model_id, doc) for model_id, doc in models if doc.get("name") == reference]
        if len(found) > 1:
            raise ModelNotFound(f"The model name `{reference}` is ambiguous: {len(found)} deployed models have "
                                "it. Use a model id (GET /v1/models lists them).")
        if not found:
            raise ModelNotFound(f"The model `{reference}` does not exist or is not deployed.")
        return found[0]

    def find(self, reference: str, caller: Caller | None = None) -> AnyModel:
        """A model by id (any registered one, deployed on first use as ml-commons does: the
        cached path), else by name among deployed models, where the name must be unique."""
        try:
            return self._registry.resolve(reference, caller)
        except AccessDenied:
            raise ModelNotFound(f"The model `{reference}` does not exist or is not deployed.") from None
        except NotFound:
            return self._registry.resolve(self.deployed(reference, by_id=False, caller=caller)[0], caller)

    def find_for(self, req: Request, reference: str) -> AnyModel:
        """``find`` for the request's caller, and the request counted as that model's
        prediction (as on the ml-commons routes) and logged with its id."""
        model = self.find(reference, req.caller)
        req.mark_model_resolved()
        if req.access is not None:
            req.access.model_id = model.model_id
        return model
