"""The OpenAI Responses front (``/v1/responses``): its wire shapes (``wire``: a Responses
request as a chat request, a chat answer as a ``response``), its stream events with
``sequence_number``, stored responses (``previous_response_id``, ``GET``/``DELETE``), its
routes. Errors are OpenAI's body."""
