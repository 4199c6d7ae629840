"""Structured JSON logs: trainwarden's own lines and kopf's, one JSON object per line."""

import logging
import sys

import structlog


def configure(level: str = "INFO") -> None:
    """Route structlog and the standard library (kopf logs there) through one JSON renderer."""
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
        foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The Kubernetes client logs every request body at DEBUG; keep it quiet.
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def get(name: str) -> structlog.stdlib.BoundLogger:
    """A named logger; bind the object and policy before logging about them."""
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
