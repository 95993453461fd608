"""Connector and action values: validation of user input and request rendering.

A connector says how to reach one remote model service (ml-commons' connector
document). ``parse_connector`` turns a user's JSON into a ``Connector`` or raises
a 400 naming the bad field; ``render_request`` turns a connector's predict action
and the merged parameters into the exact ``UpstreamRequest`` to send.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..wire import templating
from ..errors import BadRequest
from ..processing import check_function_name
from .tls import TlsMaterial, tls_material

# An MCP connector reaches an MCP server's tools (``url``, ``headers``), and has no actions.
MCP_PROTOCOLS = ("mcp_streamable_http",)
PROTOCOLS = ("http", "aws_sigv4", *MCP_PROTOCOLS)
ACTION_TYPES = ("predict", "execute", "batch_predict", "batch_predict_status", "cancel_batch_predict")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
BACKOFF_POLICIES = ("constant", "exponential_equal_jitter", "exponential_full_jitter")

# MLCreateConnectorInput.java: validate the connector, store nothing, answer this id.
DRY_RUN = "dry_run"
DRY_RUN_CONNECTOR_ID = "dryRunConnector"
# Top-level fields ml-commons connector documents carry; anything else is a typo
# we would rather report than silently ignore.
_CONNECTOR_FIELDS = frozenset({
    "name", "description", "version", "protocol", "parameters", "credential", "actions",
    "client_config", "backend_roles", "add_all_backend_roles", "access_mode", "owner",
    "tenant_id", "connector_state", "provisioned_by", "url", "headers", DRY_RUN,
})
_ACTION_FIELDS = frozenset({
    "action_type", "name", "method", "url", "headers", "request_body",
    "pre_process_function", "post_process_function", "supports_structured_output",
})
# ConnectorAction.java: a name usable in place of the action type.
_ACTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# HttpConnector.java STRUCTURED_OUTPUT_ALLOWED_FIELDS: the top-level body fields that
# "_<field>_json" / "_<field>_additions_json" parameters may set on an action that
# supports structured output.
STRUCTURED_OUTPUT_FIELDS = ("response_format", "generationConfig", "toolConfig")
# AbstractConnector.java BLOCKED_DYNAMIC_HEADERS: headers a request parameter may not fill
# (credentials and client identity go through ${credential.*} or not at all).
BLOCKED_DYNAMIC_HEADERS = frozenset({
    "authorization", "proxy-authorization", "cookie", "x-api-key", "x-auth-token", "x-auth-header",
    "x-forwarded-for", "x-real-ip", "x-client-ip", "cf-connecting-ip", "true-client-ip",
    "x-originating-ip", "host", "x-forwarded-host", "x-forwarded-server", "forwarded",
})
# ConnectorUtils.java validateSubstitutedHeaders: limits of a filled-in header.
_HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
MAX_HEADER_BYTES = 8192
MAX_HEADERS_BYTES = 65536
# ConnectorUtils.SKIP_VALIDATE_MISSING_PARAMETERS: a parameter (the connector's or the
# request's) that lets the payload keep placeholders nothing filled, as RemoteConnectorExecutor
# skips validatePayload (Boolean.parseBoolean: "true" in any case). Only the payload: the URL
# and headers are checked as ever.
SKIP_VALIDATING_MISSING_PARAMETERS = "skip_validating_missing_parameters"
# ConnectorUtils.java BEDROCK_NOVA_MODEL: the model whose null modality sections are dropped.
BEDROCK_NOVA_MODEL = "amazon.nova-2-multimodal-embeddings-v1:0"


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
    # TLS to the provider (models/tls.py): ml-commons' defaults, and no keystore type
    # unless one was given (it is not written back otherwise, as in ml-commons).
    skip_ssl_verification: bool = False
    mutual_tls_enabled: bool = False
    keystore_type: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__ if getattr(self, name) is not None}


@dataclass(frozen=True, slots=True)
class Action:
    action_type: str
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    request_body: str | None = None
    pre_process_function: str | None = None
    post_process_function: str | None = None
    name: str | None = None
    supports_structured_output: bool = False

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"action_type": self.action_type.upper(), "method": self.method,
                               "url": self.url, "headers": dict(self.headers)}
        for name in ("request_body", "pre_process_function", "post_process_function", "name"):
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        if self.supports_structured_output:
            doc["supports_structured_output"] = True
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
    # TLS beyond the defaults, from client_config and the credential (None: the defaults).
    tls: TlsMaterial | None = None
    url: str | None = None  # an MCP connector's server
    headers: Mapping[str, str] = field(default_factory=dict)  # an MCP connector's (${credential.x} filled when sent)

    @property
    def is_mcp(self) -> bool:
        return self.protocol in MCP_PROTOCOLS

    def endpoint_urls(self) -> list[str]:
        """The URLs the endpoint guard judges at create time: an MCP connector's server, or
        each action's URL as far as the connector alone fills it."""
        if self.is_mcp:
            return [self.url or ""]
        return [action_url_with_connector_parameters(self, action) for action in self.actions]

    def aws_setting(self, key: str) -> str:
        """``region`` or ``service_name``: the parameters', else the credential's
        (AwsConnector.java getRegion / getServiceName)."""
        return str(self.parameters.get(key) or self.credential[key])

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
        doc.update({"protocol": self.protocol, "parameters": dict(self.parameters)})
        if self.is_mcp:
            doc.update(url=self.url, headers=dict(self.headers))
        else:
            doc["actions"] = [action.to_doc() for action in self.actions]
        doc["client_config"] = self.client_config.to_doc()
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
    version = _version_text(doc.get("version"), where)
    parameters = _object(doc, "parameters", where)
    credential = _object(doc, "credential", where)
    for key, value in credential.items():
        if not isinstance(value, str):
            raise BadRequest(f"[credential.{key}] must be a string")
    raw_actions = doc.get("actions")
    url, headers = _mcp_endpoint(doc, protocol, credential, where)
    if protocol in MCP_PROTOCOLS:
        if raw_actions:
            raise BadRequest(f"an MCP connector ({protocol}) has no [actions]: its tools come from its [url]")
        raw_actions = []
    elif not isinstance(raw_actions, list) or not raw_actions:
        raise BadRequest(f"[actions] must be a non-empty list in {where}")
    actions = tuple(_parse_action(raw, index) for index, raw in enumerate(raw_actions))
    if protocol == "aws_sigv4":
        # Both keys, or neither: then the server's own AWS credentials (aws_credentials).
        if bool(credential.get("access_key")) != bool(credential.get("secret_key")):
            raise BadRequest("[credential.access_key] and [credential.secret_key] go together for protocol "
                             "aws_sigv4; leave both out to use the server's AWS credentials")
        for key in ("region", "service_name"):
            # AwsConnector.java: in the parameters, or else in the credential
            if not parameters.get(key) and not credential.get(key):
                raise BadRequest(f"[parameters.{key}] (or [credential.{key}]) is required for protocol aws_sigv4")
    for index, action in enumerate(actions):
        _check_credential_placeholders(action, credential, index)
    if not isinstance(doc.get(DRY_RUN, False), bool):
        raise BadRequest(f"[{DRY_RUN}] must be true or false in {where}")
    extra = {key: doc[key] for key in doc if key in _CONNECTOR_FIELDS - {
        "name", "description", "version", "protocol", "parameters", "credential",
        "actions", "client_config", "url", "headers", DRY_RUN}}
    client_config = parse_client_config(doc.get("client_config"))
    tls = tls_material(client_config.skip_ssl_verification, client_config.mutual_tls_enabled,
                       client_config.keystore_type, credential)
    return Connector(
        name=name, protocol=protocol, actions=actions, parameters=parameters,
        credential=credential, client_config=client_config,
        description=description, version=version, extra=extra, tls=tls, url=url, headers=headers)


