"""Every function a notebook calls from ``hisparse_model.views`` has a direct test here, in the
parallel tier: the coverage gate never rests on a notebook kernel writing its data.

Invariant: each name a notebook imports from the views is in :data:`DIRECT` (checked by
reading the notebooks' imports), and each row's test calls it in this process with the
notebook's own arguments and checks what the reader is shown.
"""

from __future__ import annotations

import ast
import glob
import json
import os
import re

import pytest

from hisparse_model import Knobs, predict
from hisparse_model.answers.simulate import simulate
from hisparse_model.answers.traffic_risk import load_traffic
from hisparse_model.views import engine_runs, traffic
from hisparse_model.views.engine_runs import live_output_path
from hisparse_model.views.first_request import static_report
from hisparse_model.views.risk_chart import example_traffic_path, risk_view
from hisparse_model.views.risk_panel import RiskPanel
from hisparse_model.views.traffic import TrafficDashboard, run_live, schedule_report
from hisparse_model.schedule.workload import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name a notebook imports from hisparse_model.views -> the test module that calls it directly
DIRECT = {
    "off_by_one_dashboard": "test_widgets.py", "where_in_vllm": "test_widgets.py",
    "try_this_html": "test_exercises.py", "startup_dashboard": "test_widgets.py",
    "assumption_lists_html": "test_exercises.py",
    "versions_dashboard": "test_widgets.py", "recordings_dashboard": "test_widgets.py",
    "live_status": "test_buffers_view.py", "TrafficDashboard": "test_traffic_view.py",
    "WorkloadRecordingsDashboard": "test_traffic_view.py",
    "two_gpus_dashboard": "test_two_gpus.py", "exposure_dashboard": "test_exposure_view.py",
    "SERVE_DEFAULT": "test_exposure_view.py",
    # this module
    "static_report": "test_notebook_calls.py", "schedule_report": "test_notebook_calls.py",
    "run_live": "test_notebook_calls.py", "live_output_path": "test_notebook_calls.py",
    "risk_view": "test_notebook_calls.py", "example_traffic_path": "test_notebook_calls.py",
    "RiskPanel": "test_notebook_calls.py",
}


def _notebook_view_imports() -> set[str]:
    names = set()
    for path in glob.glob(os.path.join(ROOT, "notebooks", "*.py")):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "hisparse_model.views"):
                names |= {alias.name for alias in node.names}
    return names


def test_every_view_a_notebook_calls_has_a_direct_test():
    """Each name the notebooks import from the views is a row of DIRECT, and the module the row
    names calls it (so removing the test, or a new notebook import without one, fails here)."""
    imported = _notebook_view_imports()
    assert len(imported) >= 15  # the seven notebooks' imports
    missing = sorted(imported - set(DIRECT))
    assert not missing, f"a notebook calls views with no direct test: {missing}"
    for name in sorted(imported):
        with open(os.path.join(ROOT, "tests", DIRECT[name])) as f:
            assert re.search(rf"\b{name}\b", f.read()), f"{DIRECT[name]} never names {name}"
    # example_traffic_path is what risk_view reads by default (notebook 7): named here too
    assert "example_traffic_path" in DIRECT


# notebook 2's two worked examples: (S, prompts) -> the error the reader must see, or none
# S = 1: B = 1 * 320 = 320, q = 1, C = min(320, 1) = 1, W = 2: the size-2 capture routes 2
# S = 2: C = 2, W = 3: start-up survives; the first prompt of 3 tokens routes 3 = W
STATIC_ROWS = [
    (1, [2, 3, 200], "stop=2, capacity=1"),
    (2, [2, 3, 200], "stop=3, capacity=2"),
]


@pytest.mark.parametrize("s, prompts, error", STATIC_ROWS)
def test_static_report_shows_the_crash_of_notebook_2s_examples(s, prompts, error):
    """static_report (notebook 2) shows the start-up or first-request crash the prose names."""
    html = static_report(predict(Knobs(max_num_seqs=s), prompts))
    assert html.count("<style>") == 1  # styled on its own, outside a dashboard
    assert error in html


def test_schedule_report_shows_notebook_5s_worked_example():
    """Notebook 5: S = 4 (C = min(1280, 4) = 4, W = 5), prompts 3 and 2 arriving together
    are one step of 3 + 2 = 5 = W tokens: the crash, then every step of the schedule."""
    sched = simulate(Knobs(max_num_seqs=4), synthetic(2, [3, 2], spacing=0))
    html = schedule_report(sched)
    assert "stop=5, capacity=4" in html
    assert html.count("<tr") >= 2  # the steps table: a header and the crash step


