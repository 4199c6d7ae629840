"""Hypothesis on a shared 2-core machine: the properties are what is tested, never how
fast examples are drawn or run (a busy neighbour made the too_slow health check and the
200 ms deadline fail tests whose properties held)."""

from hypothesis import HealthCheck, settings

settings.register_profile(
    "trainwarden", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("trainwarden")
