"""MaxText's own training loop on XLA's CPU backend: the data, the runs and their truth.

MaxText (``pip install maxtext``, Python >= 3.12, with its training path's dependencies:
``tests/maxtext_loop/requirements.txt``) trains a tiny Llama-style model on an ArrayRecord data
set of ``tf.train.Example`` records with a bytes ``text`` feature, through its own Grain
pipeline (parse, sentencepiece tokenization, packing, batching, ``mp_prefetch``). Nothing is
downloaded. Two configurations:

- ``tiny``: embedding 128, 2 layers, 4 heads, MLP 256, 128 tokens, 4 sequences a step:
  ~400-600 ms of XLA work a step on 2 cores against ~15 ms of Grain work a batch
  (compute-bound at any worker count);
- ``heavy``: embedding 64, 1 layer, 2 heads, MLP 128, 64 tokens, 2 sequences a step, from
  records of 500,000 words each (sentencepiece tokenizes the whole text before MaxText trims
  it: ~0.5 s of CPU a batch): input-bound at 1 worker.

Used by ``tests/maxtext_loop/test_maxtext.py`` and from the command line (repository root)::

    python sample_traces/maxtext/maxtext_runs.py measure --config heavy --workers 1,2,3,4
    python sample_traces/maxtext/maxtext_runs.py cpu --config heavy --workers 2,4 --repeats 3
    python sample_traces/maxtext/maxtext_runs.py capture --config tiny --workers 1 --out DIR
    python sample_traces/maxtext/maxtext_runs.py verify --config tiny --workers 1,4,-1 --repeats 3
    python sample_traces/maxtext/maxtext_runs.py profile --config tiny --out DIR

``measure`` times MaxText's own steps without any profiler: each step's ``seconds`` from its
``completed step`` log line, the mean from step :data:`WARMUP` on (throughput: the host runs
one step ahead and reads the step before, so its pace is the device's or the input's).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Every plain run of this process: its workers, steady step (ms), wall time, the cores its
# process tree kept busy (startup included) and the machine's load then, for a failing test's
# message: whether the machine, not the worker count, moved a figure.
RUNS: list[dict[str, Any]] = []
# Steps left out of a run's mean: compilation and the fill of Grain's buffers.
WARMUP = 10
# MaxText's own step log: "completed step: 12, seconds: 0.482, ...".
_STEP_LINE = re.compile(r"completed step: (\d+), seconds: ([0-9.]+)")
_WORDS = ("the", "model", "data", "train", "step", "device", "host", "input", "batch",
          "token", "layer", "grain", "worker", "loss", "time", "fast", "slow", "idle", "read",
          "write")  # fmt: skip


@dataclass(frozen=True)
class Config:
    """A MaxText configuration and the records it reads."""

    name: str
    records: int
    words_per_record: int
    overrides: dict[str, str] = field(default_factory=dict)
    epochs: int = 1


CONFIGS = {
    "tiny": Config(
        "tiny",
        records=4000,
        words_per_record=200,
        overrides={
            "base_emb_dim": "128",
            "base_num_decoder_layers": "2",
            "base_num_query_heads": "4",
            "base_num_kv_heads": "4",
            "base_mlp_dim": "256",
            "head_dim": "32",
            "max_target_length": "128",
            "per_device_batch_size": "4",
        },
    ),
    "heavy": Config(
        "heavy",
        records=12,
        words_per_record=500_000,
        overrides={
            "base_emb_dim": "64",
            "base_num_decoder_layers": "1",
            "base_num_query_heads": "2",
            "base_num_kv_heads": "2",
            "base_mlp_dim": "128",
            "head_dim": "32",
            "max_target_length": "64",
            "per_device_batch_size": "2",
        },
        epochs=100,
    ),
}


def maxtext_dir() -> Path:
    """The installed ``maxtext`` package (its configs and tokenizers)."""
    import maxtext  # type: ignore[import-not-found, unused-ignore]

    return Path(maxtext.__file__).resolve().parent


def make_records(path: Path, records: int, words: int, seed: int = 0) -> Path:
    """An ArrayRecord file of serialized ``tf.train.Example`` with a bytes ``text`` feature,
    as MaxText's ``grain_file_type=arrayrecord`` reads (its own copy of the proto)."""
    from array_record.python.array_record_module import (  # type: ignore[import-not-found, unused-ignore]
        ArrayRecordWriter,
    )
    from maxtext.input_pipeline.protos import (  # type: ignore[import-not-found, unused-ignore]
        example_pb2,
    )

    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = ArrayRecordWriter(str(path), "group_size:1")
    for _ in range(records):
        text = " ".join(f"{rng.choice(_WORDS)}{rng.randrange(100)}" for _ in range(words))
        example = example_pb2.Example()
        example.features.feature["text"].bytes_list.value.append(text.encode())
        writer.write(example.SerializeToString())
    writer.close()
    return path


def data_file(config: Config, data_dir: Path) -> Path:
    """The config's records, made once per folder."""
    path = data_dir / f"{config.name}-00000-of-00001.array_record"
    if not path.exists():
        make_records(path, config.records, config.words_per_record)
    return path


