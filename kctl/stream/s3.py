"""The pipeline's tables on an S3-compatible store (issue #46): URLs, the credentials file, and the settings
Spark (hadoop-aws's S3A) and delta-rs are given.

Credentials come only from a file of mode 0600 (``--s3-credentials FILE``), read inside the process that
needs them: the job's driver sets them on its SparkSession builder (``spark.hadoop.fs.s3a.*``, never on a
command line) and hands them to delta-rs as storage options; ``kctl stream metrics|query|optimize`` read the
same file. They are never written to kctl.yaml, the job's config.json, process arguments, the environment
of a child process, logs or error messages: only the file's path travels.

The file is either two lines of ``KEY=VALUE``::

    access_key=AKIA...
    secret_key=...
    # session_token=...   (optional)

or the AWS shared-credentials INI format (``[default]`` with ``aws_access_key_id``,
``aws_secret_access_key`` and optionally ``aws_session_token``; another section with ``profile``).
"""

from __future__ import annotations

import configparser
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kctl.errors import KctlError, UsageError

SCHEMES = ("s3a", "s3")
_CHMOD_HINT = "chmod 600 {path} (it holds a secret key: only its owner may read it)"
_FORMAT_HINT = ("write `access_key=...` and `secret_key=...` lines, or an AWS shared-credentials file "
                "([default] with aws_access_key_id and aws_secret_access_key)")


def is_s3(path: str | Path | None) -> bool:
    return isinstance(path, str) and urlparse(path).scheme in SCHEMES


@dataclass(frozen=True)
class Location:
    bucket: str
    key: str  # the prefix inside the bucket, without leading or trailing '/'

    @property
    def s3a(self) -> str:
        """The URL Spark writes to (hadoop-aws's S3A file system)."""
        return f"s3a://{self.bucket}/{self.key}".rstrip("/")

    @property
    def s3(self) -> str:
        """The URL delta-rs reads (it knows s3://, not s3a://)."""
        return f"s3://{self.bucket}/{self.key}".rstrip("/")

    def child(self, name: str) -> Location:
        return Location(self.bucket, f"{self.key}/{name}".strip("/"))


def parse_url(url: str) -> Location:
    """``s3a://bucket/prefix`` (or ``s3://``) -> Location; UsageError for anything else."""
    u = urlparse(url)
    if u.scheme not in SCHEMES:
        raise UsageError(f"{url!r} is not an s3a:// URL", hint="write s3a://BUCKET/PREFIX")
    if not u.netloc or "@" in u.netloc or ":" in u.netloc:
        # user:secret@bucket would put a secret in the arguments; a port belongs to --s3-endpoint
        raise UsageError(f"{_safe(url)!r} names no bucket (or names credentials or a port in it)",
                         hint="write s3a://BUCKET/PREFIX; the endpoint goes in --s3-endpoint, the keys in "
                              "--s3-credentials FILE")
    if u.query or u.fragment:
        raise UsageError(f"{url!r}: an s3a:// URL takes no query or fragment", hint="write s3a://BUCKET/PREFIX")
    return Location(u.netloc, u.path.strip("/"))


def _safe(url: str) -> str:
    """The URL without any user-info part (which could hold a secret)."""
    u = urlparse(url)
    if "@" in u.netloc:
        return u._replace(netloc="***@" + u.netloc.rsplit("@", 1)[1]).geturl()
    return url


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


