"""A connector action's process function, by its name: one of the built-in ones
(``builtin_pre``, ``builtin_post``) or, any other name, a Painless script (``scripts``).
The name is checked when a connector is created; the pre-process function is run by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import BadRequest, ScriptError
from .builtin_post import POST_PROCESS_FUNCTIONS
from .builtin_pre import DEFAULT_EMBEDDING_PRE_PROCESS, PRE_PROCESS_FUNCTIONS
from .inputs import Dataset, TextSimilarity
from .scripts import check_script, pre_process_script


def is_script(function: str) -> bool:
    """ml-commons runs any process function that is not a built-in name as Painless."""
    return function not in PRE_PROCESS_FUNCTIONS and function not in POST_PROCESS_FUNCTIONS \
        and not function.startswith("connector.")


def is_embedding_function(function: str | None) -> bool:
    """Whether ``function`` is one of ml-commons' built-in embedding functions: a pre-process
    one making an embedding request, or a post-process one reading embeddings."""
    return (function in PRE_PROCESS_FUNCTIONS or function in POST_PROCESS_FUNCTIONS) and "embedding" in function


def _unknown_function_reason(field: str, name: str) -> str:
    kind = "pre_process" if "pre_process" in field else "post_process"
    known = sorted(PRE_PROCESS_FUNCTIONS if kind == "pre_process" else POST_PROCESS_FUNCTIONS)
    return f"[{field}] {name} is not a built-in function; the built-in ones are: {', '.join(known)}"


def check_function_name(field: str, name: str | None) -> None:
    """At connector creation: a built-in name, nothing, or a Painless script that compiles
    (``check_script``: a syntax error or an unsupported construct is a 400 naming its line
    and column, here prefixed with ``field``)."""
    if name is None:
        return
    table: Mapping[str, Any] = PRE_PROCESS_FUNCTIONS if "pre_process" in field else POST_PROCESS_FUNCTIONS
    if name in table:
        return
    if name.startswith("connector."):
        raise BadRequest(_unknown_function_reason(field, name))
    try:
        check_script(name)
    except ScriptError as error:
        raise ScriptError(f"[{field}] {error.reason}") from None


def pre_process(function: str | None, dataset: Dataset | None,
                parameters: Mapping[str, Any] | None = None,
                request_parameters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The template parameters a built-in function or a Painless script makes of
    ``dataset`` (ConnectorUtils ``processMLInput``). With ``text_docs`` and no function,
    ``default.embedding`` applies. ``parameters`` (the connector's and the request's,
    merged) fill ``${parameters.x}`` in a script.

    A plain remote call (no dataset) adds nothing, as in ml-commons for built-in
    functions and for scripts, unless ``parameters`` set
    ``pre_process_function.process_remote_inference_input`` to true: then a script runs
    on ``request_parameters`` (the request's, escaped)."""
    parameters = parameters or {}
    if function is not None and is_script(function):
        return pre_process_script(function, dataset, parameters, request_parameters or {})
    if dataset is None:
        return {}
    if function is None:
        if isinstance(dataset, TextSimilarity):
            raise BadRequest("pre_process_function not defined in connector: text_similarity input "
                             "needs one (e.g. connector.pre_process.cohere.rerank)")
        function = DEFAULT_EMBEDDING_PRE_PROCESS
    process = PRE_PROCESS_FUNCTIONS.get(function)
    if process is None:
        raise BadRequest(_unknown_function_reason("pre_process_function", function))
    return process(dataset)
