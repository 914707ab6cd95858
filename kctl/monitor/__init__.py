"""Watching the cluster: consumer-lag evaluation (lag.py)."""
