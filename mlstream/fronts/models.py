"""How every front finds the model a request names: by id (any registered model,
deployed on first use, as ``_predict`` does), else by a name that exactly one deployed
model has. Shared by the OpenAI, Anthropic and Responses fronts."""

from __future__ import annotations

from typing import Any

from ..errors import ModelNotFound, NotFound
from ..models.registry import AnyModel, Registry
from ..server.routing import Request


class ModelFinder:
    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def deployed(self, reference: str, *, by_id: bool) -> tuple[str, dict[str, Any]]:
        """The one deployed model with this name (or id, when ``by_id``): 404 for none or several."""
        models = self._registry.deployed_models()
        found = [(model_id, doc) for model_id, doc in models if by_id and model_id == reference]
        found = found or [(model_id, doc) for model_id, doc in models if doc.get("name") == reference]
        if len(found) > 1:
            raise ModelNotFound(f"The model name `{reference}` is ambiguous: {len(found)} deployed models have "
                                "it. Use a model id (GET /v1/models lists them).")
        if not found:
            raise ModelNotFound(f"The model `{reference}` does not exist or is not deployed.")
        return found[0]

    def find(self, reference: str) -> AnyModel:
        """A model by id (any registered one, deployed on first use as ml-commons does: the
        cached path), else by name among deployed models, where the name must be unique."""
        try:
            return self._registry.resolve(reference)
        except NotFound:
            return self._registry.resolve(self.deployed(reference, by_id=False)[0])

    def find_for(self, req: Request, reference: str) -> AnyModel:
        """``find``, and the request counted as that model's prediction (as on the
        ml-commons routes) and logged with its id."""
        model = self.find(reference)
        req.mark_model_resolved()
        if req.access is not None:
            req.access.model_id = model.model_id
        return model
