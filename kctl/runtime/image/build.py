"""The kctl node image: build it once, rebuild only when its recipe changes.

``ensure_image`` prepares the Kafka distribution (see :mod:`kctl.runtime.image.artifacts`),
picks a Debian bookworm base (``debian:bookworm-slim`` if it is present or can be
pulled, else a local ``kctl/debian:bookworm`` made with debootstrap from the
host's apt mirror), assembles a build context (``Dockerfile``, ``node/``,
``kafka/``) and builds ``kctl/node:<kafka version>`` with the docker SDK.

The image carries a ``io.kctl.build-hash`` label: a hash of the Dockerfile, the
node files and the distribution's identity. An image whose label matches is
reused as is. Nothing here prints; progress goes to the optional callback.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl import cache, contract
from kctl.contract import (
    LABEL_BASE_IMAGE,
    LABEL_BUILD_HASH,
    LABEL_DIST_IDENTITY,
    LABEL_DIST_SOURCE,
    LABEL_IMAGE,
    LABEL_KAFKA_VERSION,
    LABEL_RECIPE_HASH,
    LABEL_ZOOKEEPER_VERSION,
)
from kctl.errors import DockerUnavailable, KctlError
from kctl.runtime.docker_api import sdk
from kctl.runtime.image import artifacts as distmod
from kctl.runtime.image import exporters
from kctl.runtime.image.artifacts import Dist

if TYPE_CHECKING:
    import docker
    from docker.models.images import Image

Progress = Callable[[str], None]

IMAGE_REPO = contract.IMAGE_REPO
DEFAULT_BASE_IMAGE = "debian:bookworm-slim"
LOCAL_BASE_IMAGE = "kctl/debian:bookworm"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SUITE = "bookworm"
PULL_TIMEOUT_SECONDS = 30.0
DOCKER_HINT = "is dockerd running? try `kctl doctor`"

ZOOKEEPER_VERSIONS = contract.ZOOKEEPER_VERSIONS

NODE_DIR = Path(__file__).resolve().parent / "node"


@dataclass(frozen=True)
class ImageInfo:
    """The node image kctl runs."""

    tag: str
    id: str
    size_bytes: int
    kafka_version: str
    zookeeper_version: str
    dist_source: str
    built: bool


image_tag = contract.image_tag


def zookeeper_version_for(kafka_version: str) -> str:
    """The ZooKeeper version pinned for a Kafka release (what its libs/ ship)."""
    try:
        return ZOOKEEPER_VERSIONS[kafka_version]
    except KeyError:
        known = ", ".join(sorted(ZOOKEEPER_VERSIONS))
        raise KctlError(
            f"Kafka {kafka_version} is not supported by this kctl",
            f"supported Kafka versions: {known} (ZooKeeper mode ends with 3.9)",
        ) from None


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


# --- recipe ----------------------------------------------------------------------


def dockerfile_path() -> Path:
    """The Dockerfile at the top of the kctl checkout (or packaged under kctl/_data)."""
    pkg = Path(__file__).resolve().parents[2]
    for candidate in (pkg.parent / "Dockerfile", pkg / "_data" / "Dockerfile"):
        if candidate.is_file():
            return candidate
    raise KctlError("the node image's Dockerfile is missing", f"expected it at {pkg.parent / 'Dockerfile'}")


def node_files() -> list[Path]:
    """The files copied into the image under /usr/local/lib/kctl, sorted."""
    files = sorted(p for p in NODE_DIR.iterdir() if p.is_file() and not p.name.startswith((".", "__")))
    if not files:
        raise KctlError(f"no node files in {NODE_DIR}", "is the kctl installation complete?")
    return files


def recipe_hash() -> str:
    """Hash of the Dockerfile, the node files and the exporters' pinned coordinates."""
    h = hashlib.sha256()
    h.update(b"Dockerfile\0" + dockerfile_path().read_bytes() + b"\0")
    h.update(b"exporters\0" + exporters.identity().encode() + b"\0")
    for f in node_files():
        h.update(f"node/{f.name}\0".encode() + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_hash(recipe: str, dist_identity: str) -> str:
    return hashlib.sha256(f"{recipe}\n{dist_identity}\n".encode()).hexdigest()


def image_labels(dist: Dist, recipe: str, base_image: str) -> dict[str, str]:
    return {
        LABEL_IMAGE: "node",
        LABEL_KAFKA_VERSION: dist.kafka_version,
        LABEL_ZOOKEEPER_VERSION: dist.zookeeper_version,
        LABEL_DIST_SOURCE: dist.source,
        LABEL_DIST_IDENTITY: dist.identity,
        LABEL_RECIPE_HASH: recipe,
        LABEL_BUILD_HASH: build_hash(recipe, dist.identity),
        LABEL_BASE_IMAGE: base_image,
    }


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def assemble_context(dest: Path, dist: Dist, monitoring: Path) -> Path:
    """Lay out a build context in ``dest``: Dockerfile, node/, kafka/ (hard links where possible), and
    monitoring/ (the exporters, from ``monitoring``: :func:`kctl.runtime.image.build.exporters.prepare`)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(dockerfile_path(), dest / "Dockerfile")
    (dest / "node").mkdir()
    for f in node_files():
        shutil.copy2(f, dest / "node" / f.name)
    shutil.copytree(dist.path, dest / "kafka", symlinks=True, copy_function=_link_or_copy)
    exporters.lay_out(monitoring, dest / "monitoring", dist.path / "libs")
    return dest


# --- base image --------------------------------------------------------------------


@dataclass(frozen=True)
class AptSource:
    uri: str
    suites: tuple[str, ...]


def _one_line_sources(text: str) -> Iterator[AptSource]:
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        line = re.sub(r"\[[^\]]*\]", " ", line)  # drop [arch=... signed-by=...]
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "deb":
            yield AptSource(parts[1], (parts[2],))


def _deb822_sources(text: str) -> Iterator[AptSource]:
    for para in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        key = ""
        for raw in para.splitlines():
            if raw.startswith("#"):
                continue
            if raw[:1].isspace() and key:
                fields[key] += " " + raw.strip()
                continue
            k, sep, v = raw.partition(":")
            if sep:
                key = k.strip().lower()
                fields[key] = v.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        suites = tuple(fields.get("suites", "").split())
        for uri in fields.get("uris", "").split():
            yield AptSource(uri, suites)


def apt_sources(apt_dir: Path = Path("/etc/apt")) -> list[AptSource]:
    """The ``deb`` entries of the host's apt configuration (one-line and deb822)."""
    found: list[AptSource] = []
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*"))]
    for f in files:
        try:
            text = f.read_text(errors="replace")
        except OSError:
            continue
        if f.name.endswith(".sources"):
            found.extend(_deb822_sources(text))
        elif f.name == "sources.list" or f.name.endswith(".list"):
            found.extend(_one_line_sources(text))
    return found


def debian_mirror(sources: list[AptSource], suite: str = DEBIAN_SUITE) -> str:
    """The Debian mirror the host already uses for ``suite`` (else for Debian at all)."""
    for s in sources:
        if suite in s.suites:
            return s.uri.rstrip("/")
    for s in sources:
        if s.uri.rstrip("/").endswith("/debian"):
            return s.uri.rstrip("/")
    return DEFAULT_DEBIAN_MIRROR


def rootfs_sources_list(sources: list[AptSource], suite: str = DEBIAN_SUITE) -> str:
    """An apt sources.list for the debootstrapped base, mirroring the host's choices."""
    mirror = debian_mirror(sources, suite)
    lines = [f"deb {mirror} {suite} main", f"deb {mirror} {suite}-updates main"]
    security = next((s.uri.rstrip("/") for s in sources if f"{suite}-security" in s.suites), None)
    if security:
        lines.append(f"deb {security} {suite}-security main")
    return "\n".join(lines) + "\n"


def _image_or_none(client: docker.DockerClient, ref: str) -> Image | None:
    try:
        return client.images.get(ref)
    except sdk().errors.ImageNotFound:
        return None
    except sdk().errors.APIError as exc:
        raise KctlError(f"Docker could not inspect image {ref}: {exc.explanation}") from exc


def try_pull(client: docker.DockerClient, ref: str, timeout: float = PULL_TIMEOUT_SECONDS) -> bool:
    """Pull ``ref``; ``False`` (soon) when no registry answers."""
    repo, _, tag = ref.partition(":")
    result: list[bool] = []

    def pull() -> None:
        try:
            client.images.pull(repo, tag=tag or "latest")
            result.append(True)
        except sdk().errors.DockerException:
            result.append(False)

    worker = threading.Thread(target=pull, name=f"pull {ref}", daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])


