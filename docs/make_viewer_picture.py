"""Write docs/images/sync_bound_trace_viewer.png: an exported trace in a real trace viewer.

    python -m venv /tmp/qt && /tmp/qt/bin/pip install PySide6    # once
    python docs/make_viewer_picture.py --qt-python /tmp/qt/bin/python

It needs, besides traceinspect's own environment (the python that runs this script):

- the `xprof` package (`pip install 'traceinspect[xprof]'`): its `static/` folder holds the
  Catapult trace viewer (chrome://tracing's, which XProf's trace_viewer tool embeds), and
  that viewer reads Chrome trace-event JSON as `traceinspect export` writes it;
- PySide6, whose QtWebEngine is a Chromium that runs headless (`QT_QPA_PLATFORM=offscreen`,
  software rendering). Install it into a throwaway venv and name its python with
  `--qt-python`; it is no dependency of traceinspect. The renderer runs this same file
  under that python and imports only the standard library and PySide6.

No network and no browser are needed. The script exports the bundled sync_bound capture
(uncompressed, into a temporary folder) with `python -m traceinspect export` run from the
repository root, serves the viewer's folder and that file on 127.0.0.1, opens
`trace_viewer_index.html` as XProf does for a trace it loads whole, zooms onto steps 41 to
44, selects step 42's longest idle gap so that its arguments (cause, duration, evidence)
show below the tracks, and saves the window as PNG. Not imported by the package or the
tests.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import importlib.util
import os
import string
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parent.parent
TRACE = "sample_traces/scenarios/sync_bound/vm.xplane.pb"
OUT = ROOT / "docs" / "images" / "sync_bound_trace_viewer.png"
# Steps 41-44 of the seven analysed: the first gap (input: nothing read the device before
# it) and three sync gaps, wide enough to read the training thread's slices under them.
FIRST_STEP, LAST_STEP, SELECTED_STEP = 41, 44, 42
# Tall enough for the selected gap's evidence lines in the panel below the tracks.
WIDTH, HEIGHT = 1200, 880
TIMEOUT_S = 60

# Runs in the page once the viewer has built its model. `tv` is the Catapult timeline view
# inside XProf's <tf-trace-viewer>; the model counts ms from the file's earliest event.
FOCUS_JS = string.Template("""(() => {
  const tv = document.querySelector('tf-trace-viewer')._traceViewer;
  const threads = [];
  for (const p of Object.values(tv.model.processes)) threads.push(...Object.values(p.threads));
  const track = (name) => threads.find((t) => t.name === name).sliceGroup.slices;
  const steps = track('steps'), gaps = track('idle gaps');
  const first = steps.find((s) => s.args.step === $first);
  const last = steps.find((s) => s.args.step === $last);
  const lo = first.start, hi = last.start + last.duration, pad = (hi - lo) * 0.02;
  const transform = new tr.ui.TimelineDisplayTransform();
  const canvas = tv.trackView.modelTrackContainer_.canvas;
  transform.xSetWorldBounds(lo - pad, hi + pad, canvas.width);
  tv.trackView.viewport.setDisplayTransformImmediately(transform);
  const gap = gaps.filter((g) => g.args.step === $selected)
    .sort((a, b) => b.duration - a.duration)[0];
  tv.brushingStateController.changeSelectionFromTimeline(new tr.model.EventSet([gap]));
  // The floating mouse-mode toolbar would sit over the last step's slices.
  const toolbars = document.querySelectorAll('tr-ui-b-mouse-mode-selector');
  for (let i = 0; i < toolbars.length; i++) toolbars[i].style.display = 'none';
  return gap.title + ' ' + gap.duration.toFixed(2) + ' ms';
})()""").substitute(first=FIRST_STEP, last=LAST_STEP, selected=SELECTED_STEP)
READY_JS = """(() => {
  const el = document.querySelector('tf-trace-viewer');
  const tv = el && el._traceViewer;
  return Boolean(tv && tv.model && tv.trackView);
})()"""


PREFIX = "make_viewer_picture.py: "


def fail(message: str) -> NoReturn:
    raise SystemExit(PREFIX + message)


def viewer_folder() -> Path:
    """xprof's static folder, which holds the Catapult trace viewer's page."""
    spec = importlib.util.find_spec("xprof")
    if spec is None or spec.origin is None:
        fail("needs the xprof package for its trace viewer: pip install 'traceinspect[xprof]'")
    folder = Path(spec.origin).parent / "static"
    if not (folder / "trace_viewer_index.html").is_file():
        fail(f"{folder} has no trace_viewer_index.html; this xprof ships no Catapult viewer")
    return folder


def check_qt(qt_python: str) -> None:
    try:
        probe = subprocess.run(
            [qt_python, "-c", "import PySide6.QtWebEngineWidgets"],
            capture_output=True,
            check=False,
        )
    except OSError as err:
        fail(f"cannot run --qt-python {qt_python}: {err.strerror}")
    if probe.returncode != 0:
        fail(
            f"{qt_python} cannot import PySide6.QtWebEngineWidgets: "
            "python -m venv /tmp/qt && /tmp/qt/bin/pip install PySide6, "
            "then pass --qt-python /tmp/qt/bin/python"
        )


def make_picture(qt_python: str, out: Path) -> None:
    static = viewer_folder()
    check_qt(qt_python)
    with tempfile.TemporaryDirectory() as tmp:
        trace_json = Path(tmp) / "trace.json"
        export = [sys.executable, "-m", "traceinspect", "export", TRACE, "-o", str(trace_json)]
        done = subprocess.run(export, cwd=ROOT, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            fail(f"{' '.join(export[2:])} failed: {done.stderr.strip()}")
        env = {
            **os.environ,
            "QT_QPA_PLATFORM": "offscreen",
            # Chromium refuses its sandbox as root (containers); the page is local files.
            "QTWEBENGINE_DISABLE_SANDBOX": "1",
            # No GL offscreen: render in software instead of probing for a GPU.
            "QTWEBENGINE_CHROMIUM_FLAGS": "--disable-gpu",
        }
        render = [qt_python, __file__, "--render", str(static), str(trace_json), str(out)]
        # Chromium logs its missing GPU and D-Bus on stderr; show that only on failure.
        done = subprocess.run(render, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            # The renderer's own message, not Chromium's log lines around it.
            lines = done.stderr.strip().splitlines()
            ours = [line for line in lines if line.startswith(PREFIX)] or lines[-1:]
            said = ours[-1].removeprefix(PREFIX) if ours else f"exit status {done.returncode}"
            fail(f"the viewer did not render: {said}")
    said = done.stdout.strip().splitlines()[-1:]
    print(f"Wrote {out} ({out.stat().st_size / 1000:.1f} kB): {' '.join(said)}")


def render(static: Path, trace_json: Path, out: Path) -> None:
    """Open the viewer on ``trace_json`` in QtWebEngine and save the window (PySide6 only)."""
    from PySide6.QtCore import QTimer, QUrl
    from PySide6.QtWebEngineWidgets import QWebEngineView
    from PySide6.QtWidgets import QApplication

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/trace.json":
                super().do_GET()
                return
            body = trace_json.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(static))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    app = QApplication([])
    view = QWebEngineView()
    view.resize(WIDTH, HEIGHT)
    page = view.page()
    result: dict[str, str] = {}

    def poll() -> None:
        page.runJavaScript(READY_JS, 0, lambda ready: focus() if ready else later(300, poll))

    def focus() -> None:
        # Give the first frame a moment before moving the viewport.
        later(200, lambda: page.runJavaScript(FOCUS_JS, 0, focused))

    def focused(selected: object) -> None:
        if not selected:  # the script threw: no such track or step in the file
            result["error"] = f"no steps {FIRST_STEP}-{LAST_STEP} with gaps in {trace_json}"
            app.quit()
            return
        result["selected"] = str(selected)
        later(1500, grab)  # the viewer redraws on the next animation frames

    def grab() -> None:
        if not view.grab().save(str(out)):
            result["error"] = f"could not write {out}"
        app.quit()

    def give_up() -> None:
        result["error"] = f"the viewer did not show the trace within {TIMEOUT_S} s"
        app.quit()

    def later(ms: int, then: Any) -> None:
        QTimer.singleShot(ms, then)

    # The query XProf's own frontend builds for a trace it loads whole (not streamed).
    query = "is_streaming=false&is_oss=true&trace_data_url=/trace.json"
    view.load(QUrl(f"http://127.0.0.1:{port}/trace_viewer_index.html?{query}"))
    view.show()
    later(500, poll)
    later(TIMEOUT_S * 1000, give_up)
    app.exec()
    server.shutdown()
    if "error" in result:
        fail(result["error"])
    print(
        f"steps {FIRST_STEP}-{LAST_STEP} of {TRACE} in the Catapult trace viewer, "
        f"step {SELECTED_STEP}'s {result['selected']} gap selected"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--qt-python",
        default=sys.executable,
        help="a python that has PySide6 (default: this one)",
    )
    parser.add_argument("-o", "--output", type=Path, default=OUT, help=f"default: {OUT}")
    parser.add_argument("--render", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.render:
        render(*args.render)
    else:
        make_picture(args.qt_python, args.output.resolve())


if __name__ == "__main__":
    main()
