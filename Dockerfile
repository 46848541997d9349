# prober in a container: `docker run --rm -v prober-data:/data -e ANTHROPIC_API_KEY prober run --suite nightly`
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PROBER_CACHE_DIR=/data/cache

WORKDIR /opt/prober
COPY pyproject.toml README.md ./
COPY prober ./prober
COPY probes ./probes
COPY suites ./suites
COPY store ./store
COPY reports ./reports
RUN pip install ".[postgres,parquet]" && useradd --create-home --uid 10001 prober && mkdir -p /data && chown prober /data

USER prober
WORKDIR /data
# The database (sqlite:///prober.db resolves to /data/prober.db) and the local-endpoint cache.
VOLUME ["/data"]
ENTRYPOINT ["prober"]
CMD ["--help"]
