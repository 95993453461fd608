"""AWS SigV4 signing of upstream requests (botocore's signer, our urllib3 transport).

The path is percent-encoded once before signing (a Bedrock model id's ``:``
becomes ``%3A``; an inference profile ARN's ``/``, written as it is or as ``%2F``,
becomes ``%2F``, so the ARN stays one path segment) and the signature covers
exactly the URL, headers and body that go on the wire; botocore encodes the path again inside the canonical request, as
SigV4 wants for every service but S3. Sign right before each send: the signature
carries a timestamp, so a retry is signed afresh.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..models.connectors import Connector, UpstreamRequest

# Headers botocore adds; anything the connector set under these names is replaced.
_SIGNING_HEADERS = ("authorization", "x-amz-date", "x-amz-security-token", "x-amz-content-sha256")


# bedrock-runtime's model routes: the model id (a name, an inference profile id, or an
# ARN with "/" in it) is one segment between "/model/" and the operation.
_BEDROCK_MODEL_ROUTE = re.compile(r"(/model/)(.+)(/(?:converse|converse-stream|invoke|invoke-with-response-stream))")


def wire_url(url: str) -> str:
    """``url`` with its path percent-encoded exactly once (``:`` -> ``%3A``, an
    encoded ``/`` kept as ``%2F``)."""
    parts = urlsplit(url)
    route = _BEDROCK_MODEL_ROUTE.fullmatch(parts.path)
    if route:
        path = route[1] + _segment(route[2]) + route[3]
    else:
        path = "/".join(_segment(segment) for segment in parts.path.split("/"))
    return urlunsplit(parts._replace(path=path))


def _segment(raw: str) -> str:
    return quote(unquote(raw), safe="")


def sign_request(request: UpstreamRequest, connector: Connector, credentials: Any) -> UpstreamRequest:
    """A copy of ``request`` with SigV4 headers for the connector's region and service,
    signed with ``credentials`` (botocore credentials: access_key, secret_key, token)."""
    # Imported on first use: botocore's signer costs several MB of memory that a
    # server with only OpenAI connectors never needs.
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    url = wire_url(request.url)
    parts = urlsplit(url)
    headers = {name: value for name, value in request.headers.items()
               if name.lower() not in _SIGNING_HEADERS and name.lower() != "host"}
    headers["Host"] = parts.netloc  # sign the Host header that urllib3 will send
    aws_request = AWSRequest(method=request.method, url=url, data=request.body or b"", headers=headers)
    SigV4Auth(credentials, connector.aws_setting("service_name"),
              connector.aws_setting("region")).add_auth(aws_request)
    return replace(request, url=url, headers=dict(aws_request.headers.items()))