def check_mode(path: Path) -> None:
    """Refuse a credentials file that its group or others may read or write."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise UsageError(f"S3 credentials file {path} does not exist", hint=_FORMAT_HINT) from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"S3 credentials file {path} is not a regular file", hint=_FORMAT_HINT)
    if st.st_mode & 0o077:
        raise UsageError(f"S3 credentials file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o})",
                         hint=_CHMOD_HINT.format(path=path))


_SIMPLE_KEYS = {"access_key": "access_key", "aws_access_key_id": "access_key", "access_key_id": "access_key",
                "secret_key": "secret_key", "aws_secret_access_key": "secret_key",
                "secret_access_key": "secret_key", "session_token": "session_token",
                "aws_session_token": "session_token"}


def parse_credentials(text: str, *, source: str = "the S3 credentials file", profile: str = "default") -> Credentials:
    """The file's text -> Credentials. Errors name the file and the missing key, never a value."""
    values: dict[str, str] = {}
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(("#", ";"))]
    if any(ln.startswith("[") for ln in lines):
        cp = configparser.ConfigParser(interpolation=None)
        try:
            cp.read_string(text)
        except configparser.Error:
            raise UsageError(f"{source} is not a readable INI file", hint=_FORMAT_HINT) from None
        if not cp.has_section(profile):
            raise UsageError(f"{source} has no [{profile}] section", hint=_FORMAT_HINT)
        items = dict(cp.items(profile))
    else:
        items = {}
        for n, ln in enumerate(lines, 1):
            k, eq, v = ln.partition("=")
            if not eq:
                raise UsageError(f"{source}: line {n} is not KEY=VALUE", hint=_FORMAT_HINT)
            items[k.strip().lower()] = v.strip()
    for k, v in items.items():
        if k.lower() in _SIMPLE_KEYS and v.strip():
            values[_SIMPLE_KEYS[k.lower()]] = v.strip().strip("'\"")
    missing = [k for k in ("access_key", "secret_key") if not values.get(k)]
    if missing:
        raise UsageError(f"{source} has no {' and no '.join(missing)}", hint=_FORMAT_HINT)
    return Credentials(values["access_key"], values["secret_key"], values.get("session_token"))


def read_credentials(path: str | Path, *, profile: str = "default") -> Credentials:
    p = Path(path).expanduser()
    check_mode(p)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read S3 credentials file {p}: {type(e).__name__}", hint=_FORMAT_HINT) from None
    return parse_credentials(text, source=f"S3 credentials file {p}", profile=profile)


@dataclass(frozen=True)
class Settings:
    """Where the store is and how to reach it; no secret, so it may be written to the job's config."""
    endpoint: str | None = None  # e.g. http://127.0.0.1:9000; None: AWS's own for the region
    region: str = "us-east-1"
    path_style: bool = True
    credentials_file: str | None = None
    profile: str = "default"

    def validate(self, url: str) -> None:
        """The settings an s3a:// output needs, before anything starts."""
        if not self.credentials_file:
            raise UsageError(f"{_safe(url)} needs credentials",
                             hint="pass --s3-credentials FILE (mode 0600; access_key=... and secret_key=... "
                                  "lines, or an AWS shared-credentials file)")
        if self.endpoint is not None:
            e = urlparse(self.endpoint)
            if e.scheme not in ("http", "https") or not e.hostname or e.username or e.password:
                raise UsageError(f"--s3-endpoint {self.endpoint!r} is not http(s)://HOST[:PORT]",
                                 hint="e.g. --s3-endpoint http://127.0.0.1:9000")

    @property
    def insecure(self) -> bool:
        return bool(self.endpoint) and urlparse(self.endpoint or "").scheme == "http"


