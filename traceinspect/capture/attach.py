"""Capture from running processes' profiler servers (``capture --attach``).

A job that serves its profiler (``jax.profiler.start_server(PORT)``; MaxText 0.2.5's
trainer starts none: its ``enable_jax_profiler`` is read by its inference server only, see
docs/maxtext.md) is traced for a while by XProf's own
profiler client, the one TensorBoard's "capture profile" button and ``python -m
jax.collect_profile`` use (``xprof.convert._pywrap_profiler_plugin.trace``), several hosts
at once as ``host1:port,host2:port``. The client runs in a child interpreter: it logs to
stderr from C++ (kept out of the user's terminal, read back for the error) and a host that
never answers cannot hang this process past its deadline.

The files land in a run directory laid out like any capture's,
``LOGDIR/plugins/profile/<run>/<host>_<port>.xplane.pb`` (one per host), moved there whole
from a scratch directory, so a failed capture leaves nothing half-written. There is no
sidecar: the job was not started by traceinspect.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from traceinspect.capture._runner import _prepare_logdir
from traceinspect.errors import CaptureError, CaptureUsageError

#: How long a host may take to accept a connection before it counts as not answering.
CONNECT_TIMEOUT_S = 5.0
#: The client's own time on top of the trace's duration (connect, collect, write).
CLIENT_SLACK_S = 60.0

_ADDRESS = re.compile(r"^(?:grpc://)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):(?P<port>\d+)$")

# Run in a child interpreter: XProf's client, its result as one JSON line on stdout.
_CLIENT = """
import json, sys
args = json.loads(sys.argv[1])
try:
    from xprof.convert import _pywrap_profiler_plugin as plugin
except ImportError as exc:
    print(json.dumps({"error": "import", "detail": str(exc)}))
    sys.exit(0)
try:
    plugin.trace(args["service"], args["logdir"], "", True, args["duration_ms"], 1,
                 args["options"])
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "detail": str(exc)}))
    sys.exit(0)
print(json.dumps({"error": None}))
"""


@dataclasses.dataclass(frozen=True)
class AttachResult:
    """One snapshot of running processes: where its files are."""

    run_dir: str
    trace_paths: tuple[str, ...]
    addresses: tuple[str, ...]
    duration_s: float

    def summary(self) -> str:
        hosts = ", ".join(self.addresses)
        return f"traced {hosts} for {self.duration_s:g} s into {self.run_dir}"


def parse_addresses(text: str) -> tuple[str, ...]:
    """``host:port[,host:port...]`` checked, as a tuple of ``host:port``."""
    found = []
    for raw in text.split(","):
        part = raw.strip()
        match = _ADDRESS.match(part)
        if not match or not 0 < int(match.group("port")) < 65536:
            raise CaptureUsageError(
                f"--attach {text!r}: {part!r} is not HOST:PORT; give the address of the job's "
                "profiler server, e.g. --attach localhost:9999 or --attach host1:9999,host2:9999"
            )
        found.append(f"{match.group('host')}:{match.group('port')}")
    if len(set(found)) != len(found):
        raise CaptureUsageError(f"--attach {text!r} names the same address twice")
    return tuple(found)


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise a one-line CaptureError unless something accepts connections at ``address``."""
    host, _, port = address.rpartition(":")
    advice = (
        "start the profiler server in the job (jax.profiler.start_server(PORT)), or check "
        "the host and port"
    )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except TimeoutError:
        raise CaptureError(
            f"{address} did not answer within {timeout_s:g} s: is the host up and the port "
            "open to this machine (a firewall, another network)?"
        ) from None
    except socket.gaierror as exc:
        raise CaptureError(f"{address}: unknown host ({exc.strerror}): check the name") from None
    except OSError as exc:
        raise CaptureError(
            f"no profiler server at {address} ({exc.strerror or exc}): {advice}"
        ) from None


