"""mlstream's benchmark harness: ``python -m bench`` (``--quick`` for a smoke run).

It starts the fake OpenAI provider and mlstream on loopback, runs six scenarios,
each against the provider directly and through mlstream, alternating, and a
keep-alive churn soak that fails the run on a freeze or a leak; writes
``bench/results/<name>.json`` and prints a Markdown table. See bench/README.md.

    __main__.py   command line, the run's lifecycle, the JSON
    scenarios.py  the scenarios and their sizes (Config)
    loadgen.py    the lean selectors-based HTTP/SSE load generator; one-client alternating driver
    procs.py      child processes (fake, mlstream), /proc figures, setup calls
    report.py     goals and the Markdown report
"""
