"""The fields of a model a register or update request sets, checked and turned into what is
stored. Pure: no I/O; the registry applies them (and the fields that name other records:
connectors, model groups) inside its transaction.

Each field is one entry in a table, ``name -> rule``: a rule takes the request's value and
returns the value to store, or raises ``BadRequest`` naming the field. Register and the
update route (``PUT /_plugins/_ml/models/<id>``) read the same tables, so a field is
accepted, checked and stored the same way by both.

``MODEL_FIELDS`` holds ml-commons' own (``MLRegisterModelInput`` / ``MLUpdateModelInput``).
``EXTENSION_FIELDS`` holds mlstream's additions; a new one is one line here, for example::

    EXTENSION_FIELDS["routing"] = lambda value: parse_routing(value).to_doc()

(``routing`` is one) and is then taken by register and update, stored in the model document
and answered by GET. What reads it on the predict path (``registry.ResolvedModel``) is the feature's own.
A field whose rule depends on the rest of the model is completed by the registry once it
knows the model's connector (``pricing``: ``model_pricing``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import BadRequest
from .interfaces import parse_interface
from ..guard.guardrails import parse as parse_guardrails
from ..processing import is_embedding_function
from ..usage.limits import parse_rate_limiter
from .routing import parse_routing
from ..usage.records import parse_pricing
from ..caching import parse_cache

FieldRule = Callable[[Any], Any]

# MLDeploySetting: model_ttl_minutes defaults to -1, "never expires".
DEPLOY_SETTING = "deploy_setting"
AUTO_DEPLOY_ENABLED = "is_auto_deploy_enabled"
TTL_MINUTES = "model_ttl_minutes"
NO_TTL = -1


def text(name: str) -> FieldRule:
    def rule(value: Any) -> str:
        if not isinstance(value, str):
            raise BadRequest(f"[{name}] must be a string")
        return value
    return rule


def flag(name: str) -> FieldRule:
    def rule(value: Any) -> bool:
        if not isinstance(value, bool):
            raise BadRequest(f"[{name}] must be true or false")
        return value
    return rule


def json_object(name: str) -> FieldRule:
    def rule(value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise BadRequest(f"[{name}] must be a JSON object")
        return value
    return rule


def guardrails(value: Any) -> dict[str, Any]:
    """Checked and compiled as the predictor runs them (``guardrails.parse``), stored in
    ml-commons' form; an empty one is stored as given (it guards nothing)."""
    parsed = parse_guardrails(value)
    return parsed.to_doc() if parsed is not None else value


def rate_limiter(value: Any) -> dict[str, Any]:
    limit = parse_rate_limiter(value)
    assert limit is not None  # None values never reach a rule
    return {"limit": limit.limit_text, "unit": limit.unit}


def deploy_setting(value: Any) -> dict[str, Any]:
    """``MLDeploySetting.parse``: ``is_auto_deploy_enabled`` (absent: auto-deploy as the
    cluster setting says) and ``model_ttl_minutes`` (a deployed model idle that long is
    undeployed; negative, the default, never)."""
    if not isinstance(value, dict):
        raise BadRequest(f"[{DEPLOY_SETTING}] must be a JSON object")
    unknown = sorted(set(value) - {AUTO_DEPLOY_ENABLED, TTL_MINUTES})
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in [{DEPLOY_SETTING}]: it takes "
                         f"[{AUTO_DEPLOY_ENABLED}] and [{TTL_MINUTES}]")
    stored: dict[str, Any] = {}
    enabled = value.get(AUTO_DEPLOY_ENABLED)
    if enabled is not None:
        stored[AUTO_DEPLOY_ENABLED] = flag(f"{DEPLOY_SETTING}.{AUTO_DEPLOY_ENABLED}")(enabled)
    stored[TTL_MINUTES] = _whole_number(value.get(TTL_MINUTES, NO_TTL), f"{DEPLOY_SETTING}.{TTL_MINUTES}")
    return stored


