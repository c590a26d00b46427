"""Minimal logging for ctxd: a request id on every log record, and a stderr handler for
ctxd's own loggers when the host has configured none (``ctxd serve``).

The request id lives in a context variable set per HTTP request by
:class:`app.api.middleware.RequestContext`; a log record factory copies it onto every
record as ``record.request_id`` ("-" outside a request), so any handler's format may use
``%(request_id)s``. Threads started by the request (FastAPI runs sync routes in a thread
pool with the request's context copied) see the same id.
"""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from typing import Any

REQUEST_ID: ContextVar[str] = ContextVar("ctxd_request_id", default="-")
LOGGERS = ("ctxd", "app")  # ctxd's logger and the modules' (logging.getLogger(__name__))
FORMAT = "%(asctime)s %(levelname)s %(name)s [request_id=%(request_id)s] %(message)s"

_configured = False


def _install_record_factory() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "ctxd_request_id", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.request_id = REQUEST_ID.get()
        return record

    factory.ctxd_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


#: ``CTXD_LOG_LEVEL`` names (app.settings.LOG_LEVELS) as logging levels; "trace" is uvicorn's 5.
LEVELS = {"critical": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO,
          "debug": logging.DEBUG, "trace": 5}


def configure_logging(level: int | str = logging.INFO) -> None:
    """Idempotent. Puts the request id on every record; sets ctxd's loggers to ``level``
    (a logging level or a ``CTXD_LOG_LEVEL`` name; only when unset) and, if the root logger
    has no handler (nobody configured logging, as under ``ctxd serve``), gives them one
    stderr handler with :data:`FORMAT`. A host that
    configured logging keeps its handlers (the records propagate to them)."""
    global _configured
    _install_record_factory()
    if _configured:
        return
    _configured = True
    if isinstance(level, str):
        level = LEVELS[level.lower()]
    handler: logging.Handler | None = None
    if not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(level)
        if handler is not None:
            logger.addHandler(handler)  # the root has none, so propagating prints nothing twice
