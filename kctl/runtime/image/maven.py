"""Resolve Maven artifacts and their runtime closure into a directory of jars.

The one place kctl runs ``mvn``: the Kafka distribution (when Apache's tarball
is out of reach) and Spark's Kafka source both come through here. A throw-away
POM lists the coordinates; ``dependency:copy-dependencies`` copies the closure.
Offline first: when ``~/.m2`` already holds everything (a second machine setup,
a rebuilt cache), nothing touches the network; only a failed offline run goes
to Maven Central. Callers keep their own caches of the result.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kctl.errors import KctlError

Progress = Callable[[str], None]

# Pinned, so that a resolution means the same on every machine (and offline, the copy in ~/.m2).
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
DEFAULT_TIMEOUT_SECONDS = 600.0
NETWORK_HINT = "is Maven Central reachable (proxy settings in ~/.m2/settings.xml)?"


@dataclass(frozen=True)
class Artifact:
    """``group:artifact:version``, with the ``group:artifact`` pairs to leave out of its closure."""

    group: str
    artifact: str
    version: str
    exclusions: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, coordinate: str, exclusions: Iterable[str] = ()) -> Artifact:
        parts = coordinate.split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"not a group:artifact:version coordinate: {coordinate!r}")
        excl = []
        for e in exclusions:
            g, sep, a = e.partition(":")
            if not (sep and g and a):
                raise ValueError(f"not a group:artifact exclusion: {e!r}")
            excl.append((g, a))
        return cls(parts[0], parts[1], parts[2], tuple(excl))

    def __str__(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"


def pom(artifacts: Sequence[Artifact], *, name: str = "kctl-resolve") -> str:
    """A ``pom``-packaged project whose dependencies are ``artifacts``."""
    deps = []
    for a in artifacts:
        excl = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{x}</artifactId></exclusion>" for g, x in a.exclusions
        )
        deps.append(
            f"    <dependency><groupId>{a.group}</groupId><artifactId>{a.artifact}</artifactId>"
            f"<version>{a.version}</version>" + (f"<exclusions>{excl}</exclusions>" if excl else "")
            + "</dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        f"  <groupId>io.kctl</groupId><artifactId>{name}</artifactId><version>1</version>"
        "<packaging>pom</packaging>\n"
        "  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n</project>\n"
    )


def mvn_or_fail(what: str, hint: str) -> str:
    """The ``mvn`` on PATH, or a KctlError saying what needed it."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KctlError(f"{what} needs Maven, which is not installed",
                        f"install Maven (apt-get install maven, or `make setup`), or {hint}")
    return mvn


def copy_dependencies(
    artifacts: Sequence[Artifact],
    dest: Path,
    *,
    what: str,
    hint: str,
    timeout_s: float = DEFAULT_TIMEOUT_SECONDS,
    progress: Progress | None = None,
) -> list[Path]:
    """Copy the runtime closure of ``artifacts`` into ``dest``; returns the jars there, sorted.

    ``what`` names the resolution in messages ("Kafka 3.9.1"); ``hint`` is the
    operator's way around Maven (e.g. "pass --kafka-dist kafka_2.13-3.9.1.tgz").
    """
    if not artifacts:
        raise ValueError("nothing to resolve")
    mvn = mvn_or_fail(f"resolving {what}", hint)
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kctl-mvn-") as tmp:
        pom_file = Path(tmp) / "pom.xml"
        pom_file.write_text(pom(artifacts), encoding="utf-8")
        cmd = [mvn, "-q", "-B", "-f", str(pom_file), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
               f"-DoutputDirectory={dest}", "-DincludeScope=runtime"]
        if progress is not None:
            progress(f"resolving {what} with {mvn} (offline first)")
        proc = _run([*cmd[:2], "-o", *cmd[2:]], what, hint, timeout_s)
        if proc.returncode != 0:
            if progress is not None:
                progress(f"~/.m2 lacks part of {what}; resolving from Maven Central")
            proc = _run(cmd, what, hint, timeout_s)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise KctlError(f"Maven could not resolve {what} (exit {proc.returncode}):\n{tail}",
                        f"{NETWORK_HINT} or {hint}")
    jars = sorted(dest.glob("*.jar"))
    if not jars:
        raise KctlError(f"Maven resolved {what} but copied no jars into {dest}", hint)
    return jars


def _run(cmd: list[str], what: str, hint: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise KctlError(f"resolving {what} with Maven took more than {timeout_s:.0f} s",
                        f"{NETWORK_HINT} or {hint}") from None
