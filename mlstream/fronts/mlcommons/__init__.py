"""ml-commons' front: its REST API (``routes``), the OpenSearch node endpoints clients
call (``node``), its stream events (``events``) and its error body (``errors``)."""
