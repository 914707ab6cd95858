"""pytest plugin registered by kctl (entry point ``pytest11``)."""