def _find_debootstrap() -> str | None:
    return shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.access(p, os.X_OK)), None
    )


def _run_streaming(cmd: list[str], progress: Progress | None, what: str) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-19:], line]
        _say(progress, line)
    if proc.wait() != 0:
        raise KctlError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def _umount_below(root: Path) -> None:
    """debootstrap mounts /proc and /sys in the target; never rmtree through a mount."""
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return
    for mnt in sorted((m for m in mounts if m.startswith(str(root) + "/")), reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False)


def build_local_base(
    client: docker.DockerClient,
    *,
    apt_dir: Path = Path("/etc/apt"),
    tag: str = LOCAL_BASE_IMAGE,
    progress: Progress | None = None,
) -> str:
    """Make ``kctl/debian:bookworm`` with ``debootstrap --variant=minbase`` + ``docker import``."""
    debootstrap = _find_debootstrap()
    if debootstrap is None:
        raise KctlError(
            "no base image: debian:bookworm-slim cannot be pulled and debootstrap is not installed",
            "install debootstrap (apt-get install debootstrap, or `make setup`) so kctl can build "
            f"{LOCAL_BASE_IMAGE} locally",
        )
    if os.geteuid() != 0:
        raise KctlError(
            f"building the local base image {LOCAL_BASE_IMAGE} with debootstrap needs root",
            "run `kctl` once as root (or `make setup`), or make debian:bookworm-slim available",
        )
    sources = apt_sources(apt_dir)
    mirror = debian_mirror(sources)
    repo, _, version = tag.partition(":")
    work_parent = distmod.cache_root().parent
    work_parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="base-", dir=work_parent))
    rootfs = work / "rootfs"
    try:
        _say(progress, f"debootstrap --variant=minbase {DEBIAN_SUITE} from {mirror} (about 30 s)")
        _run_streaming([debootstrap, "--variant=minbase", DEBIAN_SUITE, str(rootfs), mirror], progress,
                       "debootstrap")
        _umount_below(rootfs)
        (rootfs / "etc/apt/sources.list").write_text(rootfs_sources_list(sources))
        for sub in ("var/lib/apt/lists", "var/cache/apt/archives"):
            for f in (rootfs / sub).glob("*"):
                if f.is_file():
                    f.unlink()
        tar = work / "rootfs.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tar), "."], check=True)
        _say(progress, f"importing the root filesystem as {tag}")
        client.api.import_image_from_file(
            str(tar), repository=repo, tag=version or "latest",
            changes=['CMD ["/bin/bash"]', f"LABEL {LABEL_IMAGE}=base"],
        )
    except (subprocess.CalledProcessError, OSError) as exc:
        raise KctlError(f"building the local base image failed: {exc}") from exc
    except sdk().errors.APIError as exc:
        raise KctlError(f"docker import of the base image failed: {exc.explanation}") from exc
    finally:
        _umount_below(rootfs)
        shutil.rmtree(work, ignore_errors=True)
    return tag