def _mcp_endpoint(doc: Mapping[str, Any], protocol: str, credential: Mapping[str, str],
                  where: str) -> tuple[str | None, dict[str, str]]:
    """An MCP connector's ``url`` (http or https) and ``headers`` (strings; each
    ``${credential.x}`` one the credential has); other connectors have neither."""
    if protocol not in MCP_PROTOCOLS:
        for field_name in ("url", "headers"):
            if field_name in doc:
                raise BadRequest(f"[{field_name}] is a field of MCP connectors; a {protocol} connector puts it "
                                 "in its actions")
        return None, {}
    url = doc.get("url")
    if not isinstance(url, str) or not url.strip():
        raise BadRequest("MCP Connector url is blank")
    if not url.lower().startswith(("http://", "https://")):
        raise BadRequest(f"[url] of an MCP connector must be an http or https URL, got [{url[:100]}]")
    headers = _object(doc, "headers", where)
    for key, value in headers.items():
        if not isinstance(value, str):
            raise BadRequest(f"[headers.{key}] must be a string")
        for kind, name in templating.placeholders(value):
            if kind == "credential" and name not in credential:
                raise BadRequest(f"[headers.{key}] names [credential.{name}], which the connector's credential "
                                 "does not have")
    return url.strip(), dict(headers)


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
        if key in ("skip_ssl_verification", "mutual_tls_enabled"):
            if not isinstance(value, bool):
                raise BadRequest(f"[client_config.{key}] must be true or false")
            values[key] = value
            continue
        if key == "keystore_type":
            if value is not None and not isinstance(value, str):
                raise BadRequest("[client_config.keystore_type] must be PEM or PKCS12")
            values[key] = value
            continue
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
    _check_filled_headers(headers)
    body = None
    if action.request_body is not None:
        text = templating.render_json_body(action.request_body, parameters, connector.credential,
                                           keep_missing=skips_missing_parameters(parameters))
        if action.supports_structured_output:
            text = inject_structured_output(text, parameters)
        if parameters.get("model") == BEDROCK_NOVA_MODEL:
            text = clean_nova_request(text)
        body = text.encode("utf-8")
    return UpstreamRequest(method=action.method, url=url, headers=headers, body=body)


