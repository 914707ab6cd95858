import gc

gc.disable()  # until main() starts the clock that turns it back on (kctl.cli.main.quiet_gc)

from kctl.cli.main import entry  # noqa: E402

entry()
