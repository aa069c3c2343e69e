"""Every notebook in a real JupyterLab, and the standalone app, driven by headless Chromium.

The test starts its own JupyterLab on 127.0.0.1 (free port, no token) serving a
temporary copy of ``notebooks/``, with user settings that switch the news/update
toast off.  For each notebook it opens it (and checks that opening does not
mark it changed), runs all cells, moves its main control and checks that the
numbers on screen are the model's, then moves every other control once.  For
every move it records, in the page, the time from the input event that commits
the value (Enter in a number box, not the typing before it) to the change of
the dashboard's numbers in the page (``label_ms``) and of its chart
(``plot_ms``; ``None`` when that control does not change the chart, e.g. the
prompt lengths under the max_num_seqs strip), and to the end of the frame that
shows each (``label_frame_ms``, ``plot_frame_ms``), and whether the page had the numbers
ahead of the move or waited for the kernel (``label_from``), into
``test-artifacts/latency.json`` (``python -m hisparse_model.bench`` reports it).  Times are
recorded, never asserted: the test fails only when a control does not update the numbers at
all.
Notebook 5 is also timed with 64 requests.  What only a browser shows is checked too:
notebook 4's picked recording scrolled into its box with its verdict unclipped at 1400 px
with the file browser open, notebook 2's tables left-aligned with room for the error.
The dashboards' state is read from their hidden digest (``views.digest.SELECTOR``).
The app test serves ``hisparse app`` and moves max_num_seqs the
same way, then stops it with Ctrl-C (SIGINT).  Screenshots go to
``test-artifacts/browser/``.

The tests that time what a user waits for are marked ``alone``: ``scripts/run_tests.py``
runs them after the parallel tier with nothing else on the machine; the others (layout,
the picked recording, the prompt box, the app's kernels) run in the parallel tier, all on
one pytest-xdist worker (one JupyterLab, one Chromium: ``tests/conftest.py``).

Chromium is Debian's (``apt-get install -y chromium``): Playwright only drives
it (``executable_path``), it downloads nothing.  Without /usr/bin/chromium the
test is skipped, with the reason shown, except under ``CI=true`` (``.ci/run``),
where a missing browser fails the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from hisparse_model import Knobs, predict
from hisparse_model.answers.simulate import simulate
from hisparse_model.views.digest import SELECTOR as DIGEST
from hisparse_model.schedule.workload import synthetic
from interrupts import default_sigint

pytestmark = pytest.mark.browser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "browser")
LATENCY_FILE = os.path.join(ROOT, "test-artifacts", "latency.json")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SERVER_START_S = 90  # JupyterLab or Voila start on a busy 2-core machine
RUN_ALL_S = 150  # longer than nbclient's 60 s cell timeout: a stalled reply must not look like a hang
UPDATE_S = 30  # a control move -> new numbers
PLOT_WAIT_S = 3  # the app, after the numbers changed: how long a chart may take to count as unchanged

if not os.path.exists(CHROMIUM):
    if os.environ.get("CI") == "true":  # CI installs it (.ci/run): its absence is a failure
        pytest.fail(f"{CHROMIUM} is absent under CI=true (apt-get install -y chromium)",
                    pytrace=False)
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
    # Lab's default windowing ("contentVisibility") is kept, as a reader has it: every cell is
    # in the DOM, and the browser skips drawing the ones off screen
}


def _write_settings(settings_dir: str) -> None:
    """Lab user settings overrides (``--LabApp.user_settings_dir``)."""
    for (plugin, name), values in LAB_SETTINGS.items():
        path = os.path.join(settings_dir, "@jupyterlab", plugin)
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, f"{name}.jupyterlab-settings"), "w") as f:
            json.dump(values, f)


def _serve(cmd, log_path, url: str, cwd: str, env=None) -> subprocess.Popen:
    """Start a server in its own process group and wait until ``url`` answers 200."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                            start_new_session=True, preexec_fn=default_sigint)  # Ctrl-C-able
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[2]} exited: {open(log_path).read()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"{cmd[2]} did not start: {open(log_path).read()[-2000:]}")
        time.sleep(0.5)


def _stop(proc: subprocess.Popen, sig=signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


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
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(base / "runtime"),
           "JUPYTER_CONFIG_DIR": str(base / "config"),  # ignore ~/.jupyter
           "IPYTHONDIR": str(base / "ipython"), "HISPARSE_NOTEBOOK_LIVE": "0"}
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
           "--ip=127.0.0.1", f"--port={port}", "--ServerApp.token=", "--ServerApp.password=",
           f"--ServerApp.root_dir={root}", f"--LabApp.user_settings_dir={settings}",
           f"--LabApp.workspaces_dir={base / 'workspaces'}",
           "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run commands
           "--LabApp.news_url="]  # and no news feed to fetch from
    url = f"http://127.0.0.1:{port}"
    proc = _serve(cmd, base / "lab.log", f"{url}/api/status", str(root), env)
    try:
        yield {"url": url, "root": root, "log": base / "lab.log"}
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def browser():
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def latency():
    """"notebook/control" -> {"label_ms", "plot_ms", "label_frame_ms", "plot_frame_ms"}, saved."""
    out: dict = {}
    yield out
    os.makedirs(os.path.dirname(LATENCY_FILE), exist_ok=True)
    with open(LATENCY_FILE, "w") as f:
        json.dump(out, f, indent=1)


