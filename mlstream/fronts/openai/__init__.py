"""The OpenAI front (``/v1``): its wire shapes (``wire``), one translation per provider
API it does not relay (``translations``: ``converse``, ``anthropic``, ``gemini``,
``sagemaker``), its routes, its stream events and its error body."""
