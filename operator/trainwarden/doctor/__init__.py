"""`trainwarden doctor`: what an installation needs, checked from where an admin sits.

checks.py decides (pure, over plain data); probe.py reads the cluster and Prometheus.
"""