# Arms one measurement in the page.  t0 is the timestamp of the first input event that commits
# a value: a key (an arrow on a slider, Enter in a number box or the prompt box), a click (a
# button or checkbox acts when the press is released), a select's change.  Typing into a box
# before Enter sends nothing (the boxes update on Enter), so ``input`` events do not start the
# clock, nor does a press before its click (Playwright's press and release are two round trips,
# 5-15 ms apart, a reader's about 100 ms).  The event's own timeStamp is used (when
# the browser received the input, before any handler ran).  For the numbers box ("label") and the
# chart box ("plot") it records the first change of the box's HTML, and the end of the next frame
# after it ("_frame": a task posted from requestAnimationFrame runs once that frame is painted).
# Each box has its own observer, so a box's HTML is read only when something inside it changed:
# the measuring adds little to what it measures.
ARM_JS = """(sel) => {
  const root = document.querySelector(sel);
  const st = {t0: null, label: null, plot: null, label_frame: null, plot_frame: null};
  const mark = (e) => { if (st.t0 === null) st.t0 = e.timeStamp; };
  const events = ['keydown', 'change', 'click'];
  for (const e of events) root.addEventListener(e, mark, {capture: true});
  const painted = (key) => requestAnimationFrame(() => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => { st[key] = performance.now(); };
    ch.port2.postMessage(null);
  });
  const watch = (boxSel, key) => {
    const box = root.querySelector(boxSel);
    if (!box) return null;
    const before = box.innerHTML;
    const obs = new MutationObserver(() => {
      if (st.t0 !== null && st[key] === null && box.innerHTML !== before) {
        st[key] = performance.now();
        st[key + '_source'] = box.dataset.source || null;
        painted(key + '_frame');
      }
    });
    obs.observe(box, {subtree: true, childList: true, characterData: true, attributes: true});
    return obs;
  };
  const observers = [watch('.hs-numbers-box', 'label'), watch('.hs-chart-box', 'plot')];
  st.done = () => {
    for (const o of observers) if (o) o.disconnect();
    for (const e of events) root.removeEventListener(e, mark, {capture: true});
  };
  window.__hsLat = st;
}"""
TIMES = ("label", "plot", "label_frame", "plot_frame")
POLL_MS = 50  # how often the test reads them; not every frame, which would make the page draw


# Before each move: the kernel idle (in Lab; the app has no notebook panel) and the page drawn,
# then 100 ms, so that a move is timed from a quiet page and not while the browser still draws
# the previous move's chart.
IN_LAB_JS = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  return !!(w && w.sessionContext); }"""
DRAWN_JS = """async () => {
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  await new Promise((r) => setTimeout(r, 100));
}"""


def _settle(page) -> None:
    if page.evaluate(IN_LAB_JS):
        page.wait_for_function(KERNEL_IDLE_JS, timeout=UPDATE_S * 1000, polling=10)
    page.evaluate(DRAWN_JS)


def _measure(page, dash_sel: str, act, redraws: bool = False) -> dict:
    """Settle, arm, ``act()`` (one input), wait for the numbers (and the chart), return ms.

    ``redraws``: the move must change the chart (waiting past UPDATE_S fails); else the
    chart may stay, and whether it changed is read once the kernel is idle and the page drawn.

    ``label_ms`` / ``plot_ms``: input -> the numbers / the chart changed in the page;
    ``label_frame_ms`` / ``plot_frame_ms``: input -> the end of the frame that shows them;
    ``label_from``: "ahead" (the page had the numbers before the move) or "kernel".
    """
    _settle(page)
    page.evaluate(ARM_JS, dash_sel)
    act()
    page.wait_for_function("() => window.__hsLat.label_frame !== null",
                           timeout=UPDATE_S * 1000, polling=POLL_MS)
    if redraws:
        page.wait_for_function("() => window.__hsLat.plot_frame !== null",
                               timeout=UPDATE_S * 1000, polling=POLL_MS)
    elif page.evaluate(IN_LAB_JS):  # idle, the kernel has sent all this move causes
        _settle(page)
    else:  # the app: no kernel handle in the page, so the chart gets PLOT_WAIT_S
        page.wait_for_timeout(PLOT_WAIT_S * 1000)
    st = page.evaluate("(keys) => { const s = window.__hsLat; s.done(); const out = {t0: s.t0,"
                       " source: s.label_source}; for (const k of keys) out[k] = s[k];"
                       " return out; }", list(TIMES))
    times = {f"{key}_ms": None if st[key] is None else round(st[key] - st["t0"], 1)
             for key in TIMES}
    return {**times, "label_from": st["source"]}


KERNEL_IDLE_JS = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && !w.sessionContext.pendingInput;
}"""


def _digest(page, dash_sel: str) -> str:
    """The dashboard's state line (hidden: a reader never sees it)."""
    return page.locator(f"{dash_sel} {DIGEST}").first.text_content().strip()


def _control(page, dash_sel: str, name: str):
    return page.locator(f"{dash_sel} .hs-control-{name}").first


# What each control does in a move, in order; ("slider", "ArrowLeft"), ("box", "64"),
# ("select", "0.32.0"), ("toggle", "0.32.0"), ("check", None), ("text", "2, 3, 67").
def _act(page, dash_sel: str, name: str, how: str, value):
    c = _control(page, dash_sel, name)
    if how == "slider":
        c.locator(".noUi-handle").first.focus()
        return lambda: c.locator(".noUi-handle").first.press(value)
    if how in ("box", "text"):
        box = c.locator("input").last
        box.fill(str(value))  # no message yet: these controls update on Enter
        return lambda: box.press("Enter")
    if how == "select":
        return lambda: c.locator("select").first.select_option(str(value))
    if how == "toggle":
        return lambda: c.locator("button", has_text=str(value)).first.click()
    if how == "check":
        return lambda: c.locator("input[type=checkbox]").first.click()
    raise ValueError(how)


