"""Notebook 6 and its dashboard: a DP = 2 workload where the idle rank dies on its dummy batch."""

from __future__ import annotations

import os
import re

import kernels
import nbformat
import pytest

from hisparse_model.text import chart_data as cd
from hisparse_model.views.two_gpus import dp_strip, two_gpus_dashboard
from hisparse_model import Knobs

NOTEBOOK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "notebooks", "06_two_gpus.ipynb")


@pytest.mark.parametrize("version, s, crash", [
    # S = 3: step 2 is 1 + 3 = 4 = C + 1 tokens; 4 is a capture size: the dummy is 4 tokens
    ("0.31.0", 3, "step 2 rank 1 dummy batch"),
    # S = 4: 1 + 4 = 5 pads to the capture size 8 > W = 5: all-resident
    ("0.31.0", 4, "none"),
    # S = 7: 1 + 7 = 8 = C + 1 is a capture size again
    ("0.31.0", 7, "step 2 rank 1 dummy batch"),
    ("0.32.0", 3, "none"),  # routes on C = 3: 4 tokens go all-resident
])
def test_dashboard_moves(version, s, crash):
    """Moving the version and max_num_seqs controls changes the crash the dashboard reports."""
    dash = two_gpus_dashboard()
    dash.controls["max_num_seqs"].value = s
    dash.controls["vllm_version"].value = version
    assert dash.error is None
    assert dash.labels["crash"] == crash and dash.labels["C"] == str(s)
    sched = dash.last_prediction
    assert [len(st.ranks) for st in sched.steps] == [2] * len(sched.steps)
    if crash != "none":
        assert "what avoids it" in dash.numbers.value  # the advice is shown with the numbers
        assert sched.crash["scheduled"] is False
        # rank 0's two requests (2 tokens from step 0, S tokens from step 2) were both still
        # running in step 2; rank 1's (arrival 30) was never submitted
        assert "lost at the crash: 2 requests: r1 r2 (still running)" in dash.numbers.value


@pytest.mark.parametrize("joining, startup, crashing", [
    # joining 0 follows S: step 2 holds 1 + S = C + 1 tokens, and the idle rank's dummy pads to
    # the capture size of rank 0's count: a crash where S + 1 is a capture size (4, 8, 16:
    # S = 3, 7, 15), except S = 1, whose start-up capture of 2 = W tokens already dies
    (0, [1], [3, 7, 15]),
    # a fixed 7-token prompt: 1 + 7 = 8 = C + 1 only at S = 7
    (7, [1], [7]),
    # a fixed 3-token prompt: 1 + 3 = 4 = C + 1 only at S = 3
    (3, [1], [3]),
])
def test_the_strip_over_max_num_seqs(joining, startup, crashing):
    """Every max_num_seqs 1 ... 16 at once (notebook 6's strip): the scenario crashes exactly
    where step 2's C + 1 tokens pad to a capture size; a fixed joining prompt crashes only the
    S it is C + 1 for."""
    strip = dp_strip(Knobs(vllm_version="0.31.0", max_num_seqs=4, data_parallel_size=2),
                     joining, max_seqs=16)
    got = dict(zip(strip["max_num_seqs"], strip["outcome"]))
    assert [s for s, o in got.items() if o == cd.STARTUP_CRASH] == startup
    assert [s for s, o in got.items() if o == cd.RUNTIME_CRASH] == crashing
    assert all(o == cd.SAFE for s, o in got.items() if s not in startup + crashing)


def test_a_fixed_joining_prompt_keeps_the_traffic_when_max_num_seqs_moves():
    """With joining_prompt set, moving max_num_seqs changes the engine, not the workload;
    with 0 the joining prompt follows max_num_seqs, and the page says so."""
    dash = two_gpus_dashboard(max_num_seqs=3, joining_prompt=7)
    before = dash.state["workload"]
    dash.controls["max_num_seqs"].value = 7
    assert dash.state["workload"] == before and before[1]["prompt_len"] == 7
    assert dash.labels["crash"] == "step 2 rank 1 dummy batch"
    assert "the joining prompt has 7 tokens" in dash.numbers.value
    dash.controls["joining_prompt"].value = 0
    dash.controls["max_num_seqs"].value = 4
    assert dash.state["workload"][1]["prompt_len"] == 4
    assert "the joining prompt follows max_num_seqs" in dash.numbers.value
    assert "runtime_crash=3,7,15,23,31,39,47,55,63" in dash.labels["strip"]


