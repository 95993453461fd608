"""Who may call, with what, and how much: API keys, sealed credentials, model
controllers and budgets.

    tenants      the teams keys belong to: their models and limits
    keys         API keys, roles and the authenticator (who the caller is)
    policy       the one predicate of what a caller may reach
    credentials  the seam connector credentials pass through to and from the store (sealed)
    controllers  ml-commons' model controllers: per-user rate limits on one model
    budgets      per-key and per-tenant budgets and limits, checked before a call and settled after
"""