def wait_for_server(
    address: str, timeout_s: float, running: Callable[[], bool] | None = None
) -> None:
    """Wait until something accepts connections at ``address`` (a job starting its profiler
    server); CaptureError after ``timeout_s``, or as soon as ``running()`` says the job ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        if running is not None and not running():
            raise CaptureError(f"{address}: the job ended before its profiler server answered")
        try:
            check_reachable(address, timeout_s=min(1.0, timeout_s))
            return
        except CaptureError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def attach(
    addresses: tuple[str, ...],
    duration_s: float,
    *,
    logdir: str = "traceinspect_logs",
    run_name: str | None = None,
    host_tracer_level: int = 2,
    python_tracer: bool = False,
    device_tracer_level: int = 1,
) -> AttachResult:
    """Trace the processes serving their profiler at ``addresses`` for ``duration_s``."""
    if duration_s <= 0:
        raise CaptureUsageError(f"--duration must be more than 0 seconds, got {duration_s:g}")
    for address in addresses:
        check_reachable(address)
    _, run_dir, scratch = _prepare_logdir(logdir, run_name)
    try:
        _trace(
            addresses, duration_s, scratch, host_tracer_level, python_tracer, device_tracer_level
        )
        paths = _move_traces(addresses, scratch, run_dir)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        if not any(Path(run_dir).iterdir()):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    shutil.rmtree(scratch, ignore_errors=True)
    return AttachResult(run_dir, paths, addresses, duration_s)


def _trace(
    addresses: tuple[str, ...],
    duration_s: float,
    scratch: str,
    host_tracer_level: int,
    python_tracer: bool,
    device_tracer_level: int,
) -> None:
    args = {
        "service": ",".join(addresses),
        "logdir": scratch,
        "duration_ms": max(1, round(duration_s * 1000)),
        "options": {
            "host_tracer_level": host_tracer_level,
            "python_tracer_level": 1 if python_tracer else 0,
            "device_tracer_level": device_tracer_level,
        },
    }
    log = Path(scratch, "client.log")
    try:
        with log.open("w", encoding="utf-8") as err:
            done = subprocess.run(
                [sys.executable, "-c", _CLIENT, json.dumps(args)],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                timeout=duration_s + CLIENT_SLACK_S,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
                check=False,
            )
    except subprocess.TimeoutExpired:
        raise CaptureError(
            f"{', '.join(addresses)}: no trace after {duration_s + CLIENT_SLACK_S:g} s (the "
            "client waited past the trace's duration): is a host stuck, or its network slow?"
        ) from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"error": "crash", "detail": ""}
    if result["error"] is None:
        return
    raise CaptureError(_client_error(addresses, result, log.read_text(encoding="utf-8")))


def _client_error(addresses: tuple[str, ...], result: dict[str, str], log: str) -> str:
    """The client's failure as one line a person can act on."""
    where = ", ".join(addresses)
    detail = f"{result.get('detail', '')}\n{log}"
    if result["error"] == "import":
        return (
            "attaching needs XProf's profiler client, which cannot be imported here "
            f"({result['detail']}): pip install xprof (a dependency of traceinspect)"
        )
    if re.search(r"already|another (profiling )?session|in progress", detail, re.I):
        return (
            f"{where}: the profiler is already tracing (another capture, TensorBoard, or the "
            "job's own profiler): wait for it to finish and attach again"
        )
    failed = dict(re.findall(r"(\S+:\d+) returned ([A-Z_]+:[^\n]*)", log))
    if failed:
        where = ", ".join(failed)
    if re.search(r"Failed parsing HTTP/2|http1\.x server", detail):
        # An HTTP/1 server (a web server, a notebook, TensorBoard's page) on the port.
        return (
            f"{where}: an HTTP server answers there, not a profiler server (wrong port?): give "
            "the port the job passed to jax.profiler.start_server"
        )
    if re.search(r"DEADLINE_EXCEEDED|Deadline Exceeded", detail):
        return (
            f"{where}: the port took the connection but never answered within the trace's "
            "time (wrong port, or a stuck process?): give the port the job passed to "
            "jax.profiler.start_server"
        )
    if re.search(r"UNIMPLEMENTED|http2 header with status", detail):
        return (
            f"{where}: something answers there, but not a profiler server (wrong port?): give "
            "the port the job passed to jax.profiler.start_server"
        )
    if "failed to connect" in detail or "Connection refused" in detail:
        return (
            f"{where}: the profiler server stopped answering (did the job end?): check "
            "that it is still running"
        )
    if "No trace event" in detail or "did not have trace data" in detail:
        return (
            f"{where}: the profiler server answered but returned no trace: the job may have "
            "finished, or be idle; attach while it trains, or for longer (--duration)"
        )
    last = next((line for line in reversed(detail.splitlines()) if line.strip()), "")
    return f"{where}: the profiler client failed ({result['error']}: {last.strip()[:200]})"


def _move_traces(addresses: tuple[str, ...], scratch: str, run_dir: str) -> tuple[str, ...]:
    """Move each host's files from the client's scratch run into ``run_dir``."""
    profile = Path(scratch, "plugins", "profile")
    files = sorted(profile.glob("*/*")) if profile.is_dir() else []
    traces = [f for f in files if f.name.endswith(".xplane.pb")]
    missing = [a for a in addresses if not any(f.name.startswith(_file_host(a)) for f in traces)]
    if not traces or missing:
        raise CaptureError(
            f"{', '.join(missing or addresses)}: the profiler answered but wrote no trace: "
            "attach while the job trains, or for longer (--duration)"
        )
    moved = []
    for path in files:
        target = Path(run_dir, path.name)
        path.replace(target)
        if target.name.endswith(".xplane.pb"):
            moved.append(str(target))
    return tuple(moved)


def _file_host(address: str) -> str:
    """The name the client gives a host's files: ``host:port`` -> ``host_port``."""
    return address.replace(":", "_")
