"""Multi-host runs: per-host analyses side by side, steps aligned, and the straggler named.

A JAX job runs one process per host; every step ends in collectives (the gradient
all-reduce), so one host that is late stalls them all. On that host the device sits idle
waiting for input; on every other host the device looks *busy*, but the time is spent
inside the collective, waiting for the late host. So the per-host verdicts disagree
("input-bound" on one host, "device-bound" on the rest) and only the cross-host view says
what happened.

The rule, over the steps every host traced (aligned by step number; host clocks are not
compared). A host's *input idle* time is its device's idle time caused by input
(``idle_input_ns``), not the training thread's time fetching a batch (``input_work_ns``):

- Per step, the host with the longest input idle time is the *starved* host of that step
  (when that time matters: >= 5% of the step), and the host with the longest step is the
  *slowest* one.
- A host is the straggler when it is the starved host in most steps, its input idle time
  per step (median) matters, and it is at least twice any other host's.
- Its input idle time *explains* the others' collective waits when each other host spends
  longer in collectives than the straggler does, by at least half of the straggler's input
  idle time (median over hosts): the devices that were not fed by it wait for it in the
  all-reduce. Then the straggler is ``confirmed``. Without collectives in the traces (runs
  captured separately, or no cross-host communication), a starved host that is also the
  slowest is still named, unconfirmed.

Everything here is a pure function of the per-host :class:`~traceinspect.analysis.analyze.
Analysis` results; reading files and running the per-host work in parallel is
:mod:`traceinspect.pod`'s job.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.pod_advice import pod_findings, pod_recommendations, pod_verdict
from traceinspect.analysis.pod_result import HostResult, PodAnalysis, Straggler
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Analysis
from traceinspect.vocabulary import CAUSES, MATTERS

__all__ = [
    "HostResult",
    "PodAnalysis",
    "Straggler",
    "align_steps",
    "analyze_pod",
    "find_straggler",
    "host_table",
    "per_step_table",
    "pod_findings",
]

# The straggler's input idle time must be at least this many times any other host's.
DISTINCT = 2.0
# The others' extra collective time must cover at least this share of its input idle time.
EXPLAINS = 0.5
# ... and it must be the starved host in more than this share of the aligned steps.
MAJORITY = 0.5
# Collectives taking this share of device busy time are worth a note.
COLLECTIVE_HEAVY = 0.5

_STEP_COLUMNS = (S.WALL_NS, S.BUSY_NS, S.COLLECTIVE_NS, S.IDLE_NS)
_INPUT_IDLE_NS = S.idle_cause_ns("input")


def _median(values: pd.Series | np.ndarray) -> float:
    arr = np.asarray(values, dtype=float)
    return float(np.median(arr)) if len(arr) else 0.0


def _long_steps(analyses: dict[str, Analysis]) -> pd.DataFrame:
    """Every host's per-step rows in one frame, ``host`` first."""
    frames = []
    for host, a in analyses.items():
        ps = a.per_step
        cols = {
            S.STEP: ps[S.STEP].to_numpy(),
            **{c: ps[c].to_numpy() for c in _STEP_COLUMNS},
            **{S.idle_cause_ns(c): ps[S.idle_cause_ns(c)].to_numpy() for c in CAUSES},
        }
        frame = pd.DataFrame(cols)
        frame.insert(0, S.HOST, host)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def align_steps(analyses: dict[str, Analysis]) -> tuple[pd.DataFrame, int]:
    """(step, host) rows for the step numbers every host traced, and how many step
    numbers were left out because some host did not trace them."""
    long = _long_steps(analyses)
    # A step number a host traced twice (restarted numbering) keeps its first occurrence.
    long = long.drop_duplicates(subset=[S.HOST, S.STEP], keep="first")
    counts = long.groupby(S.STEP)[S.HOST].nunique()
    common = counts.index[counts == len(analyses)]
    left_out = int((counts < len(analyses)).sum())
    aligned = long[long[S.STEP].isin(common)].sort_values([S.STEP, S.HOST], kind="stable")
    return aligned.reset_index(drop=True), left_out


