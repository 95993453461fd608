"""ml-commons' agents: their registration (``spec``), the flow agent's run (``flow``) and
the service that keeps and runs them (``agents``)."""
