"""What calls cost and how much a key may spend: values, and the usage tables.

    records      usage records, prices, key limits, periods (values)
    tokens       token counts read from provider answers (values)
    limits       token-bucket rate limits (ml-commons' rate_limiter)
    tables       the usage tables in SQLite and PostgreSQL
    recorder     the batching writer of usage records
"""
