"""Durable state: connectors, models, groups, tasks, keys, settings and stored answers.

    sqlite       the Store interface and its SQLite implementation (one node)
    postgres     the PostgreSQL implementation (many instances share it)
    open         a store from --store (a path or a postgresql:// URL)
    cluster      the cluster's identity and its stored, live cluster settings
"""
