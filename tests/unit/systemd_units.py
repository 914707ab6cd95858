"""`systemd-analyze verify` of a bundle's units against a root of their own: the machine's unit library copied in,
the bundle's scripts where the units run them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from kctl.runtime.engine import bundle as b


def verify(one: dict[str, b.BundleFile], tmp_path: Path, *units: str) -> subprocess.CompletedProcess[str]:
    """Install ``one`` host's bundle (its bin/ scripts and units/) in a root under ``tmp_path`` and verify
    ``units`` (file names under units/) there."""
    root = tmp_path / "root"
    (root / "opt/kctl/bin").mkdir(parents=True)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    for rel, f in one.items():
        if rel.startswith("bin/"):
            (root / "opt/kctl" / rel).write_bytes(f.data)
            (root / "opt/kctl" / rel).chmod(0o755)
        if rel.startswith("units/"):
            (unit_dir / Path(rel).name).write_bytes(f.data)
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", *(str(unit_dir / u) for u in units)],
                          capture_output=True, text=True, timeout=60)
