"""The cluster-settings table of docs/api.md and the code's list of settings are the same list."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlstream.errors import BadRequest
from mlstream.settings.server import (
    CLUSTER_SETTINGS,
    matching_settings,
    validate_cluster_setting,
)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ML = "plugins.ml_commons."


def test_the_documented_table_lists_every_setting_with_its_effect():
    section = PAGE.read_text(encoding="utf-8").split("\n## Cluster settings\n", 1)[1].split("\n## ", 1)[0]
    cell = r"(?:[^|\\]|\\.)+"  # a table cell: an escaped "\|" does not end it
    rows = re.findall(rf"^\| `([^`]+)` \| {cell} \| {cell} \| (.+) \|$", section, re.MULTILINE)
    assert {ML + key: effect for key, effect in rows} == {key: s.effect for key, s in CLUSTER_SETTINGS.items()}


@pytest.mark.parametrize("key, value, expected", [
    ("native_memory_threshold", "99", 99),
    ("native_memory_threshold", 0, 0),
    ("model_auto_redeploy_success_ratio", "0.5", 0.5),
    ("model_auto_redeploy_success_ratio", 1, 1.0),
    ("only_run_on_ml_node", "FALSE", False),
    ("task_dispatch_policy", "least_load", "least_load"),
    ("disk_free_space_threshold", "10gb", "10gb"),
    ("task_dispatcher.eligible_node_role.remote_model", "ml", ["ml"]),
    ("trusted_connector_private_endpoints_regex", [r"^http://10\..*$"], [r"^http://10\..*$"]),
    ("memory.working_memory_ttl_days", -1, -1),
    ("max_json_size", None, None),
], ids=lambda v: str(v))
def test_values_are_read_as_opensearch_reads_them(key, value, expected):
    assert validate_cluster_setting(ML + key, value) == expected


@pytest.mark.parametrize("key, value", [
    ("native_memory_threshold", 101), ("native_memory_threshold", -1), ("native_memory_threshold", 9.5),
    ("native_memory_threshold", True), ("native_memory_threshold", "ninety"),
    ("model_auto_redeploy_success_ratio", 1.5), ("only_run_on_ml_node", 1), ("only_run_on_ml_node", "yes"),
    ("task_dispatch_policy", ["a"]), ("trusted_url_regex", "(unclosed"), ("disk_free_space_threshold", "lots"),
    ("remote_job.status_field", [1]), ("memory.working_memory_ttl_days", -2), ("multi_tenancy_enabled", True),
    ("no_such_setting", 1),
], ids=lambda v: str(v))
def test_bad_values_are_refused(key, value):
    with pytest.raises(BadRequest):
        validate_cluster_setting(ML + key, value)


def test_a_prefix_reset_names_every_key_under_it():
    assert set(matching_settings(ML + "memory.*")) == {k for k in CLUSTER_SETTINGS if k.startswith(ML + "memory.")}
    assert matching_settings(ML + "stream_enabled") == [ML + "stream_enabled"]
