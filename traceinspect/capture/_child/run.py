"""Running the user's script as ``__main__``, exactly as Python would, under the capture: the
hooks, sys.argv and sys.path[0], signals, and how the script ended."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import pathlib
import runpy
import signal
import sys
import threading
import time
import types
from typing import Any, NoReturn

from . import reap
from ._base import SOURCE_TIME, _StopAfter, _Terminated, _warn
from .grain_patches import _patch_grain, grain_method_hint, workers_vs_files_hint
from .hooks import _PostImportFinder
from .jax_patches import _patch_jax, _patch_multihost_utils
from .sampler import StackSampler
from .window import _Capture

_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Drop our own and runpy's frames so the traceback starts in the user's code.

    The traceback of an exception caught in :func:`_run` starts in ``_run`` (this file), then
    runpy, then the script."""
    ours = {__file__, runpy.__file__, "<frozen runpy>"}
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def _run(config: dict[str, Any]) -> None:
    _die_with_parent(config.get("parent_pid"))
    cap = _Capture(config)
    _watch_parent(cap, config)

    def on_sigterm(signum: int, frame: Any) -> None:
        if cap.stop_requested:
            raise _StopAfter()
        raise _Terminated()

    finder = _PostImportFinder(
        {
            "jax": lambda m: _patch_jax(cap, m),
            "grain": lambda m: _patch_grain(cap, m),
            "jax.experimental.multihost_utils": lambda m: _patch_multihost_utils(cap, m),
        }
    )
    terminated = threading.Event()
    atexit.register(_on_the_way_out, terminated, config)
    sys.meta_path.insert(0, finder)
    for name in list(finder.patches):
        # Already imported (by sitecustomize, say): patch it now.
        module = sys.modules.get(name)
        if module is not None:
            finder.patches.pop(name)(module)
    signal.signal(signal.SIGTERM, on_sigterm)
    _finish_before_os_exit(cap, config)
    if cap.forced in ("auto", SOURCE_TIME) and cap.timing is None:
        cap.start_time_window()
    if cap.timing is None:
        cap.run_events.install()
    interval_ms = float(config.get("sample_interval_ms") or 0.0)
    if interval_ms > 0 and cap.timing is None:
        ident = threading.main_thread().ident
        if ident is not None:
            cap.sampler = StackSampler(ident, cap.tracing, interval_ms / 1000.0)
            cap.sampler.start()

    target: str = config["target"]
    # Python put the entry file's directory (this package's) first on sys.path; the script
    # expects its own (or the working directory for -m). Under -P or -I Python adds neither,
    # and neither do we.
    here = pathlib.Path(__file__).resolve().parent
    replace_path0 = bool(sys.path) and pathlib.Path(sys.path[0] or ".").resolve() == here
    if config["mode"] == "module":
        sys.argv = [target, *config["args"]]
        if replace_path0:
            sys.path[0] = str(pathlib.Path.cwd())
    else:
        sys.argv = [config["argv0"], *config["args"]]
        if replace_path0:
            sys.path[0] = str(pathlib.Path(target).resolve().parent)

    try:
        if config["mode"] == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except _StopAfter:
        cap.finish("was stopped by traceinspect")
        _flush()
        sys.exit(0)
    except _Terminated:
        cap.finish("was terminated (SIGTERM)")
        # Exit through the interpreter so that atexit handlers run (multiprocessing stops
        # Grain's worker processes there, instead of leaving them orphaned), then die by
        # SIGTERM from our own handler, registered first and so run last.
        terminated.set()
        sys.exit(128 + signal.SIGTERM)
    except SystemExit as exc:
        code = exc.code
        cap.finish("returned" if code in (None, 0) else f"called sys.exit({code!r})")
        raise
    except KeyboardInterrupt as exc:
        cap.finish("was interrupted (SIGINT)")
        _report_uncaught(exc)
        sys.exit(128 + signal.SIGINT)
    except BaseException as exc:
        hint = grain_method_hint(exc) or workers_vs_files_hint(exc, cap)
        if hint is not None:
            cap.notes.append(hint)
        cap.finish(f"raised {type(exc).__name__}")
        _report_uncaught(exc)
        if hint is not None:
            _warn(hint)
        sys.exit(1)
    else:
        cap.finish("returned")


