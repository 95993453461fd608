"""The Responses front's errors: OpenAI's body and statuses, as on the rest of ``/v1``
(``openai.errors``), under a front of its own name (metrics, logs). A stream that fails
after its first byte ends with ``response.failed`` (``events``)."""

from __future__ import annotations

from ...server.routing import Front
from ..openai.errors import error_reply

RESPONSES_FRONT = Front("responses", lambda exc, trace: error_reply(exc))
