"""MirrorMaker 2 from other clusters into this one (``mirrors:`` in kctl.yaml, ``kctl mirror``).

- :mod:`.config`: the flows as MirrorMaker's ``mm2.properties`` and the Compose project that runs them (pure);
- :mod:`.records`: MirrorMaker's binary checkpoint records and Connect's JSON status and offsets (pure);
- :mod:`.run`: up and down of the mirror containers;
- :mod:`.status`: task states, replication lag per partition, the age of the last heartbeat and checkpoint;
- :mod:`.failover`: a consumer group's translated offsets on this cluster, shown and applied.
"""
