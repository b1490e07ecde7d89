# The image of the compose services: the lookback command with its dependencies.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 LOOKBACK_HOME=/data
WORKDIR /app
COPY pyproject.toml README.md* LICENSE MANIFEST.in ./
COPY lookback ./lookback
COPY ingest ./ingest
COPY index ./index
COPY query ./query
COPY workers ./workers
COPY embedders ./embedders
COPY integrations ./integrations
COPY docs ./docs
RUN pip install --no-cache-dir . && useradd --create-home --uid 1000 lookback \
    && mkdir -p /data && chown lookback /data
USER lookback
VOLUME ["/data"]
CMD ["lookback", "status"]