def hadoop_conf(s: Settings, c: Credentials | None = None) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` for the SparkSession builder: no secret among them, because pyspark passes a
    builder's settings to spark-submit as ``--conf`` arguments (visible in ``ps``). The keys go in afterwards,
    through :func:`hadoop_secrets`."""
    conf = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": s.region,
        "spark.hadoop.fs.s3a.path.style.access": str(s.path_style).lower(),
        # Give up on an unreachable store within about a minute rather than S3A's default of many.
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.retry.limit": "3",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "15000",  # S3A's minimum
        "spark.hadoop.fs.s3a.connection.timeout": "30000",
        # Delta's log on S3: a single writer (the job), S3SingleDriverLogStore is Delta's default for s3a.
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore",
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider" if c and c.session_token
            else "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    if s.endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = s.endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not s.insecure).lower()
    return conf


def hadoop_secrets(c: Credentials) -> dict[str, str]:
    """The keys for the running SparkContext's hadoop configuration (``sc._jsc.hadoopConfiguration().set``, over
    py4j inside the driver), before the first s3a:// path is touched."""
    out = {"fs.s3a.access.key": c.access_key, "fs.s3a.secret.key": c.secret_key}
    if c.session_token:
        out["fs.s3a.session.token"] = c.session_token
    return out


def storage_options(s: Settings, c: Credentials) -> dict[str, str]:
    """delta-rs's storage options for the same store. The job is the tables' single writer, so delta-rs may
    rename without a lock (``AWS_S3_ALLOW_UNSAFE_RENAME``): a second writer needs a locking provider."""
    opts = {
        "AWS_ACCESS_KEY_ID": c.access_key,
        "AWS_SECRET_ACCESS_KEY": c.secret_key,
        "AWS_REGION": s.region,
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not s.path_style).lower(),
        # A store that stops answering fails a call within about a minute (object_store's default: 10 retries over
        # 3 minutes), like S3A's settings in hadoop_conf; a pause of a few seconds is retried through.
        "max_retries": "8",
        "retry_timeout": "60s",
        "connect_timeout": "5s",
        "timeout": "30s",
    }
    if c.session_token:
        opts["AWS_SESSION_TOKEN"] = c.session_token
    if s.endpoint:
        opts["AWS_ENDPOINT_URL"] = s.endpoint
        if s.insecure:
            opts["AWS_ALLOW_HTTP"] = "true"
    return opts


def secrets(c: Credentials) -> list[str]:
    """The values that must appear in no argument, environment, log or message (for checks and scrubbing)."""
    return [v for v in (c.secret_key, c.session_token) if v]


def scrub(text: str, c: Credentials | None) -> str:
    """``text`` with the credentials' secret values masked (an error from a library may echo its settings)."""
    if c is None:
        return text
    for v in secrets(c):
        text = text.replace(v, "***")
    return text


def filesystem(s: Settings, c: Credentials, *, timeout_s: float = 5.0, attempts: int = 3) -> Any:
    """pyarrow's S3 file system for the store (pyarrow is in the stream and tables extras): the small files of a
    checkpoint on S3 (its metadata, offsets and commits) and the bucket check."""
    from pyarrow import fs as pafs

    kwargs: dict[str, object] = {"access_key": c.access_key, "secret_key": c.secret_key,
                                 "region": s.region, "connect_timeout": timeout_s,
                                 "request_timeout": timeout_s, "force_virtual_addressing": not s.path_style}
    if c.session_token:
        kwargs["session_token"] = c.session_token
    if s.endpoint:
        e = urlparse(s.endpoint)
        kwargs["endpoint_override"] = e.netloc
        kwargs["scheme"] = e.scheme
    return pafs.S3FileSystem(retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts), **kwargs)


def where(s: Settings) -> str:
    return s.endpoint or f"AWS S3 ({s.region})"


def unreachable(s: Settings, c: Credentials | None, bucket: str, e: BaseException) -> KctlError:
    """The one message for a store that does not answer (or refuses the keys)."""
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    return KctlError(f"S3 store {where(s)} does not answer for bucket {bucket}: {scrub(first, c)}",
                     hint="check --s3-endpoint (and that the store runs), the region and the keys in "
                          f"{s.credentials_file}")


def check_store(s: Settings, c: Credentials, loc: Location, *, timeout_s: float = 5.0) -> None:
    """The bucket exists and answers: one clear message otherwise (before the job starts or a table is read)."""
    from pyarrow import fs as pafs

    try:
        info = filesystem(s, c, timeout_s=timeout_s, attempts=1).get_file_info(loc.bucket)
    except OSError as e:
        raise unreachable(s, c, loc.bucket, e) from None
    if info.type == pafs.FileType.NotFound:
        raise KctlError(f"S3 bucket {loc.bucket} does not exist at {where(s)}",
                        hint="create it first (kctl writes into an existing bucket, it creates none)")


def join(root: str, name: str) -> str:
    """``root/name`` for a local dir or an s3a:// URL (pathlib would fold the URL's ``//``)."""
    return f"{root.rstrip('/')}/{name}" if is_s3(root) else str(Path(root) / name)


class Files:
    """The few small files kctl reads and writes beside Spark's (a checkpoint's ``metadata``, ``offsets/<n>``,
    ``commits/<n>``; ``OUT/_kctl_owner.json``) at local paths or, with ``settings``, at s3a:// URLs. Errors of
    the store become one :class:`KctlError` without the keys."""

    def __init__(self, settings: Settings | None = None, credentials: Credentials | None = None) -> None:
        self.settings = settings
        self.credentials = credentials
        self._fs: Any = None

    @classmethod
    def of(cls, settings: Settings | dict[str, Any] | None) -> Files:
        """For a job's settings (the credentials read from its file), or local paths only (None)."""
        if isinstance(settings, dict):
            settings = Settings(**settings)
        if settings is None or not settings.credentials_file:
            return cls()
        return cls(settings, read_credentials(settings.credentials_file, profile=settings.profile))

    def _s3(self, url: str) -> tuple[Any, str]:
        if self.settings is None or self.credentials is None:
            raise UsageError(f"{_safe(url)} is on S3, but no S3 settings were given",
                             hint="pass --s3-endpoint and --s3-credentials FILE")
        if self._fs is None:
            self._fs = filesystem(self.settings, self.credentials)
        loc = parse_url(url)
        return self._fs, f"{loc.bucket}/{loc.key}".rstrip("/")

    def _fail(self, url: str, e: BaseException) -> KctlError:
        assert self.settings is not None
        return unreachable(self.settings, self.credentials, parse_url(url).bucket, e)

    def read_text(self, path: str | Path) -> str | None:
        """The file's text; None when there is none."""
        p = str(path)
        if not is_s3(p):
            try:
                return Path(p).read_text(encoding="utf-8")
            except (FileNotFoundError, NotADirectoryError):
                return None
        fs, key = self._s3(p)
        try:
            with fs.open_input_stream(key) as f:
                return bytes(f.read()).decode("utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            if "NoSuchKey" in str(e) or "does not exist" in str(e).lower():
                return None
            raise self._fail(p, e) from None

    def write_text(self, path: str | Path, text: str) -> None:
        p = str(path)
        if not is_s3(p):
            Path(p).parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(p).with_name(f".{Path(p).name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, p)
            return
        fs, key = self._s3(p)
        try:
            with fs.open_output_stream(key) as f:  # one PUT: an object appears whole or not at all
                f.write(text.encode("utf-8"))
        except OSError as e:
            raise self._fail(p, e) from None

    def names(self, path: str | Path) -> list[str]:
        """The names in a directory (an S3 prefix); [] when there is none."""
        p = str(path)
        if not is_s3(p):
            d = Path(p)
            return [x.name for x in d.iterdir()] if d.is_dir() else []
        from pyarrow import fs as pafs

        fs, key = self._s3(p)
        try:
            infos = fs.get_file_info(pafs.FileSelector(key, allow_not_found=True))
        except OSError as e:
            raise self._fail(p, e) from None
        return [i.base_name for i in infos]


def env_without_aws(env: dict[str, str]) -> dict[str, str]:
    """A child process's environment with no AWS_* credentials (the job reads the file itself)."""
    return {k: v for k, v in env.items() if not (k.startswith("AWS_") and
                                                 any(w in k for w in ("KEY", "SECRET", "TOKEN")))}


def default_region() -> str:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
