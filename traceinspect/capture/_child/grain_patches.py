"""What capture changes in Grain: batches drawn on the main thread are steps, the pipeline's
settings are recorded, and ``mp_prefetch`` workers run the probe that measures them."""

from __future__ import annotations

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
from .grain_hints import grain_method_hint, workers_vs_files_hint
from .grain_probe import _on_class_tree, _time_stages, _worker_probe
from .hooks import _wrap_method
from .window import _TRACING, _Capture

__all__ = [
    "ABSL_DEFAULTS_NOTE",
    "FINGERPRINTED_BATCHES",
    "_patch_grain",
    "grain_method_hint",
    "workers_vs_files_hint",
]


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
            cap.run_events.batch_from(self)
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

    # Off unless asked for (capture --grain-worker-profiling): jaxlib's register_subprocess
    # waits for each worker's profiler server holding the GIL, so a worker that dies while it
    # starts (a Ctrl-C during the workers' start) froze every thread of the script.
    cap.grain_worker_profiling = bool(cap.config.get("grain_worker_profiling")) and (
        _enable_worker_profiling()
    )
    if cap.timing is None:
        # Not in a phase of isolate: its steps are timed as they run, without our wrappers.
        cap.stage_table = _time_stages(False)


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
