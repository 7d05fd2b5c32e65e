"""Log directories behind a URL: fsspec's memory:// and file:// stand in for gs:// and s3://."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pandas as pd
import pytest
from click.testing import CliRunner
from fsspec.implementations.memory import MemoryFileSystem
from traces import ROOT, SAMPLES

import traceinspect
from traceinspect.cli import main
from traceinspect.errors import (
    AmbiguousRunError,
    TraceDecodeError,
    TraceNotFoundError,
    UsageError,
)
from traceinspect.xplane import cache, fs
from traceinspect.xplane.fs import URLPath, is_url
from traceinspect.xplane.locate import locate

SAMPLE = SAMPLES[0]
SCENARIO = ROOT / "sample_traces" / "scenarios" / "sync_bound"


@pytest.fixture
def mem() -> Iterator[str]:
    """A fresh memory:// directory (the memory filesystem is one store per process)."""
    root = f"/traceinspect-test-{uuid.uuid4().hex}"
    yield f"memory://{root}"
    memfs = fsspec.filesystem("memory")
    if memfs.exists(root):
        memfs.rm(root, recursive=True)


def put(url: str, data: bytes | Path) -> str:
    with fsspec.open(url, "wb") as fh:
        fh.write(data.read_bytes() if isinstance(data, Path) else data)
    return url


def assert_same(
    remote: traceinspect.Trace, local: traceinspect.Trace, cached: bool = False
) -> None:
    for name in ("events", "event_stats", "lines", "planes", "plane_stats", "event_metadata"):
        left, right = getattr(remote, name), getattr(local, name)
        if cached:  # memory-mapped columns: compare values, not array classes
            assert left.astype(str).equals(right.astype(str)), name
        else:
            pd.testing.assert_frame_equal(left, right, obj=name)


# --- what counts as a URL -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("gs://bucket/logdir", True),
        ("s3://bucket/run/host.xplane.pb", True),
        ("memory://x", True),
        ("file:///tmp/x", True),
        ("simplecache::gs://bucket/x", True),
        ("logs/run/host.xplane.pb", False),
        ("/abs/logs", False),
        ("C:\\logs\\run", False),
        ("C:/logs/run", False),
        ("C://logs/run", False),
        ("runs/gs://odd-dir-name", False),
        (Path("gs://bucket"), False),
    ],
)
def test_what_is_a_url(path: str | Path, url: bool) -> None:
    assert is_url(path) is url


def test_urlpath_works_like_a_path() -> None:
    p = URLPath("gs://bucket/logs/run/host.xplane.pb.gz")
    assert (p.name, p.stem, p.protocol) == ("host.xplane.pb.gz", "host.xplane.pb", "gs")
    assert str(p.parent) == "gs://bucket/logs/run"
    assert str(URLPath("gs://bucket/logs/") / "plugins/x") == "gs://bucket/logs/plugins/x"
    assert URLPath("gs://bucket").parent == URLPath("gs://bucket")
    assert URLPath("simplecache::s3://b/k").protocol == "s3"


# --- load: file, run directory, log directory ---------------------------------------------
@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_file_url_reads_like_the_local_copy(mem: str, tmp_path: Path, scheme: str) -> None:
    if scheme == "memory":
        url = put(f"{mem}/{SAMPLE.name}", SAMPLE)
    else:
        shutil.copyfile(SAMPLE, tmp_path / SAMPLE.name)
        url = (tmp_path / SAMPLE.name).as_uri()
    trace = traceinspect.load(url)
    assert str(trace.path) == url
    assert trace.hosts == [SAMPLE.name.removesuffix(".xplane.pb")]
    (hf,) = trace.located.run.files
    assert hf.location == url
    assert hf.size == SAMPLE.stat().st_size
    assert_same(trace, traceinspect.load(SAMPLE))