def _move(page, dash_sel: str, key: str, name: str, how: str, value, latency: dict,
          redraws: bool = False) -> None:
    times = _measure(page, dash_sel, _act(page, dash_sel, name, how, value), redraws)
    label = f"{key}/{name}" + (" (number box)" if how == "box" and name != "prompt_lens" else "")
    latency[label] = times


def _open(page, lab, name: str) -> None:
    """Open ``name`` in a fresh workspace (?reset: no tabs restored); wait for an idle kernel."""
    page.goto(f"{lab['url']}/lab/tree/{name}.ipynb?reset", timeout=SERVER_START_S * 1000)
    page.wait_for_function(
        "(path) => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
        " return !!w && !!w.sessionContext && w.context.path === path; }",
        arg=f"{name}.ipynb", timeout=SERVER_START_S * 1000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=SERVER_START_S * 1000, polling=250)


def _open_and_run(page, lab, name: str, dash_sel: str, console: list) -> None:
    # ?reset: a fresh workspace, so only this notebook opens (no tabs restored)
    _open(page, lab, name)
    dirty = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.dirty")
    assert dirty is False, f"opening {name} marked it changed (language_info?)"
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.locator(f"{dash_sel} {DIGEST}").first.wait_for(state="attached",
                                                            timeout=RUN_ALL_S * 1000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_ALL_S * 1000, polling=250)
    page.locator(dash_sel).first.scroll_into_view_if_needed()
    # A reader's first click in a cell makes Lab make it the active cell (a Chrome trace showed
    # 50 ms of Lab's own work in that mousedown, notebook 3), once.  The moves measure the
    # dashboard, so its cell is made active first, as a reader's first click does: a click on
    # the top left corner of its numbers.
    _click_numbers(page, dash_sel)


def _click_numbers(page, dash_sel: str) -> None:
    """A click on the top left corner of the dashboard's numbers (plain text there)."""
    page.locator(f"{dash_sel} .hs-numbers-box").first.click(position={"x": 2, "y": 2})


def _expected_nb1(s: int) -> str:
    sz = predict(Knobs(vllm_version="0.31.0", max_num_seqs=s)).sizes
    return (f"B={sz.max_num_batched_tokens} q={sz.max_decode_query_len} C={sz.swap_capacity} "
            f"W={sz.workspace_rows} crash_size={sz.workspace_rows}")  # 0.31.0 crashes at n = W


def _expected_nb2(s: int, lens=(2, 3, 200)) -> str:
    pred = predict(Knobs(max_num_seqs=s), list(lens))
    crash, caps = pred.startup_crash_batch, ",".join(map(str, pred.capture_sizes))
    words = ",".join(f"{p.n}:{'not_run' if not p.ran else 'ok' if p.ok else 'crash'}"
                     for p in pred.prompts)
    return (f"max_num_seqs={s} C={pred.sizes.swap_capacity} W={pred.sizes.workspace_rows} "
            f"capture_sizes={caps} startup={'ok' if crash is None else f'crash(n={crash.routed})'} "
            f"prompts={words}")


def _expected_nb5(s: int) -> str:
    """Notebook 5's digest: requests of 3 and 2 tokens arriving together, simulated."""
    sched = simulate(Knobs(max_num_seqs=s), synthetic(2, [3, 2], 0))
    p, crash, n = sched.plan, sched.crash, len(sched.steps)
    died = "none" if crash is None else f"step{crash['step']}(n={p.workspace_rows})"
    return (f"max_num_seqs={s} C={p.swap_capacity} W={p.workspace_rows} requests=2 steps={n} "
            f"crash={died} finished={len(sched.finished)}/2")


# notebook -> (dashboard, main move, then every other control's move)
PLANS = {
    "01_off_by_one": ("off_by_one", ("max_num_seqs", "slider", "ArrowLeft"), [
        ("max_num_seqs", "box", 3), ("num_speculative_tokens", "slider", "ArrowRight"),
        ("max_num_batched_tokens", "box", 5)]),  # C = min(5, 3 * 2) = 5
    "02_startup_or_first_request": ("startup", ("max_num_seqs", "slider", "ArrowLeft"), [
        ("max_num_seqs", "box", 2), ("num_speculative_tokens", "slider", "ArrowRight"),
        ("max_num_batched_tokens", "box", 64), ("cudagraph_mode", "select", "PIECEWISE"),
        ("enforce_eager", "check", None), ("attention_backend", "select", "FLASHMLA_SPARSE"),
        ("vllm_version", "select", "0.32.0"), ("prompt_lens", "text", "2, 3, 67")]),
    "03_fix_and_next_fix": ("versions", ("max_num_batched_tokens", "box", 64), [
        ("prompt_lens", "text", "2, 3, 67, 200"), ("vllm_version", "toggle", "0.32.0"),
        ("max_num_seqs", "slider", "ArrowRight"), ("num_speculative_tokens", "slider", "ArrowRight"),
        ("routing", "toggle", "fix"), ("attention_backend", "toggle", "FLASHMLA_SPARSE")]),
    "04_model_vs_engine": ("recordings", ("recording", "select", "v0.31.0-stock-s2-b64"), []),
    "05_your_traffic": ("traffic", ("max_num_seqs", "slider", "ArrowLeft"), [
        ("max_num_seqs", "box", 4), ("requests", "box", 3), ("prompt_lens", "text", "64, 69"),
        ("arrival_spacing", "slider", "ArrowRight"), ("max_tokens", "box", 16),
        ("enable_prefix_caching", "check", None), ("max_num_batched_tokens", "box", 64),
        ("num_speculative_tokens", "slider", "ArrowRight"),
        ("cudagraph_mode", "select", "PIECEWISE"), ("enforce_eager", "check", None),
        ("attention_backend", "select", "FLASHMLA_SPARSE"), ("routing", "select", "fix"),
        ("vllm_version", "select", "0.32.0")]),
    "06_two_gpus": ("two_gpus", ("max_num_seqs", "slider", "ArrowRight"), [
        ("max_num_seqs", "box", 7), ("vllm_version", "select", "0.32.0")]),
}


