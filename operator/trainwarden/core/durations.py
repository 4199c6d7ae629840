"""Durations as people write them in policies ("45s", "2h", "7d")."""

from datetime import timedelta


def human(value: timedelta) -> str:
    """The largest unit that divides it exactly, so messages echo what the policy said."""
    seconds = int(value.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