def skips_missing_parameters(parameters: Mapping[str, Any]) -> bool:
    """``Boolean.parseBoolean(parameters.getOrDefault(SKIP_VALIDATE_MISSING_PARAMETERS, "false"))``;
    a JSON true counts too (ml-commons reads every parameter as text)."""
    value = parameters.get(SKIP_VALIDATING_MISSING_PARAMETERS)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _version_text(value: Any, where: str) -> str | None:
    """A connector's ``version`` as ml-commons stores it: the text of what was sent
    (``MLCreateConnectorInput.parse``: ``parser.text()``), so 1 comes back as "1"."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    raise BadRequest(f"[version] must be a string or a number in {where}")


def _check_filled_headers(headers: Mapping[str, str]) -> None:
    """``ConnectorUtils.validateSubstitutedHeaders``: no control character (a parameter
    must not add a header line), at most 8 KB a header and 64 KB in all."""
    total = 0
    for name, value in headers.items():
        if _HEADER_CONTROL.search(value):
            raise BadRequest(f"Header '{name}' value contains invalid control character")
        size = len(name) + len(value)
        if size > MAX_HEADER_BYTES:
            raise BadRequest(f"Header '{name}' size (key + value) exceeds 8KB limit")
        total += size
    if total > MAX_HEADERS_BYTES:
        raise BadRequest("Total headers size (key + value) exceeds 64KB limit")


def inject_structured_output(body: str, parameters: Mapping[str, Any]) -> str:
    """``HttpConnector.injectStructuredOutputParams``: ``_<field>_json`` parameters (a JSON
    object, or its text) replace a top-level field of a JSON-object body, then
    ``_<field>_additions_json`` ones merge into it; only STRUCTURED_OUTPUT_FIELDS."""
    replacements = [(name, value) for name in STRUCTURED_OUTPUT_FIELDS
                    if (value := _json_object(parameters.get(f"_{name}_json"))) is not None]
    additions = [(name, value) for name in STRUCTURED_OUTPUT_FIELDS
                 if (value := _json_object(parameters.get(f"_{name}_additions_json"))) is not None]
    if not replacements and not additions:
        return body
    doc = json.loads(body)
    if not isinstance(doc, dict):
        return body
    for name, value in replacements:
        doc[name] = value
    for name, value in additions:
        target = doc.get(name)
        doc[name] = {**(target if isinstance(target, dict) else {}), **value}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _json_object(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def clean_nova_request(body: str) -> str:
    """``ConnectorUtils.cleanBedrockNovaRequest``: in ``singleEmbeddingParams`` drop the
    modality sections the template left empty (``text.value`` or ``<x>.source.bytes`` null)."""
    doc = json.loads(body)
    params = doc.get("singleEmbeddingParams") if isinstance(doc, dict) else None
    if not isinstance(params, dict):
        return body
    for modality in ("text", "image", "video", "audio"):
        section = params.get(modality)
        if not isinstance(section, dict):
            continue
        holder = section if modality == "text" else section.get("source")
        key = "value" if modality == "text" else "bytes"
        if isinstance(holder, dict) and key in holder and holder[key] is None:
            del params[modality]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


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
        if name.lower() in BLOCKED_DYNAMIC_HEADERS and "${parameters." in value:
            raise BadRequest(f"Header '{name}' cannot use ${{parameters.*}} placeholders for security reasons. "
                             "Use ${credential.*} instead.")
    request_body = raw.get("request_body")
    if request_body is not None and not isinstance(request_body, str):
        raise BadRequest(f"[{where}.request_body] must be a string (a JSON template)")
    name = _string(raw, "name", where)
    if name is not None and (not _ACTION_NAME.fullmatch(name) or name.lower() in ACTION_TYPES):
        raise BadRequest(f"[{where}.name] must be 1 to 64 letters, digits, '-' or '_', and not an "
                         "action type")
    structured = raw.get("supports_structured_output", False)
    if not isinstance(structured, bool):
        raise BadRequest(f"[{where}.supports_structured_output] must be true or false")
    functions = {key: _string(raw, key, where) for key in ("pre_process_function", "post_process_function")}
    for key, function in functions.items():
        check_function_name(f"{where}.{key}", function)
    return Action(
        action_type=action_type, method=method, url=url, headers=headers,
        request_body=request_body, name=name, supports_structured_output=structured, **functions)


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