def _check_main(page, name: str, dash_sel: str) -> None:
    """After the main move, the numbers on screen are the model's."""
    if name == "01_off_by_one":  # max_num_seqs 2 -> 1: C 2 -> 1, W 3 -> 2, crash at n = 2
        page.wait_for_function("(a) => document.querySelector(a[0]).textContent.includes(a[1])",
                               arg=[f"{dash_sel} {DIGEST}", _expected_nb1(1)],
                               timeout=UPDATE_S * 1000)
        for cls, want in (("hs-C", "1"), ("hs-W", "2"), ("hs-crash", "2")):
            assert page.locator(f"{dash_sel} .{cls}").first.inner_text().strip() == want
        assert page.locator(f"{dash_sel} .hs-crash-label").first.text_content() == "crash: n=2"
    elif name == "02_startup_or_first_request":  # max_num_seqs 2 -> 1: dies at start-up
        assert _digest(page, dash_sel) == _expected_nb2(1)
        assert page.locator(f"{dash_sel} tr.hs-crash").first.is_visible()  # the pinned crash row
    elif name == "03_fix_and_next_fix":  # B = 64: a 67-token prompt is chunked 64 + 3 = W
        crashes = predict(Knobs(max_num_seqs=2, max_num_batched_tokens=64),
                          range(1, 320)).prompts
        want = [f"crash: n={p.n}" for p in crashes if not p.ok]
        assert "crash: n=67" in want
        got = page.locator(f"{dash_sel} .hs-crash-label").all_text_contents()
        assert got == want
        assert re.search(r"B \(tokens per step\)\s+64\s+64\s+64",
                         page.locator(f"{dash_sel} .hs-numbers-box").inner_text())
    elif name == "05_your_traffic":  # max_num_seqs 4 -> 3: the 5-token step is > W = 4
        page.wait_for_function("(a) => document.querySelector(a[0]).textContent.includes(a[1])",
                               arg=[f"{dash_sel} {DIGEST}", _expected_nb5(3)],
                               timeout=UPDATE_S * 1000)
        assert _expected_nb5(4).endswith("crash=step0(n=5) finished=0/2")  # before the move
        assert _expected_nb5(3).endswith("crash=none finished=2/2")
        page.wait_for_function(  # the strip's box follows the slider, no crash is marked
            "(sel) => (document.querySelector(sel) || {}).textContent === "
            "'▢ current max_num_seqs = 3'", arg=f"{dash_sel} .hs-current-label",
            timeout=UPDATE_S * 1000)
        assert page.locator(f"{dash_sel} .hs-crash-label").count() == 0
        assert page.locator(f"{dash_sel} .hs-finished").first.inner_text() == "2"
    elif name == "06_two_gpus":  # max_num_seqs 3 -> 4: the dummy pads to 8 > W = 5
        page.wait_for_function("(a) => document.querySelector(a[0]).innerText.includes(a[1])",
                               arg=[f"{dash_sel} {DIGEST}", "C=4 W=5 crash=none"],
                               timeout=UPDATE_S * 1000)
        assert "No rank crashes in this scenario." in page.locator(f"{dash_sel} .hs-numbers-box").inner_text()
    else:  # the picked recording is highlighted in the table and in the chart
        assert "v0.31.0-stock-s2-b64" in page.locator(f"{dash_sel} tr.hs-selected").inner_text()
        assert page.locator(f"{dash_sel} .hs-chart-box text[font-weight='bold']",
                            has_text="v0.31.0-stock-s2-b64").count() == 1


def _screenshots(page, dash_sel: str, stem: str) -> None:
    """What a reader sees: the dashboard's numbers, then its chart (Lab scrolls inside a panel)."""
    for part in (".hs-numbers-box", ".hs-chart-box"):
        page.locator(f"{dash_sel} {part}").first.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(ARTIFACTS, f"{stem}{part.replace('.hs-', '_')}.png"))


