"""The upstream client's pools: one per origin and connector limits, bounded, the oldest closed. No sockets
(a urllib3 pool opens nothing until a request)."""

from __future__ import annotations

import pytest
from urllib3.connectionpool import HTTPConnectionPool

from mlstream.errors import UpstreamError
from mlstream.upstream.client import MAX_POOLS, GuardedHTTPSConnectionPool, UpstreamClient


def test_one_pool_per_origin_limit_and_private_rule() -> None:
    client = UpstreamClient()
    pool, path = client._route("https://api.example.com/v1/chat/completions?x=1", 30, False)
    assert isinstance(pool, GuardedHTTPSConnectionPool) and path == "/v1/chat/completions?x=1"
    assert pool.pool.maxsize == 30
    assert client._route("https://api.example.com:443/v1/completions", 30, False)[0] is pool  # same origin
    assert client._route("https://api.example.com/v1/chat/completions", 10, False)[0] is not pool
    private, _ = client._route("http://127.0.0.1:8000/v1/chat/completions", 30, True)
    assert type(private) is HTTPConnectionPool and (private.host, private.port) == ("127.0.0.1", 8000)
    client.close()


def test_the_least_recently_used_pool_is_closed_past_the_bound() -> None:
    client = UpstreamClient()
    first, _ = client._route("https://host-0.example.com/", 30, False)
    for index in range(1, MAX_POOLS + 1):
        client._route(f"https://host-{index}.example.com/", 30, False)
    assert first.pool is None  # closed by urllib3's close()
    assert client._route("https://host-0.example.com/", 30, False)[0] is not first
    client.close()


@pytest.mark.parametrize("url", ["ftp://files.example.com/x", "http:///no-host"])
def test_only_http_urls_with_a_host(url: str) -> None:
    with pytest.raises(UpstreamError):
        UpstreamClient()._route(url, 30, False)