def _die_with_parent(parent: int | None) -> None:
    """On Linux, have the kernel send us SIGTERM when the capture process that started us
    dies (SIGKILL, an OOM kill: it cannot pass a signal on then): the SIGTERM handler
    saves the trace and the script ends, where it ran on orphaned. Strictly, the death of
    the parent's thread that started us (``run_capture`` waits on it). A script that ignores
    SIGTERM is ended by :func:`_watch_parent`; the processes the script started, on its way
    out (:func:`_on_the_way_out`)."""
    if parent is None or not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the prctl: nobody will tell us
        os.kill(os.getpid(), signal.SIGTERM)


def _stopping(config: dict[str, Any]) -> bool:
    """Whether capture is stopping the script (it passed on a signal, or a terminal's Ctrl-C
    reached it: it wrote ``stop_path`` first) or is gone. Then what the script started ends
    with it; a script that ends by itself leaves its processes as Python would."""
    parent, stop_path = config.get("parent_pid"), config.get("stop_path")
    if parent is not None and os.getppid() != parent:
        return True
    return stop_path is not None and pathlib.Path(stop_path).exists()


def _watch_parent(cap: _Capture, config: dict[str, Any]) -> None:
    """End the script, its trace saved first, when capture says so or dies: a thread waits on
    the pipe whose write end only capture holds (``control_fd``). A line on it: capture's
    grace after a stop ran out (the script ignores SIGTERM, or is stuck), or, ``interrupt
    T``, a SIGINT reached capture (:func:`_pass_on_interrupt`); its end (capture died,
    SIGKILL or not): the kernel sent SIGTERM (:func:`_die_with_parent`), and if the script is
    still here ``kill_grace_s`` later it is ended as for a line. A thread, so it acts while
    the main thread runs the script or waits in native code."""
    fd = config.get("control_fd")
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.set_inheritable(fd, False)
    grace_s = float(config.get("kill_grace_s") or 0.0)
    save_s = float(config.get("save_grace_s") or 0.0)
    heard = _hear_sigint()

    def watch() -> None:
        pending = b""
        while True:
            try:
                said = os.read(fd, 4096)
            except OSError:
                return  # the script closed it: PR_SET_PDEATHSIG alone then
            if not said:
                time.sleep(grace_s)
                why = f"it went on {grace_s:g} s after its capture process died"
                break
            *lines, pending = (pending + said).split(b"\n")
            words = [line.decode("utf-8", "replace").strip() for line in lines]
            why = next((w for w in words if w and not w.startswith(_INTERRUPT)), "")
            if why:
                break
            for word in words:
                if word.startswith(_INTERRUPT):
                    _pass_on_interrupt(word, heard)
        _end_now(cap, f"was killed by traceinspect ({why})", save_s)

    threading.Thread(target=watch, name="traceinspect-watch-parent", daemon=True).start()


# The control line that says a SIGINT reached capture (``_relay.INTERRUPT``), and how long
# after it a SIGINT the same terminal sent the script too has surely come: a signal sent to a
# process group is made pending in each of its processes at once, and handled as soon as
# one of the script's threads runs (a loaded machine can delay that by tens of ms).
_INTERRUPT = "interrupt"
_SIGINT_SETTLE_S = 0.5
# A SIGINT the script had up to this long before capture's counts as the same one.
_SIGINT_BEFORE_S = 1.0


