"""Where trace files live: a local path, or a URL read through fsspec (gs://, s3://, memory://).

Local paths go through pathlib and never import fsspec. A URL is a string starting with a
``scheme://`` of two letters or more (``C://`` is a Windows drive); fsspec, and the package
that implements the scheme (gcsfs, s3fs), are imported on first use. Their errors become
one-line :class:`~traceinspect.errors.TraceInspectError` s naming the URL: network and
permission failures come as anything from ``OSError`` to a library's own ``HttpError``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import importlib.util
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeAlias

from traceinspect.errors import TraceDecodeError, TraceInspectError, TraceNotFoundError, UsageError

# Chained URLs (simplecache::gs://...) included; one letter before :// is a drive.
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]+::)*[A-Za-z][A-Za-z0-9+.-]+://")

# What to install for a scheme, for the message when fsspec cannot import it: traceinspect's
# extra where it has one (pyproject.toml), else the package.
_PACKAGES = {
    "gs": "'traceinspect[gcs]'",
    "gcs": "'traceinspect[gcs]'",
    "s3": "'traceinspect[s3]'",
    "s3a": "'traceinspect[s3]'",
    "az": "adlfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
}
_CREDENTIALS = {
    "gs": "gcloud auth application-default login",
    "gcs": "gcloud auth application-default login",
    "s3": "aws configure, or AWS_PROFILE",
    "s3a": "aws configure, or AWS_PROFILE",
}
# google-auth's names for a metadata server of one's own; the file that names a GCE VM.
_METADATA_ENV = ("GCE_METADATA_HOST", "GCE_METADATA_ROOT", "GCE_METADATA_IP")
_GCE_PRODUCT_NAME = Path("/sys/class/dmi/id/product_name")
# fsspec's info() names the modification time differently per filesystem.
_MTIME_KEYS = ("mtime", "updated", "LastModified", "last_modified", "created")
_ETAG_KEYS = ("ETag", "etag", "md5Hash", "generation")
_COPY_CHUNK = 8 << 20

Kind = Literal["file", "directory"]


def is_url(path: object) -> bool:
    """True for a URL fsspec should open; plain and Windows paths are local."""
    return isinstance(path, URLPath) or (isinstance(path, str) and _URL.match(path) is not None)


@dataclass(frozen=True)
class URLPath:
    """A file or directory behind an fsspec URL, spelled as the user wrote it.

    Prints as the URL; ``name``, ``parent`` and ``/`` work as on a :class:`~pathlib.Path`.
    """

    url: str

    def __str__(self) -> str:
        return self.url

    def _split(self) -> tuple[str, str]:
        scheme, _, rest = self.url.partition("://")
        return f"{scheme}://", rest.rstrip("/")

    @property
    def protocol(self) -> str:
        """The scheme that names the filesystem (``gs`` of ``simplecache::gs://b``)."""
        return self.url.partition("://")[0].rsplit("::", 1)[-1]

    @property
    def name(self) -> str:
        return self._split()[1].rsplit("/", 1)[-1]

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def parent(self) -> URLPath:
        prefix, rest = self._split()
        head, sep, _ = rest.rpartition("/")
        return URLPath(prefix + head) if sep else self

    def __truediv__(self, other: str) -> URLPath:
        return URLPath(f"{self.url.rstrip('/')}/{other.strip('/')}")


Location: TypeAlias = Path | URLPath


def to_location(path: str | os.PathLike[str] | URLPath) -> Location:
    """A URL as a :class:`URLPath`, anything else as a local :class:`~pathlib.Path`."""
    if isinstance(path, URLPath):
        return path
    if isinstance(path, str) and is_url(path):
        return URLPath(path)
    return Path(path).expanduser()


@dataclass(frozen=True)
class Stat:
    """Size and identity of a file: enough to order runs and to key the cache."""

    size: int
    mtime_ns: int  # 0 when the filesystem does not say
    etag: str = ""  # a remote object's ETag, MD5 or generation, when given


def probe(loc: Location) -> tuple[Kind, Stat | None] | None:
    """What is at ``loc``: None when nothing, else its kind and, for a URL, its Stat."""
    if isinstance(loc, Path):
        if not loc.exists():
            return None
        return ("file" if loc.is_file() else "directory"), None
    fsys, path = _filesystem(loc)
    try:
        info = fsys.info(path)
    except FileNotFoundError:
        return None
    except Exception as exc:
        raise _unreadable(loc, exc, TraceNotFoundError) from None
    if info.get("type") == "directory":
        return "directory", None
    return "file", _stat(info)


def stat(loc: Location) -> Stat:
    """Size and modification time of a file (and the ETag of a remote one)."""
    if isinstance(loc, Path):
        st = loc.stat()
        return Stat(size=st.st_size, mtime_ns=st.st_mtime_ns)
    probed = probe(loc)
    if probed is None or probed[1] is None:
        raise TraceNotFoundError(f"{loc}: no such file. Check the URL.", path=loc)
    return probed[1]


def find(root: Location, suffixes: tuple[str, ...]) -> list[tuple[Location, Stat | None]]:
    """Every file at or below ``root`` whose name ends with one of ``suffixes``, with its
    Stat when the listing gave one (a remote listing does, in one request per page)."""
    if isinstance(root, Path):
        return [(p, None) for s in suffixes for p in root.rglob(f"*{s}") if p.is_file()]
    fsys, base = _filesystem(root)
    try:
        found: dict[str, Any] = fsys.find(base, detail=True)
    except FileNotFoundError:
        return []
    except Exception as exc:
        raise _unreadable(root, exc, TraceNotFoundError) from None
    prefix = base.rstrip("/") + "/"
    out: list[tuple[Location, Stat | None]] = []
    for name, info in sorted(found.items()):
        if not name.endswith(suffixes) or info.get("type", "file") != "file":
            continue
        # Children keep the user's spelling of the URL, so printed paths look like theirs.
        if name.startswith(prefix):
            loc = root / name[len(prefix) :]
        else:
            loc = URLPath(fsys.unstrip_protocol(name))
        out.append((loc, _stat(info)))
    return out


def relative(path: Location, root: Location) -> str:
    """``path`` below ``root`` as a POSIX string, ``.`` for ``root`` itself."""
    if isinstance(path, Path) and isinstance(root, Path):
        return path.relative_to(root).as_posix()
    full, base = str(path).rstrip("/"), str(root).rstrip("/")
    if full == base:
        return "."
    return full[len(base) + 1 :] if full.startswith(base + "/") else full


def read_text(loc: Location) -> str:
    """A small text file, such as a sidecar. Raises OSError when it cannot be read."""
    if isinstance(loc, Path):
        return loc.read_text()
    fsys, path = _filesystem(loc)
    try:
        data: bytes = fsys.cat_file(path)
    except OSError:
        raise
    except Exception as exc:
        raise OSError(_brief(exc)) from exc
    return data.decode()


@contextlib.contextmanager
def fetched(loc: Location) -> Iterator[Path]:
    """A local path holding the file: ``loc`` itself when local, else a temporary copy,
    streamed to disk in chunks (traces reach gigabytes) and deleted on exit."""
    if isinstance(loc, Path):
        yield loc
        return
    fsys, path = _filesystem(loc)
    if "file" in _protocols(fsys):
        yield Path(path)  # file:// is on this disk already
        return
    with tempfile.TemporaryDirectory(prefix="traceinspect-") as tmp:
        local = Path(tmp) / (loc.name or "trace")
        try:
            with fsys.open(path, "rb") as src, local.open("wb") as dst:
                shutil.copyfileobj(src, dst, _COPY_CHUNK)
        except FileNotFoundError:
            raise TraceNotFoundError(
                f"{loc}: no such file (removed since it was listed?). Check the URL.", path=loc
            ) from None
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise _unreadable(loc, exc, TraceDecodeError) from None
            raise TraceDecodeError(
                f"{loc}: no space left to download it into {tempfile.gettempdir()}; "
                "point TMPDIR at a disk with room for the file.",
                path=loc,
            ) from None
        except Exception as exc:
            raise _unreadable(loc, exc, TraceDecodeError) from None
        yield local


def _filesystem(loc: URLPath) -> tuple[Any, str]:
    """The fsspec filesystem and the path within it; fsspec caches the instances."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        extra = _PACKAGES.get(loc.protocol, "'traceinspect[remote]'")
        extra = extra if extra.startswith("'traceinspect[") else "'traceinspect[remote]'"
        raise UsageError(
            f"{loc}: reading {loc.protocol}:// log directories needs fsspec: pip install {extra}."
        ) from None
    if loc.protocol in ("gs", "gcs"):
        _check_gcs_credentials(loc)
    try:
        fsys, path = url_to_fs(loc.url)
    except ImportError as exc:
        package = _PACKAGES.get(loc.protocol)
        todo = (
            f"pip install {package}"
            if package
            else f"install the package that implements {loc.protocol}:// for fsspec"
        )
        raise UsageError(
            f"{loc}: fsspec cannot load the {loc.protocol}:// filesystem ({_brief(exc)}); {todo}."
        ) from None
    except ValueError as exc:
        raise UsageError(
            f"{loc}: fsspec cannot open this URL ({_brief(exc)}). Pass a local path or a "
            "URL of a filesystem fsspec knows, such as gs://bucket/logdir."
        ) from None
    except Exception as exc:
        raise _unreadable(loc, exc, TraceNotFoundError) from None
    return fsys, str(path)


def _check_gcs_credentials(loc: URLPath) -> None:
    """Refuse gs:// at once where gcsfs would find no credentials: it would ask the metadata
    server of a Compute Engine VM that is not there, then read anonymously, retrying every
    request for ~45 s before failing. Told without the network: a token in fsspec's config
    (``FSSPEC_GS_TOKEN``), ``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's application-default
    credentials, gcsfs' token cache, or a Google Compute Engine VM (its metadata server, unless
    ``NO_GCE_CHECK=true``). Without gcsfs installed, fsspec's ImportError says what to
    install instead."""
    if importlib.util.find_spec("gcsfs") is None:
        return
    from fsspec.config import conf

    if any(conf.get(protocol, {}).get("token") for protocol in ("gs", "gcs")):
        return
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return
    gcloud = os.environ.get("CLOUDSDK_CONFIG") or (
        Path(os.environ["APPDATA"], "gcloud")
        if os.name == "nt" and "APPDATA" in os.environ
        else Path.home() / ".config" / "gcloud"
    )
    cached = Path.home() / ".gcs_tokens"
    if Path(gcloud, "application_default_credentials.json").is_file() or cached.is_file():
        return
    if os.environ.get("NO_GCE_CHECK", "").lower() != "true" and _on_gce():
        return
    raise UsageError(
        f"{loc}: no Google Cloud credentials on this machine: run 'gcloud auth "
        "application-default login' (or set GOOGLE_APPLICATION_CREDENTIALS to a key file; "
        "FSSPEC_GS_TOKEN=anon reads a public bucket).",
        path=loc,
    )


def _on_gce() -> bool:
    """A Compute Engine VM (a TPU VM, a GKE node) or a metadata server named by the
    environment: its service account may read the bucket. As google-auth tells, from the
    machine's product name, without the network."""
    if any(os.environ.get(name) for name in _METADATA_ENV):
        return True
    try:
        return _GCE_PRODUCT_NAME.read_text().strip().startswith("Google")
    except OSError:
        return False


