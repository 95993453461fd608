"""mlstream: stream remote LLM answers through the OpenSearch ML Commons REST API."""

__version__ = "0.1.0"
