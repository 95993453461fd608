"""The response cache's pure parts: a model's cache setting, a request's cache controls, the
key of an entry, and an entry as stored (``config``). The cache itself, which reads and
writes entries in the store and lets identical calls in flight share one, is the inference
floor's (``inference.cache``)."""

from .config import (CACHE_CONTROLS, CacheConfig, CacheControls, Entry, NO_CONTROLS, cache_key, entry_doc,
                     entry_of, normalized_request, parse_cache, parse_controls)

__all__ = ["CACHE_CONTROLS", "CacheConfig", "CacheControls", "Entry", "NO_CONTROLS", "cache_key", "entry_doc",
           "entry_of", "normalized_request", "parse_cache", "parse_controls"]
