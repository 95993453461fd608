"""Usage values without sockets or stores: pricing, periods, the query's parameters, key
limits, the error bodies of both fronts, the metrics lines."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from mlstream.models import fields as model_fields
from mlstream.errors import BadRequest, BudgetExceeded, RateLimited
from mlstream.fronts.mlcommons import errors as mlcommons_errors
from mlstream.fronts.openai import errors as openai_errors
from mlstream.metrics import Metrics
from mlstream.usage.records import (
    KeyLimits,
    Pricing,
    UsageRecord,
    cost_of,
    parse_key_limits,
    parse_pricing,
    parse_time,
    parse_usage_query,
    period_bounds,
)

from ..support.pools import StubPool


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


# --- pricing ------------------------------------------------------------------------------

@pytest.mark.parametrize("pricing, tokens, expected", [
    ({"input_per_1m": 2.5, "output_per_1m": 10}, (1_000_000, 0, 0), 2.5),
    ({"input_per_1m": 2.5, "output_per_1m": 10}, (0, 1_000_000, 0), 10.0),
    # cached input at its own price, the rest of the input at the input price
    ({"input_per_1m": 2.5, "output_per_1m": 10, "cached_input_per_1m": 1.25}, (1_000_000, 0, 400_000),
     0.6 * 2.5 + 0.4 * 1.25),
    # no cached price: cached input costs the input price
    ({"input_per_1m": 2.0, "output_per_1m": 8}, (1000, 500, 1000), (1000 * 2.0 + 500 * 8) / 1e6),
    # more cached than input (a provider's odd report): never a negative uncached part
    ({"input_per_1m": 1.0, "output_per_1m": 1, "cached_input_per_1m": 0.5}, (10, 0, 20), 10 * 0.5 / 1e6),
], ids=["input", "output", "cached-price", "cached-no-price", "cached-capped"])
def test_cost_follows_the_formula(pricing, tokens, expected):
    assert parse_pricing(pricing).cost(tokens[0], tokens[1], tokens[2]) == pytest.approx(expected)


def test_a_model_without_pricing_costs_null_not_zero():
    assert cost_of(None, 1000, 1000) is None
    assert cost_of(Pricing(0, 0), 1000, 1000) == 0.0


@pytest.mark.parametrize("raw, message", [
    ([1, 2], "must be an object"),
    ({"input_per_1m": 1}, "output_per_1m] is required"),
    ({"output_per_1m": 1}, "input_per_1m] is required"),
    ({"input_per_1m": -1, "output_per_1m": 1}, "0 or more"),
    ({"input_per_1m": "1", "output_per_1m": 1}, "must be a number"),
    ({"input_per_1m": True, "output_per_1m": 1}, "must be a number"),
    ({"input_per_1m": float("inf"), "output_per_1m": 1}, "must be a number"),
    ({"input_per_1m": 1, "output_per_1m": 1, "currency": "EUR"}, "unknown field [currency]"),
])
def test_pricing_is_validated(raw, message):
    with pytest.raises(BadRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_pricing(raw)


def test_an_embedding_models_missing_output_price_is_zero_any_others_a_400():
    assert parse_pricing({"input_per_1m": 0.02}, embedding=True) == Pricing(0.02, 0.0)
    assert parse_pricing({"input_per_1m": 0.02, "output_per_1m": 1}, embedding=True) == Pricing(0.02, 1.0)
    today = r"\[pricing.output_per_1m\] is required \(a price per million tokens; 0 for free\)"  # as before
    with pytest.raises(BadRequest, match=today):
        parse_pricing({"input_per_1m": 0.02})
    with pytest.raises(BadRequest, match=r"\[pricing.input_per_1m\] is required"):
        parse_pricing({"output_per_1m": 1}, embedding=True)


OPENAI_EMBEDDINGS = {"actions": [{"action_type": "predict", "url": "https://api.openai.com/v1/embeddings"}]}


@pytest.mark.parametrize("doc, connector, embedding", [
    ({}, OPENAI_EMBEDDINGS, True),  # the URL /v1/embeddings relays as an embeddings call
    ({}, {"actions": [{"action_type": "PREDICT", "url": "http://${parameters.endpoint}/v1/embeddings?x=1"}]}, True),
    ({}, {"actions": [{"action_type": "predict", "url": "https://api.cohere.ai/v1/embed",
                       "post_process_function": "connector.post_process.cohere.embedding"}]}, True),
    ({}, {"actions": [{"action_type": "predict", "url": "https://h/model/amazon.titan-embed-text-v2:0/invoke",
                       "pre_process_function": "connector.pre_process.bedrock.embedding"}]}, True),
    ({}, {"actions": [{"action_type": "predict", "url": "https://h/v2/embed",
                       "post_process_function": "connector.post_process.cohere_v2.embedding.int8"}]}, True),
    ({"model_config": {"model_type": "TEXT_EMBEDDING", "embedding_dimension": 8}},
     {"actions": [{"action_type": "predict", "url": "https://h/invocations"}]}, True),  # ml-commons' model kind
    ({}, {"actions": [{"action_type": "predict", "url": "https://api.openai.com/v1/chat/completions"}]}, False),
    ({}, {"actions": [{"action_type": "predict", "url": "https://api.cohere.ai/v1/rerank",
                       "pre_process_function": "connector.pre_process.cohere.rerank",
                       "post_process_function": "connector.post_process.cohere.rerank"}]}, False),
    # a script is no built-in embedding function, whatever its text says
    ({}, {"actions": [{"action_type": "predict", "url": "https://h/x",
                       "post_process_function": "return params.embedding;"}]}, False),
    # only the predict action counts
    ({}, {"actions": [{"action_type": "batch_predict", "url": "https://h/v1/embeddings"},
                      {"action_type": "predict", "url": "https://h/v1/chat/completions"}]}, False),
    ({"model_config": {"model_type": "bert"}}, None, False),  # a router: no connector
], ids=["openai-url", "templated-url", "cohere-post", "titan-pre", "cohere-v2-post", "model-config", "chat",
        "rerank", "script", "batch-action", "router"])
def test_an_embedding_model_is_known_from_its_kind_or_its_connectors_predict_action(doc, connector, embedding):
    assert model_fields.is_embedding_model(doc, connector) is embedding
    priced = {**doc, "pricing": model_fields.pricing({"input_per_1m": 0.1})}
    if embedding:
        assert model_fields.model_pricing(priced, connector) == {"input_per_1m": 0.1, "output_per_1m": 0.0}
    else:
        with pytest.raises(BadRequest, match=r"output_per_1m\] is required"):
            model_fields.model_pricing(priced, connector)


def test_pricing_round_trips_through_its_document():
    pricing = parse_pricing({"input_per_1m": 2.5, "output_per_1m": 10, "cached_input_per_1m": 1.25})
    assert parse_pricing(pricing.to_doc()) == pricing
    assert parse_pricing(None) is None
    assert "cached_input_per_1m" not in Pricing(1, 2).to_doc()


# --- periods --------------------------------------------------------------------------------

@pytest.mark.parametrize("period, now, start, end", [
    ("day", "2026-12-02T13:45:00", "2026-12-02T00:00:00", "2026-12-03T00:00:00"),
    ("day", "2026-12-31T23:59:59", "2026-12-31T00:00:00", "2027-01-01T00:00:00"),
    # ISO weeks start on Monday: 2026-12-02 is a Wednesday
    ("week", "2026-12-02T13:45:00", "2026-11-30T00:00:00", "2026-12-07T00:00:00"),
    ("week", "2026-11-30T00:00:00", "2026-11-30T00:00:00", "2026-12-07T00:00:00"),
    ("week", "2026-12-06T23:59:59", "2026-11-30T00:00:00", "2026-12-07T00:00:00"),
    ("month", "2026-12-02T13:45:00", "2026-12-01T00:00:00", "2027-01-01T00:00:00"),
    ("month", "2028-02-29T12:00:00", "2028-02-01T00:00:00", "2028-03-01T00:00:00"),
])
def test_budget_periods_are_utc_calendar_periods(period, now, start, end):
    assert period_bounds(period, ms(now)) == (ms(start), ms(end))


# --- the query ---------------------------------------------------------------------------------

def test_the_query_defaults_to_the_last_24_hours():
    query = parse_usage_query({}, 100_000_000_000)  # up to now, this millisecond included
    assert (query.from_ms, query.to_ms) == (100_000_000_001 - 86_400_000, 100_000_000_001)
    assert query.group_by == () and query.key_name is None


@pytest.mark.parametrize("text, expected", [
    ("1764633600000", 1764633600000),
    ("2025-12-02T00:00:00Z", ms("2025-12-02T00:00:00")),
    ("2025-12-02T01:00:00+01:00", ms("2025-12-02T00:00:00")),
    ("2025-12-02", ms("2025-12-02T00:00:00")),
    ("2025-12-02T00:00:00", ms("2025-12-02T00:00:00")),  # naive is UTC
])
def test_times_are_iso_or_epoch_millis(text, expected):
    assert parse_time(text, "from") == expected


@pytest.mark.parametrize("params, message", [
    ({"from": "yesterday"}, "ISO-8601"),
    ({"from": "2025-12-02", "to": "2025-12-01"}, "before"),
    ({"group_by": "key,user"}, "group_by"),
])
def test_bad_query_parameters_are_400(params, message):
    with pytest.raises(BadRequest, match=message):
        parse_usage_query(params, ms("2025-12-03T00:00:00"))


def test_group_by_keeps_its_order_and_drops_repeats():
    assert parse_usage_query({"group_by": "model, key,model"}, 10**12).group_by == ("model", "key")


@pytest.mark.parametrize("size, ok", [("1", True), ("1000", True), ("0", False), ("1001", False), ("x", False)])
def test_records_size_is_bounded(size, ok):
    if ok:
        assert parse_usage_query({"size": size}, 10**12, records=True).size == int(size)
    else:
        with pytest.raises(BadRequest):
            parse_usage_query({"size": size}, 10**12, records=True)


def test_a_record_lists_every_field():
    record = UsageRecord(ms("2025-12-02T10:00:00"), "k1", "alice", "m1", "openai/v1/chat/completions",
                         "/v1/chat/completions", 200, "client_gone", 10, 3, 4, True, 12.5, 80.0, None, "req-1")
    body = record.to_body()
    assert body == {"time": "2025-12-02T10:00:00.000Z", "time_ms": record.time_ms, "request_id": "req-1",
                    "key": "alice", "key_id": "k1", "tenant": "default", "model": "m1",
                        "interface": "openai/v1/chat/completions",
                    "route": "/v1/chat/completions", "status": 200, "outcome": "client_gone",
                    "input_tokens": 10, "output_tokens": 3, "cached_input_tokens": 4, "estimated": True,
                    "time_to_first_token_ms": 12.5, "duration_ms": 80.0, "cost": None, "cache_hit": False,
                    "saved_input_tokens": 0, "saved_output_tokens": 0, "saved_cost": None}
    with pytest.raises(ValueError):
        UsageRecord(0, "k", "k", "m", "i", "r", 200, "maybe")


# --- key limits ------------------------------------------------------------------------------------

def test_key_limits_change_only_the_fields_named():
    limits = parse_key_limits({"budget": 5, "budget_period": "WEEK", "tpm": 100000, "rpm": 60})
    assert limits == KeyLimits(5.0, "week", 100000, 60)
    assert parse_key_limits({"rpm": 10}, limits) == KeyLimits(5.0, "week", 100000, 10)
    assert parse_key_limits({"budget": None}, limits) == KeyLimits(None, "week", 100000, 60)
    assert parse_key_limits({}, limits) == limits


@pytest.mark.parametrize("body", [{"budget": -1}, {"budget": "5"}, {"budget_period": "year"}, {"tpm": 0},
                                  {"rpm": 1.5}, {"rpm": True}])
def test_bad_key_limits_are_400(body):
    with pytest.raises(BadRequest):
        parse_key_limits(body)


# --- errors on both fronts ---------------------------------------------------------------------------

def test_budget_exceeded_in_opensearch_shape_with_retry_after():
    reply = mlcommons_errors.error_reply(BudgetExceeded("spent", retry_after_seconds=3600))
    assert reply.status == 429 and reply.headers["Retry-After"] == "3600"
    assert reply.body["error"]["type"] == "budget_exceeded" and reply.body["status"] == 429
    limited = mlcommons_errors.error_reply(RateLimited("too many", retry_after_seconds=7))
    assert limited.body["error"]["type"] == "rate_limited" and limited.headers["Retry-After"] == "7"


def test_openai_front_answers_insufficient_quota_and_rate_limit_exceeded():
    spent = openai_errors.error_reply(BudgetExceeded("spent", retry_after_seconds=10))
    assert spent.status == 429 and spent.headers["Retry-After"] == "10"
    assert spent.body["error"]["type"] == "insufficient_quota" and spent.body["error"]["code"] == "insufficient_quota"
    limited = openai_errors.error_reply(RateLimited("too many"))
    assert limited.body["error"]["code"] == "rate_limit_exceeded"
    assert limited.body["error"]["type"] == "rate_limit_error"


# --- metrics ---------------------------------------------------------------------------------------------

def test_metrics_count_tokens_and_cost_without_a_key_label():
    metrics = Metrics(StubPool())
    metrics.usage_recorded("m1", "openai/v1/chat/completions", 10, 5, 0.25)
    metrics.usage_recorded("m1", "openai/v1/chat/completions", 1, 2, None)
    metrics.usage_dropped()
    text = metrics.render()
    assert 'mlstream_tokens_total{model="m1",interface="openai/v1/chat/completions",direction="input"} 11' in text
    assert 'mlstream_tokens_total{model="m1",interface="openai/v1/chat/completions",direction="output"} 7' in text
    assert 'mlstream_cost_total{model="m1"} 0.25' in text
    assert "mlstream_usage_records_dropped_total 1" in text
    assert "key=" not in text
