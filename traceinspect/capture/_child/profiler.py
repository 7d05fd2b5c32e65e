"""jax's profiler around the window: started with capture's options into an export folder,
stopped, and its files moved whole into the run directory (renamed for ``--host-name``)."""

from __future__ import annotations

import pathlib
import shutil
import socket
from typing import Any

# What jax's profiler writes per host, ``<host><suffix>``: renamed when --host-name is given.
_HOST_FILE_SUFFIXES = (".xplane.pb", ".trace.json.gz", ".memory_profile.json.gz")


def host_file_name(name: str, host: str) -> str:
    """``name`` (a file jax wrote as ``<this machine's hostname><suffix>``) for ``host``."""
    local = socket.gethostname()
    if local and name.startswith(f"{local}."):
        return host + name[len(local) :]
    for suffix in _HOST_FILE_SUFFIXES:
        if name.endswith(suffix):
            return host + suffix
    return name


def start_profiler(config: dict[str, Any], export_dir: str) -> bool:
    """Start jax's profiler writing to ``export_dir`` with capture's tracer levels; whether
    the device tracer's level could be set (jax before 0.7 has no such option). Raises
    whatever jax raises when it cannot start."""
    import jax.profiler

    options = jax.profiler.ProfileOptions()
    options.host_tracer_level = int(config["host_tracer_level"])
    options.python_tracer_level = int(config["python_tracer_level"])
    level = config.get("device_tracer_level")
    if level is None or not hasattr(options, "device_tracer_level"):
        applied = False
    else:
        options.device_tracer_level = int(level)
        applied = True
    pathlib.Path(export_dir).mkdir(parents=True, exist_ok=True)
    jax.profiler.start_trace(export_dir, profiler_options=options)
    return applied


def stop_profiler() -> None:
    """Stop jax's profiler: it writes the trace into the folder it was started with."""
    import jax.profiler

    jax_profiler: Any = jax.profiler
    jax_profiler.stop_trace()


def move_exported_files(export_dir: str, run_dir: str, host: str | None) -> list[str]:
    """Move what jax wrote under ``export_dir`` into ``run_dir``; the names moved.

    jax writes ``<export_dir>/plugins/profile/<its run>/<host>.xplane.pb``; each file is
    complete before it is renamed into place, so the run directory never holds a
    half-written trace. With ``host`` (``--host-name``) the files are renamed for that host;
    other hosts may be writing to the same run directory, so a file already there is never
    replaced."""
    profile_root = pathlib.Path(export_dir, "plugins", "profile")
    target_dir = pathlib.Path(run_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    moved = []
    for run in sorted(profile_root.iterdir()):
        for path in sorted(run.iterdir()):
            name = host_file_name(path.name, host) if host else path.name
            target = target_dir / name
            if target.exists():
                raise FileExistsError(f"'{target}' already exists")
            path.replace(target)
            moved.append(name)
    shutil.rmtree(export_dir, ignore_errors=True)
    return moved
