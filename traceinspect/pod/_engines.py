"""Where per-host work runs: in this process, in a local process pool, or on a Dask cluster.

Each engine maps one picklable function over the host files and yields results as they
finish, so the caller can report progress and never holds more than the compact results.
Only the workers ever hold a host's frames, one host per worker at a time.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from traceinspect.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")

# Decoding and analysing one host peaks at less than this many times its file size in
# memory, the worker's own imports included: 300 MiB in a Dask worker (131 MiB of it
# imports) for an 85 MiB host file, 258 MiB in a plain process, 937 MiB for a 509 MiB
# file; before the decoder released the file's pages as it went, 377 and 1,382 MiB, which
# this was set from. Since then the peak is the decoded columns plus the analysis' few MiB
# (benchmarks/README.md: bench_pod.py, bench_analyze.py, "Memory of reading").
MEMORY_PER_FILE_BYTE = 5


class Engine(Protocol):
    """Runs ``func`` over ``items`` and yields ``(index, result)`` as each finishes."""

    name: str

    def map_unordered(
        self, func: Callable[[T], R], items: Sequence[T]
    ) -> Iterator[tuple[int, R]]: ...


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory() -> int | None:
    """Bytes of memory available now (Linux), or None when unknown."""
    try:
        with Path("/proc/meminfo").open(encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_jobs(file_sizes: Sequence[int]) -> tuple[int, str]:
    """How many local processes to use for these files, and why: every usable core, no
    more than there are files, and no more than memory holds for the largest files."""
    n_files = max(1, len(file_sizes))
    cpus = usable_cpus()
    jobs = min(cpus, n_files)
    reason = f"{cpus} usable core(s)" if jobs == cpus else f"{n_files} host file(s)"
    memory = available_memory()
    biggest = max(file_sizes, default=0)
    if memory and biggest:
        fit = max(1, int(memory // (biggest * MEMORY_PER_FILE_BYTE)))
        if fit < jobs:
            jobs = fit
            reason = (
                f"memory: {memory / 2**30:.1f} GiB available holds {fit} host(s) of "
                f"{biggest / 1e6:,.0f} MB at a time"
            )
    return jobs, reason


@dataclass
class SerialEngine:
    """Everything in this process, one host after the other."""

    name: str = "serial"

    def map_unordered(self, func: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        for i, item in enumerate(items):
            yield i, func(item)


@dataclass
class ProcessEngine:
    """A local process pool of ``jobs`` workers."""

    jobs: int
    name: str = "processes"

    def map_unordered(self, func: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        # "spawn" would re-import pandas in every worker (~1 s each). Fork is safe while
        # this process runs one thread (the CLI); a caller with threads of its own (a
        # notebook that imported jax) gets forkserver, which never forks a threaded process.
        methods = multiprocessing.get_all_start_methods()
        method = None
        if "fork" in methods and threading.active_count() == 1:
            method = "fork"
        elif "forkserver" in methods:
            method = "forkserver"
        context = multiprocessing.get_context(method)
        with cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=context) as pool:
            futures = {pool.submit(func, item): i for i, item in enumerate(items)}
            try:
                for future in cf.as_completed(futures):
                    yield futures[future], future.result()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise


@dataclass
class DaskEngine:
    """Tasks on a Dask distributed cluster: an existing scheduler (``tcp://host:8786``) or,
    with ``address="local"``, a local cluster of ``jobs`` single-threaded worker processes
    started for this call. Workers must have traceinspect installed and see the files (a
    shared file system, or a remote URL such as ``gs://`` they have credentials for)."""

    address: str
    jobs: int | None = None
    connect_timeout_s: float = 15.0
    name: str = "dask"

    def map_unordered(self, func: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[int, R]]:
        try:
            # Untyped library: used through Any.
            dd: Any = importlib.import_module("distributed")
        except ImportError:
            raise UsageError(
                "running on a Dask cluster needs dask.distributed: pip install "
                "'traceinspect[distributed]'."
            ) from None
        cluster: Any = None
        try:
            if self.address == "local":
                cluster = dd.LocalCluster(
                    n_workers=self.jobs or usable_cpus(),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",  # any free port: never clash with a running cluster
                )
                client = dd.Client(cluster)
            else:
                client = dd.Client(self.address, timeout=f"{self.connect_timeout_s}s")
        except (OSError, TimeoutError) as exc:
            if cluster is not None:
                cluster.close()
            raise UsageError(
                f"cannot reach the Dask scheduler at {self.address} ({exc}); start one "
                "(dask scheduler) or check the address."
            ) from None
        try:
            futures = client.map(func, list(items), pure=False)
            index = {f.key: i for i, f in enumerate(futures)}
            for future in dd.as_completed(futures):
                yield index[future.key], future.result()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def make_engine(jobs: int | None, scheduler: str | None, file_sizes: Sequence[int]) -> Engine:
    """The engine for ``--jobs`` / ``--scheduler``: Dask when a scheduler is named, else
    local processes (one process means no pool at all)."""
    if scheduler:
        return DaskEngine(scheduler, jobs)
    if jobs is None:
        jobs, _ = default_jobs(file_sizes)
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1 (got {jobs}).")
    return SerialEngine() if jobs == 1 or len(file_sizes) <= 1 else ProcessEngine(jobs)
