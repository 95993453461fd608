"""Model tensors and their data types.

A tensor is a plain dict in ml-commons' JSON field order (``output/model/ModelTensor.toXContent``,
under ``common/src/main/java/org/opensearch/ml/common/``): ``name``, ``data_type``,
``shape``, ``data``, then ``dataAsMap``.
"""

from __future__ import annotations

from typing import Any

Tensor = dict[str, Any]

# MLResultDataType, in its declaration order: the first whose ".NAME" the filter contains wins.
DATA_TYPES = ("FLOAT32", "FLOAT64", "FLOAT16", "UINT8", "INT32", "INT8", "INT64", "BOOLEAN",
              "UNKNOWN", "STRING", "BINARY", "UBINARY")


def data_type_from_filter(response_filter: str) -> str | None:
    """``ConnectorUtils.parseMLResultDataTypeFromResponseFilter`` (case-insensitive)."""
    lowered = response_filter.lower()
    for name in DATA_TYPES:
        if "." + name.lower() in lowered:
            return name
    return None


def is_number(value: Any) -> bool:
    """A JSON number as read: an int or a float, not a bool."""
    return type(value) in (int, float)
