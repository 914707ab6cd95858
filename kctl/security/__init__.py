"""The secured profile's secrets: a local CA, per-node certificates and keystores, generated passwords,
and the client settings every kctl client and `kctl client-config` take from them (``store``)."""
