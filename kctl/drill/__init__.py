"""Failure drills: a fault injected under load, healed, and judged by an independent read of the topic."""
