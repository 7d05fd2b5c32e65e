"""Capture the multi-host sample runs and time them plainly (``train_pod.py``, N processes).

Run from the repository root, one job at a time (the timings need the cores to themselves)::

    python sample_traces/pod/make_pod.py capture [straggler] [balanced]
    python sample_traces/pod/make_pod.py measure [--repeats 5]

``capture`` starts one process per host, each as ``traceinspect capture --logdir LOGDIR
--run-name RUN --host-name host<i> --skip-steps S --steps K -- python train_pod.py ...``, so
that the hosts' traces land side by side in one run directory, then copies each host's
``host<i>.xplane.pb`` and ``host<i>.traceinspect.capture.json`` (not jax's
``.trace.json.gz``) into ``sample_traces/pod/<name>/plugins/profile/<name>/``.

``measure`` runs the same pods without the profiler, each configuration ``--repeats`` times
interleaved, and writes ``measurements.json`` (``MEASUREMENTS.md`` explains it).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPT = HERE / "train_pod.py"

HOSTS = 4
SLOW_HOST = 2
SLOW_MS = 40.0
# The loop of a host that never waits runs ~30 steps ahead of its device before the CPU
# client's in-flight limit holds it back: trace only after that, once every host is held to
# the pod's pace.
SKIP_STEPS = 60
TRACED_STEPS = 20
# Steps run after the window closes, so the window never ends with the script.
AFTER_STEPS = 4


@dataclasses.dataclass(frozen=True)
class Pod:
    """One configuration of the pod: how many hosts, which one is slowed and by how much."""

    hosts: int = HOSTS
    slow_host: int = -1
    slow_ms: float = 0.0
    #: False: every host reads all records (the same batches on every host).
    shard: bool = True
    #: True: every host batches the whole global batch and device_puts it.
    whole_batch_per_host: bool = False
    #: True: the global batch is built with multihost_utils.host_local_array_to_global_array.
    host_local: bool = False
    #: Parquet files to read (0: the in-memory records), in ``workers`` mp_prefetch workers.
    files: int = 0
    workers: int = 0
    repeat_files: bool = False

    def train_args(self, process_id: int, coordinator: str, steps: int) -> list[str]:
        return [
            str(SCRIPT),
            f"--process-id={process_id}",
            f"--num-processes={self.hosts}",
            f"--coordinator={coordinator}",
            f"--slow-host={self.slow_host}",
            f"--slow-ms={self.slow_ms}",
            f"--steps={steps}",
        ] + (
            ([] if self.shard else ["--no-shard"])
            + (["--whole-batch-per-host"] if self.whole_batch_per_host else [])
            + (["--host-local"] if self.host_local else [])
            + ([f"--files={self.files}", f"--workers={self.workers}"] if self.files else [])
            + (["--repeat-files"] if self.repeat_files else [])
        )


# The bundled runs: host 2 sleeps 40 ms per batch (about twice the balanced pod's step on
# this 2-core machine, so it is the straggler whatever the load), and nobody slowed.
RUNS = {
    "straggler": Pod(slow_host=SLOW_HOST, slow_ms=SLOW_MS),
    "balanced": Pod(),
}


class PodError(RuntimeError):
    """A process of the pod failed or the pod did not finish in time."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for the jax.distributed coordinator."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def run_pod(commands: Sequence[Sequence[str]], log_dir: Path, timeout_s: float) -> None:
    """Run one command per host at once; wait for all; raise if any fails or time runs out.

    Each process's output goes to ``log_dir/host<i>.log``. When one fails the others would
    wait for it forever inside a collective, so they are stopped.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    procs: list[subprocess.Popen[bytes]] = []
    logs = [log_dir / f"host{i}.log" for i in range(len(commands))]
    try:
        for command, log in zip(commands, logs, strict=True):
            with log.open("wb") as out:
                # Own session: stopping a host stops its script too, and nothing else.
                procs.append(
                    subprocess.Popen(
                        list(command),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )
        deadline = time.monotonic() + timeout_s
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed:
                raise PodError(_failure(failed[0], procs, logs, "failed"))
            if time.monotonic() > deadline:
                late = next(i for i, p in enumerate(procs) if p.returncode is None)
                raise PodError(_failure(late, procs, logs, f"did not end in {timeout_s:.0f} s"))
            time.sleep(0.1)
        failed = [i for i, p in enumerate(procs) if p.returncode != 0]
        if failed:
            raise PodError(_failure(failed[0], procs, logs, "failed"))
    finally:
        _stop(procs)


def _failure(
    i: int, procs: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path], what: str
) -> str:
    tail = logs[i].read_text(errors="replace").strip().splitlines()[-15:]
    code = procs[i].returncode
    return (
        f"host {i} {what}" + (f" (exit code {code})" if code is not None else "") + f"; "
        f"command: {' '.join(map(str, procs[i].args))}\n--- {logs[i]} (end) ---\n" + "\n".join(tail)
    )


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM, then SIGKILL, each still-running host's process group (ours only)."""
    running = [p for p in procs if p.poll() is None]
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for p in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, sig)
        deadline = time.monotonic() + wait_s
        while any(p.poll() is None for p in running) and time.monotonic() < deadline:
            time.sleep(0.1)
        running = [p for p in running if p.poll() is None]
        if not running:
            return


