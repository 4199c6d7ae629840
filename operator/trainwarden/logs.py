"""Structured JSON logs: trainwarden's own lines and kopf's, one JSON object per line."""

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

# Loggers whose INFO lines are per-request or per-handler noise ("Handler succeeded", probe
# access lines); they still log warnings and errors, and everything at DEBUG.
_CHATTY = ("kopf", "aiohttp.access")


def _kopf_object(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """kopf attaches its whole settings object and a reference dict to every record:
    keep the object reference, in the same `object` field trainwarden's own lines use."""
    event.pop("settings", None)
    event.pop("k8s_skip", None)
    ref = event.pop("k8s_ref", None)
    if isinstance(ref, dict):
        parts = [ref.get("kind"), ref.get("namespace"), ref.get("name")]
        event["object"] = "/".join(p for p in parts if p)
    return event


def configure(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Route structlog and the standard library (kopf logs there) through one JSON renderer,
    to stdout (a command whose stdout is its answer passes stderr)."""
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder(), _kopf_object],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
    )
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in _CHATTY:
        logging.getLogger(name).setLevel(level.upper() if level.upper() == "DEBUG" else "WARNING")
    # The Kubernetes client logs every request body at DEBUG; keep it quiet.
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def get(name: str) -> structlog.stdlib.BoundLogger:
    """A named logger; bind the object and policy before logging about them."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
