"""capture --attach's errors, each one line with what to do, and nothing left behind
(no job needed: the servers here are absent, or are not profilers)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceinspect.capture.attach import _client_error, parse_addresses
from traceinspect.cli import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def not_a_profiler() -> Iterator[int]:
    """A port that accepts connections and answers HTTP/2 with 404s' worth of nothing: it
    reads and closes (something else listening on the port)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port: int = server.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    server.close()


def _attach(tmp_path: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["capture", "--logdir", str(tmp_path / "logs"), "--attach", *args]
    )
    return result.exit_code, result.output


def test_no_server_on_the_port(tmp_path: Path) -> None:
    port = _free_port()
    code, out = _attach(tmp_path, f"127.0.0.1:{port}")
    assert code == 1
    assert out == (
        f"Error: no profiler server at 127.0.0.1:{port} (Connection refused): start the "
        "profiler server in the job (jax.profiler.start_server(PORT)), or check the host and "
        "port\n"
    )
    assert not (tmp_path / "logs").exists()


def test_a_host_that_is_not_known(tmp_path: Path) -> None:
    code, out = _attach(tmp_path, "no-such-host.invalid:9999")
    assert code == 1
    assert out.startswith("Error: no-such-host.invalid:9999: unknown host (")
    assert out.endswith("): check the name\n")


def test_not_an_address(tmp_path: Path) -> None:
    code, out = _attach(tmp_path, "localhost")
    assert code == 2
    assert out == (
        "Error: --attach 'localhost': 'localhost' is not HOST:PORT; give the address of the "
        "job's profiler server, e.g. --attach localhost:9999 or --attach "
        "host1:9999,host2:9999\n"
    )


def test_a_command_or_script_options_with_attach(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["capture", "--attach", "localhost:9999", "--", "python", "train.py"]
    )
    assert result.exit_code == 2
    assert result.output == (
        "Error: --attach traces jobs already running: give no command after it (the command "
        "was 'python train.py')\n"
    )
    result = CliRunner().invoke(main, ["capture", "--attach", "localhost:9999", "--steps", "5"])
    assert result.output == (
        "Error: --attach cannot use --steps: those choose steps of a script capture starts; "
        "an attached job is traced for --duration seconds\n"
    )
    result = CliRunner().invoke(main, ["capture", "--count", "3", "--", "python", "x.py"])
    assert result.output == "Error: --count go with --attach HOST:PORT\n"


def test_something_else_on_the_port(tmp_path: Path, not_a_profiler: int) -> None:
    code, out = _attach(tmp_path, f"127.0.0.1:{not_a_profiler}", "--duration", "0.5")
    assert code == 1
    assert out.startswith(f"Error: 127.0.0.1:{not_a_profiler}: ")
    # Whatever gRPC makes of it (a closed stream), one line, and no run directory left.
    assert out.count("\n") == 1
    profile = tmp_path / "logs" / "plugins" / "profile"
    assert not profile.exists() or not any(profile.iterdir())


def test_client_failures_read_as_one_line() -> None:
    """The client's messages, as XProf 2.24 writes them, mapped to what to do."""
    where = ("h1:9999", "h2:9999")
    busy = {"error": "RuntimeError", "detail": "ALREADY_EXISTS: Another profiling session active"}
    assert _client_error(where, busy, "") == (
        "h1:9999, h2:9999: the profiler is already tracing (another capture, TensorBoard, or "
        "the job's own profiler): wait for it to finish and attach again"
    )
    empty = {
        "error": "RuntimeError",
        "detail": "UNAVAILABLE: No trace event was collected because there were no responses "
        "from clients or the responses did not have trace data.",
    }
    log = (
        "W0000 capture_profile.cc:181] h2:9999 returned UNAVAILABLE: failed to connect to all "
        "addresses; last error: Connection refused\n"
    )
    assert _client_error(where, empty, log) == (
        "h2:9999: the profiler server stopped answering (did the job end?): check that it is "
        "still running"
    )
    assert _client_error(where, empty, "") == (
        "h1:9999, h2:9999: the profiler server answered but returned no trace: the job may "
        "have finished, or be idle; attach while it trains, or for longer (--duration)"
    )
    http = "W0000 x] h1:9999 returned UNIMPLEMENTED: Received http2 header with status: 404\n"
    assert _client_error(where, empty, http) == (
        "h1:9999: something answers there, but not a profiler server (wrong port?): give the "
        "port the job passed to jax.profiler.start_server"
    )


def test_an_http_server_or_a_silent_port_is_named() -> None:
    """What XProf's client logged against `python -m http.server` (jaxlib 0.10.2), and a port
    that accepts the connection but never replies."""
    empty = {
        "error": "RuntimeError",
        "detail": "UNAVAILABLE: No trace event was collected because there were no responses "
        "from clients or the responses did not have trace data.",
    }
    http = (
        "E0000 profiler_client.cc:213] UNAVAILABLE: failed to connect to all addresses; last "
        "error: UNAVAILABLE: ipv4:127.0.0.1:18766: Failed parsing HTTP/2 (Expected SETTINGS "
        "frame as the first frame, got frame type 79)\n"
    )
    assert _client_error(("127.0.0.1:18766",), empty, http) == (
        "127.0.0.1:18766: an HTTP server answers there, not a profiler server (wrong port?): "
        "give the port the job passed to jax.profiler.start_server"
    )
    silent = {"error": "RuntimeError", "detail": "DEADLINE_EXCEEDED: Deadline Exceeded"}
    assert _client_error(("h:1",), silent, "").startswith(
        "h:1: the port took the connection but never answered"
    )


def test_addresses_are_checked() -> None:
    assert parse_addresses("grpc://h1:1, h2:2") == ("h1:1", "h2:2")
    with pytest.raises(Exception, match="names the same address twice"):
        parse_addresses("h1:1,h1:1")
    with pytest.raises(Exception, match="is not HOST:PORT"):
        parse_addresses("h1:70000")


def test_a_host_that_does_not_answer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that never completes the connection (down, or a firewall dropping packets):
    after CONNECT_TIMEOUT_S, one line."""

    def silent(address: tuple[str, int], timeout: float) -> socket.socket:
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    code, out = _attach(tmp_path, "10.1.2.3:9999")
    assert code == 1
    assert out == (
        "Error: 10.1.2.3:9999 did not answer within 5 s: is the host up and the port open to "
        "this machine (a firewall, another network)?\n"
    )
