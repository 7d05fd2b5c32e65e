"""The capture sidecar's format (traceinspect.sidecar): the bundled sidecars capture wrote hold
only declared keys and read back to the numbers in the file; newer schemas and damaged
fields are handled as documented."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from traceinspect import sidecar as SC

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
# A run of several hosts holds <host>.traceinspect.capture.json, one per host.
WRITTEN = sorted(SAMPLES.rglob(f"*{SC.FILE_NAME}"))


def _declared(typed: type) -> set[str]:
    return set(get_type_hints(typed))


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_bundled_sidecars_exist() -> None:
    assert len(WRITTEN) >= 10


def _keys(data: dict[str, Any]) -> dict[type, set[str]]:
    """The keys of each part of one written sidecar, by the type that declares the part."""
    out: dict[type, set[str]] = {
        SC.SidecarJSON: set(data),
        SC.WindowJSON: set(data["window"]),
        SC.HostJSON: set(data["host"]),
        SC.ProfilerJSON: set(data["profiler"]),
        SC.StepJSON: {k for step in data["steps"] for k in step},
    }
    load = data.get("machine_load")
    if load:
        out[SC.MachineLoadJSON] = set(load)
    arrays = data.get("global_arrays")
    if arrays:
        out[SC.GlobalArrayJSON] = {k for a in arrays for k in a}
    grain = data.get("grain")
    if grain:
        out[SC.GrainJSON] = set(grain)
        measured = grain.get("workers_measured")
        if measured:
            out[SC.WorkersMeasuredJSON] = set(measured)
            out[SC.WorkerJSON] = {k for w in measured["workers"] for k in w}
    return out


@pytest.mark.parametrize("path", WRITTEN, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_written_keys_are_declared(path: Path) -> None:
    for typed, keys in _keys(_load(path)).items():
        assert keys <= _declared(typed), typed.__name__


#: Fields newer than every bundled capture, each checked in a real capture by the test named.
#: (The MaxText captures, sample_traces/maxtext/, hold the worker's and the host's newest
#: fields; the GPU's per-step reads, sample_traces/gpu/read_*/, hold ``maxtext`` and the
#: window's ``untraced_after``.)
NEWER_THAN_THE_BUNDLED: dict[type, set[str]] = {
    # Written by isolate's phases only: tests/capture/test_isolate_runs.py.
    SC.StepJSON: {"cpu_ms"},
    # The machine's load over the window: tests/capture/test_machine_load.py.
    SC.SidecarJSON: {"machine_load", "run_events"},
    # The run's garbage collections and new iterators: tests/capture/test_stalls_by_kind.py.
    SC.RunEventsJSON: set(),
}


def test_every_declared_key_was_written() -> None:
    """Older sidecars lack fields added since (fields are only added within a version), but
    together the bundled ones hold every declared key (or one newer than them all, which a
    real capture test checks): nothing is declared and never written."""
    seen: dict[type, set[str]] = {}
    for path in WRITTEN:
        for typed, keys in _keys(_load(path)).items():
            seen.setdefault(typed, set()).update(keys)
    for typed, keys in seen.items():
        newer = NEWER_THAN_THE_BUNDLED.get(typed, set())
        # A bundled capture that has one: drop it from NEWER_THAN_THE_BUNDLED.
        assert not keys & newer, typed.__name__
        assert keys == _declared(typed) - newer, typed.__name__
    assert len(seen) == 9


@pytest.mark.parametrize("path", WRITTEN, ids=lambda p: str(p.relative_to(SAMPLES)))
def test_read_back(path: Path) -> None:
    data = _load(path)
    record = SC.parse(data)
    assert record is not None and record.data is data
    assert record.schema_version == data["schema_version"] == SC.SCHEMA_VERSION
    assert record.step_source == data["step_source"]
    assert record.window is not None
    assert record.window.first_step == data["window"]["first_step"]
    assert record.window.last_step == data["window"]["last_step"]
    assert record.window.rule == data["window"].get("rule")
    assert [s.wall_ms for s in record.steps] == [s["wall_ms"] for s in data["steps"]]
    assert record.traced_step_walls_ms() == [
        s["wall_ms"] for s in data["steps"] if s["traced"] and s["wall_ms"] is not None
    ]
    assert record.host is not None
    assert record.host.cores == data["host"]["cpus_available"]
    grain = data.get("grain")
    if not grain:
        assert record.grain is None
        return
    assert record.grain is not None
    assert record.grain.worker_count == grain["worker_count"]
    measured = grain.get("workers_measured")
    if not measured:
        assert record.grain.measured is None
        return
    assert record.grain.measured is not None
    assert record.grain.measured.batches == measured["batches"]
    assert [w.produce_s for w in record.grain.measured.workers] == [
        w["produce_s"] for w in measured["workers"]
    ]


def test_a_newer_schema_is_not_read() -> None:
    assert SC.parse({"schema_version": SC.SCHEMA_VERSION + 1, "window": {"rule": "x"}}) is None


def test_no_schema_version_reads_as_version_1() -> None:
    record = SC.parse({"steps": [{"index": 0, "wall_ms": 2.5, "traced": True}]})
    assert record is not None and record.schema_version == 1
    assert record.traced_step_walls_ms() == [2.5]


def test_damaged_fields_read_as_absent() -> None:
    data: Mapping[str, Any] = {
        "step_source": "guess",
        "window": {"rule": "sometimes", "first_step": "3", "last_step": 7.0, "complete": 1},
        "steps": [{"wall_ms": 1.0}, "x", {"index": True}, {"index": 2, "wall_ms": "1"}],
        "grain": {"worker_count": True, "workers_measured": {"workers": [{"index": 0}]}},
        "host": [],
        "partial_reasons": ["a", 3],
    }
    record = SC.parse(data)
    assert record is not None
    assert record.step_source is None
    assert record.window == SC.Window(
        rule=None, reason=None, first_step=None, last_step=7, complete=False
    )
    assert record.steps == (SC.HostStep(2, None, None, None, False),)
    assert record.grain is not None and record.grain.worker_count is None
    assert record.grain.measured is not None and record.grain.measured.workers == ()
    assert record.host is None
    assert record.partial_reasons == ("a",)


def test_file_names() -> None:
    assert SC.file_name() == SC.FILE_NAME == "traceinspect.capture.json"
    assert SC.file_name("host3") == "host3.traceinspect.capture.json"


def test_sharding_facts_read_back() -> None:
    array = {
        "api": "jax.device_put",
        "local_rows": 128,
        "global_rows": 128,
        "host_rows": 64,
        "processes": 2,
    }
    record = SC.parse(
        {
            "grain": {"batch_rows": 128, "files": 4, "file_shards": 2},
            "global_arrays": [array, {**array, "host_rows": "64"}, "x"],
        }
    )
    assert record is not None and record.grain is not None
    assert (record.grain.batch_rows, record.grain.files, record.grain.file_shards) == (128, 4, 2)
    assert record.global_arrays == (SC.GlobalArray("jax.device_put", 128, 128, 64, 2),)


def test_the_backend_platform_reads_back() -> None:
    # isolate reads it to know whether the device's work is the host's CPU work.
    bundled = SC.parse(json.loads((SAMPLE / SC.FILE_NAME).read_text(encoding="utf-8")))
    assert bundled is not None and bundled.platform == "cpu"
    damaged: tuple[object, ...] = (None, [], {"platform": 3}, {"device_count": 1})
    for backend in damaged:
        record = SC.parse({"backend": backend})
        assert record is not None and record.platform is None
    gpu = SC.parse({"backend": {"platform": "gpu", "devices": []}})
    assert gpu is not None and gpu.platform == "gpu"


@pytest.mark.parametrize(
    ("versions", "old"),
    [
        ({"jax": "0.6.1", "jaxlib": "0.6.1", "grain": "0.2.12"}, ["jax 0.6.1", "grain 0.2.12"]),
        ({"jax": "0.10.2", "grain": "0.2.18"}, []),
        ({"jax": "0.12.0.1", "grain": None}, []),  # a script without Grain
        ({"jax": "0.10.1", "grain": "0.2.18rc1"}, ["jax 0.10.1"]),
        ({"jax": "0.10.2.dev20260101", "grain": "0.2.17"}, ["grain 0.2.17"]),
        ({}, []),
    ],
)
def test_versions_older_than_capture_is_tested_with(
    versions: dict[str, str | None], old: list[str]
) -> None:
    assert SC.untested_versions(versions) == old
    note = SC.untested_note(versions)
    assert (note is None) == (not old)
    if note is not None:
        assert note.startswith(f"Captured with {' and '.join(old)}, older than capture is")
        assert "jax >= 0.10.2, grain >= 0.2.18" in note


def test_every_bundled_capture_was_made_on_a_tested_stack() -> None:
    for path in WRITTEN:
        sidecar = SC.parse(_load(path))
        assert sidecar is not None and sidecar.untested_note is None, path


def test_ran_maxtext_from_the_record_or_else_the_command() -> None:
    """The worker advice names grain_worker_count for MaxText, Grain's option otherwise."""
    maxtext = SC.parse(_load(next(p for p in WRITTEN if "maxtext" in p.parts)))
    family = SC.parse(_load(next(p for p in WRITTEN if "family" in p.parts)))
    assert maxtext is not None and family is not None
    assert "maxtext" not in maxtext.data and "maxtext" not in family.data  # older sidecars
    assert maxtext.ran_maxtext is True  # python -m maxtext.trainers.pre_train.train
    assert family.ran_maxtext is False
    for command, expected in [
        (["python3", "-m", "MaxText.train", "cfg.yml"], True),
        (["python", "/src/maxtext/MaxText/train.py"], True),
        (["python", "train_maxtextish.py"], False),
    ]:
        data = {**family.data, "command": command}
        record = SC.parse(data)
        assert record is not None and record.ran_maxtext is expected, command
    recorded = SC.parse({**family.data, "maxtext": True})
    assert recorded is not None and recorded.ran_maxtext is True


