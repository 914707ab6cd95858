"""Test helpers: a real multi-node ZooKeeper + Kafka cluster for integration tests."""