@pytest.mark.alone
@pytest.mark.parametrize("name", list(PLANS))
def test_notebook_controls_update_numbers_and_chart(lab, browser, latency, name):
    """Run all, move the main control (numbers equal the model's), then every control updates."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    dash_name, main, others = PLANS[name]
    dash_sel = f".hs-dashboard-{dash_name}"
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    try:
        _open_and_run(page, lab, name, dash_sel, console)
        _screenshots(page, dash_sel, f"{name}_before")
        _move(page, dash_sel, name, *main, latency, redraws=True)  # each main move redraws
        _check_main(page, name, dash_sel)
        _screenshots(page, dash_sel, f"{name}_after")
        for move in others:
            _move(page, dash_sel, name, *move, latency)
        _screenshots(page, dash_sel, f"{name}_last")
        mismatches = [m for m in console if "does not satisfy" in m or "Unsatisfied version" in m]
        assert not mismatches, mismatches  # Lab and its extensions' pins agree
    except Exception:
        page.screenshot(path=os.path.join(ARTIFACTS, f"{name}_failure.png"), full_page=True)
        shutil.copy(lab["log"], os.path.join(ARTIFACTS, "lab.log"))
        raise
    finally:
        with open(os.path.join(ARTIFACTS, f"{name}_console.log"), "w") as f:
            f.write("\n".join(console))
        context.close()


# Counts the widget messages the page sends to the kernel (Lab's WebSocket frames of type comm_msg).
COUNT_COMM_JS = """(() => {
  const send = WebSocket.prototype.send;
  window.__hsComm = 0;
  WebSocket.prototype.send = function (data) {
    const text = typeof data === 'string' ? data : new TextDecoder().decode(data);
    if (text.includes('"msg_type":"comm_msg"')) window.__hsComm += 1;
    return send.call(this, data);
  };
})()"""
# What the reader does in notebook 2's prompt box -> the widget messages it sends.  Enter sends
# the value once; leaving the box right after sends nothing (the value is unchanged); leaving it
# after an edit sends the edit once.  (ipywidgets' Text sent two on Enter: "submit", the value.)
PROMPT_BOX_STEPS = [
    ("type, Enter", "2, 3, 200, 5", 1, (2, 3, 200, 5)),
    ("leave the box", None, 0, (2, 3, 200, 5)),
    ("type, leave the box", "2, 3", 1, (2, 3)),
]


def test_prompt_box_sends_its_value_in_one_message(lab, browser):
    """Each step sends the kernel exactly its messages, and the digest shows the prompts typed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(COUNT_COMM_JS)
    page = context.new_page()
    dash_sel = ".hs-dashboard-startup"
    try:
        _open_and_run(page, lab, "02_startup_or_first_request", dash_sel, [])
        box = _control(page, dash_sel, "prompt_lens").locator("input").last
        for what, text, messages, lens in PROMPT_BOX_STEPS:
            _settle(page)
            before = page.evaluate("() => window.__hsComm")
            if text is not None:
                box.fill(text)
            if what.endswith("Enter"):
                box.press("Enter")
            else:
                _click_numbers(page, dash_sel)  # focus leaves the box
            page.wait_for_function("(a) => document.querySelector(a[0]).textContent.includes(a[1])",
                                   arg=[f"{dash_sel} {DIGEST}", _expected_nb2(2, lens)],
                                   timeout=UPDATE_S * 1000)
            _settle(page)
            assert page.evaluate("() => window.__hsComm") - before == messages, what
    finally:
        context.close()


def test_the_pasted_command_box_is_wide_and_says_when_it_is_applied(lab, browser):
    """Notebook 7 (issue 39, item 4): the command is a text area as wide as the dashboard's
    controls; an edit greys the verdict and says it is not applied; Enter applies it, the
    verdict redraws for the new command and is no longer grey; an empty box is never called
    applied (issue 60)."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    dash_sel = ".hs-dashboard-exposure"
    try:
        _open_and_run(page, lab, "07_is_my_server_exposed", dash_sel, [])
        box = _control(page, dash_sel, "command").locator("textarea")
        assert box.bounding_box()["width"] >= 500  # it was an 186-px line
        hint = page.locator(f"{dash_sel} .hs-prompt-hint")
        assert "applied" in hint.inner_text() and "not applied" not in hint.inner_text()
        box.fill(box.input_value() + " --max-num-seqs 7")
        assert "not applied yet" in hint.inner_text()
        assert "hs-stale" in (page.locator(dash_sel).get_attribute("class") or "")
        box.press("Enter")
        page.wait_for_function(
            "(s) => !document.querySelector(s).classList.contains('hs-stale')",
            arg=dash_sel, timeout=UPDATE_S * 1000)
        assert "S = 7" in page.locator(f"{dash_sel} .hs-numbers-box").inner_text()
        assert "not applied" not in hint.inner_text()
        # the box emptied: the hint says no command is applied, and the reset button, with
        # no command to reset to, changes nothing and says so in one line
        box.fill("")
        box.press("Enter")
        page.wait_for_function(
            "(s) => !document.querySelector(s).classList.contains('hs-stale')",
            arg=dash_sel, timeout=UPDATE_S * 1000)
        assert hint.inner_text().startswith("empty: no command applied")
        before = page.locator(f"{dash_sel} .hs-numbers-box").inner_text()
        page.locator(f"{dash_sel} .hs-reset").click()
        said = page.locator(f"{dash_sel} .hs-nothing-applied")
        said.wait_for(timeout=UPDATE_S * 1000)
        assert said.inner_text().startswith("Nothing applied: the command box is empty")
        assert page.locator(f"{dash_sel} .hs-numbers-box").inner_text() == before
        said.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(ARTIFACTS, "07_nothing_applied.png"))
    finally:
        context.close()


# Notebook 1, max_num_seqs moved with the keyboard once the page holds the screens ahead:
# (key, S after) -> the numbers are shown from the page's screens ahead, and are the model's.
AHEAD_MOVES = [("ArrowLeft", 1), ("ArrowRight", 2), ("ArrowRight", 3)]  # 2 -> 1 -> 2 -> 3


@pytest.mark.alone
def test_numbers_ahead_are_shown_before_the_kernel_answers(lab, browser):
    """A slider step shows the model's numbers from the page's screens ahead, then stays so."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    dash_sel = ".hs-dashboard-off_by_one"
    pane = f"{dash_sel} .hs-numbers-box"
    try:
        _open_and_run(page, lab, "01_off_by_one", dash_sel, [])
        handle = _control(page, dash_sel, "max_num_seqs").locator(".noUi-handle").first
        for key, s in AHEAD_MOVES:
            page.wait_for_function("(sel) => Number(document.querySelector(sel).dataset.ahead) > 0",
                                   arg=pane, timeout=UPDATE_S * 1000)
            _settle(page)
            handle.press(key)
            page.wait_for_function("(a) => document.querySelector(a[0]).textContent.includes(a[1])",
                                   arg=[f"{dash_sel} {DIGEST}", _expected_nb1(s)],
                                   timeout=UPDATE_S * 1000)
            assert page.locator(pane).get_attribute("data-source") == "ahead"
            _settle(page)  # the kernel's numbers have come: the same HTML, nothing redrawn
            assert page.locator(pane).get_attribute("data-source") == "ahead"
            assert _expected_nb1(s) in _digest(page, dash_sel)
    finally:
        context.close()


