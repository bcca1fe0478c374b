# refusal-audit worker / CLI image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app

COPY pyproject.toml README.md ./
COPY refusal_audit ./refusal_audit
COPY schemas ./schemas
COPY processors ./processors
COPY prompts ./prompts
COPY streams ./streams
COPY warehouse ./warehouse
COPY inference ./inference
COPY examples ./examples
# The int8 sentence encoders are fetched at build time (pinned sha256, docs/encoders.md) into
# a folder outside the /data volume, owned by the audit user (files 0600): the image runs
# offline.
ENV REFUSAL_AUDIT_ENCODER_DIR=/opt/refusal-audit/encoders
RUN pip install --no-cache-dir . && useradd --create-home --uid 10001 audit \
    && mkdir -p /data /opt/refusal-audit && chown audit /data /opt/refusal-audit
USER audit
RUN refusal-audit encoders fetch && refusal-audit encoders list
ENV REFUSAL_AUDIT_DATA_DIR=/data
VOLUME ["/data"]
ENTRYPOINT ["refusal-audit"]
CMD ["--help"]