def train_command(
    config: Config,
    data: Path,
    workers: int,
    steps: int,
    out_dir: Path,
    extra: Sequence[str] = (),
) -> list[str]:
    """``python -m maxtext.trainers.pre_train.train`` with the config on the CPU backend."""
    root = maxtext_dir()
    args = {
        "run_name": "traceinspect",
        "base_output_directory": str(out_dir),
        "hardware": "cpu",
        "skip_jax_distributed_system": "true",
        "enable_checkpointing": "false",
        "dataset_type": "grain",
        "grain_file_type": "arrayrecord",
        "grain_train_files": str(data),
        "grain_worker_count": str(workers),
        "tokenizer_type": "sentencepiece",
        "tokenizer_path": str(root / "assets" / "tokenizers" / "tokenizer.default"),
        "num_epoch": str(config.epochs),
        "steps": str(steps),
        **config.overrides,
    }
    return [
        sys.executable,
        "-m",
        "maxtext.trainers.pre_train.train",
        str(root / "configs" / "base.yml"),
        *(f"{k}={v}" for k, v in args.items()),
        *extra,
    ]


def train_env() -> dict[str, str]:
    """MaxText on the CPU backend with no cloud service (DECOUPLE_GCLOUD)."""
    return {**os.environ, "DECOUPLE_GCLOUD": "TRUE", "JAX_PLATFORMS": "cpu"}


def step_seconds(output: str) -> dict[int, float]:
    """Each step's ``seconds`` from MaxText's ``completed step`` lines."""
    return {int(m.group(1)): float(m.group(2)) for m in _STEP_LINE.finditer(output)}


def steady_ms(seconds: dict[int, float]) -> float:
    """The mean step time (ms) from step WARMUP on."""
    kept = [s for step, s in seconds.items() if step >= WARMUP]
    if not kept:
        raise ValueError(f"no step from {WARMUP} on in MaxText's output")
    return statistics.fmean(kept) * 1000.0


def run_plain(
    config: Config, data: Path, workers: int, steps: int, out_dir: Path, timeout: float = 600
) -> float:
    """One run without any profiler: its steady mean step time (ms). Each run's figures,
    and the CPU its process tree used (startup included), go to :data:`RUNS` too."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        train_command(config, data, workers, steps, out_dir),
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"MaxText exited {done.returncode}: {output[-2000:]}")
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    ms = steady_ms(step_seconds(output))
    RUNS.append(
        {
            "workers": workers,
            "step_ms": round(ms, 1),
            "wall_s": round(wall, 1),
            "cores_busy": round(cpu / wall, 2),
            "load": os.getloadavg()[0],
        }
    )
    return ms


def measure(
    config: Config, data: Path, workers: Sequence[int], steps: int, repeats: int, out_dir: Path
) -> dict[int, list[float]]:
    """Each worker count's steady step time (ms), ``repeats`` runs each, interleaved."""
    runs: dict[int, list[float]] = {w: [] for w in workers}
    for _ in range(repeats):
        for w in workers:
            runs[w].append(run_plain(config, data, w, steps, out_dir))
    return runs


def knee(best_ms: dict[int, float], within: float = 0.10) -> int:
    """The smallest worker count whose step is within ``within`` of the best."""
    best = min(best_ms.values())
    return min(w for w, ms in best_ms.items() if ms <= best * (1 + within))


def execution_busy_share(run_dir: Path) -> float:
    """The device's busy share from the programs' execution spans alone: the union of every
    event that carries a ``run_id`` (an execution: its ops and the CPU client's wait for
    its completion), over the traced steps' span (the first to the last ``train`` step
    annotation). Independent of traceinspect's analysis; it reads the frames only."""
    import numpy as np

    import traceinspect
    from traceinspect import schema as S

    trace = traceinspect.load(run_dir)
    ev, stats = trace.events, trace.event_stats
    rows = stats.loc[stats[S.STAT] == "run_id", S.EVENT_ROW].unique()
    starts = ev[S.START_NS].to_numpy()[rows]
    ends = starts + ev[S.DURATION_NS].to_numpy()[rows]
    steps = ev[ev[S.NAME] == "train"]
    lo = int(steps[S.START_NS].min())
    hi = int(steps[S.START_NS].max())
    order = np.argsort(starts)
    covered, reach = 0, lo
    for start, end in zip(starts[order], ends[order], strict=True):
        lo_ns, hi_ns = max(int(start), reach), min(int(end), hi)
        if hi_ns > lo_ns:
            covered += hi_ns - lo_ns
            reach = hi_ns
    return covered / (hi - lo)


