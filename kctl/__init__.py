"""kctl: an operator's toolkit for ZooKeeper-based Apache Kafka clusters on Docker Compose."""

__version__ = "0.1.0"