def test_live_output_path_is_the_tests_folder_or_the_env(monkeypatch, tmp_path):
    """Notebook 4's live cell writes to test-artifacts/, or to $HISPARSE_LIVE_OUT_DIR."""
    monkeypatch.delenv(engine_runs.LIVE_OUT_ENV, raising=False)
    assert live_output_path() == os.path.join(ROOT, "test-artifacts", "live-notebook.json")
    monkeypatch.setenv(engine_runs.LIVE_OUT_ENV, str(tmp_path))
    assert live_output_path("x.json") == str(tmp_path / "x.json")


def test_run_live_skips_without_an_engine_and_reports_a_run_that_wrote_nothing(
        monkeypatch, tmp_path, capsys):
    """Notebook 5's live cell: no engine -> None and a calm note; an engine whose run leaves
    no recording -> one error naming the exit status (never an old recording)."""
    monkeypatch.setenv(engine_runs.LIVE_OUT_ENV, str(tmp_path))
    dash = TrafficDashboard()
    monkeypatch.setattr(traffic, "live_status", lambda skip: None)
    assert run_live(dash) is None
    stale = tmp_path / "live-traffic.json"
    stale.write_text("{}")  # an earlier run's recording must not be taken for this one's
    monkeypatch.setattr(traffic, "live_status", lambda skip: "0.31.0")
    monkeypatch.setattr(traffic, "live_command", lambda knobs, work, out: ["false"])
    with pytest.raises(RuntimeError, match=r"live run left no recording \(exit 1\)"):
        run_live(dash)
    assert not stale.exists()
    with open(tmp_path / "live-traffic-workload.json") as f:  # the dashboard's workload
        assert json.load(f) == dash.workload().as_json()


def test_example_traffic_is_bundled_and_loads():
    """The bundled example: 10 requests/s, prompts 1 to 16,000 tokens, 8 tokens out."""
    path = example_traffic_path()
    assert os.path.isfile(path) and path.endswith(os.path.join("data", "traffic-example.json"))
    t = load_traffic(path)
    assert t.rate_per_s == 10
    assert "1-256" in t.prompt_len.describe() and "16000" in t.prompt_len.describe()


def test_risk_view_answers_notebook_7s_server_under_the_example():
    """risk_view (notebook 7): serve's default 0.31.0 server under the example traffic, 2
    seeds of 2 minutes: the odds in words over the chart of those 2 seeds."""
    from hisparse_model.views.exposure import SERVE_DEFAULT

    html = risk_view(SERVE_DEFAULT, minutes=2, seeds=2)
    odds = re.search(r"<b>(\d) of 2 seeds crashed within 2 minutes</b>", html)
    assert odds, html[:400]
    assert f"data-crashed='{odds.group(1)}'" in html and "data-seeds='2'" in html
    assert "S=1024" in html  # serve's default max_num_seqs, read from the command


def test_the_risk_panel_follows_the_server_the_dashboard_shows():
    """RiskPanel (notebook 7): estimated for the pasted command's server (S 1024); a new
    command greys it and says so, without estimating (seconds); the button estimates the new
    server (S 64); a refused command takes the last chart away (it would read as the answer)."""
    from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard

    dash = exposure_dashboard(SERVE_DEFAULT)
    panel = RiskPanel(dash, minutes=1, seeds=2, step_ms=25)
    assert "S=1024" in panel.chart.value and "max_num_seqs 1024" in panel.chart.value
    assert "hs-stale-risk" not in panel.chart._dom_classes and panel.note.value == ""
    dash.controls["command"].value = SERVE_DEFAULT + " --max-num-seqs 64"
    assert "S=1024" in panel.chart.value  # not re-estimated on its own
    assert "hs-stale-risk" in panel.chart._dom_classes and "changed" in panel.note.value
    panel.button.click()
    assert "S=64" in panel.chart.value and "the pasted vllm serve command" in panel.chart.value
    assert "hs-stale-risk" not in panel.chart._dom_classes and panel.note.value == ""
    dash.controls["max_num_seqs"].value = 32  # a moved knob: another server
    assert "hs-stale-risk" in panel.chart._dom_classes
    panel.button.click()
    assert "S=32" in panel.chart.value and "max_num_seqs = 32 from the knobs" in panel.chart.value
    dash.controls["command"].value = "vllm serve x --max-num-seqs"  # refused: no server
    assert "hs-stale-risk" in panel.chart._dom_classes
    panel.button.click()
    assert "nothing to estimate" in panel.note.value and panel.chart.value == ""