def capture(
    config: Config,
    data: Path,
    workers: int,
    steps: int,
    logdir: Path,
    capture_args: Sequence[str] = (),
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """``traceinspect capture`` (defaults unless ``capture_args``) of one MaxText run."""
    command = [
        sys.executable,
        "-m",
        "traceinspect",
        "capture",
        "--logdir",
        str(logdir),
        *capture_args,
        "--",
        *train_command(config, data, workers, steps, logdir / "maxtext"),
    ]
    return subprocess.run(
        command, env=train_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def verdict(run_dir: Path) -> dict[str, Any]:
    """What a default capture's analysis says, beside the busy share of the executions'
    spans: the figures the integration test checks."""
    import traceinspect

    trace = traceinspect.load(run_dir)
    analysis = traceinspect.analyze(trace)
    workers = next((r for r in analysis.recommendations if r.kind == "grain_worker_count"), None)
    grain = trace.sidecar.grain if trace.sidecar is not None else None
    return {
        "verdict": analysis.verdict,
        "busy": round(analysis.busy_fraction, 3),
        "execution_spans": round(execution_busy_share(run_dir), 3),
        "workers_in_use": grain.worker_count if grain is not None else None,
        "recommended": workers.value if workers is not None else None,
        "expected_step_ms": workers.expected_step_ms if workers is not None else None,
        "kinds": [r.kind for r in analysis.recommendations],
        "step_ms": analysis.steps.median_ms,
    }


def run_profile(
    config: Config, data: Path, workers: int, steps: int, out_dir: Path, timeout: float = 600
) -> Path:
    """A run with MaxText's own profiler at its defaults (skip 1 step, profile 5): the log
    directory it writes (``<out_dir>/<run_name>/tensorboard``)."""
    done = subprocess.run(
        train_command(config, data, workers, steps, out_dir, ["profiler=xplane"]),
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"MaxText exited {done.returncode}: {done.stderr[-2000:]}")
    (logdir,) = out_dir.glob("*/tensorboard")
    return logdir


def run_sampled(
    config: Config, data: Path, workers: int, steps: int, out_dir: Path
) -> dict[str, Any]:
    """One run without any profiler, its process tree's CPU read at each ``completed step``
    line: from step :data:`WARMUP` to the last, the wall time per step (ms), the training
    process's CPU per step and its workers' (ms), and the cores the tree kept busy. Where
    :func:`run_plain`'s CPU includes startup, this is the steady steps' alone."""
    # capture's own reading of a process tree's CPU (the training process, then the rest).
    from traceinspect.capture._child.facts import tree_cpu_split_s

    proc = subprocess.Popen(
        train_command(config, data, workers, steps, out_dir),
        env=train_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    marks: dict[int, tuple[float, float, float]] = {}
    tail: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        tail = [*tail[-40:], line]
        found = _STEP_LINE.search(line)
        if found:
            split = tree_cpu_split_s(proc.pid)
            if split is not None:
                marks[int(found.group(1))] = (time.monotonic(), *split)
    if proc.wait() != 0 or WARMUP not in marks:
        raise RuntimeError(f"MaxText exited {proc.returncode}: {''.join(tail)[-2000:]}")
    last = max(marks)
    (t0, main0, kids0), (t1, main1, kids1) = marks[WARMUP], marks[last]
    n, wall = last - WARMUP, t1 - t0
    return {
        "workers": workers,
        "step_ms": round(wall / n * 1000, 1),
        "main_cpu_ms_per_step": round((main1 - main0) / n * 1000, 1),
        "workers_cpu_ms_per_step": round((kids1 - kids0) / n * 1000, 1),
        "cores_busy": round((main1 - main0 + kids1 - kids0) / wall, 2),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("data", "measure", "cpu", "capture", "verify", "profile"))
    parser.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    parser.add_argument("--workers", default="1", help="worker counts, comma-separated")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/traceinspect-maxtext"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/traceinspect-maxtext/out"))
    args = parser.parse_args(argv)
    config = CONFIGS[args.config]
    data = data_file(config, args.data_dir)
    counts = [int(w) for w in args.workers.split(",")]
    if args.what == "data":
        print(data)
    elif args.what == "measure":
        runs = measure(config, data, counts, args.steps, args.repeats, args.out)
        best = {w: min(ms) for w, ms in runs.items()}
        median = {w: statistics.median(ms) for w, ms in runs.items()}
        print(json.dumps({"config": config.name, "runs_ms": runs, "best_ms": best,
                          "median_ms": median, "knee": knee(best),
                          "knee_by_median": knee(median)}))  # fmt: skip
    elif args.what == "cpu":
        # --repeats rounds of the counts, interleaved: one JSON line a run.
        for _ in range(args.repeats):
            for w in counts:
                print(json.dumps(run_sampled(config, data, w, args.steps, args.out)), flush=True)
    elif args.what == "capture":
        done = capture(config, data, counts[0], args.steps, args.out)
        print(done.stderr[-3000:])
        return done.returncode
    elif args.what == "verify":
        # Default captures, --repeats of each worker count, interleaved: one JSON line each.
        for repeat in range(args.repeats):
            for w in counts:
                logdir = args.out / f"{config.name}_w{w}_{repeat}"
                done = capture(config, data, w, args.steps, logdir)
                if done.returncode != 0:
                    print(json.dumps({"workers": w, "error": done.stderr[-500:]}), flush=True)
                    continue
                (run_dir,) = {p.parent for p in logdir.glob("plugins/profile/*/*.xplane.pb")}
                found = {"config": config.name, "workers": w, **verdict(run_dir)}
                print(json.dumps(found), flush=True)
    else:
        print(run_profile(config, data, counts[0], args.steps, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
