"""What every read of Prometheus raises when it cannot answer."""


class MetricsUnavailable(Exception):
    """Prometheus could not answer: every pod's utilization is unknown, never idle."""
