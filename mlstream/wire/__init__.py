"""Wire formats and languages: pure, I/O-free, table-tested and fuzzed.

    framing      HTTP/1.1 request framing (head, chunked bodies, content codings)
    sse          server-sent events: parse and write
    jsonpath     the JSONPath subset connectors' response filters use
    templating   ml-commons' ${parameters.x} templates
    filterpath   OpenSearch's filter_path response filtering
"""
