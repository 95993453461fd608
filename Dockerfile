# syntax=docker/dockerfile:1
#
# mlstream in a container. Build and run (see docs/deploy.md):
#
#   docker build -t mlstream .
#   docker run --rm -v mlstream-data:/data mlstream keys create --role admin   # prints the key once
#   docker run -d --name mlstream -p 9200:9200 -v mlstream-data:/data --stop-timeout 35 mlstream
#
# Two stages: the builder installs mlstream and its dependencies into a virtualenv at
# /opt/mlstream; the runtime stage is the same slim Python image with that virtualenv,
# no compiler, no pip, running as an unprivileged user. State (the SQLite store and the
# master key file) lives in the volume /data. Any `serve` flag can be appended to
# `docker run ... mlstream serve ...`; settings also come from MLSTREAM_* variables
# (`-e MLSTREAM_LOG_FORMAT=json`) or a mounted file (`--config /etc/mlstream.toml`).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/mlstream
WORKDIR /src
# Only what `pip install .` needs (.dockerignore keeps everything else out of the context).
COPY pyproject.toml setup.cfg README.md ./
COPY mlstream ./mlstream
# mlstream uses botocore's SigV4 signer and event-stream decoder only; neither reads
# botocore's service models (~26 MB), so they are not shipped. OpenTelemetry's SDK and OTLP
# exporter (the otel extra) are in, imported only with --otel-endpoint. The import-and-sign check
# fails the build if that ever stops being true. The runtime needs no pip in the venv.
RUN /opt/mlstream/bin/pip install '.[fast,otel]' \
 && rm -rf /opt/mlstream/lib/python3*/site-packages/botocore/data \
 && /opt/mlstream/bin/python -c "\
from botocore.auth import SigV4Auth; \
from botocore.awsrequest import AWSRequest; \
from botocore.credentials import Credentials; \
from botocore.eventstream import EventStreamBuffer; \
from cryptography.hazmat.primitives.ciphers.aead import AESGCM; \
r = AWSRequest(method='POST', url='https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse', data=b'{}'); \
SigV4Auth(Credentials('a', 'b'), 'bedrock', 'us-east-1').add_auth(r); \
assert r.headers['Authorization'].startswith('AWS4-HMAC-SHA256'); \
import mlstream.app.cli, mlstream.app.compose, mlstream.app.demo, mlstream.telemetry.otel" \
 && /opt/mlstream/bin/mlstream --version \
 && /opt/mlstream/bin/python -m pip uninstall --yes pip setuptools wheel

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 mlstream \
 && useradd --system --uid 10001 --gid mlstream --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin mlstream \
 && mkdir /data \
 && chown mlstream:mlstream /data
COPY --from=builder /opt/mlstream /opt/mlstream
ENV PATH=/opt/mlstream/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MLSTREAM_DATA_DIR=/data
USER mlstream:mlstream
WORKDIR /data
# A named volume starts as a copy of this (empty, mlstream-owned) directory; a bind mount
# must be writable by uid 10001.
VOLUME /data
EXPOSE 9200
# SIGTERM: stop accepting, let open streams finish for --drain-timeout (30 s by default;
# give `docker stop` / the orchestrator a longer grace period), exit 0.
STOPSIGNAL SIGTERM
# /healthz answers without an API key. Adjust if you change --port or serve TLS.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9200/healthz', timeout=4)"]
ENTRYPOINT ["mlstream"]
# Listening on every interface needs an API key first (`mlstream keys create --role admin`,
# as above); mlstream refuses to serve 0.0.0.0 without one unless --insecure-no-auth.
CMD ["serve", "--host", "0.0.0.0", "--port", "9200", "--data-dir", "/data"]