def test_run_directory_url_reads_every_host_and_the_sidecar(mem: str, tmp_path: Path) -> None:
    for host, src in (("host-a", SAMPLES[0]), ("host-b", SAMPLES[1])):
        put(f"{mem}/run/{host}.xplane.pb", src)
        shutil.copyfile(src, tmp_path / f"{host}.xplane.pb")
    sidecar = {"schema": 1, "note": "written by the test"}
    put(f"{mem}/run/traceinspect.capture.json", json.dumps(sidecar).encode())
    (tmp_path / "traceinspect.capture.json").write_text(json.dumps(sidecar))
    trace = traceinspect.load(f"{mem}/run")
    assert trace.hosts == ["host-a", "host-b"]
    assert [f.location for f in trace.located.run.files] == [
        f"{mem}/run/host-a.xplane.pb",
        f"{mem}/run/host-b.xplane.pb",
    ]
    assert trace.sidecar is not None and trace.sidecar.data == sidecar
    assert_same(trace, traceinspect.load(tmp_path))


def test_logdir_url_picks_the_newest_run_and_run_selects(mem: str) -> None:
    put(f"{mem}/plugins/profile/2026_01_01/{SAMPLES[0].name}", SAMPLES[0])
    time.sleep(0.01)  # memory:// files carry their creation time
    put(f"{mem}/plugins/profile/2026_01_02/{SAMPLES[1].name}", SAMPLES[1])
    trace = traceinspect.load(mem)
    assert trace.located.chose_newest
    assert trace.run_name == "plugins/profile/2026_01_02"
    assert [r.name for r in trace.located.all_runs] == [
        "plugins/profile/2026_01_01",
        "plugins/profile/2026_01_02",
    ]
    assert_same(trace, traceinspect.load(SAMPLES[1]))
    picked = traceinspect.load(mem, run="2026_01_01")
    assert str(picked.located.run.path) == f"{mem}/plugins/profile/2026_01_01"
    assert_same(picked, traceinspect.load(SAMPLES[0]))
    with pytest.raises(AmbiguousRunError, match=rf"^{mem}: no run named 'nope'.*2026_01_02"):
        traceinspect.load(mem, run="nope")


def test_file_url_logdir_orders_runs_by_mtime(tmp_path: Path) -> None:
    for name, src, mtime in (("b_old", SAMPLES[0], 2), ("a_new", SAMPLES[1], 3)):
        run = tmp_path / "plugins" / "profile" / name
        run.mkdir(parents=True)
        shutil.copyfile(src, run / "h.xplane.pb")
        os.utime(run / "h.xplane.pb", ns=(mtime * 10**9, mtime * 10**9))
    trace = traceinspect.load(tmp_path.as_uri())
    assert trace.run_name == "plugins/profile/a_new"
    assert [r.name for r in trace.located.all_runs] == [
        r.name for r in traceinspect.load(tmp_path).located.all_runs
    ]


def test_runs_from_several_profile_dirs_are_ambiguous(mem: str) -> None:
    for sub in ("train", "eval"):
        put(f"{mem}/{sub}/plugins/profile/r1/h.xplane.pb", SAMPLE)
    with pytest.raises(AmbiguousRunError, match="choose one with --run"):
        traceinspect.load(mem)
    trace = traceinspect.load(mem, run="eval/plugins/profile/r1")
    assert trace.run_name == "eval/plugins/profile/r1"


def test_gzip_url_gives_the_same_frames(mem: str) -> None:
    url = put(f"{mem}/{SAMPLE.name}.gz", gzip.compress(SAMPLE.read_bytes()))
    assert_same(traceinspect.load(url), traceinspect.load(SAMPLE))


def test_located_pickles_and_each_location_loads_that_one_file(mem: str) -> None:
    put(f"{mem}/run/host-a.xplane.pb", SAMPLES[0])
    put(f"{mem}/run/host-b.xplane.pb", SAMPLES[1])
    located = locate(mem)
    assert pickle.loads(pickle.dumps(located)) == located
    for hf, src in zip(located.run.files, SAMPLES[:2], strict=True):
        one = traceinspect.load(hf.location)
        assert one.hosts == [hf.host]
        assert one.event_count == traceinspect.load(src).event_count


