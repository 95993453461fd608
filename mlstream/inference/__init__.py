"""The predictor: one _predict (or front) call through guardrails, budgets, routing,
provider and post-processing; and batch prediction.

    predict      the predictor, streamed and whole
    batch        batch_predict tasks
"""