@pytest.mark.alone
def test_app_serves_the_dashboards_and_stops_on_ctrl_c(browser, latency, tmp_path):
    """``hisparse app``: max_num_seqs 2 -> 1 moves C, W and the crash marker; Ctrl-C exits 0."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    port = _free_port()
    cmd = [sys.executable, "-m", "hisparse_model", "app", "--port", str(port), "--no-browser"]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = _serve(cmd, tmp_path / "app.log", f"http://127.0.0.1:{port}/", ROOT, env)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    dash_sel = ".hs-dashboard-off_by_one"
    try:
        page.goto(f"http://127.0.0.1:{port}/", timeout=SERVER_START_S * 1000)
        page.locator(f"{dash_sel} {DIGEST}").first.wait_for(state="attached",
                                                                timeout=RUN_ALL_S * 1000)
        assert _digest(page, dash_sel) == _expected_nb1(2)
        cut = page.evaluate("() => [...document.querySelectorAll('.hs-app .lm-TabBar-tabLabel')]"
                            ".filter(e => e.scrollWidth > e.clientWidth + 1)"
                            ".map(e => e.textContent)")
        assert cut == [], f"tab titles cut: {cut}"  # tab 7's was "is my server expos"
        wide = _app_tabs_overflow(page)  # every tab at this width, as a learner opens them
        assert not wide, json.dumps(wide)
        page.screenshot(path=os.path.join(ARTIFACTS, "app_before.png"))
        _move(page, dash_sel, "app", "max_num_seqs", "slider", "ArrowLeft", latency,
              redraws=True)
        _check_main(page, "01_off_by_one", dash_sel)
        page.screenshot(path=os.path.join(ARTIFACTS, "app_after.png"))
        if os.environ.get("HISPARSE_DOCS_SHOTS") == "1":  # the README's picture of the app
            os.makedirs(DOCS_SHOTS, exist_ok=True)
            page.screenshot(path=os.path.join(DOCS_SHOTS, "app.png"))
    except Exception:
        page.screenshot(path=os.path.join(ARTIFACTS, "app_failure.png"), full_page=True)
        shutil.copy(tmp_path / "app.log", os.path.join(ARTIFACTS, "app.log"))
        raise
    finally:
        context.close()
        rc = proc.poll()
        if rc is None:
            os.kill(proc.pid, signal.SIGINT)  # Ctrl-C: the app stops Voila and its kernels
            try:
                rc = proc.wait(timeout=30)
            finally:
                _stop(proc)
    assert rc == 0
    assert "app: stopping" in (tmp_path / "app.log").read_text()


APP_PANELS = ".hs-app .lm-TabPanel-stackedPanel, .hs-app .widget-tab-contents > *"


def _app_tabs_overflow(page) -> list[dict]:
    """Open each of the app's tabs in turn: what is wider than its panel or scrolls sideways."""
    found = []
    assert page.locator(APP_PANELS).count(), "no tab panel found: the app's layout changed"
    tabs = page.locator(".hs-app .lm-TabBar-tab")
    for i in range(tabs.count()):
        tabs.nth(i).click()
        page.wait_for_timeout(300)  # the panel shown and laid out
        page.evaluate(DRAWN_JS)
        found += [{"tab": tabs.nth(i).text_content(), **w}
                  for w in page.evaluate(OVERFLOW_JS, APP_PANELS)]
    tabs.first.click()
    page.evaluate(DRAWN_JS)
    return found


# Notebook 5 with 64 requests (the widest dashboard a reader builds): moves timed like the
# others and written to latency.json under "05_your_traffic, 64 requests/<control>".
TRAFFIC_64_MOVES = [("max_num_seqs", "slider", "ArrowLeft"), ("max_num_seqs", "slider", "ArrowRight"),
                    ("arrival_spacing", "slider", "ArrowRight"), ("max_tokens", "box", 9),
                    ("prompt_lens", "text", "3, 2, 5")]


