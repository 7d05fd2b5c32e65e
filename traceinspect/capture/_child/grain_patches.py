"""What capture changes in Grain: batches drawn on the main thread are steps, the pipeline's
settings are recorded, and ``mp_prefetch`` workers run the probe that measures them."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ._base import ANN_NEXT_BATCH, SOURCE_GRAIN, TIMING_LOADER, TIMING_TARGET, _warn
from .hooks import _wrap_method
from .window import _TRACING, _Capture


def _nbytes(obj: Any, depth: int = 0) -> int | None:
    """Bytes held by the arrays of a batch (numpy or jax leaves in dicts, lists, tuples)."""
    if depth > 6:
        return None
    nbytes = getattr(obj, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    items: Sequence[Any]
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        items = obj
    else:
        return None
    total = 0
    seen = False
    for item in items[:1000]:
        n = _nbytes(item, depth + 1)
        if n is not None:
            total += n
            seen = True
    return total if seen else None


#: Batches whose content is fingerprinted, from the first one the loop draws: hosts of a pod
#: that start with the same batches read the same data instead of their own slices.
FINGERPRINTED_BATCHES = 2


def _numpy_leaves(batch: Any) -> list[Any]:
    """A batch's NumPy arrays in a stable order (dict keys sorted), at most 1000 items
    visited; jax arrays are left alone (reading them would sync)."""
    leaves: list[Any] = []
    stack: list[Any] = [batch]
    seen = 0
    while stack and seen < 1000:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            stack.extend(item[k] for k in sorted(item, key=str, reverse=True))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif type(item).__module__ == "numpy" and hasattr(item, "tobytes"):
            leaves.append(item)
    return leaves


def _fingerprint(batch: Any) -> str | None:
    """A short digest of a batch's NumPy arrays (dtype, shape and bytes, in a stable order),
    or None when it holds none."""
    leaves = _numpy_leaves(batch)
    if not leaves:
        return None
    digest = hashlib.blake2b(digest_size=8)
    for item in leaves:
        digest.update(f"{item.dtype.str}{item.shape}".encode())
        digest.update(item.tobytes())
    return digest.hexdigest()


def _leading_rows(leaves: list[Any]) -> int | None:
    """The batch's leading size: its first array's first dimension (None for scalars)."""
    shape = getattr(leaves[0], "shape", ()) if leaves else ()
    return int(shape[0]) if shape else None


def _interleaved_files(datasets: Any) -> tuple[int | None, int]:
    """What an ``InterleaveIterDataset`` interleaves: the length of the list it was built
    from (one dataset per file, as Grain documents it and MaxText builds its Parquet and
    TFRecord pipelines: ``MapDataset.source(files)...[i::n].map(open_file)``), walked down
    through the ``MapDataset``\\ s on top of it to its source, and the product of the steps
    of the slices met on the way (a host's share of the files, ``[i::n]``)."""
    shards = 1
    ds = datasets
    for _ in range(100):
        parents = getattr(ds, "parents", None)
        if parents is None:
            break  # a plain sequence of datasets: one per file
        if type(ds).__name__ == "SliceMapDataset":
            shards *= max(1, int(getattr(ds, "_step", 1)))
        if len(parents) != 1:
            if not parents:
                break  # the source
            return None, shards  # a mix or concatenation: no one list of files
        ds = parents[0]
    try:
        return len(ds), shards
    except TypeError:
        return None, shards


def _patch_grain(cap: _Capture, grain: types.ModuleType) -> None:
    dataset_mod = sys.modules["grain._src.python.dataset.dataset"]
    iterator_base = dataset_mod.DatasetIterator
    workers = cap.config.get("workers")
    state = cap.thread_state

    def make_next(orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(orig)
        def __next__(self: Any) -> Any:
            depth = getattr(state, "depth", 0)
            if depth or not cap.active():
                # A pipeline stage calling its parent: only the outermost fetch is a batch.
                state.depth = depth + 1
                try:
                    return orig(self)
                finally:
                    state.depth = depth
            cls_name = type(self).__name__
            if cap.timing == TIMING_LOADER:
                _drain(self, orig, cls_name)
            cap.batches_drawn += 1
            cap.on_step(SOURCE_GRAIN, cls_name, f"batches from grain {cls_name}")
            if cap.has_first_batch:
                return cap.first_batch  # the target phase: no input cost
            state.depth = 1
            if cap.phase == _TRACING:
                cap.batches_in_window += 1
            timed = cap.timing_window()
            start = time.perf_counter_ns() if timed else 0
            try:
                with cap.annotate(ANN_NEXT_BATCH):
                    batch = orig(self)
            finally:
                state.depth = 0
                if timed:
                    cap.window_input_ns += time.perf_counter_ns() - start
            if len(cap.first_batches) < FINGERPRINTED_BATCHES:
                digest = _fingerprint(batch)
                if digest is not None:
                    cap.first_batches.append(digest)
            if cap.batch_rows is None or cap.wants_global_arrays():
                leaves = _numpy_leaves(batch)
                if cap.batch_rows is None:
                    cap.batch_rows = _leading_rows(leaves)
                # The global array the script builds next is matched to this batch by
                # its arrays' identity (jax_patches).
                cap.batch_leaf_ids = frozenset(id(leaf) for leaf in leaves)
            if cap.batch_bytes is None or cap.phase == _TRACING:
                n = _nbytes(batch)
                if n is not None:
                    cap.batch_bytes = n
            if cap.timing == TIMING_TARGET:
                cap.first_batch, cap.has_first_batch = batch, True
            return batch

        return __next__

    def _drain(iterator: Any, orig: Callable[[Any], Any], cls_name: str) -> NoReturn:
        """The loader phase: draw batch after batch from the first iterator the loop asked,
        each a step, until the phase stops the script (``_StopAfter``)."""
        detail = f"batches drawn alone from grain {cls_name}"
        state.depth = 1
        try:
            while True:
                cap.on_step(SOURCE_GRAIN, cls_name, detail)
                try:
                    orig(iterator)
                except StopIteration:
                    cap.stop_phase(f"the iterator ran out after {cap.batches_drawn} batches")
                cap.batches_drawn += 1
        finally:
            state.depth = 0

    _on_class_tree(
        iterator_base, ("__next__",), lambda cls, name: _wrap_method(cls, name, make_next)
    )

    loader_mod = sys.modules.get("grain._src.python.data_loader")
    if loader_mod is not None:
        _wrap_method(loader_mod.DataLoaderIterator, "__next__", make_next)
        real_loader_init = loader_mod.DataLoader.__init__

        @functools.wraps(real_loader_init)
        def loader_init(self: Any, *args: Any, **kwargs: Any) -> None:
            _parse_absl_defaults(cap)
            if workers is not None:
                kwargs["worker_count"] = workers
            real_loader_init(self, *args, **kwargs)
            read = kwargs.get("read_options")
            batch_size = None
            for op in kwargs.get("operations") or ():
                batch_size = getattr(op, "batch_size", batch_size)
            cap.grain_event(
                "DataLoader",
                worker_count=kwargs.get("worker_count", 0),
                worker_buffer_size=kwargs.get("worker_buffer_size", 1),
                read_threads=getattr(read, "num_threads", None),
            )
            if batch_size is not None:
                cap.grain_event("batch", batch_size=batch_size, where="DataLoader")

        loader_mod.DataLoader.__init__ = loader_init

    options_mod = sys.modules["grain._src.python.options"]
    iter_dataset = dataset_mod.IterDataset
    real_mp_prefetch = iter_dataset.mp_prefetch

    @functools.wraps(real_mp_prefetch)
    def mp_prefetch(
        self: Any, options: Any = None, worker_init_fn: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        _parse_absl_defaults(cap)
        options = options or options_mod.MultiprocessingOptions(num_workers=10)
        if workers is not None:
            options = dataclasses.replace(options, num_workers=workers)
        cap.grain_event(
            "mp_prefetch",
            num_workers=options.num_workers,
            per_worker_buffer_size=options.per_worker_buffer_size,
        )
        if options.num_workers > 0 and os.getpid() == cap.pid:
            # Grain cloudpickles this into each worker process; _worker_probe is pickled by
            # value (it claims __main__, below), so the worker needs nothing of ours.
            time_stages = _time_stages if cap.timing is None else None
            worker_init_fn = functools.partial(
                _worker_probe, cap.worker_probe_dir(), worker_init_fn, time_stages
            )
        return real_mp_prefetch(self, options, worker_init_fn, *args, **kwargs)

    iter_dataset.mp_prefetch = mp_prefetch

    prefetch_mod = sys.modules.get("grain._src.python.dataset.transformations.prefetch")
    if prefetch_mod is not None:
        real_prefetch_init = prefetch_mod.PrefetchIterDataset.__init__

        @functools.wraps(real_prefetch_init)
        def prefetch_init(self: Any, parent: Any, *args: Any, **kwargs: Any) -> None:
            real_prefetch_init(self, parent, *args, **kwargs)
            read = kwargs.get("read_options")
            cap.grain_event(
                "ReadOptions",
                num_threads=_plain(getattr(read, "num_threads", None)),
                prefetch_buffer_size=_plain(getattr(read, "prefetch_buffer_size", None)),
            )

        prefetch_mod.PrefetchIterDataset.__init__ = prefetch_init

    interleave_mod = sys.modules.get("grain._src.python.dataset.transformations.interleave")
    if interleave_mod is not None:
        real_interleave_init = interleave_mod.InterleaveIterDataset.__init__

        @functools.wraps(real_interleave_init)
        def interleave_init(self: Any, datasets: Any, *args: Any, **kwargs: Any) -> None:
            real_interleave_init(self, datasets, *args, **kwargs)
            first = next(iter(datasets), None) if isinstance(datasets, (list, tuple)) else None
            if type(first).__name__ == "ProcessPrefetchIterDataset":
                return  # mp_prefetch's own interleave of its workers
            files, shards = _interleaved_files(datasets)
            if files is not None:
                cap.grain_event("interleave", files=files, file_shards=shards)

        interleave_mod.InterleaveIterDataset.__init__ = interleave_init

    batch_mod = sys.modules.get("grain._src.python.dataset.transformations.batch")
    if batch_mod is not None:
        for cls_name in ("BatchMapDataset", "BatchIterDataset"):
            cls = getattr(batch_mod, cls_name, None)
            if cls is None:
                continue
            real_init = cls.__init__

            def batch_init(
                self: Any,
                parent: Any,
                batch_size: int,
                *args: Any,
                _real: Callable[..., None] = real_init,
                _name: str = cls_name,
                **kwargs: Any,
            ) -> None:
                _real(self, parent, batch_size, *args, **kwargs)
                cap.grain_event("batch", batch_size=batch_size, where=_name)

            cls.__init__ = batch_init

    if cap.config.get("grain_worker_profiling"):
        cap.grain_worker_profiling = _enable_worker_profiling()
    if cap.timing is None:
        # Not in a phase of isolate: its steps are timed as they run, without our wrappers.
        cap.stage_table = _time_stages(False)


def _on_class_tree(base: Any, names: tuple[str, ...], wrap: Callable[[type, str], None]) -> None:
    """``wrap(cls, name)`` for each of ``names`` on ``base`` and every subclass of it, those
    defined already and those defined later (through ``base.__init_subclass__``, chained to
    the one it had). Self-contained: pickled by value with :func:`_time_stages`."""

    def walk(cls: type) -> None:
        for name in names:
            wrap(cls, name)
        sub: type
        for sub in cls.__subclasses__():
            walk(sub)

    walk(base)
    previous = base.__dict__.get("__init_subclass__")

    def __init_subclass__(cls: type, /, **kwargs: Any) -> None:
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(base, cls).__init_subclass__(**kwargs)
        for name in names:
            wrap(cls, name)

    base.__init_subclass__ = classmethod(__init_subclass__)


# Pickled by value into spawned workers (with _time_stages, which calls it).
_on_class_tree.__module__ = "__main__"


#: A stage table: where -> stage -> [self time in ns, calls].
StageTable = dict[str, dict[str, list[int]]]


def _time_stages(in_worker: bool) -> Callable[[], StageTable]:
    """Time the stages of Grain pipelines in this process; return a function that gives the
    cumulative table so far (where -> stage -> [self ns, calls]).

    Every ``__getitem__`` / ``_getitems`` / ``__getitems__`` of a ``MapDataset`` class and
    every ``__next__`` of a ``DatasetIterator`` class, present and future, is wrapped to
    add its *self* time (its own time less that of the wrapped calls inside it) to its
    class's stage: sources read (``read``), batching classes batch (``batch``), prefetch
    classes wait for others (not a stage: left out), every other transformation is
    ``preprocessing``. Where: ``workers`` in an ``mp_prefetch`` worker, else ``main`` on the
    main thread and ``threads`` on any other. Each thread adds to its own table, so no
    increment is lost between threads.

    Installed once per process (the table function is kept on Grain's dataset module).
    Self-contained (imports inside; its one module global, :func:`_on_class_tree`, is pickled
    by value with it) because it is pickled by value into worker processes.
    """
    import functools as _functools
    import sys as _sys
    import threading as _threading
    import time as _time

    dataset_mod = _sys.modules.get("grain._src.python.dataset.dataset")
    if dataset_mod is None:
        return dict
    existing = getattr(dataset_mod, "_traceinspect_stage_table", None)
    if existing is not None:
        return existing
    main = _threading.main_thread()
    local = _threading.local()
    tables: list[StageTable] = []
    lock = _threading.Lock()
    clock = _time.perf_counter_ns
    #: The kernel's ids of the threads that ran stages, by place (see stage_thread_clocks).
    native_ids: dict[str, set[int]] = {}

    def stage_of(cls: type) -> str | None:
        name = cls.__name__.lower()
        if "prefetch" in name:
            return None
        if "source" in name:
            return "read"
        if "batch" in name:
            return "batch"
        return "preprocessing"

    def own() -> tuple[StageTable, list[list[int]], str]:
        """This thread's table, its stack of calls in progress, and its place (worked out
        once per thread)."""
        table = getattr(local, "table", None)
        if table is None:
            table = local.table = {}
            local.stack = []
            local.place = (
                "workers"
                if in_worker
                else "main"
                if _threading.current_thread() is main
                else "threads"
            )
            with lock:
                tables.append(table)
                native_ids.setdefault(local.place, set()).add(_threading.get_native_id())
        return table, local.stack, local.place

    def wrap(cls: type, name: str) -> None:
        orig = cls.__dict__.get(name)
        if not callable(orig) or getattr(orig, "_traceinspect_stage", False):
            return
        stage = stage_of(cls)

        @_functools.wraps(orig)
        def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            table, stack, where = own()
            inner = [0]
            stack.append(inner)
            start = clock()
            try:
                return orig(self, *args, **kwargs)
            finally:
                elapsed = clock() - start
                stack.pop()
                if stack:
                    stack[-1][0] += elapsed
                if stage is not None:
                    cell = table.setdefault(where, {}).setdefault(stage, [0, 0])
                    cell[0] += elapsed - inner[0]
                    cell[1] += 1

        timed._traceinspect_stage = True  # type: ignore[attr-defined]
        setattr(cls, name, timed)

    _on_class_tree(dataset_mod.MapDataset, ("__getitem__", "_getitems", "__getitems__"), wrap)
    _on_class_tree(dataset_mod.DatasetIterator, ("__next__",), wrap)

    def snapshot() -> StageTable:
        with lock:
            current = list(tables)
        out: StageTable = {}
        for table in current:
            for where, row in list(table.items()):
                for stage, (ns, calls) in list(row.items()):
                    cell = out.setdefault(where, {}).setdefault(stage, [0, 0])
                    cell[0] += ns
                    cell[1] += calls
        return out

    def threads() -> dict[str, set[int]]:
        with lock:
            return {place: set(ids) for place, ids in native_ids.items()}

    snapshot.native_ids = threads  # type: ignore[attr-defined]
    setattr(dataset_mod, "_traceinspect_stage_table", snapshot)  # noqa: B010
    return snapshot


# Pickled by value into spawned workers, as _worker_probe below.
_time_stages.__module__ = "__main__"


def _worker_probe(
    stats_dir: str,
    user_init: Callable[[int, int], None] | None,
    time_stages: Callable[[bool], Callable[[], StageTable]] | None,
    index: int,
    count: int,
) -> None:
    """Runs in each Grain ``mp_prefetch`` worker process before it starts producing.

    Times the worker's loop from the outside of each element: Grain's worker produces an
    element (``next``), then puts it in its buffer, blocking while the buffer is full. The put
    is ``grain_queue.add_element_to_queue``; wrapped here, the time between two puts is the
    time spent producing, and the time inside one is the time blocked on a full buffer (the
    consumer did not need the element yet). A thread writes the counters, with the process's
    CPU time, its threads' time waiting for a core and its memory, to
    ``stats_dir/worker-<index>-<pid>.json`` every 50 ms; the training process reads them when
    the trace window opens and closes.

    Self-contained (imports inside, no module globals) because it is pickled by value.
    """
    if user_init is not None:
        user_init(index, count)
    stage_table = time_stages(True) if time_stages is not None else None
    import contextlib as _contextlib
    import json as _json
    import os as _os
    import pathlib as _pathlib
    import sys as _sys
    import threading as _threading
    import time as _time

    pid = _os.getpid()
    lock = _threading.Lock()
    state: dict[str, Any] = {
        "elements": 0,
        "produce_ns": 0,
        "blocked_ns": 0,
        "since": _time.perf_counter_ns(),
    }
    phase = ["produce"]
    timed = False
    module = _sys.modules.get("grain._src.python.dataset.transformations.process_prefetch")
    queue_mod: Any = getattr(module, "grain_queue", None)
    real_put = getattr(queue_mod, "add_element_to_queue", None)
    if real_put is not None:

        def add_element_to_queue(*args: Any, **kwargs: Any) -> Any:
            now = _time.perf_counter_ns()
            with lock:
                state["produce_ns"] += now - state["since"]
                state["elements"] += 1
                state["since"] = now
                phase[0] = "blocked"
            try:
                return real_put(*args, **kwargs)
            finally:
                done = _time.perf_counter_ns()
                with lock:
                    state["blocked_ns"] += done - state["since"]
                    state["since"] = done
                    phase[0] = "produce"

        queue_mod.add_element_to_queue = add_element_to_queue
        timed = True
    path = _pathlib.Path(stats_dir, f"worker-{index}-{pid}.json")
    page = _os.sysconf("SC_PAGE_SIZE") if hasattr(_os, "sysconf") else 4096

    def rss() -> int | None:
        try:
            statm = _pathlib.Path(f"/proc/{pid}/statm").read_text(encoding="ascii")
            return int(statm.split()[1]) * page
        except (OSError, ValueError, IndexError):
            return None

    def run_delay() -> int | None:
        # Time this process's threads were ready to run but waited for a core (the kernel's
        # run delay, the second field of each thread's schedstat): on oversubscribed cores a
        # CPU-bound worker waits there, and its CPU time alone would make it look idle.
        total, seen = 0, False
        with _contextlib.suppress(OSError):
            for task in _os.scandir("/proc/self/task"):
                with _contextlib.suppress(OSError, ValueError, IndexError):
                    stat = _pathlib.Path(task.path, "schedstat").read_text(encoding="ascii")
                    total += int(stat.split()[1])
                    seen = True
        return total if seen else None

    def write() -> None:
        now = _time.perf_counter_ns()
        with lock:
            counters = dict(state)
            running = now - counters.pop("since")
            counters[f"{phase[0]}_ns"] += running
        counters.update(
            index=index,
            count=count,
            pid=pid,
            timed=timed,
            t_ns=_time.time_ns(),
            cpu_ns=_time.process_time_ns(),
            run_delay_ns=run_delay(),
            rss_bytes=rss(),
            stages=stage_table() if stage_table is not None else None,
        )
        tmp = path.with_name(f"{path.name}.tmp")
        tmp.write_text(_json.dumps(counters), encoding="utf-8")
        tmp.replace(path)

    def loop() -> None:
        while True:
            try:
                write()
            except OSError:
                return
            _time.sleep(0.05)

    _threading.Thread(target=loop, name="traceinspect-worker-probe", daemon=True).start()


# cloudpickle, Grain's pickler, pickles a function of __main__ by value and any other by
# reference, for the worker to import. A spawned worker cannot import this module (the child's
# package exists only in the training process, under a private name), so the probe claims
# __main__: it needs no module globals, and the worker gets its code.
_worker_probe.__module__ = "__main__"


def _plain(value: Any) -> Any:
    return value if isinstance(value, (int, float, str)) or value is None else repr(value)


#: What capture says when it marks absl's flags parsed for the script (stderr and sidecar).
ABSL_DEFAULTS_NOTE = (
    "Grain reads absl flags and the script had not parsed them: marked them parsed with "
    "their defaults (without traceinspect: absl.flags.FLAGS.mark_as_parsed() or "
    "absl.app.run first)."
)


def _parse_absl_defaults(cap: _Capture) -> None:
    """Mark absl's flags parsed, with their defaults, when Grain is about to read them and
    nothing has parsed them: Grain's ``mp_prefetch`` and ``DataLoader`` read absl flags on
    another thread, which raises ``UnparsedFlagAccessError`` in a plain script.

    Done here, when the script builds its pipeline, and not before the script runs: a script
    that parses its own flags (``absl.app.run``, ``FLAGS(argv)``) has done so by then, and
    one that checks ``FLAGS.is_parsed()`` before parsing still sees False until it needs
    Grain. Even so a later ``FLAGS(argv)`` parses the command line as usual (absl parses on
    every call)."""
    flags = sys.modules.get("absl.flags")
    if flags is None:
        return
    try:
        if flags.FLAGS.is_parsed():
            return
        flags.FLAGS.mark_as_parsed()
    except Exception:
        return
    cap.notes.append(ABSL_DEFAULTS_NOTE)
    if not cap.config.get("quiet"):
        _warn(ABSL_DEFAULTS_NOTE)


def _enable_worker_profiling() -> bool:
    """Turn on Grain's worker profiling flag when this jax/grain pair supports it."""
    profiler = sys.modules.get("grain._src.core.profiler")
    if profiler is None or not getattr(profiler, "is_worker_profiling_supported", lambda: False)():
        return False
    try:
        from absl import flags

        # A default, not a value: a script that parses its own flags keeps control.
        flags.FLAGS.set_default("grain_enable_multiprocess_worker_profiling", True)
    except Exception:
        return False
    return True


def workers_vs_files_hint(exc: BaseException, cap: _Capture) -> str | None:
    """For the ``IndexError`` a Grain pipeline raises when an ``mp_prefetch`` worker was given
    no file of an ``InterleaveIterDataset`` (more workers than files on this host): the
    numbers and the fix. None otherwise.

    Measured with Grain 0.2.18: 2 files, 3 workers: ``IndexError: list index out of range``
    after 2 batches (after 1 with 1 file and 2 workers); as many workers as files run
    through. The count of files per host is MaxText's, as in
    ``traceinspect.analysis.findings`` (the analysis' ``workers_vs_files``)."""
    if not isinstance(exc, IndexError) or not _raised_in_grain(exc):
        return None
    workers = cap._grain_setting("mp_prefetch", "num_workers")
    files = cap._grain_setting("interleave", "files")
    shards = max(1, cap._grain_setting("interleave", "file_shards") or 1)
    if not workers or not files:
        return None
    per_host = max(files // shards, 1)
    if workers <= per_host:
        return None
    sliced = f", {files} // {shards} per host" if shards > 1 else ""
    return (
        f"{workers} mp_prefetch workers share {per_host} file(s) on this host ({files} "
        f"listed under the InterleaveIterDataset{sliced}): a worker given no file ends "
        f"Grain's pipeline with this IndexError. Use at most {per_host} worker(s) (MaxText "
        f"refuses more workers than files per host), or split the data into at least "
        f"{workers * shards} files."
    )


def _raised_in_grain(exc: BaseException) -> bool:
    """Whether the exception's traceback passes through Grain's own code."""
    tb = exc.__traceback__
    while tb is not None:
        if f"{os.sep}grain{os.sep}" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def grain_method_hint(exc: BaseException) -> str | None:
    """For an ``AttributeError`` raised on a Grain dataset (``'BatchMapDataset' object has no
    attribute 'mp_prefetch'``): which of Grain's dataset kinds has that method in the
    installed Grain, and how to get there from the object the script had. None otherwise.

    Looked up, not remembered: the classes and their methods are those of the Grain the
    script imported.
    """
    obj = getattr(exc, "obj", None)
    name = getattr(exc, "name", None)
    if not isinstance(exc, AttributeError) or obj is None or not isinstance(name, str):
        return None
    if not type(obj).__module__.startswith("grain."):
        return None
    dataset_mod = sys.modules.get("grain._src.python.dataset.dataset")
    if dataset_mod is None:
        return None
    kinds = [
        cls
        for cls in (getattr(dataset_mod, n, None) for n in ("MapDataset", "IterDataset"))
        if isinstance(cls, type)
    ]
    mine = next((k for k in kinds if isinstance(obj, k)), None)
    having = [k for k in kinds if k is not mine and hasattr(k, name)]
    version = "?"
    with contextlib.suppress(Exception):
        from importlib import metadata

        version = metadata.version("grain")
    what = f"'{type(obj).__name__}'" + (f" (a {mine.__name__})" if mine else "")
    if not having:
        return f"{what} has no '{name}' in grain {version}, nor has any Grain dataset kind."
    target = having[0].__name__
    converters = [
        m
        for m in sorted(dir(type(obj)))
        if m.startswith("to_") and target.lower().startswith(m[3:].replace("_", ""))
    ]
    how = (
        f": call .{converters[0]}(...) first, then .{name}(...)"
        if converters
        else f"; build the pipeline so that .{name}(...) is called on a {target}"
    )
    return f"{what} has no '{name}' in grain {version}; {target} has it{how}."
