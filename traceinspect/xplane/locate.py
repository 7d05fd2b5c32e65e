"""Find the XPlane files a path means: one file, one run directory, or a log directory.

Layouts understood (jax.profiler and TensorBoard write the last two)::

    trace.xplane.pb[.gz]                                   one file
    <run>/<host>.xplane.pb ...                             a run: one file per host
    <logdir>/[<sub>/]plugins/profile/<run>/<host>.xplane.pb  runs under a log directory

Each may be local or behind a URL (``gs://bucket/logdir``, see :mod:`traceinspect.xplane.fs`).
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from traceinspect.errors import AmbiguousRunError, TraceNotFoundError
from traceinspect.xplane import fs
from traceinspect.xplane.fs import Location, Stat, URLPath

log = logging.getLogger(__name__)

SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
PROFILE_DIR = ("plugins", "profile")


@dataclass(frozen=True)
class HostFile:
    """One host's trace file: a local :class:`~pathlib.Path` or a :class:`URLPath`."""

    host: str
    path: Location
    # A remote file's size, mtime and ETag as its listing gave them (local files are
    # stat'ed when asked, as before).
    stat: Stat | None = field(default=None, compare=False, repr=False)

    @property
    def location(self) -> str:
        """The file as a string that ``traceinspect.load()`` reads: the path, or the URL."""
        return str(self.path)

    @property
    def remote(self) -> bool:
        return isinstance(self.path, URLPath)

    @property
    def size(self) -> int:
        """Bytes on disk (or in the bucket)."""
        return (self.stat or fs.stat(self.path)).size

    @property
    def mtime_ns(self) -> int:
        return (self.stat or fs.stat(self.path)).mtime_ns

    @property
    def compressed(self) -> bool:
        return self.path.name.endswith(".gz")


@dataclass(frozen=True)
class Run:
    """A profiling run: a directory with one XPlane file per host."""

    name: str  # path relative to the directory the user named, e.g. plugins/profile/2026_...
    path: Location
    files: tuple[HostFile, ...]

    @property
    def mtime_ns(self) -> int:
        return max(f.mtime_ns for f in self.files)


@dataclass(frozen=True)
class Located:
    """What a user's path resolved to."""

    requested: Location  # as the user named it: str() gives their path or URL
    run: Run
    all_runs: tuple[Run, ...]  # every run found, newest last
    chose_newest: bool  # True when several runs existed and the newest was taken


def host_of(path: Location) -> str:
    name = path.name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return PurePosixPath(name).stem


def _one_per_host(files: list[HostFile]) -> tuple[HostFile, ...]:
    # A host written both plain and compressed: read the plain one.
    by_host: dict[str, HostFile] = {}
    for hf in sorted(files, key=lambda f: f.path.name):
        if hf.host not in by_host or by_host[hf.host].compressed:
            by_host[hf.host] = hf
    return tuple(by_host[h] for h in sorted(by_host))


def find_runs(root: Location) -> list[Run]:
    """Every run directory at or below ``root``, oldest first."""
    by_directory: dict[Location, list[HostFile]] = {}
    for path, stat in fs.find(root, SUFFIXES):
        by_directory.setdefault(path.parent, []).append(HostFile(host_of(path), path, stat))
    runs = []
    for directory, files in by_directory.items():
        rel = fs.relative(directory, root)
        runs.append(
            Run(
                name=rel if rel != "." else directory.name,
                path=directory,
                files=_one_per_host(files),
            )
        )
    runs.sort(key=lambda r: (r.mtime_ns, r.name))
    return runs


def _location(run: Run) -> str:
    """The profile directory a run lives in (sub-logdirs such as train/ and eval/ differ)."""
    return str(run.path.parent)


def _why_missing(p: object) -> str:
    """What is there instead of a file or a directory: nothing, a link to nothing, or a link
    that leads back to itself."""
    if not isinstance(p, Path) or not p.is_symlink():
        return "no such file or directory"
    try:
        p.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 says a loop so
        return "a symbolic link that loops back to itself"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link that loops back to itself"
        return f"a symbolic link to {p.readlink()}, which does not exist"
    return "no such file or directory"


def locate(path: str | os.PathLike[str] | URLPath, run: str | None = None) -> Located:
    """Resolve ``path`` (a file, a run directory or a log directory) to one run.

    With several runs, ``run`` picks one by name (as listed in errors and by
    ``traceinspect info``) or by its directory name; otherwise the newest run is taken,
    unless runs come from several profile directories (``train/`` and ``eval/``), where
    the choice is the user's.
    """
    p = fs.to_location(path)
    probed = fs.probe(p)
    if probed is None:
        raise TraceNotFoundError(
            f"{p}: {_why_missing(p)}. Pass a *.xplane.pb file, a run directory "
            "or a TensorBoard log directory (for example ./traceinspect_logs).",
            path=p,
        )
    if probed[0] == "file":
        hf = HostFile(host_of(p), p, probed[1])
        single = Run(name=p.parent.name, path=p.parent, files=(hf,))
        return Located(requested=p, run=single, all_runs=(single,), chose_newest=False)
    runs = find_runs(p)
    if not runs and isinstance(p, Path) and not os.access(p, os.R_OK | os.X_OK):
        raise TraceNotFoundError(
            f"{p}: the directory cannot be read (permission denied). Read it as a user who "
            "may, or copy the run somewhere readable.",
            path=p,
        )
    if not runs:
        raise TraceNotFoundError(
            f"{p}: no *.xplane.pb file in this directory or below it. Capture one with "
            "`traceinspect capture -- python train.py`, or point at the log directory "
            "jax.profiler wrote.",
            path=p,
        )
    if run is not None:
        chosen = [r for r in runs if run in (r.name, r.path.name)]
        if not chosen:
            raise AmbiguousRunError(
                f"{p}: no run named {run!r}; runs here: {_listing(runs)}.", path=p
            )
        if len(chosen) > 1:
            raise AmbiguousRunError(
                f"{p}: {len(chosen)} runs are named {run!r}; pass one of: {_listing(chosen)}.",
                path=p,
            )
        return Located(requested=p, run=chosen[0], all_runs=tuple(runs), chose_newest=False)
    if len({_location(r) for r in runs}) > 1:
        raise AmbiguousRunError(
            f"{p}: runs from {len({_location(r) for r in runs})} profile directories; "
            f"choose one with --run: {_listing(runs)}.",
            path=p,
        )
    log.debug("%s: %d run(s); reading the newest, %s", p, len(runs), runs[-1].name)
    return Located(requested=p, run=runs[-1], all_runs=tuple(runs), chose_newest=len(runs) > 1)


def _listing(runs: list[Run]) -> str:
    shown = [r.name for r in reversed(runs)][:10]
    more = f" (and {len(runs) - 10} older)" if len(runs) > 10 else ""
    return ", ".join(shown) + more
