"""Notebook 1 in a real JupyterLab, driven by headless Chromium (Playwright).

The test starts its own JupyterLab on 127.0.0.1 (free port, no token) serving a
temporary copy of ``notebooks/`` (Lab writes checkpoints and reuses kernels per
path), with user settings that switch the news/update toast off, opens
``01_off_by_one.ipynb``, runs all cells, moves the ``max_num_seqs`` slider from
2 to 1 with the keyboard, and checks that the capacity, workspace and crash
numbers on screen change to the model's values (C: 2 -> 1, W: 3 -> 2, crash
size 3 -> 2) and that the chart is redrawn.  Screenshots go to
``test-artifacts/browser/``.

Chromium is Debian's (``apt-get install -y chromium``): Playwright only drives
it (``executable_path``), it downloads nothing.  Without /usr/bin/chromium the
test is skipped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from hisparse_model.knobs import Knobs
from hisparse_model.predict import predict

pytestmark = pytest.mark.browser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "browser")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SERVER_START_S = 90  # JupyterLab start on a busy 2-core machine
RUN_ALL_S = 150  # longer than nbclient's 60 s cell timeout: a stalled reply must not look like a hang
UPDATE_S = 90  # slider move -> new numbers and an idle kernel

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is absent (install it with: apt-get install -y chromium)",
                allow_module_level=True)

from playwright import sync_api as playwright_sync  # a test extra: must be there


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LAB_SETTINGS = {
    # no news fetch, no update check: no toast over the notebook
    ("apputils-extension", "notification"): {"fetchNews": "false", "checkForUpdates": False},
    # render every cell (no virtual scrolling), so the dashboard is in the DOM wherever it is
    ("notebook-extension", "tracker"): {"windowingMode": "none"},
}


def _write_settings(settings_dir: str) -> None:
    """Lab user settings overrides (``--LabApp.user_settings_dir``)."""
    for (plugin, name), values in LAB_SETTINGS.items():
        path = os.path.join(settings_dir, "@jupyterlab", plugin)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, f"{name}.jupyterlab-settings"), "w") as f:
            json.dump(values, f)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab serving a temporary copy of notebooks/; stopped (process group) at the end."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    root.mkdir()
    for name in os.listdir(os.path.join(ROOT, "notebooks")):
        if name.endswith(".ipynb"):
            shutil.copy(os.path.join(ROOT, "notebooks", name), root / name)
    settings = base / "settings"
    _write_settings(str(settings))
    port = _free_port()
    env = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
        "JUPYTER_CONFIG_DIR": str(base / "config"),  # ignore ~/.jupyter
        "IPYTHONDIR": str(base / "ipython"),
        "MPLBACKEND": "Agg",
    }
    log = open(base / "lab.log", "w")
    cmd = [
        sys.executable, "-m", "jupyterlab",
        "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
        "--ServerApp.token=", "--ServerApp.password=",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.user_settings_dir={settings}",
        f"--LabApp.workspaces_dir={base / 'workspaces'}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run commands
        "--LabApp.news_url=",  # and no news feed to fetch from
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, cwd=str(root))

    def stop() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        log.close()

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited: {(base / 'lab.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not start: {(base / 'lab.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield {"url": url, "root": root, "log": base / "lab.log"}
    finally:
        stop()


@pytest.fixture(scope="module")
def browser():
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


KERNEL_IDLE_JS = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && !w.sessionContext.pendingInput;
}"""


def _wait_idle(page, timeout_s: float) -> None:
    page.wait_for_function(KERNEL_IDLE_JS, timeout=timeout_s * 1000, polling=250)


def _text(page, selector: str) -> str:
    return page.locator(f".hisparse-dashboard {selector}").first.inner_text().strip()


def _numbers(page) -> dict:
    return {
        "C": _text(page, ".hs-C"),
        "W": _text(page, ".hs-W"),
        "crash": _text(page, ".hs-crash"),
        "summary": _text(page, ".hs-summary"),
    }


def _image_src(page) -> str:
    return page.locator(".hisparse-dashboard img").first.get_attribute("src") or ""


def _stable_image(page, not_equal: str | None, timeout_s: float) -> str:
    """Wait until the chart's image is present, differs from ``not_equal`` and stays put 1 s."""
    deadline = time.monotonic() + timeout_s
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        src = _image_src(page)
        if src and src != not_equal:
            if src == last and time.monotonic() - since >= 1.0:
                return src
            if src != last:
                last, since = src, time.monotonic()
        time.sleep(0.2)
    raise AssertionError("the chart did not settle on a new image")


def _expected(s: int) -> dict:
    sz = predict(Knobs(vllm_version="0.31.0", max_num_seqs=s)).sizes
    return {
        "C": str(sz.swap_capacity),
        "W": str(sz.workspace_rows),
        "crash": str(sz.workspace_rows),  # 0.31.0 crashes at n = W
        "summary": (f"B={sz.max_num_batched_tokens} q={sz.max_decode_query_len} "
                    f"C={sz.swap_capacity} W={sz.workspace_rows} crash_size={sz.workspace_rows}"),
    }


def test_slider_moves_numbers_and_crash_marker(lab, browser):
    """Moving max_num_seqs 2 -> 1 in Lab shows the model's C 2->1, W 3->2, crash size 3->2."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    before, after = _expected(2), _expected(1)
    assert (before["C"], before["W"], before["crash"]) == ("2", "3", "3")
    assert (after["C"], after["W"], after["crash"]) == ("1", "2", "2")

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    try:
        page.goto(f"{lab['url']}/lab/tree/01_off_by_one.ipynb", timeout=SERVER_START_S * 1000)
        page.wait_for_function(
            "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
            " && window.jupyterapp.shell.currentWidget.sessionContext",
            timeout=SERVER_START_S * 1000)
        _wait_idle(page, SERVER_START_S)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        dash = page.locator(".hisparse-dashboard").first
        dash.wait_for(state="visible", timeout=RUN_ALL_S * 1000)
        page.wait_for_function(
            "(s) => [...document.querySelectorAll('.hisparse-dashboard .hs-summary')]"
            ".some(e => e.textContent.trim() === s)",
            arg=before["summary"], timeout=RUN_ALL_S * 1000)
        _wait_idle(page, RUN_ALL_S)
        src_before = _stable_image(page, None, UPDATE_S)
        assert _numbers(page) == before
        dash.scroll_into_view_if_needed()
        dash.screenshot(path=os.path.join(ARTIFACTS, "01_before.png"))

        slider = dash.locator(".widget-slider").filter(
            has=page.locator("label", has_text="max_num_seqs")).first
        handle = slider.locator(".noUi-handle").first
        handle.focus()
        handle.press("ArrowLeft")  # one step: 2 -> 1

        page.wait_for_function(
            "(s) => [...document.querySelectorAll('.hisparse-dashboard .hs-summary')]"
            ".some(e => e.textContent.trim() === s)",
            arg=after["summary"], timeout=UPDATE_S * 1000)
        _wait_idle(page, UPDATE_S)
        src_after = _stable_image(page, src_before, UPDATE_S)
        assert src_after != src_before
        assert _numbers(page) == after
        assert slider.locator(".widget-readout").first.inner_text().strip() == "1"
        dash.screenshot(path=os.path.join(ARTIFACTS, "01_after.png"))
    except Exception:
        page.screenshot(path=os.path.join(ARTIFACTS, "01_failure.png"), full_page=True)
        with open(os.path.join(ARTIFACTS, "console.log"), "w") as f:
            f.write("\n".join(console))
        shutil.copy(lab["log"], os.path.join(ARTIFACTS, "lab.log"))
        raise
    finally:
        context.close()
