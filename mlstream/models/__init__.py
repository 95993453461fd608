"""Models and connectors: what is registered, checked and looked up.

    connectors   connector documents, actions and credentials (values)
    interfaces   a model's input and output JSON Schemas
    fields       the fields a register or update request sets (pure)
    groups       a model group's access fields and owner, checked as ml-commons does
    tls          a connector's TLS material (skip_ssl_verification, mutual TLS)
    routing      router models: targets, health, candidates
    search       the _search routes' query subset
    registry     connectors, models and model groups: stored, cached, deployed
    ttl          undeploying models whose time to live has passed
"""
