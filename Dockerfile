# syntax=docker/dockerfile:1
# ctxd service image: `docker build -t ctxd .` then `docker compose up`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    CTXD_DATA_DIR=/data \
    MPLCONFIGDIR=/tmp/matplotlib

RUN groupadd --system --gid 10001 ctxd \
 && useradd --system --uid 10001 --gid ctxd --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin ctxd \
 && mkdir -p /data \
 && chown ctxd:ctxd /data

WORKDIR /opt/ctxd

# Dependencies first, in their own layer: it is rebuilt only when pyproject.toml changes.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# The project itself. Editable on purpose: app/store/migrate.py finds migrations/
# next to the app/ package (parents[2]), which a wheel install would not ship.
COPY README.md* alembic.ini ./
COPY migrations ./migrations
COPY app ./app
RUN pip install --no-deps -e . \
 && python -c "import app.cli" \
 && chown -R root:root /opt/ctxd

USER ctxd
VOLUME ["/data"]
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request, sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"]

CMD ["ctxd", "serve", "--host", "0.0.0.0", "--port", "8000"]
