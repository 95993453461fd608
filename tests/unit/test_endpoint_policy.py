"""The endpoint guard's answers are the same whether a URL or host was judged before or not."""

from __future__ import annotations

import pytest

from mlstream.settings import endpoints
from mlstream.settings.endpoints import EndpointPolicy
from mlstream.errors import EndpointRefused

TRUSTED = (r"^https://api\.openai\.com/.*$", r"^http://127\.0\.0\.1:.*$")


@pytest.mark.parametrize("url, host", [
    ("https://api.openai.com/v1/chat/completions", "api.openai.com"),
    ("http://127.0.0.1:9/v1/x?key=sk-secret", "127.0.0.1"),
])
def test_a_trusted_url_gives_its_host_every_time(url, host):
    policy = EndpointPolicy(TRUSTED, allow_private=True)
    assert [policy.check_url(url) for _ in range(3)] == [host] * 3


@pytest.mark.parametrize("url, words", [
    ("https://evil.example/v1", "not matching the trusted"),
    ("https://[::1/v1", "not a valid URL"),
])
def test_a_refused_url_is_refused_every_time(url, words):
    policy = EndpointPolicy(TRUSTED, allow_private=True)
    for _ in range(3):
        with pytest.raises(EndpointRefused, match=words):
            policy.check_url(url)


def test_what_is_trusted_is_the_policys_own_not_the_last_one_asked():
    url = "https://api.openai.com/v1/chat/completions"
    assert EndpointPolicy(TRUSTED, allow_private=False).check_url(url) == "api.openai.com"
    with pytest.raises(EndpointRefused):
        EndpointPolicy((r"^http://127\.0\.0\.1:.*$",), allow_private=False).check_url(url)


def test_a_long_url_is_judged_without_being_remembered():
    url = "https://api.openai.com/" + "a" * endpoints.MAX_REMEMBERED_URL
    before = endpoints._checked_host.cache_info().currsize
    assert EndpointPolicy(TRUSTED, allow_private=True).check_url(url) == "api.openai.com"
    assert endpoints._checked_host.cache_info().currsize == before


@pytest.mark.parametrize("host, refused", [
    ("127.0.0.1", True), ("localhost", True), ("LocalHost.", True), ("a.localhost", True), ("10.1.2.3", True),
    ("0x7f000001", True), ("api.openai.com", False), ("8.8.8.8", False),
])
def test_a_private_literal_host_is_refused_every_time_unless_allowed(host, refused):
    strict, lax = EndpointPolicy(TRUSTED, allow_private=False), EndpointPolicy(TRUSTED, allow_private=True)
    for _ in range(2):
        if refused:
            with pytest.raises(EndpointRefused, match="private ip address"):
                strict.check_literal_host(host)
        else:
            strict.check_literal_host(host)
        lax.check_literal_host(host)
