"""The names traceinspect matches traces against, in one place: the annotations
``traceinspect capture`` writes, and what jax, XLA, Grain and tf.data write into traces
(``../shared/FIELD-NOTES.md`` has where each was seen).

Standard library only, and importing nothing of the package: the capture child
(``capture/_child/``) runs inside the user's process without the package on its path and
loads this file by path (``_child/_base.py``).
"""

from __future__ import annotations

import re

# --- what `traceinspect capture` writes (main thread, inside the window only) --------------
ANN_STEP = "traceinspect/step"  # one step (stats step_index, step_num)
ANN_NEXT_BATCH = "traceinspect/next_batch"  # the loop waiting for a Grain batch
ANN_HOST_READ = "traceinspect/host_read"  # a host read of a device value (stats kind, site)
ANNOTATIONS = (ANN_STEP, ANN_NEXT_BATCH, ANN_HOST_READ)
READ_KIND_STAT = "kind"  # how the read was made: __float__, item, device_get, ...
READ_SITE_STAT = "site"  # where: the user's "file.py:line function" that made the read

# --- steps ------------------------------------------------------------------------------
STEP_NUM = "step_num"  # jax.profiler.StepTraceAnnotation's stat
GROUP_ID = "group_id"  # TensorFlow / XProf step grouping
ITER_NUM = "iter_num"  # TensorFlow executor iterations
STEPS_LINE = "Steps"  # a device plane's line of step events

# --- dispatch and execution ---------------------------------------------------------------
PJIT = re.compile(r"^PjitFunction\((?P<fn>.*)\)$")  # a jitted call on the host
RUN_ID = "run_id"  # one id per execution (XLA ops on the CPU backend, TPU modules)
HLO_MODULE = "hlo_module"  # the program an op belongs to: jit_<fn>
# The threads XLA's CPU client runs programs on, by the names jaxlib gives them: 0.6
# `tf_XLATfrtCpuClient/<id>` and `tf_XLAEigen/<id>`, 0.10
# `tf_XLAPjRtCpuClient/<id>` and `tf_XLAEigen/<id>`, 0.12 `tf_XLAExecute/<id>` beside
# `tf_XLAEigen/<id>`. Threads of another name that run a program's ops (events with an
# HLO_MODULE stat) and dispatch none count too (backends.detect.xla_cpu_line_rows).
XLA_CPU_LINE = re.compile(r"^tf_(XLATfrtCpuClient|XLAPjRtCpuClient|XLAEigen|XLACpu|XLAExecute)")
# Small programs run synchronously on the thread that calls them: only the execute call shows.
INLINE_EXECUTE = re.compile(r"^(CommonPjRtLoadedExecutable::ExecuteHelper|ThunkExecutor::Execute)")

# --- host-to-device transfer on the training thread (jax.device_put, jit arguments) ---------
TRANSFER_EVENT = re.compile(r"^(DevicePut|TransferToDevice.*|.*H2D.*)$")

# --- what the training thread waits on ---------------------------------------------------
INPUT_EVENT = re.compile(
    r"(Iterator\.__next__$|^" + re.escape(ANN_NEXT_BATCH) + r"$|IteratorGetNext"
    r"|^Iterator::GetNext)"
)
SYNC_EVENT = re.compile(
    r"^(np\.asarray\(jax\.Array\)|" + re.escape(ANN_HOST_READ) + r"|.*::ToLiteral"
    r"|TransferD2HRequest|TransferBufferFromDevice.*|PjrtAsyncWait|.*BlockHostUntilReady.*"
    # Python tracer frames of jax.Array methods that block on the value.
    r"|\$[^ ]*(array|api)\.py:\d+ (__float__|__int__|__bool__|__index__|__array__|item"
    r"|tolist|block_until_ready|try_to_block|device_get|_value))$"
)
# .block_until_ready(): a producer (_p) and a consumer (_c) event; the wait is between them.
AWAIT = "CommonPjRtBuffer::Await"
COMPILE_EVENT = re.compile(
    r"(Compil|compil|^pjit_lower|lower_sharding_computation|^trace_to_jaxpr|BackendCompile)"
)
COMPILE_LINE = re.compile(r"^(tf_PjRtCompilerThreadPool|tf_xla-cpu-codegen|tf_xla-compile)")
PYTHON_FRAME = re.compile(r"^\$(?P<file>[^:]+\.py):(?P<line>\d+) (?P<func>.+)$")

# --- host callbacks inside jitted programs ---------------------------------------------------
# XLA names a callback's custom call after jax's primitive (jaxlib 0.10-0.12, seen on the CPU
# backend and on a GPU): `debug_callback.N` (jax.debug.callback), `debug_print.N`
# (jax.debug.print), `pure_callback.N`, `io_callback.N`. On the CPU backend the name is the
# thunk's event (stats hlo_op, hlo_module, run_id); on a GPU the executable's annotation of
# the thunk on the thread that dispatched the program. TPU `XLA Ops` names are HLO text
# (`%name = ...`). Named scopes change the op_name metadata, not the instruction's name.
HOST_CALLBACK = re.compile(
    r"^%?(?P<kind>debug_callback|debug_print|pure_callback|io_callback)(?:\.\d+)?(?:\s|$)"
)
CALLBACK_API = {
    "debug_callback": "jax.debug.callback",
    "debug_print": "jax.debug.print",
    "pure_callback": "jax.pure_callback",
    "io_callback": "io_callback",
}
# On a TPU jax lowers a callback to sends and receives to the host (jax's callback.py,
# `_emit_tpu_python_callback`); the device waits in them while the host runs the callback.
# From XLA's HLO text, not yet seen in a trace.
HOST_TRANSFER_OP = re.compile(r"\b(?:send|recv)(?:-done)?\(.*\bis_host_transfer=true")
# Inside a GPU callback, the host first copies the callback's operands from the device, which
# waits for the device to reach the callback: the copy's CUDA/HIP calls on the same thread.
CALLBACK_OPERAND_COPY = re.compile(
    r"^(?:MemcpyD2H|cuMemcpyDtoH\w*|hipMemcpyDtoH\w*|cuStreamSynchronize|hipStreamSynchronize)$"
)
# Python-tracer frames (``file.py:line function``; the tracer names a file by its base name)
# of jax's callback machinery, which calls the user's function, and of what else it calls
# there: the conversion of the arguments to arrays (jaxlib 0.10-0.12).
CALLBACK_WRAPPER_FRAME = re.compile(r"^(?:callback|debugging)\.py:\d+ ")
CALLBACK_JAX_FRAME = re.compile(r"^(?:api\.py:\d+ device_put|tree_util\.py:\d+ .*)$")
HLO_OP = "hlo_op"  # the HLO instruction an event ran (XLA CPU ops, GPU kernels and copies)
