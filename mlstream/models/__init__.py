"""Models and connectors: what is registered, checked and looked up.

    connectors   connector documents, actions and credentials (values)
    interfaces   a model's input and output JSON Schemas
    fields       the fields a register or update request sets (pure)
    routing      router models: targets, health, candidates
    search       the _search routes' query subset
    registry     connectors, models and model groups: stored, cached, deployed
    ttl          undeploying models whose time to live has passed
"""