def _whole_number(value: Any, name: str) -> int:
    """A Java long as XContentParser.longValue() reads it: a whole number, or its text."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise BadRequest(f"[{name}] must be a whole number of minutes") from None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not -2**63 <= value < 2**63:
        raise BadRequest(f"[{name}] must be a whole number of minutes")
    return value


def interface(value: Any) -> dict[str, str]:
    parsed = parse_interface(value)
    assert parsed is not None
    return parsed


def model_config(value: Any) -> dict[str, Any]:
    """``BaseModelConfig``, kept as given; a remote ``text_embedding`` model's needs
    ``embedding_dimension``, ``framework_type`` and ``additional_config.space_type``
    (UpdateModelTransportAction.validateModelConfig) — checked against the stored one on update."""
    if not isinstance(value, dict):
        raise BadRequest("[model_config] must be a JSON object")
    return value


def check_model_config(new: dict[str, Any], old: dict[str, Any] | None) -> None:
    """``UpdateModelTransportAction.validateModelConfig`` for a remote model: only a
    ``text_embedding`` one is checked, each need met by the new config or the stored one."""
    if str(new.get("model_type", "")).lower() != "text_embedding":
        return
    old = old or {}
    suffix = " must be provided for remote text embedding model"
    if new.get("embedding_dimension") is None and old.get("embedding_dimension") is None:
        raise BadRequest("Embedding dimension" + suffix)
    if new.get("framework_type") is None and old.get("framework_type") is None:
        raise BadRequest("Framework type" + suffix)
    if "space_type" not in (new.get("additional_config") or {}) and "space_type" not in (old.get("additional_config")
                                                                                        or {}):
        raise BadRequest("Space type must be provided in additional_config for remote text embedding model")


def pricing(value: Any) -> dict[str, float]:
    """``pricing`` checked (``usage.parse_pricing``) as given: a missing ``output_per_1m``
    stays missing until ``model_pricing`` knows whether the model is an embedding model."""
    doc = parse_pricing(value, embedding=True).to_doc()
    if value.get("output_per_1m") is None:
        del doc["output_per_1m"]
    return doc


def is_embedding_model(doc: Mapping[str, Any], connector: Mapping[str, Any] | None) -> bool:
    """Whether a model (its stored document, and its connector's) answers embeddings, so
    that its calls have no output tokens: ml-commons' model kind (``model_config.model_type``
    ``text_embedding``), or its connector's predict action, as mlstream calls it: one of
    ml-commons' built-in embedding pre- or post-process functions, or an OpenAI embeddings
    URL (``.../embeddings``, which ``/v1/embeddings`` relays as it is)."""
    config = doc.get("model_config")
    if isinstance(config, dict) and str(config.get("model_type", "")).lower() == "text_embedding":
        return True
    for action in (connector or {}).get("actions") or ():
        if isinstance(action, dict) and str(action.get("action_type", "")).lower() == "predict":
            url = str(action.get("url", "")).split("?", 1)[0].rstrip("/")
            return url.endswith("/embeddings") or any(
                is_embedding_function(action.get(name)) for name in ("pre_process_function", "post_process_function"))
    return False


def model_pricing(doc: Mapping[str, Any], connector: Mapping[str, Any] | None) -> dict[str, float] | None:
    """The ``pricing`` to store for a model (its document with the fields given, and its
    connector's; None for a router): an embedding model's missing output price is 0, any
    other model's is the same 400 as a missing input price."""
    given = doc.get("pricing")
    if given is None:
        return None
    return parse_pricing(given, embedding=is_embedding_model(doc, connector)).to_doc()


# ml-commons' fields that are values of the model itself. The ones naming other records
# (connector_id, connector, model_group_id) are the registry's.
MODEL_FIELDS: dict[str, FieldRule] = {
    "name": text("name"),
    "description": text("description"),
    "is_enabled": flag("is_enabled"),
    "rate_limiter": rate_limiter,
    DEPLOY_SETTING: deploy_setting,
    "interface": interface,
    "guardrails": guardrails,
    "model_config": model_config,
}

# mlstream's own model fields (see the module docstring): name -> rule.
EXTENSION_FIELDS: dict[str, FieldRule] = {
    "pricing": pricing,  # prices per million tokens (usage.Pricing), completed by model_pricing
    "routing": lambda value: parse_routing(value).to_doc(),  # a router model's targets (routing.Routing)
    "cache": lambda value: parse_cache(value).to_doc(),  # its response cache (caching.CacheConfig)
}


def checked_fields(body: dict[str, Any], names: frozenset[str] | set[str]) -> dict[str, Any]:
    """The stored value of each field of ``body`` among ``names`` that has a rule; a null
    value is left out (as ml-commons' parsers leave a null field unset)."""
    rules = {**MODEL_FIELDS, **EXTENSION_FIELDS}
    return {name: rules[name](body[name]) for name in body
            if name in names and name in rules and body[name] is not None}


def ttl_minutes(doc: dict[str, Any]) -> int:
    """A stored model's TTL: negative (no TTL) unless its deploy_setting gives one."""
    setting = doc.get(DEPLOY_SETTING)
    value = setting.get(TTL_MINUTES, NO_TTL) if isinstance(setting, dict) else NO_TTL
    return value if isinstance(value, int) else NO_TTL


def check_embedding_model(doc: Mapping[str, Any], model_id: str | None, find: Callable[[str], Any]) -> None:
    """A semantic cache's ``embedding_model`` is another registered model with a connector
    (``find``: a model's stored record by id, or None)."""
    cache = doc.get("cache") or {}
    embedding = cache.get("embedding_model") if cache.get("mode") == "semantic" else None
    if embedding is None:
        return
    found = find(embedding)
    if found is None or "routing" in found.doc or embedding == model_id:
        raise BadRequest(f"[cache.embedding_model] [{embedding}] is not a registered embedding model: give "
                         "the id of a model with a connector that answers embeddings")


def config_version(doc: Mapping[str, Any], connector: Mapping[str, Any] | None) -> str:
    """What changes whenever a model or its connector does (their last update times): the
    version in a response cache key, so an edited model never answers from its old entries."""
    return f"{doc.get('last_updated_time', '')}/{(connector or {}).get('last_updated_time', '')}"


def auto_deploy_allowed(doc: dict[str, Any]) -> bool:
    """``MLPredictTaskRunner.checkModelAutoDeployEnabled``: true unless the model's
    deploy_setting says false."""
    setting = doc.get(DEPLOY_SETTING)
    return not (isinstance(setting, dict) and setting.get(AUTO_DEPLOY_ENABLED) is False)