# --- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("compressed", [False, True])
def test_truncated_url_names_the_url_not_the_download(mem: str, compressed: bool) -> None:
    data = SAMPLE.read_bytes()
    if compressed:
        url = put(f"{mem}/h.xplane.pb.gz", gzip.compress(data)[:5000])
    else:
        url = put(f"{mem}/h.xplane.pb", data[: len(data) // 3])
    with pytest.raises(TraceDecodeError) as err:
        traceinspect.load(url)
    message = str(err.value)
    assert message.startswith(f"{url}: ")
    assert "truncated" in message or "not a readable XPlane trace" in message
    assert tempfile.gettempdir() not in message and "\n" not in message


def test_missing_url(mem: str) -> None:
    with pytest.raises(TraceNotFoundError, match=rf"^{mem}/nope: no such file or directory"):
        traceinspect.load(f"{mem}/nope")


def test_url_without_traces(mem: str) -> None:
    put(f"{mem}/notes.txt", b"hi")
    with pytest.raises(TraceNotFoundError, match=rf"^{mem}: no \*\.xplane\.pb file"):
        traceinspect.load(mem)


def test_without_fsspec_a_url_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec now raises ImportError
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    with pytest.raises(UsageError) as err:
        traceinspect.load("gs://bucket/logdir")
    assert str(err.value) == (
        "gs://bucket/logdir: reading gs:// log directories needs fsspec: pip install "
        "'traceinspect[gcs]'."
    )
    with pytest.raises(UsageError, match=r"needs fsspec: pip install 'traceinspect\[remote\]'\.$"):
        traceinspect.load("abfs://container/logdir")


def test_unknown_protocol_is_a_clean_error() -> None:
    with pytest.raises(UsageError, match=r"^nosuch://x: fsspec cannot open this URL .*nosuch"):
        traceinspect.load("nosuch://x")


def test_missing_filesystem_package_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_s3fs(url: str) -> Any:
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec.core, "url_to_fs", no_s3fs)
    with pytest.raises(
        UsageError, match=r"^s3://b/logs: .*s3:// filesystem.*pip install 'traceinspect\[s3\]'\.$"
    ):
        traceinspect.load("s3://b/logs")


# --- gs:// without gcsfs or without credentials --------------------------------------------
def _loopback_only(home: Path) -> dict[str, str]:
    """An environment in which Google's libraries find no credentials and could reach only
    loopback: no metadata server lookups (NO_GCE_CHECK), and one pointed at a closed local
    port if they looked anyway; the storage endpoint and any proxy too."""
    closed = "127.0.0.1:9"
    return {
        "HOME": str(home),
        "CLOUDSDK_CONFIG": str(home / "gcloud"),
        "NO_GCE_CHECK": "true",
        "GCE_METADATA_HOST": closed,
        "GCE_METADATA_IP": closed,
        "GCE_METADATA_TIMEOUT": "1",
        "STORAGE_EMULATOR_HOST": f"http://{closed}",
        "HTTP_PROXY": f"http://{closed}",
        "HTTPS_PROXY": f"http://{closed}",
    }


@pytest.fixture
def no_cloud(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """This process in :func:`_loopback_only`'s environment, fsspec's config without a token."""
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    for name in [n for n in os.environ if n.startswith("FSSPEC_G")]:
        monkeypatch.delenv(name)
    for protocol in ("gs", "gcs"):
        monkeypatch.delitem(fsspec.config.conf, protocol, raising=False)
    for name, value in _loopback_only(tmp_path).items():
        monkeypatch.setenv(name, value)
    return tmp_path


def test_gs_without_gcsfs_names_the_extra(no_cloud: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # import gcsfs now raises ImportError
    with pytest.raises(UsageError) as err:
        traceinspect.load("gs://bucket/logdir")
    assert str(err.value).startswith("gs://bucket/logdir: fsspec cannot load the gs:// filesystem")
    assert str(err.value).endswith("pip install 'traceinspect[gcs]'.")


def test_gs_without_credentials_fails_at_once(no_cloud: Path) -> None:
    """gcsfs would ask for a metadata server, then read anonymously with retries (~45 s)."""
    pytest.importorskip("gcsfs")
    started = time.monotonic()
    with pytest.raises(UsageError) as err:
        traceinspect.load("gs://bucket/logdir")
    assert time.monotonic() - started < 2
    assert str(err.value) == (
        "gs://bucket/logdir: no Google Cloud credentials on this machine: run 'gcloud auth "
        "application-default login' (or set GOOGLE_APPLICATION_CREDENTIALS to a key file; "
        "FSSPEC_GS_TOKEN=anon reads a public bucket)."
    )
    assert err.value.path == "gs://bucket/logdir"


@pytest.mark.parametrize(
    "given", ["adc_file", "key_env", "fsspec_token", "token_cache", "gce_vm", "metadata_env"]
)
def test_gs_with_any_credentials_is_let_through(
    no_cloud: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: str
) -> None:
    """Each source of credentials gcsfs would use passes the check (the check alone is run:
    nothing here goes to gcsfs, so nothing reaches a network)."""
    pytest.importorskip("gcsfs")
    product_name = tmp_path / "product_name"
    product_name.write_text("Standard PC (Q35 + ICH9, 2009)\n")
    monkeypatch.setattr(fs, "_GCE_PRODUCT_NAME", product_name)
    for name in fs._METADATA_ENV:
        monkeypatch.delenv(name, raising=False)
    if given == "adc_file":
        (no_cloud / "gcloud").mkdir()
        (no_cloud / "gcloud" / "application_default_credentials.json").write_text("{}")
    elif given == "key_env":
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    elif given == "fsspec_token":
        monkeypatch.setitem(fsspec.config.conf, "gs", {"token": "anon"})
    elif given == "token_cache":
        (no_cloud / ".gcs_tokens").write_bytes(b"")
    elif given == "gce_vm":
        product_name.write_text("Google Compute Engine\n")
        monkeypatch.delenv("NO_GCE_CHECK")
    else:
        monkeypatch.setenv("GCE_METADATA_HOST", "169.254.169.254")
        monkeypatch.delenv("NO_GCE_CHECK")
    fs._check_gcs_credentials(URLPath("gs://bucket/logdir"))
    if given in ("gce_vm", "metadata_env"):
        monkeypatch.setenv("NO_GCE_CHECK", "true")  # as google-auth: no metadata server then
        with pytest.raises(UsageError, match="no Google Cloud credentials"):
            fs._check_gcs_credentials(URLPath("gs://bucket/logdir"))


def test_cli_gs_without_credentials_is_one_line_and_quick(tmp_path: Path) -> None:
    """In a fresh process (google-auth reads its variables on import): exit 2, one line."""
    pytest.importorskip("gcsfs")
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
    env = {k: v for k, v in env.items() if not k.startswith("FSSPEC_G")}
    env.update(_loopback_only(tmp_path), PYTHONPATH=str(ROOT))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "traceinspect", "info", "gs://bucket/logdir"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert time.monotonic() - started < 20
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "Error: gs://bucket/logdir: no Google Cloud credentials on this machine: run 'gcloud "
        "auth application-default login' (or set GOOGLE_APPLICATION_CREDENTIALS to a key "
        "file; FSSPEC_GS_TOKEN=anon reads a public bucket)."
    ]


class Forbidding(MemoryFileSystem):  # type: ignore[misc]
    """A filesystem that lists but refuses to read, as a bucket without read access does."""

    protocol = "forbidding"

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return str(super()._strip_protocol(path.removeprefix("forbidding://")))

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        if "denied" in path:
            raise OSError('Forbidden: b/denied\n{"error": {"code": 403}}')
        return super().info(path, **kwargs)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        raise RuntimeError("HttpError: 401\nAnonymous caller")


def test_network_and_permission_errors_are_one_line(mem: str) -> None:
    fsspec.register_implementation("forbidding", Forbidding, clobber=True)
    with pytest.raises(TraceNotFoundError) as err:
        traceinspect.load("forbidding://denied/logs")
    assert str(err.value).startswith("forbidding://denied/logs: cannot read it (OSError: Forb")
    assert "credentials" in str(err.value) and "\n" not in str(err.value)

    put(f"{mem}/h.xplane.pb", SAMPLE)
    url = f"forbidding://{mem.removeprefix('memory://')}/h.xplane.pb"
    with pytest.raises(TraceDecodeError) as decode_err:
        traceinspect.load(url)
    assert str(decode_err.value).startswith(
        f"{url}: cannot read it (RuntimeError: HttpError: 401 Anon"
    )
    assert "\n" not in str(decode_err.value)


# --- cache --------------------------------------------------------------------------------
@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Cache everything; record every file fetched for decoding."""
    monkeypatch.setattr(cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache, "MIN_DECODE_SECONDS", 0.0)
    monkeypatch.setenv("TRACEINSPECT_CACHE_DIR", str(tmp_path / "cache"))
    seen: list[str] = []
    real = fs.fetched

    @contextlib.contextmanager
    def counting(loc: fs.Location) -> Iterator[Path]:
        seen.append(str(loc))
        with real(loc) as local:
            yield local

    monkeypatch.setattr(fs, "fetched", counting)
    return seen


def test_second_load_of_a_url_neither_downloads_nor_decodes(mem: str, fetches: list[str]) -> None:
    url = put(f"{mem}/h.xplane.pb", SAMPLE)
    assert SAMPLE.stat().st_size >= cache.MIN_BYTES
    first = traceinspect.load(url)
    assert fetches == [url] and first.load_info.cached_files == 0
    second = traceinspect.load(url)
    assert fetches == [url] and second.load_info.cached_files == 1
    assert_same(second, first, cached=True)
    time.sleep(0.01)
    put(url, SAMPLES[1])  # rewritten: a new creation time and size
    third = traceinspect.load(url)
    assert fetches == [url, url] and third.load_info.cached_files == 0
    assert third.event_count == traceinspect.load(SAMPLES[1]).event_count


def test_no_cache_always_downloads(mem: str, fetches: list[str]) -> None:
    url = put(f"{mem}/h.xplane.pb", SAMPLE)
    traceinspect.load(url, use_cache=False)
    traceinspect.load(url, use_cache=False)
    assert fetches == [url, url]


# --- CLI ----------------------------------------------------------------------------------
def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_cli_info_reads_a_memory_url(mem: str) -> None:
    url = put(f"{mem}/run/vm.xplane.pb", SAMPLE)
    code, out, err = run("info", f"{mem}/run", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["path"] == f"{mem}/run"
    assert data["files"] == [{"host": "vm", "path": url, "bytes": SAMPLE.stat().st_size}]
    code, out, _ = run("info", url)
    assert code == 0 and url in out


def test_cli_events_reads_a_url(mem: str) -> None:
    url = put(f"{mem}/h.xplane.pb", SAMPLE)
    code, out, err = run("events", url, "--name", "^train$", "--limit", "2")
    local = run("events", str(SAMPLE), "--name", "^train$", "--limit", "2")
    assert code == 0, err
    assert (out, err) == local[1:]


def test_cli_analyze_file_url_gives_the_local_verdict() -> None:
    code, out, err = run("analyze", SCENARIO.as_uri(), "--json", "-q")
    assert code == 0, err
    _, local, _ = run("analyze", str(SCENARIO), "--json", "-q")
    remote, expected = json.loads(out), json.loads(local)
    assert remote["path"] == SCENARIO.as_uri()
    assert remote["verdict"] == expected["verdict"] == "sync-bound"
    assert remote["summary"] == expected["summary"]


def test_cli_analyze_memory_url_reads_the_sidecar(mem: str) -> None:
    for f in SCENARIO.iterdir():
        put(f"{mem}/{f.name}", f)
    code, out, err = run("analyze", mem, "--json", "-q")
    _, local, _ = run("analyze", str(SCENARIO), "--json", "-q")
    assert code == 0, err
    remote, expected = json.loads(out), json.loads(local)
    remote.pop("path")
    expected.pop("path")
    assert remote == expected


def test_cli_errors_for_urls_are_one_line() -> None:
    code, _, err = run("info", "nosuch://bucket/logs")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "nosuch://bucket/logs: fsspec cannot open this URL" in err


def test_local_loading_never_imports_fsspec() -> None:
    code = (
        "import sys, traceinspect; "
        f"traceinspect.load({str(SAMPLE)!r}); "
        f"traceinspect.load({str(SCENARIO)!r}); "
        "print('fsspec' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
