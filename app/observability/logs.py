"""ctxd's logging: structured lines (structlog) with the request id on every line.

The request id is asgi-correlation-id's context variable, set per HTTP request by its
``CorrelationIdMiddleware`` (app/main.py: the incoming ``X-Request-ID`` when sane, else a
new 32-hex id; echoed in the response header and in every problem+json body). Threads the
request runs in (FastAPI's thread pool copies the context) see the same id.

Under ``ctxd serve`` (the root logger has no handler) :func:`configure_logging` gives the
root logger one stderr handler whose formatter is structlog's ``ProcessorFormatter``:
every record, ctxd's, uvicorn's (its log configuration is turned off: ``log_config=None``)
and the libraries', becomes one line

* ``json`` (``CTXD_LOG_FORMAT=json``; the default when stderr is not a terminal):
  ``{"timestamp": "2026-12-01T07:31:02.123456Z", "level": "info", "logger": "ctxd",
  "event": "ctxd starting: ...", "request_id": null, "pid": 123}`` (``request_id`` is the
  request's inside one, null outside; ``exception`` holds a traceback);
* ``console`` (the default on a terminal): the same fields as aligned text for humans.

A host that configured logging itself (a test runner, an embedding application) keeps its
handlers; a log record factory still puts ``record.request_id`` ("-" outside a request) on
every record, so its formats may use ``%(request_id)s`` (:data:`FORMAT`).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog
from asgi_correlation_id import correlation_id

LOGGERS = ("ctxd", "app", "uvicorn", "uvicorn.error", "uvicorn.access", "asgi_correlation_id")
#: A plain logging format with the request id, for hosts with their own handlers.
FORMAT = "%(asctime)s %(levelname)s %(name)s [request_id=%(request_id)s] %(message)s"
FORMATS = ("auto", "json", "console")

#: ``CTXD_LOG_LEVEL`` names (app.settings.LOG_LEVELS) as logging levels; "trace" is uvicorn's 5.
LEVELS = {"critical": logging.CRITICAL, "error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO,
          "debug": logging.DEBUG, "trace": 5}

_configured = False


def current_request_id() -> str | None:
    """The id of the HTTP request being served (None outside a request)."""
    request_id: str | None = correlation_id.get()
    return request_id


def _install_record_factory() -> None:
    previous = logging.getLogRecordFactory()
    if getattr(previous, "ctxd_request_id", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        record.request_id = correlation_id.get() or "-"
        return record

    factory.ctxd_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def _add_request_id(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    """The request id when the record was made (the record factory's; its "-" is null here),
    else the current one."""
    record = event.get("_record")
    rid = getattr(record, "request_id", None) if record is not None else correlation_id.get()
    event["request_id"] = None if rid in (None, "-") else rid
    return event


def _add_pid(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    event.setdefault("pid", os.getpid())  # which worker of `ctxd serve --workers N`
    return event


def _drop_color_message(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
    event.pop("color_message", None)  # uvicorn's coloured copy of the message
    return event


def resolve_format(fmt: str, stream: Any = None) -> str:
    """``json`` or ``console``: ``auto`` is console when ``stream`` (default stderr) is a terminal."""
    if fmt != "auto":
        return fmt
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return "console" if callable(isatty) and isatty() else "json"


def formatter(fmt: str) -> logging.Formatter:
    """The ``ProcessorFormatter`` of ``fmt`` (``json`` or ``console``) for any stdlib handler."""
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
        _add_pid,
        structlog.stdlib.ExtraAdder(),
        _add_request_id,
        _drop_color_message,
    ]
    renderer: Any
    final: list[Any]
    if fmt == "json":
        final = [structlog.stdlib.ProcessorFormatter.remove_processors_meta, structlog.processors.format_exc_info,
                 structlog.processors.JSONRenderer()]
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        final = [structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]
    formatter: logging.Formatter = structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=final)
    return formatter


def configure_logging(level: int | str = logging.INFO, fmt: str = "auto") -> None:
    """Idempotent (once per process). Puts the request id on every record; sets ctxd's and
    uvicorn's loggers to ``level`` (a logging level or a ``CTXD_LOG_LEVEL`` name) and the
    root to ``level`` or warning, whichever is higher (libraries' info lines stay out); and,
    if the root logger has no handler (``ctxd serve``), gives it one stderr handler in
    ``fmt`` (``auto | json | console``, :func:`resolve_format`). A host that configured
    logging keeps its handlers (the records propagate to them)."""
    global _configured
    _install_record_factory()
    if _configured:
        return
    _configured = True
    if isinstance(level, str):
        level = LEVELS[level.lower()]
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter(resolve_format(fmt, sys.stderr)))
        root.addHandler(handler)
        root.setLevel(max(level, logging.WARNING))
        for name in LOGGERS:  # uvicorn's own configuration is off (log_config=None): no handler of theirs
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
            logger.setLevel(level)
    else:
        for name in ("ctxd", "app"):
            logger = logging.getLogger(name)
            if logger.level == logging.NOTSET:
                logger.setLevel(level)
    structlog.configure(  # for code that logs with structlog.get_logger(): the same handler and format
        processors=[structlog.stdlib.filter_by_level, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
