"""The operator's own copy (``--kafka-dist``): a ``.tgz`` or an extracted directory."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from kctl.errors import KctlError
from kctl.runtime.image.artifacts.apache import extract_tgz, sha512_of
from kctl.runtime.image.artifacts.layout import Progress

NAME = "operator"


class LocalDist:
    name = NAME

    def __init__(self, path: Path) -> None:
        self.path = path.expanduser().resolve()
        if not self.path.exists():
            raise KctlError(f"--kafka-dist {self.path} does not exist", "pass a Kafka .tgz or its extracted dir")

    def cache_name(self) -> str:
        """A cache entry per content: the tarball's digest, or the directory's names, sizes and times."""
        key = hashlib.sha256()
        if self.path.is_file():
            key.update(f"tgz {sha512_of(self.path)}".encode())
        else:
            key.update(f"dir {self.path}\n".encode())
            for f in sorted(self.path.rglob("*")):
                if f.is_file():
                    key.update(f"{f.relative_to(self.path)} {f.stat().st_size} {f.stat().st_mtime_ns}\n".encode())
        return f"operator-{key.hexdigest()[:16]}"

    def fetch(self, work: Path, kafka_version: str, scala_version: str, progress: Progress | None) -> \
            tuple[Path, str] | None:
        if self.path.is_file():
            return extract_tgz(self.path, work / "x"), str(self.path)
        if not (self.path / "libs").is_dir():
            raise KctlError(f"--kafka-dist {self.path} has no libs/", "pass the extracted tarball's top dir")
        root = work / "x"
        shutil.copytree(self.path, root, symlinks=True)
        return root, str(self.path)