def resolve_base_image(client: docker.DockerClient, progress: Progress | None = None) -> str:
    """The base for ``FROM``: a local debian:bookworm-slim or kctl/debian:bookworm, a pull, or debootstrap."""
    for ref in (DEFAULT_BASE_IMAGE, LOCAL_BASE_IMAGE):
        if _image_or_none(client, ref) is not None:
            return ref
    _say(progress, f"pulling {DEFAULT_BASE_IMAGE}")
    if try_pull(client, DEFAULT_BASE_IMAGE):
        return DEFAULT_BASE_IMAGE
    _say(progress, f"no registry answers; building {LOCAL_BASE_IMAGE} with debootstrap")
    return build_local_base(client, progress=progress)


# --- build -------------------------------------------------------------------------


def build_from_context(
    client: docker.DockerClient,
    context: Path,
    *,
    tag: str,
    base_image: str,
    labels: dict[str, str],
    nocache: bool = False,
    progress: Progress | None = None,
) -> Image:
    """``docker build`` of an assembled context, streaming the log to ``progress``."""
    tail: list[str] = []
    try:
        stream: Iterator[dict[str, Any]] = client.api.build(
            path=str(context), tag=tag, buildargs={"BASE_IMAGE": base_image}, labels=labels,
            rm=True, forcerm=True, nocache=nocache, pull=False, decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                raise KctlError(
                    f"building {tag} failed: {str(chunk['error']).strip()}",
                    "last build output:\n" + "\n".join(tail[-15:]),
                )
            text = chunk.get("stream")
            if isinstance(text, str):
                for line in text.splitlines():
                    if line.strip():
                        tail = [*tail[-29:], line]
                        _say(progress, line)
    except sdk().errors.APIError as exc:
        raise KctlError(f"building {tag} failed: {exc.explanation}") from exc
    image = _image_or_none(client, tag)
    if image is None:
        raise KctlError(f"the build of {tag} reported success but the image is missing")
    return image


def _info(image: Image, tag: str, *, built: bool) -> ImageInfo:
    labels: dict[str, str] = image.labels or {}
    return ImageInfo(
        tag=tag,
        id=str(image.id),
        size_bytes=int(image.attrs.get("Size", 0)),
        kafka_version=labels.get(LABEL_KAFKA_VERSION, ""),
        zookeeper_version=labels.get(LABEL_ZOOKEEPER_VERSION, ""),
        dist_source=labels.get(LABEL_DIST_SOURCE, ""),
        built=built,
    )


def is_current(labels: dict[str, str], recipe: str, dist_identity: str | None) -> bool:
    """Whether an image with ``labels`` was built from this recipe (and this dist, if known)."""
    if labels.get(LABEL_RECIPE_HASH) != recipe:
        return False
    image_dist = labels.get(LABEL_DIST_IDENTITY, "")
    if labels.get(LABEL_BUILD_HASH) != build_hash(recipe, image_dist):
        return False
    return dist_identity is None or dist_identity == image_dist


def ensure_image(
    client: docker.DockerClient,
    *,
    kafka_version: str = "3.9.1",
    scala_version: str = "2.13",
    kafka_dist: Path | None = None,
    rebuild: bool = False,
    progress: Progress | None = None,
) -> ImageInfo:
    """Return the node image for ``kafka_version``, building it if missing or stale.

    Two kctl processes that need the image at once (two `kctl up`, two test workers) build it once: the
    second waits on a lock in the cache directory (said once, and bounded: :func:`kctl.cache.locked`), then
    finds the first one's image up to date. The build holds the cached distribution and exporters for reading
    only while it lays out its context (:func:`_ensure_image`).
    """

    root = distmod.cache_root().parent
    with cache.locked(root / f"image-{kafka_version}", path=root / f"image-{kafka_version}.lock",
                      what="building the node image", progress=progress):
        return _ensure_image(client, kafka_version=kafka_version, scala_version=scala_version,
                             kafka_dist=kafka_dist, rebuild=rebuild, progress=progress)


def _ensure_image(
    client: docker.DockerClient,
    *,
    kafka_version: str,
    scala_version: str,
    kafka_dist: Path | None,
    rebuild: bool,
    progress: Progress | None,
) -> ImageInfo:
    zk_pinned = zookeeper_version_for(kafka_version)
    tag = image_tag(kafka_version)
    recipe = recipe_hash()
    try:
        existing = _image_or_none(client, tag)
    except sdk().errors.DockerException as exc:
        raise DockerUnavailable(f"Docker engine not reachable: {exc}", DOCKER_HINT) from exc

    dist: Dist | None = None
    if existing is not None and not rebuild:
        if kafka_dist is not None:
            dist = distmod.prepare_dist(kafka_version=kafka_version, scala_version=scala_version,
                                        kafka_dist=kafka_dist, progress=progress)
            known: str | None = dist.identity
        else:
            # Without a cached dist, trust the image's own (no download just to compare).
            cached = distmod.cached_dist(kafka_version, scala_version)
            known = cached.identity if cached is not None else None
            if cached is not None and not cached.current:
                # prepared before kctl needed another tool of it (a new bin/ script): prepared again, and built
                known = None
                rebuild = True
        if not rebuild and is_current(existing.labels or {}, recipe, known):
            _say(progress, f"image {tag} is up to date ({str(existing.id)[7:19]})")
            return _info(existing, tag, built=False)
        _say(progress, f"image {tag} is out of date; rebuilding")

    try:
        base = resolve_base_image(client, progress)
        work_parent = distmod.cache_root().parent
        work_parent.mkdir(parents=True, exist_ok=True)
        # Same file system as the dist cache, so kafka/ is hard-linked, not copied. The distribution and the
        # exporters are held for reading while the context is laid out (kctl.cache): another kctl's refill of
        # either waits, so the context holds the whole entry its labels name; the links and copies made, the
        # build reads only the context.
        with tempfile.TemporaryDirectory(prefix="build-", dir=work_parent) as tmp:
            with distmod.using_dist(kafka_version=kafka_version, scala_version=scala_version,
                                    kafka_dist=kafka_dist, progress=progress) as dist:
                if dist.zookeeper_version != zk_pinned:
                    raise KctlError(
                        f"the Kafka distribution ships ZooKeeper {dist.zookeeper_version}, kctl pins {zk_pinned} "
                        f"for Kafka {kafka_version}",
                        f"is {dist.path} a genuine Kafka {kafka_version} distribution?",
                    )
                with exporters.prepared(progress) as monitoring:
                    labels = image_labels(dist, recipe, base)
                    context = assemble_context(Path(tmp) / "context", dist, monitoring)
            _say(progress, f"building {tag} from {base} (Kafka {dist.kafka_version}, source: {dist.source})")
            image = build_from_context(client, context, tag=tag, base_image=base, labels=labels,
                                       progress=progress)
    except sdk().errors.DockerException as exc:
        if isinstance(exc, sdk().errors.APIError):
            raise KctlError(f"Docker refused the image build: {exc.explanation}") from exc
        raise DockerUnavailable(f"Docker engine not reachable: {exc}", DOCKER_HINT) from exc
    return _info(image, tag, built=True)
