"""What capture changes in jax: StepTraceAnnotation and jit calls report steps, host reads
of device values are annotated inside the window, and the global arrays the script builds
from the loop's batches are described (their rows, and the rows on this host's devices)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._base import ANN_HOST_READ, SOURCE_ANNOTATION, SOURCE_JIT
from .hooks import _wrap_method
from .window import _Capture

if TYPE_CHECKING:  # the sidecar's format (checked, never imported: the child runs by path)
    from traceinspect.sidecar import GlobalArrayJSON


def _patch_jax(cap: _Capture, jax: Any) -> None:
    profiler_mod: Any = sys.modules["jax._src.profiler"]
    base = profiler_mod.StepTraceAnnotation

    class StepTraceAnnotation(base):  # type: ignore[misc, valid-type]
        __doc__ = base.__doc__

        def __init__(self, name: str, **kwargs: Any) -> None:
            # Before the base __init__: jax's TraceMe decides at construction whether it is
            # recorded, so the window must already be open for this step's annotation.
            if cap.active():
                step_num = kwargs.get("step_num")
                cap.on_step(
                    SOURCE_ANNOTATION,
                    name,
                    f"StepTraceAnnotation {name!r}",
                    step_num if isinstance(step_num, int) else None,
                )
            super().__init__(name, **kwargs)

    StepTraceAnnotation.__name__ = base.__name__
    StepTraceAnnotation.__qualname__ = base.__qualname__
    StepTraceAnnotation.__module__ = base.__module__
    profiler_mod.StepTraceAnnotation = StepTraceAnnotation
    jax.profiler.StepTraceAnnotation = StepTraceAnnotation

    real_jit = jax.jit

    @functools.wraps(real_jit)
    def jit(fun: Any = None, *args: Any, **kwargs: Any) -> Any:
        if fun is None:
            # jax.jit(static_argnums=...) used as a decorator factory.
            return lambda f: jit(f, *args, **kwargs)
        return _JitProxy(cap, real_jit(fun, *args, **kwargs), fun)

    jax.jit = jit

    array_mod = sys.modules.get("jax._src.array")
    array_impl = getattr(array_mod, "ArrayImpl", None)
    if array_impl is not None:
        for name in (
            "__float__",
            "__int__",
            "__bool__",
            "__index__",
            "item",
            "tolist",
            "__array__",
            "block_until_ready",
        ):
            _wrap_method(array_impl, name, functools.partial(_host_read, cap, kind=name))
        value = array_impl.__dict__.get("_value")
        if cap.timing is not None and isinstance(value, property) and value.fget is not None:
            # A phase of isolate also times the copy every other read goes through
            # (print(x), str(x), f"{x}"), uncounted when inside one of the reads above.
            array_impl._value = property(_host_read(cap, value.fget, kind="_value"))
    real_device_get = jax.device_get
    jax.device_get = _host_read(cap, real_device_get, kind="device_get")
    # The ways a training loop turns each host's batch into one global array.
    jax.device_put = _global_array(cap, jax.device_put, "jax.device_put", "x")
    jax.make_array_from_process_local_data = _global_array(
        cap,
        jax.make_array_from_process_local_data,
        "jax.make_array_from_process_local_data",
        "local_data",
        position=1,
    )


def _patch_multihost_utils(cap: _Capture, module: Any) -> None:
    name = "host_local_array_to_global_array"
    api = f"multihost_utils.{name}"
    setattr(module, name, _global_array(cap, getattr(module, name), api, "local_inputs"))


def _global_array(
    cap: _Capture, orig: Callable[..., Any], api: str, keyword: str, position: int = 0
) -> Callable[..., Any]:
    """``orig`` (a jax function that makes arrays from host data), describing what it made
    from the arrays of the loop's last batch while the report wants more such records."""

    @functools.wraps(orig)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = orig(*args, **kwargs)
        if cap.batch_leaf_ids and cap.wants_global_arrays() and cap.active():
            data = args[position] if len(args) > position else kwargs.get(keyword)
            with contextlib.suppress(Exception):
                record = _describe_global_array(api, data, out, cap.batch_leaf_ids)
                if record is not None:
                    cap.global_arrays.append(record)
        return out

    return wrapper


