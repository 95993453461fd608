"""Painless process functions: any function name that is not a built-in one is a script.

The interpreter (``mlstream.painless``) is imported on first use. What follows ml-commons
(under ``common/src/main/java/org/opensearch/ml/common/`` unless they say otherwise): the
pre-process script's params and output (``connector/functions/preprocess/DefaultPreProcessFunction.java``,
``ConnectorUtils.processMLInput`` and ``escapeMLInput``); over plain ``parameters``, when
``pre_process_function.process_remote_inference_input`` is true
(``connector/functions/preprocess/RemoteInferencePreProcessFunction.java``), the request's
parameters as the script's params; the post-process script's params and how its text
becomes tensors (``ml-algorithms/.../utils/ScriptUtils.java``, ``ConnectorUtils.processOutput``,
``connector/AbstractConnector.parseResponse``, ``output/model/ModelTensor.parser``);
``${parameters.x}`` in a script (``ConnectorUtils.fillProcessFunctionParameter``).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import BadRequest, ScriptError, UpstreamError
from ..speedups import loads_json
from .escaping import escape_json_text, is_json_container
from .inputs import Dataset, TextSimilarity
from .tensors import DATA_TYPES, Tensor, is_number

if TYPE_CHECKING:  # the interpreter itself is imported on first use (compile_script)
    from ..painless import LazyText, Script

# MLPreProcessFunction.PROCESS_REMOTE_INFERENCE_INPUT: a script pre-processes plain parameters too
PROCESS_REMOTE_INFERENCE_INPUT = "pre_process_function.process_remote_inference_input"
# RemoteInferencePreProcessFunction: that script sees JSON object or array text as Maps and Lists
CONVERT_PARAMETERS_TO_OBJECTS = "pre_process_function.convert_remote_inference_param_to_object"
CONVERT_INPUT_TO_JSON_STRING = "pre_process_function.convert_input_to_json_string"

_PARAMETER_PLACEHOLDER = re.compile(r"\$\{parameters\.([^}]*)\}")


def check_script(source: str) -> None:
    """Compiles a process function's script (a syntax error or an unsupported construct is a
    ScriptError naming its line and column). Each ``${parameters.x}`` stands for a string
    here; at predict time it is filled with the parameter's value as JSON text, as
    ml-commons does (``script_for``)."""
    compile_script(_PARAMETER_PLACEHOLDER.sub('"parameter"', source))


def compile_script(source: str) -> Script:
    """The Painless interpreter's compile_script, imported on first use: about 4 MB of
    resident memory that a server with no script connector never needs."""
    from ..painless import compile_script as compile_painless
    return compile_painless(source)


def script_for(function: str, parameters: Mapping[str, Any]) -> Script:
    """The compiled script, its ``${parameters.x}`` filled with each value as JSON text
    (``fillProcessFunctionParameter``; an unknown name stays as written)."""
    if "${parameters." in function:
        function = _PARAMETER_PLACEHOLDER.sub(
            lambda m: _gson_text(parameters[m.group(1)]) if m.group(1) in parameters else m.group(0), function)
    return compile_script(function)


def _gson_text(value: Any, *, doubles: bool = True) -> str:
    """Gson's JSON text, no spaces, of a value Gson parsed (``doubles``: every number is a
    Double, ``1.0``) or Jackson parsed (an integer stays one, other numbers are Doubles)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int) and not doubles:
        return str(value)
    if isinstance(value, (int, float)):
        from ..painless import double_to_string  # only ever reached from a script
        return double_to_string(float(value))
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    if isinstance(value, list):
        return "[" + ",".join(_gson_text(item, doubles=doubles) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_gson_text(str(k))}:{_gson_text(v, doubles=doubles)}" for k, v in value.items()) + "}"
    return _gson_text(str(value))


def _parse_boolean(value: Any) -> bool:
    """Java's ``Boolean.parseBoolean`` of a parameter's text: "true" in any case."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def pre_process_script(function: str, dataset: Dataset | None, parameters: Mapping[str, Any],
                       request_parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The template parameters the script ``function`` makes of ``dataset``, its
    ``${parameters.x}`` filled from ``parameters`` (the connector's and the request's,
    merged). A plain remote call (no dataset) adds nothing unless ``parameters`` set
    ``pre_process_function.process_remote_inference_input`` to true: then the script runs
    on ``request_parameters`` (the request's, escaped)."""
    if dataset is None:
        if not _parse_boolean(parameters.get(PROCESS_REMOTE_INFERENCE_INPUT)):
            return {}
        return _remote_input_script(script_for(function, parameters), request_parameters,
                                    _parse_boolean(parameters.get(CONVERT_PARAMETERS_TO_OBJECTS)))
    return _pre_process_script(script_for(function, parameters), dataset,
                               _parse_boolean(parameters.get(CONVERT_INPUT_TO_JSON_STRING)))


