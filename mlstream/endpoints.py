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

from .errors import EndpointRefused

_LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


@dataclass(frozen=True, slots=True)
class EndpointPolicy:
    trusted_patterns: tuple[str, ...]
    allow_private: bool

    def check_url(self, url: str) -> str:
        """Raise EndpointRefused unless ``url`` is trusted; return its host."""
        if not any(pattern.match(url) for pattern in _compiled(self.trusted_patterns)):
            raise EndpointRefused(
                f"Connector URL is not matching the trusted connector endpoint regex, URL is: {_safe(url)}")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointRefused(f"Connector URL must be http or https with a host, URL is: {_safe(url)}")
        return parts.hostname

    def check_literal_host(self, host: str) -> None:
        """The create-time check: a literal private address or a local name is refused."""
        if self.allow_private:
            return
        address = _literal_address(host)
        if host.lower().rstrip(".") in _LOCAL_NAMES or (address is not None and _is_private(address)):
            raise EndpointRefused(f"Remote inference host name has private ip address: {host}")

    def check_resolved_host(self, host: str, port: int | None) -> None:
        """The call-time check: every address the host resolves to must be public."""
        if self.allow_private:
            return
        self.check_literal_host(host)
        try:
            infos = socket.getaddrinfo(host, port or 443, proto=socket.IPPROTO_TCP)
        except OSError:
            return  # the connection attempt reports an unknown host as a 502
        for info in infos:
            if _is_private(ipaddress.ip_address(info[4][0].split("%")[0])):
                raise EndpointRefused(f"Remote inference host name has private ip address: {host}")


@lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in patterns)


def _literal_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def _is_private(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (address.is_private or address.is_loopback or address.is_link_local
            or address.is_reserved or address.is_multicast or address.is_unspecified)


def _safe(url: str) -> str:
    """The URL without its query string, which may carry a key."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"
