"""The APIs clients speak, one package each, over the one predictor:

    mlcommons/   ml-commons' REST API and the OpenSearch node endpoints (/_plugins/_ml, /)
    openai/      OpenAI's API (/v1): chat and text completions, embeddings, models
    anthropic/   Anthropic's Messages API (/v1/messages): Claude Code, the anthropic SDK
    responses/   OpenAI's Responses API (/v1/responses): stored responses, the Agents SDK
    console/     the console in the browser (/_console): static files, calling the APIs above
    conversation a conversation, provider-neutral: what a front's messages become
    chat         a chat request bound to any chat model with the OpenAI front's
                 translations: what the Anthropic and Responses fronts send
    models       the model a request names, by id or unique name (every /v1 front)

A front turns its request into an ``predict.Ask``, hands the ``Prepared`` call to the
predictor, and writes the answer, the stream and the errors in its own shapes
(``server.routing.Front``: its error body; ``StreamEvents``: its stream).
"""
