"""Connector and action values: validation of user input and request rendering.

A connector says how to reach one remote model service (ml-commons' connector
document). ``parse_connector`` turns a user's JSON into a ``Connector`` or raises
a 400 naming the bad field; ``render_request`` turns a connector's predict action
and the merged parameters into the exact ``UpstreamRequest`` to send.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from . import templating
from .errors import BadRequest

PROTOCOLS = ("http", "aws_sigv4")
ACTION_TYPES = ("predict", "execute", "batch_predict", "batch_predict_status", "cancel_batch_predict")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
BACKOFF_POLICIES = ("constant", "exponential_equal_jitter", "exponential_full_jitter")

# Top-level fields ml-commons connector documents carry; anything else is a typo
# we would rather report than silently ignore.
_CONNECTOR_FIELDS = frozenset({
    "name", "description", "version", "protocol", "parameters", "credential", "actions",
    "client_config", "backend_roles", "add_all_backend_roles", "access_mode", "owner",
    "tenant_id", "connector_state",
})
_ACTION_FIELDS = frozenset({
    "action_type", "method", "url", "headers", "request_body",
    "pre_process_function", "post_process_function",
})


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Per-connector upstream limits; defaults are ml-commons'. Times in seconds."""

    max_connection: int = 30
    connection_timeout: float = 30.0
    # The longest gap between two reads of the upstream answer (not the whole call):
    # a slow but steady token trickle never trips it.
    read_timeout: float = 30.0
    max_retry_times: int = 0
    retry_backoff_millis: int = 200
    retry_timeout_seconds: int = 30
    retry_backoff_policy: str = "constant"

    def to_doc(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Action:
    action_type: str
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    request_body: str | None = None
    pre_process_function: str | None = None
    post_process_function: str | None = None

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"action_type": self.action_type.upper(), "method": self.method,
                               "url": self.url, "headers": dict(self.headers)}
        for name in ("request_body", "pre_process_function", "post_process_function"):
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        return doc


@dataclass(frozen=True, slots=True)
class Connector:
    name: str
    protocol: str
    actions: tuple[Action, ...]
    parameters: Mapping[str, Any] = field(default_factory=dict)
    credential: Mapping[str, str] = field(default_factory=dict)
    client_config: ClientConfig = ClientConfig()
    description: str | None = None
    version: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def action(self, action_type: str = "predict") -> Action:
        for action in self.actions:
            if action.action_type == action_type:
                return action
        raise BadRequest(f"no {action_type} action found in the connector")

    def public_doc(self) -> dict[str, Any]:
        """The connector as clients see it: everything but credential values."""
        doc: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            doc["description"] = self.description
        if self.version is not None:
            doc["version"] = self.version
        doc.update({
            "protocol": self.protocol,
            "parameters": dict(self.parameters),
            "actions": [action.to_doc() for action in self.actions],
            "client_config": self.client_config.to_doc(),
        })
        doc.update(self.extra)
        return doc


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None