# --- numbers no capture writes: NaN, Infinity, negative, another type (issue 34) ----------

SAMPLE = Path(__file__).resolve().parents[1] / "traceinspect" / "_samples" / "sync_bound"
_BAD_VALUES: dict[str, object] = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_BAD_VALUES |= {"neg": -3, "str": "8", "list": [8], "bool": True}


@pytest.mark.parametrize("bad", list(_BAD_VALUES))
@pytest.mark.parametrize(
    "where", ["steps.step_num", "steps.wall_ms", "grain.read_prefetch_buffer_size"]
)
def test_unusable_numbers_are_left_out_and_named(where: str, bad: str) -> None:
    data = json.loads((SAMPLE / SC.FILE_NAME).read_text(encoding="utf-8"))
    group, key = where.split(".")
    target = data[group][0] if group == "steps" else data[group]
    target[key] = _BAD_VALUES[bad]
    # json writes NaN and Infinity, and reads them back as Python floats.
    record = SC.parse(json.loads(json.dumps(data)))
    assert record is not None and record.grain is not None
    got = {
        "step_num": record.steps[0].step_num,
        "wall_ms": record.steps[0].wall_ms,
        "read_prefetch_buffer_size": record.grain.read_prefetch_buffer_size,
    }[key]
    if key == "step_num" and bad == "neg":  # jax lets a step number be negative
        assert got == -3 and record.ignored == ()
        return
    assert got is None
    assert record.ignored == (key,)
    assert record.ignored_note is not None and key in record.ignored_note


