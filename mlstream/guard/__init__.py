"""Guards on text: guardrails, stop words and the Java regex dialect they use.

    regex        java.util.regex patterns translated to Python's re
    percolate    OpenSearch's percolate query, small
    guardrails   a model's input and output guardrails
    stopwords    stop-word indices (stored) matched through percolate
"""