@pytest.mark.alone
def test_traffic_with_64_requests_is_timed_like_the_others(lab, browser, latency):
    """Notebook 5 at 64 requests: every move updates the numbers; its times join latency.json."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    dash_sel = ".hs-dashboard-traffic"
    key = "05_your_traffic, 64 requests"
    try:
        _open_and_run(page, lab, "05_your_traffic", dash_sel, [])
        box = _control(page, dash_sel, "requests").locator("input").last
        box.fill("64")
        box.press("Enter")
        page.wait_for_function("(sel) => document.querySelector(sel).textContent"
                               ".includes(' requests=64 ')", arg=f"{dash_sel} {DIGEST}",
                               timeout=UPDATE_S * 1000)
        _settle(page)
        for move in TRAFFIC_64_MOVES:
            _move(page, dash_sel, key, *move, latency)
        assert " requests=64 " in _digest(page, dash_sel)
    except Exception:
        page.screenshot(path=os.path.join(ARTIFACTS, "traffic64_failure.png"), full_page=True)
        raise
    finally:
        context.close()


def _inside(page, inner: str, outer: str) -> dict:
    """Rectangles of the first ``inner`` and of its closest ``outer`` ancestor, in px."""
    return page.evaluate(
        "([inner, outer]) => { const el = document.querySelector(inner);"
        " const box = el.closest(outer); const a = el.getBoundingClientRect(),"
        " b = box.getBoundingClientRect(); return {top: a.top, bottom: a.bottom, left: a.left,"
        " right: a.right, box_top: b.top, box_bottom: b.bottom, box_left: b.left,"
        " box_right: b.right}; }", [inner, outer])


def test_a_picked_recording_is_in_view_and_its_verdict_unclipped(lab, browser):
    """Notebook 4 at 1400 px, file browser open: the picked row scrolls into its box, the verdict shows."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    dash_sel = ".hs-dashboard-recordings"
    try:
        _open_and_run(page, lab, "04_model_vs_engine", dash_sel, [])
        page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
        assert page.locator(".jp-FileBrowser").first.is_visible()
        select = _control(page, dash_sel, "recording").locator("select").first
        last = select.locator("option").last.get_attribute("value")
        select.select_option(last)
        page.wait_for_function("(a) => (document.querySelector(a[0]) || {}).textContent"
                               "?.includes(a[1])", arg=[f"{dash_sel} tr.hs-selected", last],
                               timeout=UPDATE_S * 1000)
        page.locator(f"{dash_sel} .hs-scroll").first.scroll_into_view_if_needed()
        page.screenshot(path=os.path.join(ARTIFACTS, "04_picked_last_recording.png"))
        row = _inside(page, f"{dash_sel} tr.hs-selected", ".hs-scroll")
        assert row["box_top"] <= row["top"] and row["bottom"] <= row["box_bottom"], row
        verdict = _inside(page, f"{dash_sel} .hs-scroll th:nth-child(2)", ".jp-Notebook")
        assert verdict["right"] <= verdict["box_right"], verdict  # not cut by the notebook
        head = page.locator(f"{dash_sel} .hs-scroll th:nth-child(2)").first.inner_text()
        assert head.startswith("verdict")
    finally:
        context.close()


def test_notebook_2_tables_read_left_to_right(lab, browser):
    """Notebook 2's static reports: cells left-aligned (not Lab's right), the error not squeezed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    try:
        _open_and_run(page, lab, "02_startup_or_first_request", ".hs-dashboard-startup", [])
        cells = page.locator(".hs-static .hs-table td")
        aligns = set(cells.evaluate_all("els => els.map(e => getComputedStyle(e).textAlign)"))
        assert aligns == {"left"}, aligns
        error = page.locator(".hs-static tr.hs-crash code.hs-error-text").first
        # 16em (~210 px at 13 px): the message reads in three lines, and the table fits the
        # 968-px output area with the file browser open (test_a_learner_at_lab_width_sees_it_all)
        assert error.bounding_box()["width"] >= 200
    finally:
        context.close()


# --------------------------------------------------------------------------
# what a learner sees at Lab's width: every notebook, whatever notebooks exist
# --------------------------------------------------------------------------

NOTEBOOK_NAMES = sorted(os.path.splitext(n)[0] for n in os.listdir(os.path.join(ROOT, "notebooks"))
                        if n.endswith(".ipynb"))
LEARNER_VIEWPORT = {"width": 1400, "height": 900}  # the walkthrough's window
NOTEBOOK_OUTPUTS = ".jp-Notebook .jp-OutputArea-output"  # what OVERFLOW_JS measures in Lab
DOCS_SHOTS = os.path.join(ROOT, "docs", "screenshots")  # HISPARSE_DOCS_SHOTS=1 writes them
# Elements wider than their area (an output area in Lab, the shown tab in the app; hidden
# ones, 0 px wide, skipped), and boxes that scroll sideways, in px (1 px slack for
# sub-pixel layout).  Elements inside a box that scrolls vertically only are measured too.
OVERFLOW_JS = """(areas) => {
  const out = [];
  for (const area of document.querySelectorAll(areas)) {
    const a = area.getBoundingClientRect();
    if (a.width === 0) continue;
    for (const el of area.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.right > a.right + 1) {
        out.push({what: 'wider', tag: el.tagName, cls: String(el.className.baseVal ?? el.className),
                  right: Math.round(r.right), area_right: Math.round(a.right)});
      }
      const ox = getComputedStyle(el).overflowX;
      if ((ox === 'auto' || ox === 'scroll') && el.scrollWidth > el.clientWidth + 1) {
        out.push({what: 'scrolls', tag: el.tagName, cls: String(el.className),
                  scroll: el.scrollWidth, client: el.clientWidth});
      }
    }
  }
  return out.slice(0, 10);
}"""
CHART_LABELS_JS = """() => [...document.querySelectorAll('.jp-Notebook svg.hs-chart')].map(s => ({
  title: (s.querySelector('title') || {}).textContent || '',
  axis: s.querySelectorAll('.hs-axis-label').length,
  legend: s.querySelectorAll('.hs-legend').length}))"""
PICTURES_JS = """() => [...document.querySelectorAll('.jp-Notebook svg.hs-buffers')].map(s => ({
  c: s.dataset.c, w: s.dataset.w,
  digest: ((s.closest('.hisparse-dashboard') || document).querySelector('.hs-summary') || {})
          .textContent || ''}))"""


def _run_all_any(page, lab, name: str) -> None:
    """Open ``name`` with a fresh workspace, run every cell, wait until the kernel is idle."""
    _open(page, lab, name)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.locator(".hisparse-dashboard .hs-summary").first.wait_for(state="attached",
                                                                   timeout=RUN_ALL_S * 1000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=RUN_ALL_S * 1000, polling=250)


def _digest_c_w(digest: str):
    m = re.search(r"\bC=(\d+) W=(\d+)\b", digest)
    return None if m is None else m.groups()


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_a_learner_at_lab_width_sees_it_all(lab, browser, name):
    """1400×900, file browser open: nothing wider than the output area, no sideways scrolling;
    after a move the buffers picture's C and W are the dashboard's; every chart has an axis
    title and a legend."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    context = browser.new_context(viewport=LEARNER_VIEWPORT)
    page = context.new_page()
    try:
        _run_all_any(page, lab, name)
        page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
        assert page.locator(".jp-FileBrowser").first.is_visible()
        # a move: the first slider one step (right unless at its end), else the first
        # dropdown's last choice
        dash = page.locator(".hisparse-dashboard:has(.noUi-handle), "
                            ".hisparse-dashboard:has(select)").first
        if dash.count():
            dash.scroll_into_view_if_needed()
            which = next(c for c in dash.get_attribute("class").split()
                         if c.startswith("hs-dashboard-"))
            summary_sel = f".{which} .hs-summary"  # the numbers' HTML is replaced on a move
            before = page.locator(summary_sel).first.text_content()
            if dash.locator(".noUi-handle").count():
                handle = dash.locator(".noUi-handle").first
                handle.focus()  # one step right, or left from the slider's end (notebook 7's
                # max_num_seqs shows the pasted command's 1024, its slider's top)
                at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute(
                    "aria-valuemax")
                handle.press("ArrowLeft" if at_end else "ArrowRight")
            else:
                select = dash.locator("select").first
                select.select_option(select.locator("option").last.get_attribute("value"))
            page.wait_for_function("([sel, was]) => { const el = document.querySelector(sel);"
                                   " return !!el && el.textContent !== was; }",
                                   arg=[summary_sel, before], timeout=UPDATE_S * 1000)
        _settle(page)
        page.evaluate(DRAWN_JS)
        wide = page.evaluate(OVERFLOW_JS, NOTEBOOK_OUTPUTS)
        assert not wide, json.dumps(wide)
        pictures = page.evaluate(PICTURES_JS)
        assert pictures, "no buffers picture"
        for p in pictures:
            want = _digest_c_w(p["digest"])
            if want is not None:  # dashboards whose digest names C and W (1, 2, 5, 6)
                assert (p["c"], p["w"]) == want, p
        for chart in page.evaluate(CHART_LABELS_JS):
            assert chart["title"] and chart["axis"] and chart["legend"], chart
        if dash.count():
            dash.scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(ARTIFACTS, f"{name}_lab_width.png"))
            if os.environ.get("HISPARSE_DOCS_SHOTS") == "1":
                os.makedirs(DOCS_SHOTS, exist_ok=True)
                dash.locator(".hs-numbers-box").first.screenshot(
                    path=os.path.join(DOCS_SHOTS, f"{name}.png"))
    except Exception:
        page.screenshot(path=os.path.join(ARTIFACTS, f"{name}_lab_width_failure.png"))
        raise
    finally:
        context.close()


