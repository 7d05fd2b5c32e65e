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
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from traceinspect import schema as S
from traceinspect.analysis.result import GRAIN_WORKER_COUNT, Analysis, Finding, Recommendation
from traceinspect.vocabulary import CAUSES, MATTERS

# The straggler's input idle time must be at least this many times any other host's.
DISTINCT = 2.0
# The others' extra collective time must cover at least this share of its input idle time.
EXPLAINS = 0.5
# ... and it must be the starved host in more than this share of the aligned steps.
MAJORITY = 0.5
# Collectives taking this share of device busy time are worth a note.
COLLECTIVE_HEAVY = 0.5

_STEP_COLUMNS = (S.WALL_NS, S.BUSY_NS, S.COLLECTIVE_NS, S.IDLE_NS)


@dataclass(frozen=True, eq=False)
class HostResult:
    """One host's part of a multi-host analysis: its analysis, or why there is none."""

    host: str
    location: str
    file_bytes: int
    analysis: Analysis | None
    error: str | None = None
    seconds: float = 0.0  # reading and analysing this host's file
    #: Digests of the first batches this host's loop drew, from its capture sidecar: read
    #: even when the trace could not be analysed (a window the analysis refused, a trace
    #: without events), so the cross-host data check still sees every host.
    first_batches: tuple[str, ...] = ()
    #: For a host that could not be analysed: the checks of its capture sidecar alone
    #: (``findings.sidecar_findings``); an analysed host's are in its analysis.
    findings: tuple[Finding, ...] = ()

    @property
    def ok(self) -> bool:
        return self.analysis is not None

    @property
    def batch_digests(self) -> tuple[str, ...]:
        """The host's batch digests: its analysis's, else those read from its sidecar."""
        if self.analysis is not None and self.analysis.first_batches:
            return self.analysis.first_batches
        return self.first_batches


@dataclass(frozen=True)
class Straggler:
    """The host that starves the pod, and how sure the evidence makes us.

    ``input_wait_ms_per_step`` and ``others_input_wait_ms_per_step`` are input *idle* times
    (the device idle for input, the pod tables' ``input_idle_ms_per_step``); the fields keep
    their historical names because ``to_dict()`` gives them as ``analyze --json`` keys.
    """

    host: str
    starved_steps: int  # aligned steps in which this host's input idle time was the longest
    aligned_steps: int
    input_wait_ms_per_step: float  # input idle time, median, this host
    others_input_wait_ms_per_step: float  # the largest input idle median among the others
    collective_ms_per_step: float  # median, this host
    others_collective_ms_per_step: float  # median over the other hosts
    explained_fraction: float | None  # others' extra collective time / its input idle time
    confirmed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True, eq=False)
class PodAnalysis:
    """The result of :func:`analyze_pod`; ``to_dict()`` is what ``analyze --json`` prints
    for a run with several hosts."""

    path: str
    run: str
    results: tuple[HostResult, ...]
    #: One row per host (index ``host``): verdict, step times, input idle, collective time.
    hosts: pd.DataFrame = field(repr=False)
    #: One row per (step, host) for the steps all analysed hosts traced (ns columns).
    steps: pd.DataFrame = field(repr=False)
    #: One row per aligned step: slowest host, starved host, spread of step times.
    per_step: pd.DataFrame = field(repr=False)
    straggler: Straggler | None
    verdict: str
    summary: str
    recommendations: tuple[Recommendation, ...]
    notes: tuple[str, ...] = ()
    #: What is set up wrong across hosts (each host's own findings are in its analysis).
    findings: tuple[Finding, ...] = ()

    @property
    def analyses(self) -> dict[str, Analysis]:
        """The per-host analyses that succeeded, by host name."""
        return {r.host: r.analysis for r in self.results if r.analysis is not None}

    def to_dict(self, max_gaps: int = 10) -> dict[str, Any]:
        def keyed(row: pd.Series | dict[Any, Any]) -> dict[str, Any]:
            return {_JSON_KEY.get(str(k), str(k)): _jsonable(v) for k, v in row.items()}

        hosts = []
        for r in self.results:
            entry: dict[str, Any] = {S.HOST: r.host, "location": r.location}
            entry["file_bytes"] = r.file_bytes
            entry["seconds"] = round(r.seconds, 3)
            if r.analysis is None:
                entry[S.ERROR] = r.error
            else:
                row = self.hosts.loc[r.host]
                entry[S.ROLE] = str(row[S.ROLE])
                entry["analysis"] = r.analysis.to_dict(max_gaps=max_gaps)
            hosts.append(entry)
        return {
            "path": self.path,
            "run": self.run,
            "host_count": len(self.results),
            "analysed_hosts": len(self.analyses),
            "verdict": self.verdict,
            "summary": self.summary,
            "straggler": None if self.straggler is None else self.straggler.to_dict(),
            "recommendations": [r.to_dict() for r in self.recommendations],
            "hosts_table": [{S.HOST: str(h), **keyed(row)} for h, row in self.hosts.iterrows()],
            "steps": [keyed(r) for r in self.per_step.to_dict(orient="records")],
            "hosts": hosts,
            "notes": list(self.notes),
            "findings": [f.to_dict() for f in self.findings],
        }


# Pod table columns whose analyze --json key keeps its historical spelling: "input wait"
# there is the device's input idle time (the column's name), not the training thread's
# wait for a batch (the sweep's input_wait_ms). Readers of the JSON rely on these keys.
_JSON_KEY = {
    S.INPUT_IDLE_MS_PER_STEP: "input_wait_ms_per_step",
    S.STARVED_INPUT_IDLE_MS: "starved_input_wait_ms",
}
_INPUT_IDLE_NS = S.idle_cause_ns("input")


