"""Who may call, with what, and how much: API keys, sealed credentials, model
controllers and budgets.

    keys         API keys, roles and the authenticator
    credentials  the seam connector credentials pass through to and from the store (sealed)
    controllers  ml-commons' model controllers: per-user rate limits on one model
    budgets      per-key spend budgets and limits, checked before a call and settled after
"""