def _kernels_under(pid: int) -> int:
    """ipykernel processes descended from ``pid`` (Voila starts each in a session of its own)."""
    parent, cmd = {}, {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd[int(p)] = f.read().decode(errors="replace")
        except OSError:
            continue

    def under(p: int) -> bool:
        while p > 1:
            p = parent.get(p, 0)
            if p == pid:
                return True
        return False
    return sum(1 for p, c in cmd.items() if "ipykernel" in c and under(p))


APP_LOADS = 3
# the app's --cull-idle here: a closed page's kernel goes within ~2 x this.  Voila runs the
# notebook before it sends the page, and a kernel no page has connected to yet counts as idle:
# a browser slower than this to connect would find its kernel culled (with 3 s, full runs on
# a busy 2-core machine timed out twice waiting for the first tab's widgets), so 10 s
CULL_TEST_S = 10


def _kernels_drop_to(pid: int, most: int, wait_s: float) -> int:
    """Wait until at most ``most`` kernels run under ``pid`` (or ``wait_s`` passed); the count."""
    deadline = time.monotonic() + wait_s
    while _kernels_under(pid) > most and time.monotonic() < deadline:
        time.sleep(0.5)
    return _kernels_under(pid)


def test_app_page_loads_leave_no_kernel_once_closed(browser, tmp_path):
    """Three pages of the app open at once: one kernel each while its page is open (past the
    cull time), one fewer as each closes (Voila's close beacon, or the culler for a page that
    went without it), none once all are closed."""
    port = _free_port()
    cmd = [sys.executable, "-m", "hisparse_model", "app", "--port", str(port), "--no-browser",
           "--cull-idle", str(CULL_TEST_S)]
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    proc = _serve(cmd, tmp_path / "app.log", f"http://127.0.0.1:{port}/", ROOT, env)
    wait_s = 6 * CULL_TEST_S + 30  # the culler looks every CULL_TEST_S s; a busy machine
    open_count, closed_counts = None, []
    try:
        # _serve's own GET of the page started a kernel that no page holds: culled first
        assert _kernels_drop_to(proc.pid, 0, wait_s) == 0
        pages = []
        for _ in range(APP_LOADS):
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            page.goto(f"http://127.0.0.1:{port}/", timeout=SERVER_START_S * 1000)
            page.locator(".hs-buffers").first.wait_for(state="attached", timeout=RUN_ALL_S * 1000)
            pages.append((context, page))
        pages[-1][1].wait_for_timeout(2 * CULL_TEST_S * 1000)  # past the cull time: an open
        open_count = _kernels_under(proc.pid)  # page's kernel is kept
        for i, (context, page) in enumerate(pages):
            page.close(run_before_unload=i % 2 == 0)  # with, and without, the close beacon
            context.close()
            closed_counts.append(_kernels_drop_to(proc.pid, APP_LOADS - 1 - i, wait_s))
    finally:
        _stop(proc)
    assert open_count == APP_LOADS, open_count
    assert closed_counts == list(range(APP_LOADS - 1, -1, -1)), (closed_counts,
                                              (tmp_path / "app.log").read_text()[-2000:])