def per_step_table(aligned: pd.DataFrame) -> pd.DataFrame:
    """Per aligned step: the slowest host, the fastest step time, and the starved host
    (longest input idle time, when it is at least 5% of the slowest step)."""
    if aligned.empty:
        return pd.DataFrame(
            columns=[
                S.STEP,
                S.SLOWEST_HOST,
                S.SLOWEST_MS,
                S.FASTEST_MS,
                S.STARVED_HOST,
                S.STARVED_INPUT_IDLE_MS,
            ]
        )
    g = aligned.groupby(S.STEP, sort=True)
    slow_idx = g[S.WALL_NS].idxmax()
    starved_idx = g[_INPUT_IDLE_NS].idxmax()
    slowest_ns = aligned.loc[slow_idx, S.WALL_NS].to_numpy()
    starved_idle = aligned.loc[starved_idx, _INPUT_IDLE_NS].to_numpy()
    starved_host = aligned.loc[starved_idx, S.HOST].to_numpy().astype(object)
    starved_host[starved_idle < MATTERS * slowest_ns] = None
    return pd.DataFrame(
        {
            S.STEP: g[S.WALL_NS].max().index.to_numpy(),
            S.SLOWEST_HOST: aligned.loc[slow_idx, S.HOST].to_numpy(),
            S.SLOWEST_MS: slowest_ns / 1e6,
            S.FASTEST_MS: g[S.WALL_NS].min().to_numpy() / 1e6,
            S.STARVED_HOST: starved_host,
            S.STARVED_INPUT_IDLE_MS: starved_idle / 1e6,
        }
    )


def find_straggler(aligned: pd.DataFrame, per_step: pd.DataFrame) -> Straggler | None:
    """The host that starves the others (see the module docstring), or None."""
    hosts = sorted(aligned[S.HOST].unique()) if len(aligned) else []
    if len(hosts) < 2 or per_step.empty:
        return None
    starved = Counter(str(h) for h in per_step[S.STARVED_HOST] if pd.notna(h))
    if not starved:
        return None
    host, count = starved.most_common(1)[0]
    n_steps = len(per_step)
    by_host = aligned.groupby(S.HOST)
    input_idle = by_host[_INPUT_IDLE_NS].median()
    wall = by_host[S.WALL_NS].median()
    coll = by_host[S.COLLECTIVE_NS].median()
    others = [h for h in hosts if h != host]
    own_idle = float(input_idle[host])
    others_idle = float(input_idle[others].max())
    if count <= MAJORITY * n_steps or own_idle < MATTERS * float(wall[host]):
        return None
    if own_idle < DISTINCT * others_idle:
        return None  # several hosts starve alike: the pod is input-bound, not one host
    own_coll = float(coll[host])
    others_coll = _median(coll[others].to_numpy())
    has_collectives = float(coll.max()) > 0
    explained = (others_coll - own_coll) / own_idle if has_collectives else None
    confirmed = explained is not None and explained >= EXPLAINS
    slowest = wall.idxmax() == host and float(wall[host]) > (1 + MATTERS) * _median(
        wall[others].to_numpy()
    )
    if not confirmed and not slowest and explained is not None:
        # Starved, but the others do not wait for it and it is not slower: a host with
        # a slow pipeline that still keeps its place (its device had slack).
        return None
    ms = 1e6
    n_others = len(others)
    if confirmed:
        message = (
            f"Host {host} starves the pod: its device waits {own_idle / ms:.2f} ms/step for "
            f"input (the other {n_others} host(s) at most {others_idle / ms:.2f}), and the "
            f"other hosts spend {(others_coll - own_coll) / ms:.2f} ms/step longer in "
            "collectives than it does: they wait there for it."
        )
    elif explained is None:
        message = (
            f"Host {host} is the slowest and starved of input: its device waits "
            f"{own_idle / ms:.2f} ms/step for input (the others at most "
            f"{others_idle / ms:.2f}). The traces hold no collectives, so whether the "
            "other hosts wait for it cannot be checked (were the runs captured separately?)."
        )
    else:
        message = (
            f"Host {host} is the slowest and starved of input ({own_idle / ms:.2f} ms/step "
            f"against at most {others_idle / ms:.2f} on the others), but the other hosts' "
            f"collectives are only {(others_coll - own_coll) / ms:.2f} ms/step longer than "
            "its own, so its wait does not explain theirs."
        )
    return Straggler(
        host=str(host),
        starved_steps=int(count),
        aligned_steps=n_steps,
        input_wait_ms_per_step=round(own_idle / ms, 4),
        others_input_wait_ms_per_step=round(others_idle / ms, 4),
        collective_ms_per_step=round(own_coll / ms, 4),
        others_collective_ms_per_step=round(others_coll / ms, 4),
        explained_fraction=None if explained is None else round(explained, 4),
        confirmed=confirmed,
        message=message,
    )


