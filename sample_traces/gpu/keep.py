"""Keep one GPU capture per cause from a ``run_gpu.py`` output folder, with its truth.

Run from the repository root, after ``run_gpu.py --out OUT`` came back from the GPU::

    python sample_traces/gpu/keep.py OUT [--earlier EARLIER_OUT]

For each cause in :data:`KEPT` it writes ``sample_traces/gpu/<cause>/``: the trace
(gzipped: ``vm.xplane.pb.gz``), the capture sidecar, and ``truth.json`` (the verdict the
timings without the profiler say, ``label``, with those timings), and it prints the entries
for ``sample_traces/manifest.json``. A run cut short by its deadline may lack the truth of
a configuration it captured: ``--earlier`` names the output of an earlier run on the same kind
of GPU whose truth stands in, and ``truth.json`` says so (``truth_from``), with both runs'
figures for the baseline they share.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# cause folder -> (run name, label, the run it is compared with, why that label).
KEPT: dict[str, tuple[str, str, str, str]] = {
    "sync_bound": (
        "read_item_w0",
        "sync-bound",
        "read_none_w0",
        "loss.item() every step; the same loop without the read runs at the device's step",
    ),
    "input_bound": (
        "io_w1",
        "input-bound",
        "synthetic",
        "40 ms of input per batch on 1 Grain worker against the device's step",
    ),
    "device_bound": (
        "light_w2",
        "device-bound",
        "synthetic",
        "a light pipeline on 2 workers: the loop runs at its pre-built batches' pace",
    ),
    "checkpoint": (
        "checkpoint25",
        "host-bound",
        "light_w2",
        "a synchronous checkpoint every 25 steps (device_get, np.save, 250 ms of storage)",
    ),
    "checkpoint_long": (
        "checkpoint60",
        "host-bound",
        "light_w2",
        "a synchronous checkpoint every 60 steps, a period longer than the default window",
    ),
    "eval": (
        "eval20",
        "device-bound",
        "light_w2",
        "an evaluation every 20 steps (20 jitted forward passes, their mean read): cheap",
    ),
    "host_wait": (
        "host_wait14",
        "host-bound",
        "light_w2",
        "14 ms of the loop's own waiting between next() and the dispatch",
    ),
    "callback": (
        "callback6",
        "host-bound",
        "light_w2",
        "jax.debug.callback to a 6 ms logger inside the jitted step",
    ),
}


def keep(out: Path, earlier: Path | None = None) -> list[dict[str, Any]]:
    truth = json.loads((out / "truth.json").read_text(encoding="utf-8"))
    env = json.loads((out / "env.json").read_text(encoding="utf-8"))
    best: dict[str, float] = truth["best_ms"]
    knee = _knee(best)
    before = json.loads((earlier / "truth.json").read_text("utf-8")) if earlier else None
    entries = []
    for cause, (run, label, baseline, what) in KEPT.items():
        source = out / "runs" / run
        if not (source / "vm.xplane.pb").exists():
            continue
        this = truth
        if run not in best:
            if before is None or run not in before["best_ms"]:
                continue
            this = before
        target = HERE / cause
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        with (
            (source / "vm.xplane.pb").open("rb") as f,
            gzip.open(target / "vm.xplane.pb.gz", "wb") as g,
        ):
            shutil.copyfileobj(f, g)
        shutil.copy2(source / "traceinspect.capture.json", target / "traceinspect.capture.json")
        mine = this["best_ms"]
        record: dict[str, Any] = {
            "label": label,
            "what": what,
            "step_ms": mine[run],
            "baseline": baseline,
            "baseline_step_ms": mine[baseline],
            "device_step_ms": mine["synthetic"],
            "figure": this["figure"],
            "runs_ms": {run: this["runs_ms"][run], baseline: this["runs_ms"][baseline]},
            "device_repeat": this["device_repeat"],
            "stack": env,
        }
        if this is not truth:
            record["truth_from"] = (
                f"an earlier run on the same kind of GPU (this run was cut at its deadline "
                f"before timing {run}); the baseline {baseline} ran {mine[baseline]:.2f} ms "
                f"there and {best[baseline]:.2f} ms in this run"
            )
        if run.startswith("io_"):
            record["knee"] = knee
            record["workers_ms"] = {k: v for k, v in best.items() if k.startswith("io_w")}
        (target / "truth.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        entry: dict[str, Any] = {
            "path": f"gpu/{cause}",
            "verdict": label,
            "truth": (
                f"sample_traces/gpu/run_gpu.py on {env.get('gpu', 'a GPU')}: {what}; "
                f"{mine[run]:.2f} ms/step against {mine[baseline]:.2f} for {baseline} "
                f"(gpu/{cause}/truth.json)"
            ),
        }
        if "knee" in record:
            entry["knee"] = knee
        entries.append(entry)
    return entries


def _knee(best: dict[str, float]) -> int:
    """The smallest worker count within 10% of the best (the family's knee rule)."""
    times = {int(k.removeprefix("io_w")): v for k, v in best.items() if k.startswith("io_w")}
    fastest = min(times.values())
    return min(w for w, t in times.items() if t <= fastest * 1.10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="run_gpu.py's --out folder")
    parser.add_argument("--earlier", type=Path, help="an earlier run's --out, for missing truth")
    args = parser.parse_args()
    print(json.dumps(keep(args.out, args.earlier), indent=2))


if __name__ == "__main__":
    main()