def _jsonable(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if np.isnan(value) else round(float(value), 4)
    if value is pd.NA or value is None:
        return None
    return value if isinstance(value, (int, str, bool)) else str(value)


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
    verdict, summary = _pod_verdict(analyses, straggler, table)
    recs = _recommendations(analyses, straggler)
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
    )


def pod_findings(results: tuple[HostResult, ...]) -> tuple[Finding, ...]:
    """Across hosts: hosts whose loops drew the same first batches read the same data, not
    each its own slice (``same_data_on_hosts``; every host counts, analysed or not: the
    digests come from the capture sidecar); then the sidecar's own findings of each host
    that could not be analysed, named."""
    unanalysed = tuple(
        replace(f, message=f"{r.host} (not analysed; from its capture sidecar): {f.message}")
        for r in results
        if r.analysis is None
        for f in r.findings
    )
    return _same_data(results) + unanalysed


def _same_data(results: tuple[HostResult, ...]) -> tuple[Finding, ...]:
    by_digest: dict[str, list[str]] = {}
    for r in sorted(results, key=lambda r: r.host):
        for digest in set(r.batch_digests):
            by_digest.setdefault(digest, []).append(r.host)
    groups = sorted({tuple(h) for h in by_digest.values() if len(h) > 1})
    if not groups:
        return ()
    named = "; ".join(", ".join(g) for g in groups)
    return (
        Finding(
            "same_data_on_hosts",
            "warning",
            f"Hosts read the same batches: {named} drew identical first batches (capture's "
            "digest of their contents), so each host trains on the same data instead of its "
            "own slice.",
            "Shard the input by process: grain.sharding.ShardOptions(shard_index="
            "jax.process_index(), shard_count=jax.process_count()) or, for a MapDataset, "
            "ds[jax.process_index()::jax.process_count()] before shuffling and batching.",
        ),
    )


def _pod_verdict(
    analyses: dict[str, Analysis], straggler: Straggler | None, table: pd.DataFrame
) -> tuple[str, str]:
    if straggler is not None:
        return "straggler", straggler.message
    if not analyses:
        return "error", "No host could be analysed."
    counts = Counter(a.verdict for a in analyses.values())
    common, n = counts.most_common(1)[0]
    step_ms = table[S.MEDIAN_STEP_MS].astype(float)
    slowest = str(step_ms.idxmax())
    if n == len(analyses):
        return common, (
            f"All {n} hosts are {common}; the slowest, {slowest}, takes "
            f"{step_ms[slowest]:.2f} ms/step (median). "
            f"{analyses[slowest].summary}"
        )
    spread = ", ".join(f"{v}: {c}" for v, c in counts.most_common())
    verdict = analyses[slowest].verdict
    return verdict, (
        f"Hosts disagree ({spread}); the slowest host, {slowest}, is {verdict}: "
        f"{analyses[slowest].summary}"
    )


def _recommendations(
    analyses: dict[str, Analysis], straggler: Straggler | None
) -> tuple[Recommendation, ...]:
    """What to do, pod-wide: the straggler's own fixes first, and one worker count for
    every host (they run the same pipeline, each on its shard)."""
    recs: list[Recommendation] = []
    if straggler is not None:
        recs.append(
            Recommendation(
                "fix_straggler",
                f"Look at {straggler.host} first: every host loads its own shard "
                "(global batch / process count), so one slow pipeline sets the pace of "
                "the pod. Compare its data shard, disk or network reads and CPU load "
                "with the other hosts'.",
                host=straggler.host,
            )
        )
        own = analyses.get(straggler.host)
        if own is not None:
            recs.extend(
                replace(r, on_host=straggler.host)
                for r in own.recommendations
                if r.kind not in ("device_bound", GRAIN_WORKER_COUNT)
            )
    else:
        # No straggler: what the hosts' own analyses advise, most common first.
        by_kind: dict[str, tuple[Recommendation, list[str]]] = {}
        for h, a in analyses.items():
            for r in a.recommendations:
                if r.kind != GRAIN_WORKER_COUNT:
                    by_kind.setdefault(r.kind, (r, []))[1].append(h)
        for rec, on in sorted(by_kind.values(), key=lambda item: -len(item[1])):
            where = "every host" if len(on) == len(analyses) else ", ".join(sorted(on))
            recs.append(
                replace(rec, on_hosts=tuple(sorted(on)), message=f"({where}) {rec.message}")
            )
    workers = {
        h: r for h, a in analyses.items() for r in a.recommendations if r.kind == GRAIN_WORKER_COUNT
    }
    if workers:
        need = max(workers, key=lambda h: int(workers[h].value or 0))
        value = int(workers[need].value or 0)
        currents = {r.current for r in workers.values()}
        current = currents.pop() if len(currents) == 1 else None
        if current is not None and value <= int(current):
            message = f"Keep the Grain worker count at {current} on every host."
        else:
            message = (
                f"Set the Grain worker count to {value} on every host: {need} needs it; "
                f"{workers[need].reason}."
            )
        recs.append(
            Recommendation(
                GRAIN_WORKER_COUNT,
                message,
                value=value,
                current=current,
                host=need,
                per_host={h: int(r.value or 0) for h, r in workers.items()},
            )
        )
    return tuple(recs)
