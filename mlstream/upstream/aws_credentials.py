"""AWS credentials for ``aws_sigv4`` connectors, from botocore's own code only.

    credential has access_key + secret_key   those keys (and session_token), as given
    credential has neither                   botocore's default chain, resolved once: the
                                             environment, the shared config and credentials
                                             files (AWS_PROFILE), a web identity token file
                                             (Kubernetes IRSA), container and instance
                                             metadata; refreshed by botocore before expiry
    credential has roleArn (or role_arn)     that role, assumed through STS with the
                                             credentials above as the source
                                             (botocore's AssumeRoleCredentialFetcher),
                                             refreshed by botocore before expiry

These lookups are the server's own (the metadata service, STS, the files), not a
connector's endpoint: the endpoint guard does not apply to them. STS is reached at
its regional endpoint for the connector's region, or where botocore's configuration
points (``AWS_ENDPOINT_URL_STS``, ``endpoint_url`` in the profile).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from functools import partial
from typing import Any

from ..models.connectors import Connector
from ..errors import UpstreamError
from ..redaction import redact

ROLE_KEYS = ("roleArn", "role_arn")
EXTERNAL_ID_KEYS = ("externalId", "external_id")
ROLE_SESSION_NAME = "mlstream"
# The STS client's own limits: a credential lookup must not outlast a provider call. At
# worst 2 attempts x (3 s to connect + 10 s to read) + one standard-mode backoff (at most
# 1 s, or 6 s when STS sends x-amz-retry-after) = 32 s, below the 60 s a provider call
# may take by the connector defaults (connection_timeout 30 s + read_timeout 30 s).
STS_CONNECT_TIMEOUT_SECONDS = 3
STS_READ_TIMEOUT_SECONDS = 10
STS_ATTEMPTS = 2
# A chain that found nothing is not asked again for this long: on a host with no AWS
# setup its last step (the instance metadata service) costs a connect timeout, which
# every call would otherwise wait for before its 502. Credentials put in place later
# (a mounted token, a profile) are found once it has passed.
NO_CREDENTIALS_RECHECK_SECONDS = 30.0
# Assumed roles kept (each refreshes itself); past this the least recently used is dropped
# and assumed again when next needed.
MAX_ASSUMED_ROLES = 256


def _no_credentials() -> UpstreamError:
    return UpstreamError("no AWS credentials: the connector has no access_key and botocore's chain "
                         "(environment, config files, web identity, container or instance role) found none",
                         kind="connection")


def _secrets_of(source: Any) -> tuple[str, ...]:
    """The secret parts of source credentials (none when there were none yet)."""
    if source is None:
        return ()
    frozen = source.get_frozen_credentials()
    return tuple(value for value in (frozen.secret_key, frozen.token) if value)


def _fingerprint(source: Any) -> str:
    """Static source keys as a cache key: a digest, so the cache holds no secret as a key."""
    parts = (source.access_key, source.secret_key, source.token or "")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def role_arn(credential: dict[str, str] | Any) -> str | None:
    return next((credential[key] for key in ROLE_KEYS if credential.get(key)), None)


class AwsCredentials:
    """The credentials to sign one connector's calls with; one per server."""

    def __init__(self) -> None:
        # Guards the cached chain and roles (dict work only): resolving and refreshing
        # happen outside it, under botocore's own locks.
        self._lock = threading.Lock()
        # Guards creating an STS client on the shared botocore session, which is not
        # thread-safe (it loads and caches service models; no network).
        self._client_lock = threading.Lock()
        self._session: Any = None
        self._chain: Any = None
        self._chain_missing_since: float | None = None  # when the chain last found nothing
        # role, external id, region, and a fingerprint of the source keys (never the keys)
        self._roles: OrderedDict[tuple[str, ...], Any] = OrderedDict()

    def for_connector(self, connector: Connector) -> Any:
        """Frozen credentials (access key, secret key, token) valid now; raises
        UpstreamError when there are none or STS refuses."""
        from botocore.exceptions import BotoCoreError, ClientError

        source = None
        try:
            source = self._source(connector)
            return self._role(connector, source).get_frozen_credentials()
        except ClientError as exc:  # STS answered with an error
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            # AWS's SignatureDoesNotMatch quotes the canonical request, session token and
            # all. The role ARN is no secret, and AccessDenied names it.
            secrets = [value for key, value in connector.credential.items() if key not in ROLE_KEYS]
            message = redact(f"{error.get('Code')}: {error.get('Message')}", [*secrets, *_secrets_of(source)])
            raise UpstreamError(f"Error from remote service: STS AssumeRole failed: {message}",
                                upstream_status=status) from None
        except BotoCoreError as exc:
            raise UpstreamError(f"could not get AWS credentials: {exc}", kind="connection") from None

    def _source(self, connector: Connector) -> Any:
        """The connector's own keys, else botocore's chain."""
        from botocore.credentials import Credentials

        credential = connector.credential
        if credential.get("access_key"):
            return Credentials(credential["access_key"], credential["secret_key"],
                               credential.get("session_token") or None)
        return self._default_chain()

    def _role(self, connector: Connector, source: Any) -> Any:
        """The connector's role assumed with ``source``, or ``source`` when it has none."""
        credential = connector.credential
        role = role_arn(credential)
        if role is None:
            return source
        external_id = next((credential[key] for key in EXTERNAL_ID_KEYS if credential.get(key)), "")
        region = connector.aws_setting("region")
        key = (role, external_id, region, _fingerprint(source) if credential.get("access_key") else "chain")
        with self._lock:
            assumed = self._roles.get(key)
            if assumed is not None:
                self._roles.move_to_end(key)
        if assumed is None:
            assumed = self._assume(source, role, external_id, region)
            with self._lock:
                assumed = self._roles.setdefault(key, assumed)
                while len(self._roles) > MAX_ASSUMED_ROLES:
                    self._roles.popitem(last=False)
        return assumed

    def _default_chain(self) -> Any:
        with self._lock:
            chain, missing_since = self._chain, self._chain_missing_since
        if chain is not None:
            return chain
        if missing_since is not None and time.monotonic() - missing_since < NO_CREDENTIALS_RECHECK_SECONDS:
            raise _no_credentials()
        found = self._botocore_session().get_credentials()
        with self._lock:
            if found is None:
                self._chain_missing_since = time.monotonic()
            else:
                self._chain = self._chain or found
            chain = self._chain
        if chain is None:
            raise _no_credentials()
        return chain

    def _assume(self, source: Any, role: str, external_id: str, region: str) -> Any:
        from botocore.config import Config
        from botocore.credentials import AssumeRoleCredentialFetcher, DeferredRefreshableCredentials

        extra = {"RoleSessionName": ROLE_SESSION_NAME}
        if external_id:
            extra["ExternalId"] = external_id
        config = Config(connect_timeout=STS_CONNECT_TIMEOUT_SECONDS, read_timeout=STS_READ_TIMEOUT_SECONDS,
                        retries={"mode": "standard", "total_max_attempts": STS_ATTEMPTS})
        # The fetcher creates a client per fetch, with the source's keys of that moment (a
        # chain's keys rotate), so clients are not kept; creating one is serialised.
        client_creator = partial(self._create_client, region_name=region, config=config)
        fetcher = AssumeRoleCredentialFetcher(client_creator, source, role, extra_args=extra)
        return DeferredRefreshableCredentials(refresh_using=fetcher.fetch_credentials, method="assume-role")

    def _create_client(self, service_name: str, **options: Any) -> Any:
        session = self._botocore_session()
        with self._client_lock:
            return session.create_client(service_name, **options)

    def _botocore_session(self) -> Any:
        # Imported on first use, as signing is: botocore's session costs memory a server
        # with only static keys or no AWS connector never needs.
        import botocore.session

        with self._lock:
            session = self._session
        if session is None:
            session = botocore.session.Session()
            with self._lock:
                self._session = self._session or session
                session = self._session
        return session
