"""Calling providers: pooled urllib3 connections, retries and request signing.

    client           the connection pools and one provider call (UpstreamRequest -> response)
    retry            ml-commons' retry policy (client_config)
    signing          SigV4 signing of a request
    aws_credentials  where AWS credentials come from (static, role, STS)
"""
