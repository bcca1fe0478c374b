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
COPY examples ./examples
RUN pip install --no-cache-dir . && useradd --create-home --uid 10001 audit \
    && mkdir -p /data && chown audit /data
USER audit
ENV REFUSAL_AUDIT_DATA_DIR=/data
VOLUME ["/data"]
ENTRYPOINT ["refusal-audit"]
CMD ["--help"]
