"""Apache's official tarball, checked against its ``.sha512``."""

from __future__ import annotations

import hashlib
import re
import shutil
import tarfile
from collections.abc import Iterable
from pathlib import Path

from kctl.deferred import defer_import
from kctl.errors import KctlError
from kctl.runtime.image.artifacts.layout import Progress, dist_name, say

# urllib.request brings http.client, email and ssl (~15 ms): loaded by a download, not by every command that
# imports the engines (which reach the image builder).
defer_import("urllib.request")

import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

NAME = "apache"
APACHE_MIRRORS = (
    "https://downloads.apache.org/kafka",
    "https://archive.apache.org/dist/kafka",
)
# Short connect timeout so that an unreachable host fails fast; the read
# timeout only bounds a stalled transfer, not a slow one.
HTTP_TIMEOUT_SECONDS = 10.0

_HEX_ONLY = re.compile(r"[^0-9a-fA-F]")


def parse_sha512(text: str) -> str:
    """The SHA-512 digest in an Apache ``.sha512`` file, lower-case hex.

    Accepts the ``gpg --print-md SHA512`` layout Apache uses (``name: 8 groups
    of hex`` wrapped over several lines, upper case) as well as the
    coreutils ``sha512sum`` layout (``hex  name``) and a bare digest.
    """
    body = text.strip()
    if not body:
        raise KctlError("empty SHA-512 file")
    first = body.split()[0]
    if len(first) == 128 and not _HEX_ONLY.search(first):
        return first.lower()  # sha512sum layout or bare digest
    # gpg layout: "<file name>: <hex groups...>"; the name may contain no ':'.
    _, sep, rest = body.partition(":")
    digest = _HEX_ONLY.sub("", rest if sep else body)
    if len(digest) != 128:
        raise KctlError(
            "cannot find a SHA-512 digest in the checksum file",
            f"expected 128 hex digits, found {len(digest)}: {body[:200]!r}",
        )
    return digest.lower()


def sha512_of(path: Path) -> str:
    h = hashlib.sha512()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha512(path: Path, expected: str) -> None:
    actual = sha512_of(path)
    if actual != expected.lower():
        raise KctlError(
            f"SHA-512 mismatch for {path.name}",
            f"expected {expected[:16]}…, got {actual[:16]}…; the download is corrupt or tampered with "
            f"— delete {path} and retry, or pass a verified tarball with --kafka-dist",
        )


def extract_tgz(tgz: Path, dest: Path) -> Path:
    """Extract a Kafka tarball into ``dest``; returns the distribution root inside it."""
    try:
        with tarfile.open(tgz, "r:gz") as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:  # Python < 3.11.4
                tf.extractall(dest)  # noqa: S202
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise KctlError(f"cannot extract {tgz}: {exc}", "is it a Kafka .tgz?") from exc
    roots = [p for p in dest.iterdir() if p.is_dir()]
    if len(roots) == 1 and (roots[0] / "libs").is_dir():
        return roots[0]
    if (dest / "libs").is_dir():
        return dest
    raise KctlError(f"{tgz} does not look like a Kafka distribution", "expected a top directory with libs/")


def _http_get(url: str, dest: Path, timeout: float) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "kctl"})
    with urllib.request.urlopen(req, timeout=timeout) as resp, dest.open("wb") as out:  # noqa: S310
        shutil.copyfileobj(resp, out, 1 << 20)


def fetch_apache_tarball(
    kafka_version: str,
    scala_version: str,
    dest_dir: Path,
    *,
    mirrors: Iterable[str] = APACHE_MIRRORS,
    timeout: float = HTTP_TIMEOUT_SECONDS,
    progress: Progress | None = None,
) -> Path | None:
    """Download and verify the official tarball; ``None`` if no mirror answers.

    A checksum mismatch is an error, not a reason to try the next source.
    """
    name = f"{dist_name(kafka_version, scala_version)}.tgz"
    dest_dir.mkdir(parents=True, exist_ok=True)
    for base in mirrors:
        url = f"{base}/{kafka_version}/{name}"
        sha_path = dest_dir / f"{name}.sha512.part"
        tgz_part = dest_dir / f"{name}.part"
        try:
            say(progress, f"fetching {url}.sha512")
            _http_get(f"{url}.sha512", sha_path, timeout)
            expected = parse_sha512(sha_path.read_text(errors="replace"))
            say(progress, f"fetching {url}")
            _http_get(url, tgz_part, timeout)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            say(progress, f"{base} not reachable: {getattr(exc, 'reason', exc)}")
            continue
        finally:
            sha_path.unlink(missing_ok=True)
        try:
            verify_sha512(tgz_part, expected)
        except KctlError:
            tgz_part.unlink(missing_ok=True)
            raise
        final = dest_dir / name
        tgz_part.rename(final)
        return final
    return None


class ApacheTarball:
    """The release tarball from Apache's download hosts; out of reach when no mirror answers."""

    name = NAME

    def fetch(self, work: Path, kafka_version: str, scala_version: str, progress: Progress | None) -> \
            tuple[Path, str] | None:
        tgz = fetch_apache_tarball(kafka_version, scala_version, work, progress=progress)
        if tgz is None:
            say(progress, "Apache download hosts unreachable")
            return None
        return extract_tgz(tgz, work / "x"), tgz.name
