"""Watching the cluster: consumer-lag evaluation (lag.py) and alert states (alerts.py)."""