def host_table(results: tuple[HostResult, ...], aligned: pd.DataFrame) -> pd.DataFrame:
    """One row per host: what its own analysis says, beside its aligned-step medians."""
    rows = []
    by_host = aligned.groupby(S.HOST) if len(aligned) else None
    for r in results:
        a = r.analysis
        row: dict[str, Any] = {S.HOST: r.host, S.FILE_MB: r.file_bytes / 1e6}
        if a is None:
            row.update({S.VERDICT: "error", S.ERROR: r.error})
            rows.append(row)
            continue
        workers = next((x for x in a.recommendations if x.kind == GRAIN_WORKER_COUNT), None)
        row.update(
            {
                S.VERDICT: a.verdict,
                S.STEP_COUNT: a.steps.count,
                S.MEDIAN_STEP_MS: a.steps.median_ms,
                S.P90_STEP_MS: a.steps.p90_ms,
                S.BUSY_MS_PER_STEP: a.device_busy_ms_per_step,
                S.COLLECTIVE_MS_PER_STEP: a.collective_ms_per_step,
                S.INPUT_WORK_MS_PER_STEP: a.input_ms_per_step,
                S.INPUT_IDLE_MS_PER_STEP: np.nan,
                S.IDLE_FRACTION: a.idle_fraction,
                S.GRAIN_WORKERS: None if workers is None else workers.value,
                S.ERROR: None,
            }
        )
        if by_host is not None and r.host in by_host.groups:
            mine = by_host.get_group(r.host)
            row[S.INPUT_IDLE_MS_PER_STEP] = _median(mine[_INPUT_IDLE_NS]) / 1e6
        rows.append(row)
    table = pd.DataFrame(rows).set_index(S.HOST)
    table[S.ROLE] = ""
    return table


def analyze_pod(
    results: list[HostResult] | tuple[HostResult, ...], path: str, run: str
) -> PodAnalysis:
    """Combine per-host results into the pod view. Hosts whose file could not be read or
    analysed are listed with their error; the rest are analysed together."""
    results = tuple(results)
    analyses = {r.host: r.analysis for r in results if r.analysis is not None}
    notes: list[str] = []
    failed = [r for r in results if r.analysis is None]
    if failed:
        notes.append(
            f"{len(failed)} of {len(results)} host(s) could not be analysed and are left "
            f"out: " + "; ".join(f"{r.host}: {r.error}" for r in failed[:5])
        )
    aligned, left_out = (
        align_steps(analyses) if analyses else (pd.DataFrame(columns=[S.STEP, S.HOST]), 0)
    )
    if left_out:
        notes.append(
            f"{left_out} step number(s) traced by only some hosts are left out of the "
            "cross-host comparison (the hosts' traces cover different windows)."
        )
    if len(analyses) > 1 and aligned.empty:
        notes.append(
            "No step number was traced by every host, so steps cannot be aligned across "
            "hosts; capture the same steps on every host (traceinspect capture --skip-steps "
            "N --steps M with StepTraceAnnotation step numbers)."
        )
    steps_table = per_step_table(aligned)
    straggler = find_straggler(aligned, steps_table)
    table = host_table(results, aligned)
    if straggler is not None:
        table.loc[straggler.host, S.ROLE] = "straggler"
        if straggler.confirmed:
            for h in table.index:
                if h != straggler.host and table.loc[h, S.VERDICT] != "error":
                    table.loc[h, S.ROLE] = f"waits for {straggler.host}"
    if straggler is None and len(analyses) > 1:
        ok = table[table[S.VERDICT] != "error"]
        share = ok[S.COLLECTIVE_MS_PER_STEP] / ok[S.BUSY_MS_PER_STEP].where(lambda v: v > 0)
        if len(share.dropna()) and float(share.median()) >= COLLECTIVE_HEAVY:
            notes.append(
                f"The devices spend {float(share.median()):.0%} of their busy time inside "
                "collectives (median over hosts) and no single host explains it: hosts wait "
                "for each other in turn (jitter), or the step is communication-bound."
            )
    verdict, summary, decided_by = pod_verdict(analyses, straggler, table)
    recs = pod_recommendations(analyses, straggler)
    return PodAnalysis(
        path=path,
        run=run,
        results=results,
        hosts=table,
        steps=aligned,
        per_step=steps_table,
        straggler=straggler,
        verdict=verdict,
        summary=summary,
        recommendations=recs,
        notes=tuple(notes),
        findings=pod_findings(results),
        decided_by=decided_by,
    )