def parse_connector(doc: Any, *, where: str = "connector") -> Connector:
    """Validate a connector document from a user; a 400 names the first bad field."""
    if not isinstance(doc, dict):
        raise BadRequest(f"{where} must be a JSON object")
    unknown = sorted(set(doc) - _CONNECTOR_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in {where}")
    name = _string(doc, "name", where, required=True)
    protocol = _string(doc, "protocol", where, required=True).lower()
    if protocol not in PROTOCOLS:
        raise BadRequest(f"[protocol] must be one of {', '.join(PROTOCOLS)}, got [{protocol}]")
    description = _string(doc, "description", where)
    version = doc.get("version")
    if version is not None and not isinstance(version, (str, int, float)):
        raise BadRequest(f"[version] must be a string or a number in {where}")
    parameters = _object(doc, "parameters", where)
    credential = _object(doc, "credential", where)
    for key, value in credential.items():
        if not isinstance(value, str):
            raise BadRequest(f"[credential.{key}] must be a string")
    raw_actions = doc.get("actions")
    if not isinstance(raw_actions, list) or not raw_actions:
        raise BadRequest(f"[actions] must be a non-empty list in {where}")
    actions = tuple(_parse_action(raw, index) for index, raw in enumerate(raw_actions))
    if protocol == "aws_sigv4":
        # Both keys, or neither: then the server's own AWS credentials (aws_credentials).
        if bool(credential.get("access_key")) != bool(credential.get("secret_key")):
            raise BadRequest("[credential.access_key] and [credential.secret_key] go together for protocol "
                             "aws_sigv4; leave both out to use the server's AWS credentials")
        for key in ("region", "service_name"):
            if not parameters.get(key):
                raise BadRequest(f"[parameters.{key}] is required for protocol aws_sigv4")
    for index, action in enumerate(actions):
        _check_credential_placeholders(action, credential, index)
    extra = {key: doc[key] for key in doc if key in _CONNECTOR_FIELDS - {
        "name", "description", "version", "protocol", "parameters", "credential",
        "actions", "client_config"}}
    return Connector(
        name=name, protocol=protocol, actions=actions, parameters=parameters,
        credential=credential, client_config=parse_client_config(doc.get("client_config")),
        description=description, version=version, extra=extra)


def parse_client_config(raw: Any) -> ClientConfig:
    if raw is None:
        return ClientConfig()
    if not isinstance(raw, dict):
        raise BadRequest("[client_config] must be a JSON object")
    defaults = ClientConfig()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in ClientConfig.__slots__:
            raise BadRequest(f"unknown field [client_config.{key}]")
        if key == "retry_backoff_policy":
            if not isinstance(value, str) or value.lower() not in BACKOFF_POLICIES:
                raise BadRequest(f"[client_config.retry_backoff_policy] must be one of {', '.join(BACKOFF_POLICIES)}")
            values[key] = value.lower()
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise BadRequest(f"[client_config.{key}] must be a non-negative number")
        if key in ("connection_timeout", "read_timeout") and value == 0:
            raise BadRequest(f"[client_config.{key}] must be greater than 0")
        if key == "max_connection" and value < 1:
            raise BadRequest("[client_config.max_connection] must be at least 1")
        values[key] = type(getattr(defaults, key))(value)
    return ClientConfig(**values)


def render_request(connector: Connector, parameters: Mapping[str, Any],
                   action_type: str = "predict") -> UpstreamRequest:
    """Fill the action's templates; nothing is sent if a placeholder stays empty."""
    action = connector.action(action_type)
    url = templating.render(action.url, parameters, connector.credential, where="url")
    headers = {name: templating.render(value, parameters, connector.credential,
                                       where=f"header {name}")
               for name, value in action.headers.items()}
    body = None
    if action.request_body is not None:
        body = templating.render_json_body(action.request_body, parameters,
                                           connector.credential).encode("utf-8")
    return UpstreamRequest(method=action.method, url=url, headers=headers, body=body)


def merge_parameters(connector: Connector, request_parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The connector's parameters with the request's on top (the request wins)."""
    merged = dict(connector.parameters)
    merged.update(request_parameters)
    return merged


def action_url_with_connector_parameters(connector: Connector, action: Action) -> str:
    """The action URL as far as the connector alone fills it (for create-time checks).

    Placeholders that only a request could fill are left in place, so such a URL
    matches no trusted-endpoint pattern, as in ml-commons.
    """
    try:
        return templating.render(action.url, connector.parameters, connector.credential, where="url")
    except BadRequest:
        return action.url


def _parse_action(raw: Any, index: int) -> Action:
    where = f"actions[{index}]"
    if not isinstance(raw, dict):
        raise BadRequest(f"[{where}] must be a JSON object")
    unknown = sorted(set(raw) - _ACTION_FIELDS)
    if unknown:
        raise BadRequest(f"unknown field [{', '.join(unknown)}] in {where}")
    action_type = _string(raw, "action_type", where, required=True).lower()
    if action_type not in ACTION_TYPES:
        raise BadRequest(f"[{where}.action_type] must be one of {', '.join(ACTION_TYPES)}")
    method = _string(raw, "method", where, required=True).upper()
    if method not in HTTP_METHODS:
        raise BadRequest(f"[{where}.method] must be one of {', '.join(HTTP_METHODS)}")
    url = _string(raw, "url", where, required=True)
    headers = _object(raw, "headers", where)
    for name, value in headers.items():
        if not isinstance(value, str):
            raise BadRequest(f"[{where}.headers.{name}] must be a string")
    request_body = raw.get("request_body")
    if request_body is not None and not isinstance(request_body, str):
        raise BadRequest(f"[{where}.request_body] must be a string (a JSON template)")
    return Action(
        action_type=action_type, method=method, url=url, headers=headers,
        request_body=request_body,
        pre_process_function=_string(raw, "pre_process_function", where),
        post_process_function=_string(raw, "post_process_function", where))


def _check_credential_placeholders(action: Action, credential: Mapping[str, str], index: int) -> None:
    templates = [action.url, *action.headers.values(), action.request_body or ""]
    missing = sorted({name for template in templates
                      for source, name in templating.placeholders(template)
                      if source == "credential" and name not in credential})
    if missing:
        raise BadRequest(f"[actions[{index}]] uses credential [{', '.join(missing)}] "
                         "that the connector's credential does not define")


def _string(doc: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> Any:
    value = doc.get(key)
    if value is None:
        if required:
            raise BadRequest(f"[{key}] is required in {where}")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadRequest(f"[{key}] must be a non-empty string in {where}")
    return value


def _object(doc: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"[{key}] must be a JSON object in {where}")
    return dict(value)
