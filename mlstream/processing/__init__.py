"""ml-commons' remote-model input shapes and connector process functions.

Pure: no I/O. Each rule follows a named ml-commons source file, named where it is
implemented (paths under ``common/src/main/java/org/opensearch/ml/common/`` unless they
say otherwise). By concern, each module importing only those listed before it:

    inputs        the ``_predict`` body: parameters, text_docs, query_text + text_docs
    escaping      request parameters JSON-escaped for templating (``no_escape_params``)
    builtin_pre   built-in pre-process functions: a dataset -> template parameters
    tensors       model tensors (plain dicts in ml-commons' field order), data types
    builtin_post  built-in post-process functions: an answer at its filter -> tensors
    scripts       Painless process functions: params in, parameters or tensors out
    functions     a function by its name, built-in or script: checked, pre-process run
    chunking      ``text_docs`` split into upstream requests
"""

from __future__ import annotations

from .builtin_post import check_response_filter, post_process
from .chunking import chunk_size, split_dataset
from .escaping import escape_input_parameters
from .functions import check_function_name, is_embedding_function, is_script, pre_process
from .inputs import Dataset, PredictInput, TextDocs, TextSimilarity, parse_predict_input
from .scripts import post_process_script

__all__ = [
    "Dataset",
    "PredictInput",
    "TextDocs",
    "TextSimilarity",
    "check_function_name",
    "check_response_filter",
    "chunk_size",
    "escape_input_parameters",
    "is_embedding_function",
    "is_script",
    "parse_predict_input",
    "post_process",
    "post_process_script",
    "pre_process",
    "split_dataset",
]
