"""The endpoint guard: which URLs a connector may call.

Two checks, as in ml-commons: the URL must match a trusted-endpoint regex, and
its host must not be a loopback, private, link-local or reserved address unless
private endpoints are allowed. At create time only literal addresses and local
names are judged (no DNS); before each call the resolved addresses are.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from ..errors import EndpointRefused

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_LEGACY_IPV4 = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    trusted_patterns: tuple[str, ...]
    allow_private: bool

    def check_url(self, url: str) -> str:
        """Raise EndpointRefused unless ``url`` is trusted; return its host."""
        if len(url) <= MAX_REMEMBERED_URL:
            return _checked_host(self.trusted_patterns, url)
        return _check_url(self.trusted_patterns, url)

    def check_literal_host(self, host: str) -> None:
        """The create-time check (no DNS): a literal private address or a local name is refused.

        Names are judged again, by the address actually connected to, when a call is
        made (``upstream.GuardedHTTPConnection``).
        """
        if self.allow_private:
            return
        if _local_or_private(host) if len(host) <= MAX_REMEMBERED_HOST else _local_or_private.__wrapped__(host):
            raise EndpointRefused(private_host_message(host))


# A connector's URL is checked before every call, the same URL against the same patterns
# (a dozen regexes, the usual trusted one last): an accepted one is remembered, as long as
# the URL is not long (it may be rendered from a client's parameters).
MAX_REMEMBERED_URL = 2048


def _check_url(trusted_patterns: tuple[str, ...], url: str) -> str:
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:  # e.g. an unbalanced "[" in the host
        raise EndpointRefused("Connector URL is not a valid URL") from None
    if not any(pattern.match(url) for pattern in _compiled(trusted_patterns)):
        raise EndpointRefused(
            f"Connector URL is not matching the trusted connector endpoint regex, URL is: {_safe(url)}")
    if parts.scheme not in ("http", "https") or not hostname:
        raise EndpointRefused(f"Connector URL must be http or https with a host, URL is: {_safe(url)}")
    return hostname


# Only accepted URLs are kept (lru_cache keeps no exception): a refused one is checked anew.
_checked_host = lru_cache(maxsize=1024)(_check_url)
# Hosts longer than a DNS name may be are judged each time.
MAX_REMEMBERED_HOST = 255


@lru_cache(maxsize=1024)
def _local_or_private(host: str) -> bool:
    """A local name or a literal private address (remembered: judged before every call)."""
    name = host.lower().rstrip(".")
    address = literal_address(name)
    return name in _LOCAL_NAMES or name.endswith(".localhost") or (address is not None and is_private(address))


def private_host_message(host: str) -> str:
    return f"Remote inference host name has private ip address: {host}"


def literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``host`` as an IP address, in any spelling a resolver accepts; None for a name.

    Besides dotted quads and IPv6 this takes the legacy IPv4 forms that inet_aton
    (and so the system resolver) understands: 2130706433, 0x7f000001, 0177.0.0.1, 127.1.
    """
    bare = host.strip("[]").split("%")[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if _LEGACY_IPV4.match(bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def is_private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Anything but a global unicast address: loopback, private, link-local and the
    cloud metadata addresses (169.254.169.254, 100.100.100.200 in 100.64/10), reserved,
    multicast, unspecified."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (not address.is_global or address.is_private or address.is_loopback
            or address.is_link_local or address.is_reserved or address.is_multicast
            or address.is_unspecified)


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in patterns)


def _safe(url: str) -> str:
    """The URL without its query string, which may carry a key."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
