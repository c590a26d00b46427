# syntax=docker/dockerfile:1
# ctxd service image (issue 13 item 4): `docker build -t ctxd:dev .`, then `docker compose up`.
#
# builder: a venv with the locked runtime dependencies (requirements.lock: exact versions,
#          hashes checked) and ctxd itself as a wheel (non-editable: the alembic migrations
#          ship inside the package, app/migrations).
# runtime: the same slim Python with only that venv copied in; runs as a non-root user.
# No eval extra (matplotlib plots) and no test tools in the image. CI cannot build images;
# tests/deploy/test_image.py parses this file and replays its install steps in a venv.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/ctxd
ENV PATH=/opt/ctxd/bin:$PATH
WORKDIR /src
# Dependencies first, in their own layer: rebuilt only when the locks change. The build
# tools (pyproject's [build-system]) are locked too and used without build isolation, so
# nothing in the image comes from an unpinned, unhashed download.
COPY requirements.lock requirements-build.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock -r requirements-build.lock
# The project (the service, app, and its offline tools, ctxd_tools: one wheel), built as a
# wheel and installed without touching the locked dependencies.
COPY pyproject.toml README.md ./
COPY app ./app
COPY ctxd_tools ./ctxd_tools
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && pip install --no-deps --no-index /wheels/ctxd-*.whl \
 && pip check \
 && python -c "import app.cli, app.main"

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/ctxd/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    CTXD_DATA_DIR=/data
RUN groupadd --system --gid 10001 ctxd \
 && useradd --system --uid 10001 --gid ctxd --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin ctxd \
 && mkdir -p /data \
 && chown ctxd:ctxd /data
# root-owned and read-only for the service user
COPY --from=builder /opt/ctxd /opt/ctxd
USER ctxd:ctxd
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000

# Ready = the database answers and the default profile's tokenizer is loaded (503 otherwise).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=3).status == 200 else 1)"]

CMD ["ctxd", "serve", "--host", "0.0.0.0", "--port", "8000"]