def test_a_host_pool_refusal_shows_no_chart_and_defines_its_words(tmp_path):
    """A server whose 16 GiB host pool may run short under the traffic (DeepSeek-V3.2's
    blocks of 4,497,408 bytes: 3,819 of them, enough to start, 2,562; prompts of 60,000 to
    150,000 tokens, 4 a second, can hold 4,101 by engine step 104): the refusal alone, the
    words it uses defined under it (host block, null block, copy-on-write tail), and no chart
    of the server estimated before it."""
    from hisparse_model.text.glossary import TERMS
    from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard

    heavy = tmp_path / "heavy.json"
    heavy.write_text(json.dumps({"rate_per_s": 4, "max_tokens": 8, "prompt_len": [
        {"min": 60000, "max": 150000, "weight": 1}]}))
    dash = exposure_dashboard(SERVE_DEFAULT)
    panel = RiskPanel(dash, traffic_path=str(heavy), minutes=1, seeds=2, step_ms=25)
    assert "S=1024" in panel.chart.value
    dash.controls["command"].value = SERVE_DEFAULT.replace('"host_pool_gib": 2048', '"host_pool_gib": 16')
    panel.button.click()
    assert "may run short" in panel.note.value and panel.chart.value == ""
    assert "by engine step 104 its requests can hold 4101 blocks" in panel.note.value
    for term in TERMS:
        assert f"<b>{term}</b>" in panel.note.value, term


def test_without_a_step_time_the_panel_shows_the_band():
    """No step time measured: one line per step time (6, 12, 25 ms), each that estimate's
    share of seeds crashed, as the traffic risk model gives it at that step time."""
    from hisparse_model.answers.traffic_risk import estimate
    from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard

    dash = exposure_dashboard(SERVE_DEFAULT)
    panel = RiskPanel(dash, minutes=2, seeds=2)
    assert "data-step-ms='6,12,25'" in panel.chart.value
    knobs, _ = dash.deployment()
    shares = [estimate(knobs, load_traffic(example_traffic_path()), 2, seeds=2, step_ms=ms)
              .share for ms in (6, 12, 25)]
    assert f"data-shares='{','.join(f'{x:.4f}' for x in shares)}'" in panel.chart.value
    assert panel.chart.value.count("class='hs-band-line'") == 3


def test_a_kernel_killed_at_once_keeps_its_coverage_data():
    """tests/kernels.py: the kernel saves its coverage data before the shutdown starts, so a
    kernel killed with no grace period (``shutdown_kernel="immediate"``) still leaves it
    (checked where the kernel is measured, under ``coverage run``; else the save is a no-op
    that must still answer)."""
    import coverage
    import nbformat.v4 as v4

    import kernels

    nb = v4.new_notebook(cells=[v4.new_code_cell("import os; print(os.getpid())")])
    client = kernels.FlushingClient(nb, timeout=kernels.CELL_TIMEOUT, kernel_name="python3",
                                    shutdown_kernel="immediate",
                                    resources={"metadata": {"path": ROOT}})
    client.execute()
    assert client.saved
    pid = nb.cells[0].outputs[0]["text"].strip()
    cov = coverage.Coverage.current()
    if cov is not None:  # measured: the kernel's own data file is on disk
        data = cov.config.data_file
        written = glob.glob(f"{data}.*.pid{pid}.*")
        assert written, f"no coverage data from kernel {pid} next to {data}"


def test_the_band_lines_stay_apart_where_they_coincide():
    """Notebook 7's band: each step time's line has its own width and dash, widest first in
    drawing order, so a line the same seeds make at another step time is not hidden; the y
    axis's title sits above the 100 % line, not on it."""
    import re

    from hisparse_model.views import risk_chart
    from hisparse_model.views.exposure import SERVE_DEFAULT, exposure_dashboard

    panel = RiskPanel(exposure_dashboard(SERVE_DEFAULT), minutes=2, seeds=2)
    lines = re.findall(r"<path [^>]*stroke-width='([\d.]+)' stroke-dasharray='([^']*)' "
                       r"class='hs-band-line'", panel.chart.value)
    assert len(lines) == 3 and len(set(lines)) == 3
    widths = [float(w) for w, _ in lines]
    assert widths == sorted(widths, reverse=True)  # the widest drawn first, under the others
    label_y = float(re.search(r"y='([\d.]+)'[^>]*class='hs-axis-label'>y: share",
                              panel.chart.value).group(1))
    assert label_y <= risk_chart.TOP - 12  # the 100 % line is at y = TOP
