"""The Anthropic Messages front (``/v1/messages``): its wire shapes (``wire``: a Messages
request as a chat request, a chat answer as a Messages ``message``), its routes, its SSE
events and its error body. Anthropic models are relayed as they are."""
