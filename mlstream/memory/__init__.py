"""Conversation memory (ml-commons' ``/_plugins/_ml/memory``): memories and their messages,
kept in the store (``conversations``)."""