def test_notebook_runs_headless():
    """Notebook 6 executes and shows both ranks' timelines, the crash on rank 1 and the advice."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    kernels.execute(nb, NOTEBOOK, kernels.CELL_TIMEOUT)
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    shown = " ".join(m.get("state", {}).get("value", "") for m in state.values()
                     if isinstance(m.get("state", {}).get("value"), str))
    assert "The run dies at step 2 on DP rank 1 (a dummy batch" in shown
    assert "rank 0" in shown and "rank 1" in shown and "what avoids it" in shown
    assert "max_num_seqs = 4" in shown  # the advice: S = 4 pads 1 + 4 = 5 to 8 > W


def test_a_start_up_crash_is_said_as_such():
    """S = 1 (C = 1): the PIECEWISE capture of 2 = W tokens kills every rank at start-up; the
    dashboard says so (no step, no rank) and lists data parallel's assumptions."""
    dash = two_gpus_dashboard()
    dash.controls["max_num_seqs"].value = 1
    assert dash.labels["crash"] == "start-up"
    assert "The run dies at start-up (every rank)." in dash.numbers.value
    assert "Engine core initialization failed" in dash.numbers.value  # the caller's text
    assumptions = dash.widget.children[-1].value
    assert "simulate -dp N" in assumptions and "predict: the prompts" not in assumptions


# (version, S, the verdict above for all traffic, the strip's cell at S, its caption's green
# part): the strip replays only notebook 6's scenario, so its green says this scenario does
# not crash, whatever the verdict
STRIP_WORD_ROWS = [
    # S 4: C = 4, a lone 5-token prompt kills the server (EXPOSED), yet the scenario's step 2
    # (1 + 4 = 5 tokens) pads the idle rank's dummy to the capture size 8 > W = 5: it survives;
    # green wherever 1 + S is no capture size (4, 8, 16, 24, ...: S 3, 7, 15, 23, ... crash)
    ("0.31.0", 4, "exposed", cd.SAFE, "this scenario does not crash: 2,4-6,8-14,16-22,"),
    # S 3: 1 + 3 = 4 = W is a capture size: the idle rank's dummy batch crashes
    ("0.31.0", 3, "exposed", cd.RUNTIME_CRASH, "this scenario does not crash: 2,4-6,8-14,"),
    # 0.32.0 routes on C: nothing can kill it, and the scenario survives at every S
    ("0.32.0", 3, "not_exposed", cd.SAFE, "this scenario does not crash: 1-64"),
]


@pytest.mark.parametrize("version, s, verdict, cell, green", STRIP_WORD_ROWS)
def test_the_strip_speaks_only_of_its_scenario(version, s, verdict, cell, green):
    """The strip's legend and caption say what the scenario does at each max_num_seqs, never a
    claim about all traffic that the verdict above could contradict."""
    dash = two_gpus_dashboard(max_num_seqs=s, vllm_version=version)
    assert f"data-verdict='{verdict}'" in dash.numbers.value
    knobs = Knobs(vllm_version=version, max_num_seqs=s, data_parallel_size=2)
    assert dp_strip(knobs)["outcome"][s - 1] == cell
    assert "no traffic crashes it" not in dash.numbers.value
    assert "safe:" not in dash.numbers.value
    assert green in re.search(r"class='hs-sweep'>([^<]*)", dash.numbers.value)[1]
    assert "class='hs-legend'>this scenario does not crash<" in dash.numbers.value


# (version, S, the ⋯ rows of the step table): rank 0's two requests (2 tokens at step 0, S at
# step 2, 8 output tokens each) are done after step 9; rank 1's arrives at step 30, so steps
# 10 ... 29 (30 - 9 - 1 = 20) have no work on either rank and are skipped
GAP_ROWS = [
    ("0.31.0", 4, ["20 steps with no work skipped"]),
    ("0.32.0", 3, ["20 steps with no work skipped"]),
    ("0.31.0", 3, []),  # dies at step 2: steps 0, 1, 2, no jump
]


@pytest.mark.parametrize("version, s, gaps", GAP_ROWS)
def test_the_step_table_marks_skipped_steps_as_the_chart_does(version, s, gaps):
    """Where the step numbers jump, the table has a ⋯ row counting the steps skipped (the
    chart's ⋯ column), and its footnote is one point a line, each a sentence."""
    dash = two_gpus_dashboard(max_num_seqs=s, vllm_version=version)
    assert re.findall(r"<tr class='hs-gap-row'><td>⋯</td><td colspan='3'><i>([^<]*)</i>",
                      dash.numbers.value) == gaps
    notes = re.search(r"<ul class='hs-note hs-cell-legend'>(.*?)</ul>", dash.numbers.value)[1]
    items = re.findall(r"<li>(.*?)</li>", notes)
    assert len(items) == 5 and all(x.endswith(".") for x in items)
    assert items[0].endswith("steps from 0, as arrival_step.")
    assert "as arrival_step In a cell" not in dash.numbers.value