def _describe_global_array(
    api: str, data: Any, out: Any, batch_ids: frozenset[int]
) -> GlobalArrayJSON | None:
    """The first array of ``out`` made from an array of the last batch (itself, or a NumPy
    view of it) when it spans processes: its rows, those this host handed over, and those on
    this host's devices. None for anything else (parameters, arrays local to this host)."""
    tree_util = sys.modules["jax.tree_util"]
    leaves_in = tree_util.tree_leaves(data)
    leaves_out = tree_util.tree_leaves(out)
    if len(leaves_in) != len(leaves_out):
        return None
    for leaf, array in zip(leaves_in, leaves_out, strict=True):
        base = getattr(leaf, "base", None)
        if id(leaf) not in batch_ids and (base is None or id(base) not in batch_ids):
            continue
        sharding = getattr(array, "sharding", None)
        shape = tuple(getattr(array, "shape", ()))
        if sharding is None or sharding.is_fully_addressable or not shape or not leaf.shape:
            return None
        rows = shape[0]
        spans = sorted(
            index[0].indices(rows)[:2]
            for index in sharding.addressable_devices_indices_map(shape).values()
        )
        host_rows, end = 0, 0
        for start, stop in spans:  # the union of this host's row ranges
            host_rows += max(0, stop - max(start, end))
            end = max(end, stop)
        return {
            "api": api,
            "local_rows": int(leaf.shape[0]),
            "global_rows": int(rows),
            "host_rows": host_rows,
            "processes": len({d.process_index for d in sharding.device_set}),
        }
    return None


# Frames of these files are not the user's: the read's site is the first frame outside them
# (``float(loss)`` in train.py, not jax's ``__float__`` or numpy's ``asarray``).
_NOT_USER = (
    *(f"{os.sep}{part}{os.sep}" for part in ("jax", "jaxlib", "numpy", "flax", "optax", "keras")),
    f"{Path(__file__).resolve().parent}{os.sep}",
)
# Frames walked up at most: a read under a framework's helpers is still found.
_SITE_DEPTH = 24


def caller_site(depth: int = 2) -> str:
    """``file.py:line function`` of the user's frame that made this call (the first frame
    outside jax, numpy, the frameworks and capture itself), or "" when none is found."""
    try:
        frame: Any = sys._getframe(depth)
    except ValueError:
        return ""
    for _ in range(_SITE_DEPTH):
        if frame is None:
            break
        code = frame.f_code
        file = code.co_filename
        if not file.startswith("<") and not any(part in file for part in _NOT_USER):
            return f"{file.rsplit(os.sep, 1)[-1]}:{frame.f_lineno} {code.co_name}"
        frame = frame.f_back
    return ""


def _host_read(cap: _Capture, orig: Callable[..., Any], *, kind: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not cap.tracing() or not cap.active():
            # Outside the trace (the window, or the early trace), or not the training thread
            # (capture's own completion waits among others).
            return orig(*args, **kwargs)
        if cap.timing_window() and not cap.in_host_read:
            # A phase of isolate: the time the loop waits on the device (outermost reads).
            cap.in_host_read = True
            start = time.perf_counter_ns()
            try:
                return orig(*args, **kwargs)
            finally:
                cap.window_read_ns += time.perf_counter_ns() - start
                cap.window_reads += 1
                cap.in_host_read = False
        if cap.in_host_read:
            # Inside another read (device_get's copies): the outer one carries the site.
            return orig(*args, **kwargs)
        cap.in_host_read = True
        try:
            with cap.annotate(ANN_HOST_READ, kind=kind, site=caller_site()):
                return orig(*args, **kwargs)
        finally:
            cap.in_host_read = False

    wrapper.__name__ = getattr(orig, "__name__", kind)
    wrapper.__doc__ = getattr(orig, "__doc__", None)
    return wrapper


class _JitProxy:
    """Stands in for a jitted function to count its calls; everything else is forwarded."""

    def __init__(self, cap: _Capture, jitted: Any, fun: Any) -> None:
        self._ti_cap = cap
        self._ti_jitted = jitted
        name = getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None) or repr(fun)
        self._ti_key = f"{name}@{id(jitted):x}"
        self._ti_detail = f"calls of jitted {name}"
        self._ti_previous: Any = None
        with contextlib.suppress(Exception):
            self.__wrapped__ = jitted
            self.__name__ = getattr(fun, "__name__", "jitted")
            self.__doc__ = getattr(fun, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cap = self._ti_cap
        if not cap.active():
            return self._ti_jitted(*args, **kwargs)
        cap.on_step(SOURCE_JIT, self._ti_key, self._ti_detail)
        out = self._ti_jitted(*args, **kwargs)
        key = self._ti_key
        previous = self._ti_previous
        if previous is not None:
            # Which of its last output's arrays did this call donate? Never wait on those.
            self._ti_previous = None
            cap.completions.learn(key, previous)
        if cap.completions.learning(key):
            self._ti_previous = out
        # The step's last jitted call so far: the next step's start waits on it (completion).
        cap.last_output = (key, out)
        return out

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_ti_"):
            # Not yet set (copy, pickle): never recurse into ourselves.
            raise AttributeError(name)
        return getattr(self._ti_jitted, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return types.MethodType(self, instance)

    def __repr__(self) -> str:
        return repr(self._ti_jitted)