def _pre_process_script(script: Script, dataset: Dataset, as_json_strings: bool = False) -> dict[str, Any]:
    # DefaultPreProcessFunction: the script's params are the MLInput as JSON, documents
    # JSON-escaped first (escapeMLInput), so that a script may quote them as they are.
    # With convert_input_to_json_string, each of them is a String instead, any value but a
    # String its Gson text (convertScriptStringToJsonString, into a new HashMap).
    params: dict[str, Any] = {"algorithm": "REMOTE"}
    if isinstance(dataset, TextSimilarity):
        params["query_text"] = escape_json_text(dataset.query_text)
    params["text_docs"] = [None if doc is None else escape_json_text(doc) for doc in dataset.docs]
    if not as_json_strings:
        return _script_parameters(script.run(params))
    from ..painless import hash_map_order
    texts = {name: params[name] if isinstance(params[name], str) else _gson_text(params[name])
             for name in hash_map_order(list(params), 16)}
    return _script_parameters(script.run(texts, params_table=16))


def _remote_input_script(script: Script, request_parameters: Mapping[str, Any], as_objects: bool) -> dict[str, Any]:
    # RemoteInferencePreProcessFunction: the script's params are the request's parameters as
    # ml-commons holds them, text (a JSON value sent as its JSON text, getParameterMap),
    # already escaped (RemoteConnectorExecutor escapes them before processInput). With
    # convert_remote_inference_param_to_object, JSON object or array text is read as Gson
    # reads it into an Object: Maps, Lists, every number a Double.
    # The parameters pass through HashMaps on their way (getParameterMap, the escaping,
    # inputParams): the script's params iterate in HashMap order, its table 16 buckets when
    # each is put, pre-sized when they are putAll'd.
    from ..painless import hash_map_order, presized_table, table_size
    params: dict[str, Any] = {}
    try:
        for name in hash_map_order(list(request_parameters), table_size(len(request_parameters))):
            value = request_parameters[name]
            text = value if isinstance(value, str) else _gson_text(value, doubles=False)
            params[name] = json.loads(text, parse_int=float) if as_objects and is_json_container(text) else text
    except RecursionError:
        raise BadRequest("[parameters] are nested too deeply for pre_process_function") from None
    table = 16 if as_objects else presized_table(len(params))
    return _script_parameters(script.run(params, params_table=table))


def _script_parameters(output: Any) -> dict[str, Any]:
    """The parameters a pre-process script's output gives: its text read as JSON,
    ``{"parameters": {...}}``, each value kept if a string, else its JSON text."""
    if output is None:
        raise ScriptError("pre_process_function: Preprocess function output is null")
    if not isinstance(output, str):
        raise ScriptError("pre_process_function must return a String (the JSON of the new parameters)")
    try:
        parsed = json.loads(output)
    except (ValueError, RecursionError):
        raise ScriptError("pre_process_function returned text that is not JSON: "
                          f"{output[:200]!r}") from None
    if not isinstance(parsed, dict):
        raise ScriptError('pre_process_function must return a JSON object: {"parameters": {...}}')
    parameters = parsed.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ScriptError('pre_process_function must return {"parameters": {...}}, with an object')
    # convertScriptStringToJsonString: strings stay, anything else becomes its JSON text
    try:
        return {name: value if isinstance(value, str) else _gson_text(value) for name, value in parameters.items()}
    except RecursionError:
        raise ScriptError("pre_process_function returned parameters nested too deeply") from None


def post_process_script(function: str, parameters: Mapping[str, Any], payload: bytes) -> list[Tensor] | None:
    """The tensors a post-process script makes of the provider's answer, or None when the
    script returns null (ml-commons then reads the answer as if there were no function).

    The script's params are the answer (an array answer under ``result``); text it returns
    that is a JSON object or array is read as one tensor or a list of tensors
    (``ModelTensor.parser``); other text is the ``response`` of one tensor."""
    script = script_for(function, parameters)
    try:
        # Jackson reads a JSON integer as an Integer, or a Long past 32 bits: the
        # interpreter treats an int past 32 bits as a long (``operators.is_long``).
        answer = loads_json(payload)
    except (ValueError, RecursionError):
        raise UpstreamError("post_process_function cannot read the model's answer: it is not JSON",
                            kind="answer") from None
    if isinstance(answer, list):
        answer = {"result": answer}
    elif not isinstance(answer, dict):
        raise BadRequest("Unsupported response type: the model's answer is neither a JSON object nor an array")
    output = script.run(answer, lazy=True)
    from ..painless import LazyText  # loaded with the script
    if type(output) is LazyText:
        tensors = _lazy_tensors(output)
        if tensors is not None:
            return tensors
        output = output.text()
    if output is None:
        return None
    if not isinstance(output, str):
        raise ScriptError("post_process_function must return a String (the JSON of the tensors)")
    stripped = output.strip()
    parsed: Any = None
    if stripped[:1] in ("{", "["):
        try:
            parsed = loads_json(stripped)
        except (ValueError, RecursionError):
            parsed = None
    if isinstance(parsed, dict):
        return [_script_tensor(parsed)]
    if isinstance(parsed, list):
        return [_script_tensor(item) for item in parsed]
    return [{"name": "response", "dataAsMap": {"response": output}}]


