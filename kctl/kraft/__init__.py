"""Leaving ZooKeeper: the phases of Kafka's ZooKeeper-to-KRaft migration (KIP-866), and what each node runs in
each phase (issue #26; the commands that drive a running cluster through them are not built yet).

- :mod:`kctl.kraft.phases`: the phases in order, which one comes next, where a rollback goes, and the record
  of the phase a cluster is in (the state dir's ``kraft.json``), so that a kctl killed mid-phase resumes.
- :mod:`kctl.kraft.config`: the KRaft controllers' properties and the brokers' changes per phase, as Kafka's
  "ZooKeeper to KRaft Migration" documents them. Pure: spec and phase in, properties out.
"""
