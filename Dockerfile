# prober in a container: `docker run --rm -v prober-data:/data -e ANTHROPIC_API_KEY prober run --suite nightly`
#
# BASE is any image with Python 3.11 as `python3` and its venv module: the public python:3.11-slim
# by default; CI (scripts/build-image.sh) builds from a local Debian bookworm base made with
# mmdebstrap, because no container registry is reachable there.
ARG BASE=python:3.11-slim
FROM ${BASE}

# A TLS-intercepting proxy's CA bundle for pip, bind-mounted by the builder at build time only
# (scripts/build-image.sh passes the host's PIP_CERT); unset, pip uses its own bundle.
ARG PIP_CERT=""

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PROBER_CACHE_DIR=/data/cache \
    PATH=/opt/prober/venv/bin:$PATH

WORKDIR /opt/prober
COPY pyproject.toml README.md ./
COPY prober ./prober
COPY requirements/ci.lock ./requirements/
# A venv, not the system's pip: Debian's python3 refuses `pip install` outside one (PEP 668), and
# the same line then works on both bases. The versions are the ones CI tests (requirements/ci.lock,
# as constraints without the hashes: pip checks hashes only when every requirement has one, and
# the project itself has none). The distribution is llm-prober; its command is `prober`.
RUN if [ -z "$PIP_CERT" ]; then unset PIP_CERT; fi \
    && python3 -m venv /opt/prober/venv \
    && sed -n 's/^\([A-Za-z0-9._-]*==[^ ]*\).*/\1/p' requirements/ci.lock > /tmp/pins.txt \
    && pip install --constraint /tmp/pins.txt "llm-prober[postgres,parquet] @ file:///opt/prober" \
    && rm /tmp/pins.txt \
    && useradd --create-home --uid 10001 prober \
    && mkdir -p /data \
    && chown prober /data

USER 10001
WORKDIR /data
# The database (sqlite:///prober.db resolves to /data/prober.db) and the local-endpoint cache.
VOLUME ["/data"]
ENTRYPOINT ["prober"]
CMD ["--help"]