def _lazy_tensors(output: LazyText) -> list[Tensor] | None:
    """The tensors of a script's JSON text with Lists of doubles in it not yet printed
    (``ListPrint``), without printing them and reading them back: the JSON is read with a
    marker string in place of each List, then each marker is replaced by its List. A
    List's Java text reads back as the same doubles (the shortest digits that do), so the
    value is the one the whole text would read as. None when the text is not read that
    way (a List inside a JSON string or as a key, text that is not JSON): then the
    caller reads the whole text."""
    first = output.parts[0] if output.parts else ""
    if type(first) is not str or first.lstrip()[:1] not in ("{", "["):
        return None
    nonce = secrets.token_hex(8)   # a script cannot write a marker it cannot know
    lists: list[list[float]] = []
    pieces: list[str] = []
    for part in output.parts:
        if type(part) is str:
            pieces.append(part)
        else:
            pieces.append(f'"\\u0000{nonce}:{len(lists)}"')
            lists.append(part.values)
    try:
        skeleton = loads_json("".join(pieces).strip())
    except (ValueError, RecursionError):
        return None
    value = _put_lists(skeleton, nonce, lists)
    if value is None:
        return None
    floats = {id(values) for values in lists}
    if isinstance(value, dict):
        return [_script_tensor(value, floats)]
    if isinstance(value, list):
        return [_script_tensor(item, floats) for item in value]
    return None


def _put_lists(value: Any, nonce: str, lists: list[list[float]]) -> Any:
    """``value`` with each marker string replaced by its List; None unless each marker
    was a value of its own (not a key, not inside another string: then it is not a
    string of its own, and the count falls short)."""
    markers = {f"\0{nonce}:{index}": index for index in range(len(lists))}
    placed = 0
    root = [value]
    stack: list[Any] = [root]
    while stack:   # bounded: the JSON was read, so it is finite
        container = stack.pop()
        for key in (container.keys() if type(container) is dict else range(len(container))):
            item = container[key]
            kind = type(item)
            if kind is str:
                index = markers.get(item)
                if index is not None:
                    container[key] = lists[index]
                    placed += 1
            elif kind is dict or kind is list:
                stack.append(item)
    return root[0] if placed == len(lists) else None


def _script_tensor(item: Any, floats: set[int] = frozenset()) -> Tensor:
    """``ModelTensor.parser``: known fields kept in ``toXContent`` order, others skipped."""
    if not isinstance(item, dict):
        raise ScriptError("post_process_function returned a JSON array whose elements are not tensor objects")
    tensor: Tensor = {}
    if "name" in item:
        tensor["name"] = item["name"] if isinstance(item["name"], str) or item["name"] is None else str(item["name"])
    data_type = item.get("data_type")
    if data_type is not None:
        if data_type not in DATA_TYPES:
            raise ScriptError(f"post_process_function returned an unknown data_type [{data_type}]; "
                              f"one of {', '.join(DATA_TYPES)}")
        tensor["data_type"] = data_type
    shape = item.get("shape")
    if shape is not None:
        if not isinstance(shape, list) or not all(is_number(n) for n in shape):
            raise ScriptError("post_process_function returned a tensor whose shape is not a list of numbers")
        tensor["shape"] = [int(n) for n in shape]
    data = item.get("data")
    if data_type is not None and isinstance(data, list) and data:
        if id(data) not in floats and not set(map(type, data)) <= {int, float}:
            raise ScriptError("post_process_function returned a tensor whose data is not a list of numbers")
        tensor["data"] = data
    if isinstance(item.get("result"), str):
        tensor["result"] = item["result"]
    if isinstance(item.get("dataAsMap"), dict):
        tensor["dataAsMap"] = item["dataAsMap"]
    return tensor
