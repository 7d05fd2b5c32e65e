"""What capture sends by value into Grain's processes: the timer of pipeline stages (run in
the training process too) and the probe each ``mp_prefetch`` worker runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


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