def _hear_sigint() -> list[float]:
    """When the script last received SIGINT (``time.monotonic()``; empty: never), whatever
    handler it has: Python's C-level handler writes every signal it catches to the wakeup
    fd, which a thread reads. A script that sets a wakeup fd of its own (asyncio's
    ``add_signal_handler``) replaces ours: a SIGINT capture alone received is then passed on
    even when the terminal sent it one too."""
    heard: list[float] = []
    if threading.current_thread() is not threading.main_thread():
        return heard
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read_fd)
        os.close(write_fd)
        return heard

    def read() -> None:
        while True:
            try:
                data = os.read(read_fd, 512)
            except OSError:
                return
            if not data:
                return
            if signal.SIGINT in data:
                heard[:] = [time.monotonic()]

    threading.Thread(target=read, name="traceinspect-signals", daemon=True).start()
    return heard


def _pass_on_interrupt(line: str, heard: list[float]) -> None:
    """A SIGINT reached capture (at ``time.monotonic()`` in ``line``). From a terminal, it
    reached the whole process group, the script too; sent to capture alone (``timeout``,
    ``kill -INT``), it did not: then the script gets it from here, so it has it once."""
    try:
        sent_at = float(line.split()[1])
    except (IndexError, ValueError):
        sent_at = time.monotonic()
    time.sleep(max(0.0, sent_at + _SIGINT_SETTLE_S - time.monotonic()))
    if heard and heard[0] >= sent_at - _SIGINT_BEFORE_S:
        return
    # To the process: the kernel hands it to the main thread, waking it from a blocking wait.
    with contextlib.suppress(OSError):
        os.kill(os.getpid(), signal.SIGINT)


def _end_now(cap: _Capture, how: str, save_s: float) -> NoReturn:
    """Save the trace (unless the main thread has: the lock waits out a finish under way, for
    ``save_s`` at most), end what the script started, and die by SIGKILL."""
    if cap.lock.acquire(timeout=save_s):
        try:
            if cap.ended_how is None:
                with contextlib.suppress(BaseException):
                    # Not finish(): only the main thread may set signal handlers.
                    cap._finish(how)
        finally:
            cap.lock.release()
    _flush()
    with contextlib.suppress(BaseException):
        reap.end_descendants(os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")  # pragma: no cover


def _finish_before_os_exit(cap: _Capture, config: dict[str, Any]) -> None:
    """``os._exit`` skips ``finally`` and atexit: inside the window the trace was lost.
    Stop the profiler and write the report first, as for ``sys.exit``; only in this
    process (a forked child calling ``os._exit`` exits as it would)."""
    real_exit, pid = os._exit, os.getpid()

    def _exit(status: int) -> NoReturn:
        if os.getpid() == pid and cap.ended_how is None:
            with contextlib.suppress(BaseException):
                how = f"called os._exit({status!r})"
                if threading.current_thread() is threading.main_thread():
                    cap.finish(how)
                else:  # finish() sets signal handlers, which only the main thread may
                    cap._finish(how)
            _flush()
        if os.getpid() == pid and _stopping(config):
            with contextlib.suppress(BaseException):
                reap.end_descendants(pid)
        real_exit(status)

    os._exit = _exit


def _on_the_way_out(terminated: threading.Event, config: dict[str, Any]) -> None:
    """The last atexit handler (registered first): after multiprocessing's has stopped Grain's
    workers, end what the script started if capture is stopping it; then, after SIGTERM,
    die by it as the script would have without us (the parent sees the signal)."""
    if _stopping(config):
        with contextlib.suppress(Exception):
            reap.end_descendants(os.getpid())
    if terminated.is_set():
        _flush()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _report_uncaught(exc: BaseException) -> None:
    # What the interpreter would print, without our frames: the user's code comes first.
    tb = _user_traceback(exc.__traceback__)
    # The interpreter prints the exception's own __traceback__, so trim that one too.
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def main(argv: list[str]) -> None:
    """Run the script that ``argv[1]`` (the runner's config file) names, under the capture."""
    _run(json.loads(pathlib.Path(argv[1]).read_text(encoding="utf-8")))
