"""Kafka through confluent-kafka: admin, producers, consumers (see docs/architecture.md)."""

from kctl.deferred import defer_import

# confluent-kafka's package __init__ imports asyncio (for its serializers' async helpers, which kctl
# never calls): 30-50 ms of every command that talks to Kafka. It loads when something uses it.
defer_import("asyncio")
