"""What test modules share, split by concern. Test modules import from here, never from
each other or from a ``conftest.py`` (those hold fixtures and hooks only; fixtures may
use this package too). ``tests/unit/test_test_layout.py`` keeps it so.

    timeouts     HANG_GUARD, SUBPROCESS_HANG_GUARD, poll_until
    fuzz         the hypothesis settings of every fuzz test
    clocks       FakeClock, a monotonic clock that moves only when told
    threads      run_in_thread
    responses    StubResponse, a urllib3 response scripted chunk by chunk
    stores       PostgreSQL of a test session's own, fresh databases, StoreFactory
    clients      the JSON Client, API-key headers, the 401 shape
    wire         raw HTTP requests and the exact bytes of the response
    streams      the seed's messages, opening predict streams, a stream's channel (white-box)
    connectors   connector bodies pointed at the fakes (the seed's, Bedrock's, the blueprints')
    servers      what a test server trusts; ``mlstream`` as a child process: serve, keys, stop
    aws          keeping the machine's AWS settings away from botocore
    openai_sdk   the ``openai`` SDK pointed at a server
    openai_wire  reading OpenAI's SSE bytes and request bodies
    painless     the Painless fuzz grammar, limits and post-process cases
"""