def _protocols(fsys: Any) -> tuple[str, ...]:
    protocol = fsys.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _unreadable(loc: URLPath, exc: Exception, kind: type[TraceInspectError]) -> TraceInspectError:
    if isinstance(exc, TraceInspectError):
        return exc
    login = _CREDENTIALS.get(loc.protocol)
    hint = f" ({login})" if login else ""
    return kind(
        f"{loc}: cannot read it ({_brief(exc)}). Check the URL, and that your credentials "
        f"for {loc.protocol}://{hint} may read it."
    )


def _brief(exc: BaseException) -> str:
    """An exception as one short line: libraries put JSON bodies and newlines in them."""
    text = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _stat(info: Mapping[str, Any]) -> Stat:
    mtime_ns = next((ns for key in _MTIME_KEYS if (ns := _ns(info.get(key)))), 0)
    etag = next((str(info[key]) for key in _ETAG_KEYS if info.get(key)), "")
    return Stat(size=int(info.get("size") or 0), mtime_ns=mtime_ns, etag=etag)


def _ns(value: object) -> int:
    """Seconds since the epoch, a datetime or an ISO 8601 string, in ns; 0 if none."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
        return (value - epoch) // dt.timedelta(microseconds=1) * 1000
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value * 1e9)
    if isinstance(value, str):
        try:
            return _ns(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return 0
    return 0