def test_a_negative_step_number_is_kept() -> None:
    record = SC.parse({"steps": [{"index": 0, "step_num": -1}]})
    assert record is not None and record.steps[0].step_num == -1 and record.ignored == ()


@pytest.mark.parametrize("command", ["analyze", "info"])
def test_commands_read_a_sidecar_with_nan_and_infinity(tmp_path: Path, command: str) -> None:
    from click.testing import CliRunner

    from traceinspect.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "vm.xplane.pb").write_bytes((SAMPLE / "vm.xplane.pb").read_bytes())
    data = json.loads((SAMPLE / SC.FILE_NAME).read_text(encoding="utf-8"))
    for step in data["steps"]:
        step["wall_ms"] = float("nan")
        step["step_num"] = float("inf")
    data["grain"]["read_prefetch_buffer_size"] = float("-inf")
    data["window"]["first_step"] = -2
    (run / SC.FILE_NAME).write_text(json.dumps(data), encoding="utf-8")
    result = CliRunner().invoke(main, [command, str(run), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert result.exception is None
    if command == "analyze":
        note = [line for line in result.stdout.splitlines() if "capture sidecar" in line]
        assert note and all(k in note[0] for k in ("wall_ms", "step_num", "first_step"))


LOAD = {"window_s": 2.5, "cpu_count": 2, "others_cpu_cores": 1.1, "script_cpu_cores": 0.8}


def test_the_machine_load_reads_back() -> None:
    record = SC.parse({"machine_load": LOAD})
    assert record is not None
    assert record.machine_load == SC.MachineLoad(2.5, 2, 1.1, 0.8)
    # Older sidecars have none; a capture that could not read /proc wrote null.
    bundled = SC.parse(json.loads((SAMPLE / SC.FILE_NAME).read_text(encoding="utf-8")))
    assert bundled is not None and "machine_load" not in bundled.data
    assert bundled.machine_load is None
    absent_values: tuple[object, ...] = (None, {}, [], "busy")
    for absent in absent_values:
        record = SC.parse({"machine_load": absent})
        assert record is not None and record.machine_load is None and record.ignored == ()


@pytest.mark.parametrize("key", ["window_s", "others_cpu_cores"])
@pytest.mark.parametrize("bad", ["nan", "neg", "str"])
def test_a_damaged_machine_load_reads_as_absent(key: str, bad: str) -> None:
    data = json.loads(json.dumps({"machine_load": {**LOAD, key: _BAD_VALUES[bad]}}))
    record = SC.parse(data)
    assert record is not None and record.machine_load is None
    assert record.ignored == (key,)


@pytest.mark.parametrize(
    ("cpu_count", "others", "cores", "left"),
    [
        (2, 0.1, 2, 2),
        (2, 0.49, 2, 2),  # to the nearest core
        (2, 0.51, 2, 1),
        (2, 1.1, 2, 1),
        (2, 2.0, 2, 1),  # never below one
        (64, 10.4, 64, 54),
        (64, 30.0, 4, 4),  # an affinity of 4 cores: others are taken to run on the rest
        (64, 62.0, 4, 2),
        (None, 1.0, 4, 3),  # the machine's count unknown: the cores the script may use
        (2, 1.0, None, None),
    ],
)
def test_the_cores_left(
    cpu_count: int | None, others: float, cores: int | None, left: int | None
) -> None:
    assert SC.MachineLoad(1.0, cpu_count, others).cores_left(cores) == left