def capture_pod(
    logdir: Path,
    run_name: str,
    pod: Pod,
    *,
    skip_steps: int = SKIP_STEPS,
    steps: int = TRACED_STEPS,
    after_steps: int = AFTER_STEPS,
    timeout_s: float = 600.0,
) -> Path:
    """Capture every host of ``pod`` into ``logdir/plugins/profile/run_name/``; return it."""
    coordinator = f"127.0.0.1:{free_port()}"
    total = skip_steps + steps + after_steps
    commands = []
    for i in range(pod.hosts):
        command = [sys.executable, "-m", "traceinspect", "capture", f"--logdir={logdir}"]
        command += [f"--run-name={run_name}", f"--host-name=host{i}", "--no-python-tracer"]
        command += [f"--skip-steps={skip_steps}", f"--steps={steps}", "--"]
        command += [sys.executable, *pod.train_args(i, coordinator, total)]
        commands.append(command)
    run_pod(commands, logdir / "logs" / run_name, timeout_s)
    return logdir / "plugins" / "profile" / run_name


def time_pod(
    pod: Pod, *, steps: int = 160, warmup: int = SKIP_STEPS, timeout_s: float = 600.0
) -> list[dict[str, Any]]:
    """Run ``pod`` without the profiler; return each host's step times (``--timing-json``)."""
    coordinator = f"127.0.0.1:{free_port()}"
    with tempfile.TemporaryDirectory(prefix="ti_pod_time_") as tmp:
        outs = [Path(tmp, f"host{i}.json") for i in range(pod.hosts)]
        commands = [
            [
                sys.executable,
                *pod.train_args(i, coordinator, steps),
                f"--warmup={warmup}",
                f"--timing-json={out}",
            ]
            for i, out in enumerate(outs)
        ]
        run_pod(commands, Path(tmp, "logs"), timeout_s)
        return [json.loads(out.read_text(encoding="utf-8")) for out in outs]


def bundle(name: str) -> Path:
    """Capture run ``name`` and copy its host traces and sidecars into ``HERE/name``."""
    out = HERE / name
    with tempfile.TemporaryDirectory(prefix=f"ti_pod_{name}_") as tmp:
        run_dir = capture_pod(Path(tmp), name, RUNS[name])
        shutil.rmtree(out, ignore_errors=True)
        dest = out / "plugins" / "profile" / name
        dest.mkdir(parents=True)
        for path in sorted(run_dir.iterdir()):
            if path.name.endswith((".xplane.pb", ".traceinspect.capture.json")):
                shutil.copyfile(path, dest / path.name)
    return out


# Measured configurations: the straggler pod, the same pod with the slow host's sleep
# removed (nothing else changed), and the balanced pod (nobody slowed).
MEASURED = {
    "straggler": RUNS["straggler"],
    "straggler_without_sleep": Pod(slow_host=SLOW_HOST, slow_ms=0.0),
    "balanced": RUNS["balanced"],
}


def measure(repeats: int, steps: int, warmup: int) -> dict[str, Any]:
    results: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in MEASURED}
    names = list(MEASURED)
    for repeat in range(repeats):
        # Interleaved, so that drifting load hits every configuration, and in a rotating
        # order, so that none always follows the same one.
        shift = repeat % len(names)
        for name in names[shift:] + names[:shift]:
            pod = MEASURED[name]
            hosts = time_pod(pod, steps=steps, warmup=warmup)
            results[name].append(hosts)
            per_host = ", ".join(f"{h['ms_per_step']:.1f}" for h in hosts)
            print(f"[{repeat}] {name}: ms/step per host {per_host}", file=sys.stderr)

    def summary(name: str) -> dict[str, Any]:
        runs = results[name]
        # The pod's step time in one repeat: the mean host step, averaged over the hosts
        # (they agree to within a few percent once every host is held to the pod's pace).
        pod_ms = [statistics.mean(h["ms_per_step"] for h in hosts) for hosts in runs]
        pod = MEASURED[name]
        return {
            "pod": dataclasses.asdict(pod),
            "ms_per_step": round(statistics.median(pod_ms), 2),
            "repeats_ms_per_step": [round(v, 2) for v in pod_ms],
            "per_host": [
                {
                    "host": f"host{i}",
                    "slowed": i == pod.slow_host and pod.slow_ms > 0,
                    "ms_per_step": round(statistics.median(r[i]["ms_per_step"] for r in runs), 2),
                    "median_step_ms": round(
                        statistics.median(r[i]["median_step_ms"] for r in runs), 2
                    ),
                    "drain_ms": round(statistics.median(r[i]["drain_ms"] for r in runs), 1),
                }
                for i in range(pod.hosts)
            ],
        }

    return {
        "how": "plain runs of train_pod.py (no profiler), one process per host on one "
        f"machine, {steps} steps of which the first {warmup} are left out. ms_per_step: mean "
        "start-to-start host step after the warm-up (every host is then held to the pod's "
        "pace), averaged over the hosts; the median over repeats. drain_ms: from the last "
        "step's start to the end with the device drained (how far the host ran ahead).",
        "repeats": repeats,
        "configurations": {name: summary(name) for name in MEASURED},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cap = sub.add_parser("capture", help="capture the bundled runs")
    cap.add_argument("names", nargs="*", default=list(RUNS), help=", ".join(RUNS))
    mea = sub.add_parser("measure", help="time the pods plainly; write measurements.json")
    mea.add_argument("--repeats", type=int, default=5)
    mea.add_argument("--steps", type=int, default=160)
    mea.add_argument("--warmup", type=int, default=SKIP_STEPS)
    args = parser.parse_args()

    if args.command == "capture":
        unknown = sorted(set(args.names) - set(RUNS))
        if unknown:
            parser.error(f"unknown run(s) {unknown}; choose from {list(RUNS)}")
        for name in args.names:
            out = bundle(name)
            files = sorted(p for p in out.rglob("*") if p.is_file())
            total = sum(p.stat().st_size for p in files)
            sizes = ", ".join(f"{p.name} {p.stat().st_size:,} B" for p in files)
            print(f"{out}: {total:,} B ({sizes})", file=sys.stderr)
        return
    results = measure(args.repeats, args.steps, args.warmup)
    path = HERE / "measurements.json"
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
