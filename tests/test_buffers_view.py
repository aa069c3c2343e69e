"""The buffers' picture: the knobs' C and W, the step's n tokens, the token with no swap row.

Expected values are arithmetic from the knobs (C = min(B, S·q), W = C + 1) or the model's
API (``predict``, ``simulate``), never the picture code under test.
"""

from __future__ import annotations

import html
import os
import re
import xml.etree.ElementTree as ET

import pytest

from hisparse_model import Knobs, predict, simulate
from hisparse_model.views.buffers import (buffer_picture, dp_pick, pick_step, picture_for_dp_step,
                                          picture_for_prediction, picture_for_step, shown_slots)
from hisparse_model.views.off_by_one import off_by_one_dashboard
from hisparse_model.views.page import app_page
from hisparse_model.views.two_gpus import two_gpus_dashboard, two_rank_workload
from hisparse_model.schedule.workload import synthetic

SVG_NS = "{http://www.w3.org/2000/svg}"


def _pictures(markup: str) -> list[ET.Element]:
    found = re.findall(r"<svg[^>]*class='hs-buffers'.*?</svg>", markup, flags=re.DOTALL)
    return [ET.fromstring(s) for s in found]


def _count(svg: ET.Element, cls: str) -> int:
    return sum(1 for e in svg.iter() if cls in (e.get("class") or "").split())


@pytest.mark.parametrize(("c", "w", "n", "expect"), [
    (2, 3, 3, [1, 2, 3]),  # everything fits: all drawn
    (40, 41, 41, [1, 2, 3, None, 39, 40, 41]),  # first three, C - 1 ... W
    (40, 41, 5, [1, 2, 3, 4, 5, None, 39, 40, 41]),  # n below C: its last two, then C - 1 ... W
    (24, 25, 25, [1, 2, 3, None, 23, 24, 25]),  # 25 slots > 24: elided
    (23, 24, 24, list(range(1, 25))),  # 24 slots: every one
])
def test_the_slots_drawn_keep_c_w_and_n(c, w, n, expect):
    """Past 24 slots only the first three and those around C, W and n are drawn, "…" between."""
    assert shown_slots(c, w, n) == expect


@pytest.mark.parametrize(("seqs", "spec", "c"), [
    (2, 0, 2),  # q = 1: C = min(B, 2·1) = 2
    (2, 2, 6),  # q = 3: C = min(B, 2·3) = 6
    (5, 0, 5),  # C = 5
    (40, 0, 40),  # C = 40: slots elided
])
def test_notebook_1s_picture_follows_the_knobs(seqs, spec, c):
    """Notebook 1: the picture's C and W are the knobs', n = W tokens, one token has no row."""
    dash = off_by_one_dashboard(max_num_seqs=seqs, num_speculative_tokens=spec)
    [svg] = _pictures(dash.numbers.value)
    assert (svg.get("data-c"), svg.get("data-w"), svg.get("data-n")) == (str(c), str(c + 1),
                                                                            str(c + 1))
    assert svg.get("data-route") == "crash"
    assert _count(svg, "hs-token-nowhere") == 1 and _count(svg, "hs-no-row") == 1
    assert dash.labels["C"] == str(c)


def test_no_row_is_missing_when_no_step_holds_w_tokens():
    """S = B = 4: C = 4 = B, a 4-token batch (n = B) fits swap_in; nothing drawn red."""
    dash = off_by_one_dashboard(max_num_seqs=4, num_speculative_tokens=0,
                                max_num_batched_tokens=4)
    [svg] = _pictures(dash.numbers.value)
    assert (svg.get("data-c"), svg.get("data-n"), svg.get("data-route")) == ("4", "4", "swap_in")
    assert _count(svg, "hs-no-row") == 0
    assert "all-resident path" not in dash.numbers.value.split("hs-fix-note")[1][:200]


def test_the_fixed_rule_sends_w_tokens_all_resident():
    """0.32.0 checks n ≤ C: the W-token batch takes the all-resident path, no buffer filled."""
    pred = predict(Knobs(max_num_seqs=2, vllm_version="0.32.0"))
    svg = ET.fromstring(picture_for_prediction(pred, startup=False))
    assert svg.get("data-route") == "all_resident" and _count(svg, "hs-no-row") == 0
    texts = " ".join(t.text or "" for t in svg.iter(SVG_NS + "text"))
    assert "0.32.0 checks n ≤ C" in texts


def test_every_route_has_its_sentence():
    """Each route (and none) says what happens in words; the crash names stop and capacity."""
    for route, words in [("crash", "stop=3, capacity=2"), ("swap_in", "every token has"),
                         ("all_resident", "no swap row is used"), (None, "No token")]:
        svg = buffer_picture(2, 3, 3 if route == "crash" else 2, route, title="t",
                             labels=["r1", "r1", "r2"], note="a note")
        assert words in svg and "a note" in svg


def test_notebook_5s_picture_is_the_crash_step_or_a_chosen_one():
    """Two 3- and 2-token prompts, S = 4: step 0 packs 5 = W tokens and crashes; C = 4."""
    knobs = Knobs(max_num_seqs=4, vllm_version="0.31.0")
    sched = simulate(knobs, synthetic(2, [3, 2], 0, 8))
    assert sched.crash["step"] == 0 and pick_step(sched) == 0
    svg = ET.fromstring(picture_for_step(sched))
    assert (svg.get("data-c"), svg.get("data-n"), svg.get("data-route")) == ("4", "5", "crash")
    # no crash: the busiest step (most routed tokens, the first of them) unless one is chosen
    safe = simulate(Knobs(max_num_seqs=8, vllm_version="0.31.0"), synthetic(2, [3, 2], 0, 8))
    assert safe.crash is None
    busiest = max(s.routed_tokens for s in safe.steps)
    first = next(s.step for s in safe.steps if s.routed_tokens == busiest)
    assert pick_step(safe) == first and pick_step(safe, safe.steps[-1].step) == safe.steps[-1].step
    assert pick_step(safe, 10**6) == first  # a step it never ran: the default
    last = ET.fromstring(picture_for_step(safe, safe.steps[-1].step))
    assert last.get("data-n") == str(safe.steps[-1].routed_tokens)


def test_a_start_up_death_draws_the_start_up_batch():
    """max_num_seqs = 1 (C = 1, W = 2): the 2-token PIECEWISE capture crashes, and is drawn."""
    knobs = Knobs(max_num_seqs=1, vllm_version="0.31.0")
    sched = simulate(knobs, synthetic(1, [2], 0, 2))
    crash = predict(knobs).startup_crash_batch
    assert not sched.steps and crash.routed == 2  # n = W = C + 1 = 2
    svg = ET.fromstring(picture_for_step(sched))
    assert (svg.get("data-c"), svg.get("data-n"), svg.get("data-route")) == ("1", "2", "crash")
    assert crash.label in (svg.get("aria-label") or "")


def test_notebook_6s_picture_is_the_crashing_ranks_forward():
    """S = 7 under 0.31.0: the model's crash (step, rank) is the forward drawn, C = 7."""
    knobs = Knobs(max_num_seqs=7, vllm_version="0.31.0", data_parallel_size=2)
    sched = simulate(knobs, two_rank_workload(7))
    crash = sched.crash
    assert crash is not None
    assert dp_pick(sched) == (crash["step"], crash["rank"] or 0)
    svg = ET.fromstring(picture_for_dp_step(sched, *dp_pick(sched)))
    assert svg.get("data-c") == "7" and svg.get("data-route") == "crash"
    dash = two_gpus_dashboard(max_num_seqs=7)
    [shown] = _pictures(dash.numbers.value)
    assert shown.get("data-c") == dash.labels["C"] == "7"
    ok = two_gpus_dashboard(max_num_seqs=2)
    [quiet] = _pictures(ok.numbers.value)
    assert quiet.get("data-c") == ok.labels["C"]


def test_every_app_tab_draws_its_own_knobs():
    """The app: each tab's picture has that tab's C (tab 1 at S = 5 and tab 6 at S = 7)."""
    page, dashboards = app_page()
    tabs = list(dashboards.values())
    tabs[0].controls["max_num_seqs"].value = 5
    tabs[-1].controls["max_num_seqs"].value = 7
    for dash in tabs:
        pictures = _pictures(dash.numbers.value)
        assert pictures, dash.name
        if "C" in dash.labels:
            assert pictures[0].get("data-c") == dash.labels["C"], dash.name
    assert _pictures(tabs[0].numbers.value)[0].get("data-c") == "5"
    assert _pictures(tabs[-1].numbers.value)[0].get("data-c") == "7"


@pytest.mark.parametrize(("requests", "size", "names"), [
    (3, 1, ["r1", "r2", "r3"]),  # up to 8: one colour a request
    (8, 1, [f"r{i}" for i in range(1, 9)]),
    (9, 2, ["r1–r2", "r3–r4", "r5–r6", "r7–r8", "r9"]),  # ceil(9 / 8) = 2 a colour
    (64, 8, [f"r{8 * g + 1}–r{8 * g + 8}" for g in range(8)]),  # 64 / 8 = 8 a colour
])
def test_past_8_requests_a_colour_is_a_named_group(requests, size, names):
    """No colour stands for two requests the legend does not group: r1–r8, r9–r16, …"""
    from hisparse_model.views.traffic_charts import group_name, request_groups
    assert request_groups(requests) == size
    groups = -(-requests // size)
    assert [group_name(g, size, requests) for g in range(groups)] == names


def test_the_timeline_is_linear_and_the_dp_chart_marks_skipped_steps():
    """Notebook 5's token axis is linear (no √); notebook 6's chart has axes, a legend, and a
    "⋯ +20" column for DP steps 10 … 29 that have no work (rank 1's request arrives at 30)."""
    from hisparse_model.views.traffic import traffic_dashboard
    dash = traffic_dashboard()
    assert "√" not in dash.chart.value and "(linear)" in dash.chart.value
    knobs = Knobs(max_num_seqs=2, vllm_version="0.31.0", data_parallel_size=2)
    sched = simulate(knobs, two_rank_workload(2))
    numbers = [s.step for s in sched.steps]
    gaps = [(a, b) for a, b in zip(numbers, numbers[1:]) if b > a + 1]
    dp = two_gpus_dashboard(max_num_seqs=2)
    root = ET.fromstring(dp.chart.value)
    texts = {c: [t.text for t in root.iter(SVG_NS + "text") if c in (t.get("class") or "")]
             for c in ("hs-legend", "hs-axis-label", "hs-lane-label", "hs-skipped")}
    assert texts["hs-legend"] and texts["hs-axis-label"] and texts["hs-lane-label"] == [
        "rank 0", "rank 1"]
    assert gaps and texts["hs-skipped"] == [f"+{b - a - 1}" for a, b in gaps]


@pytest.mark.parametrize(("phase", "shown"), [
    ("prompt:0", "prompt 1"),  # vLLM's index 0 is the reader's prompt 1
    ("prompt:2 chunk 1/2", "prompt 3 chunk 1/2"),
    ("jit_warmup", "jit_warmup"),  # anything else as recorded
    (None, "None"),
])
def test_recorded_phases_number_prompts_from_1(phase, shown):
    """Notebook 4 numbers prompts one way: from 1, as notebooks 2 and 3 and the chart do."""
    from hisparse_model.views.engine_runs import phase_name
    assert phase_name(phase) == shown


@pytest.mark.parametrize(("j", "event", "shown"), [
    (0, "start-up", "start-up"),
    (1, "prompt n=2", "prompt 1 (2 tokens)"),  # n was the length, not the number
    (3, "prompt n=200", "prompt 3 (200 tokens)"),
])
def test_recorded_events_name_prompt_and_length(j, event, shown):
    """An event is "prompt k (n tokens)", k from 1; n is never mistaken for the number."""
    from hisparse_model.views.engine_runs import event_name
    assert event_name(j, event) == shown


def test_each_dashboard_leads_with_its_headline():
    """Notebooks 1, 2 and 4 open with one answer, under the verdict on the server that every
    dashboard shows first: the crash size, where it dies, the verdict."""
    from hisparse_model.views import recordings_dashboard, startup_dashboard

    def after_verdict(markup: str) -> str:
        return re.sub(r"^<div class='hs-verdict'.*?</span>(<div class='hs-verdict-advice'>"
                      r".*?</div>)?</div>", "", markup, flags=re.S)

    one = off_by_one_dashboard()
    assert one.numbers.value.startswith("<div class='hs-verdict' data-verdict='exposed'")
    assert after_verdict(one.numbers.value).startswith(
        "<div class='hs-headline'>A batch of exactly")
    two = startup_dashboard()  # S = 2, prompts 2, 3, 200: prompt 2 (3 tokens) crashes
    assert after_verdict(two.numbers.value).startswith("<div class='hs-headline'>")
    assert "prompt 2</b> (of 3 tokens)" in after_verdict(two.numbers.value).split("</div>")[0]
    dead = startup_dashboard(max_num_seqs=1)  # the 2-token capture dies (C = 1, W = 2)
    assert "Start-up dies" in after_verdict(dead.numbers.value).split("</div>")[0]
    four = recordings_dashboard()
    assert after_verdict(four.numbers.value).startswith("<div class='hs-headline'>")


def test_advice_for_a_knob_without_a_control_says_where_to_set_it():
    """Notebook 6 has no routing control: its "routing = fix" advice says where to set it;
    notebook 5, which has one, says nothing of the kind."""
    from hisparse_model.views.traffic import traffic_dashboard
    dash = two_gpus_dashboard(max_num_seqs=7)  # rank 1 crashes: advice shown
    item = next(li for li in dash.numbers.value.split("<li>") if li.startswith("<b>routing = fix"))
    assert "routing has no control here: set it in notebook 5" in item
    five = traffic_dashboard()  # the default traffic crashes: advice under the charts
    assert "routing = fix" in five.search.value and "no control here" not in five.search.value


def test_formulas_and_citations_fold_away():
    """The formulas' vLLM lines are in a closed <details>; notebook 1's routing cites too."""
    dash = off_by_one_dashboard()
    folds = dash.numbers.value.count("<details class='hs-fold'>")
    assert folds == 2 and "<details class='hs-fold' open" not in dash.numbers.value


def test_every_dashboard_chart_has_axis_labels_and_a_legend():
    """Each dashboard's chart (and notebook 5's map): a title, an axis title, a legend entry;
    each dashboard's numbers hold one buffers picture."""
    from hisparse_model.views import (recordings_dashboard, startup_dashboard,
                                      versions_dashboard)
    from hisparse_model.views.traffic import WorkloadRecordingsDashboard, traffic_dashboard
    for make in (off_by_one_dashboard, startup_dashboard, versions_dashboard,
                 recordings_dashboard, traffic_dashboard, WorkloadRecordingsDashboard,
                 two_gpus_dashboard):
        dash = make()
        charts = [dash.chart.value] + ([dash.search.value.split("</svg>")[0] + "</svg>"]
                                       if getattr(dash, "search", None) else [])
        for svg in charts:
            root = ET.fromstring(svg)
            classes = [c for t in root.iter(SVG_NS + "text") for c in (t.get("class") or "").split()]
            assert root.find(SVG_NS + "title").text, dash.name
            assert "hs-axis-label" in classes and "hs-legend" in classes, dash.name
        assert len(_pictures(dash.numbers.value)) == 1, dash.name


def test_no_gpu_engine_is_a_calm_note(monkeypatch, capsys):
    """Without a GPU engine the live cell prints one calm line (not a failure) and runs
    nothing; with one it runs unless told to skip."""
    from hisparse_model.engine import live
    from hisparse_model.views.engine_runs import live_status

    def missing():
        raise live.LiveUnavailable("No module named 'torch'")
    monkeypatch.setattr(live, "check_available", missing)
    assert live_status() is None
    said = capsys.readouterr().out
    assert said.startswith("Live engine: not available here, and nothing is wrong")
    assert "No module named 'torch'" in said and "unavailable" not in said
    monkeypatch.setattr(live, "check_available", lambda: "0.31.0")
    assert live_status("HISPARSE_NOTEBOOK_LIVE=0") is None
    assert "not run: HISPARSE_NOTEBOOK_LIVE=0" in capsys.readouterr().out
    assert live_status() == "0.31.0"


def test_notebook_5_draws_the_step_you_choose():
    """draw_step picks the engine step drawn; -1 (or a step never run) draws the default."""
    from hisparse_model.views.traffic import traffic_dashboard
    dash = traffic_dashboard(max_num_seqs=8)  # C = 8: 3 + 2 = 5 tokens fit, no crash
    sched = simulate(Knobs(max_num_seqs=8, vllm_version="0.31.0"), synthetic(2, [3, 2], 0, 8))
    [first] = _pictures(dash.numbers.value)
    assert first.get("data-n") == str(sched.steps[0].routed_tokens)  # the busiest: step 0, 5
    dash.controls["draw_step"].value = sched.steps[3].step
    [chosen] = _pictures(dash.numbers.value)
    assert chosen.get("data-n") == str(sched.steps[3].routed_tokens)
    assert f"Engine step {sched.steps[3].step}:" in chosen.get("aria-label")


def test_b_snaps_to_c_and_w_in_one_click():
    """Notebook 1, S = 4: C = 4, W = 5.  B = C: no step holds W, no crash; B = W: n = 5 crashes."""
    dash = off_by_one_dashboard(max_num_seqs=4)
    dash.snaps["C"].click()
    assert dash.controls["max_num_batched_tokens"].value == 4
    assert dash.number_boxes["max_num_batched_tokens"].value == 4  # the box follows
    assert dash.labels["crash_size"] == "none"
    dash.snaps["W"].click()
    assert dash.controls["max_num_batched_tokens"].value == 5
    assert dash.labels["crash_size"] == "5"
    dash.controls["max_num_batched_tokens"].value = 3  # refused (3 < S = 4): the snap waits
    assert dash.error is not None
    dash.snaps["C"].click()
    assert dash.controls["max_num_batched_tokens"].value == 3


def test_notebook_6_draws_the_step_you_choose():
    """draw_step in notebook 6: the forward of that step that failed or routed most; S = 7's
    default is the crash (step 2, rank 1's dummy)."""
    dash = two_gpus_dashboard(max_num_seqs=7)
    sched = simulate(Knobs(max_num_seqs=7, vllm_version="0.31.0", data_parallel_size=2),
                     two_rank_workload(7))
    [shown] = _pictures(dash.numbers.value)
    assert shown.get("aria-label").startswith(f"Step {sched.crash['step']}, rank {sched.crash['rank']}")
    first = sched.steps[0]
    busiest = max(first.ranks, key=lambda r: (bool(r.error), r.routed_tokens, -r.rank))
    dash.controls["draw_step"].value = first.step
    [chosen] = _pictures(dash.numbers.value)
    assert chosen.get("aria-label").startswith(f"Step {first.step}, rank {busiest.rank}")
    assert chosen.get("data-n") == str(busiest.routed_tokens)


def _says(svg: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in svg.iter(f"{SVG_NS}text")
            if "hs-buffers-says" in (t.get("class") or "")]


def test_notebook_4_draws_a_start_up_failure_that_is_no_overflow_as_it_is():
    """Notebook 4, every recording whose start-up failed: the picture draws the failing batch
    with the recording's own error; only a swap-row error is drawn as an overflow (no token
    past C, no "ValueError" for an IndexError)."""
    from hisparse_model.views.engine_runs import recordings_dashboard

    dash = recordings_dashboard()
    failed = [r for r in dash.recordings if not r["startup"]["ok"]]
    assert any("IndexError" in r["startup"]["error"] for r in failed)  # v0.31.0-...-b2-mtp1
    assert any("swap rows exceed" in r["startup"]["error"] for r in failed)  # e.g. s1
    for rec in failed:
        dash.controls["recording"].value = next(
            row["name"] for row, r in zip(dash.rows, dash.recordings) if r is rec)
        svg = _pictures(dash.numbers.value)[0]
        error = rec["startup"]["error"]
        says = " ".join(_says(svg))
        if "swap rows exceed" in error:  # the off-by-one: the token past C has no row
            assert svg.get("data-route") == "crash" and _count(svg, "hs-no-row") == 1
            assert error.split("capacity=")[1].rstrip(".") in says
        else:  # another failure: its own text, nothing drawn past C
            assert svg.get("data-route") == "none" and _count(svg, "hs-no-row") == 0
            assert error in says and "ValueError" not in says
            assert "fails start-up" in (svg.get("aria-label") or "")


@pytest.mark.parametrize(("backend", "n", "route"), [
    # S = 26: C = 26, W = 27.  FLASH_ATTN_MLA_SPARSE routes a 27-token batch: 0.31.0 crashes
    ("FLASH_ATTN_MLA_SPARSE", "27", "crash"),
    # FLASHMLA_SPARSE hands the routing only the decode part (none in a 27-token prefill)
    ("FLASHMLA_SPARSE", "0", "none"),
])
def test_notebook_3_title_and_caption_agree_for_each_backend(backend, n, route):
    """Notebook 3: the picture's n, title and caption tell one story; under FLASHMLA_SPARSE it
    says why nothing is routed (the decode part only), not "a replayed CUDA graph"."""
    from hisparse_model.views.fixes import versions_dashboard

    dash = versions_dashboard(attention_backend=backend, max_num_seqs=26)
    svg = _pictures(dash.numbers.value)[0]
    title, says = svg.get("aria-label"), " ".join(_says(svg))
    assert (svg.get("data-n"), svg.get("data-route")) == (n, route)
    assert "replayed CUDA graph" not in says
    if route == "none":
        assert "none of them is routed" in title and "only a step's decode part" in says
        assert "routed tokens" not in title and "n = W" not in title  # it routes 0, not W
    else:
        assert "n = 27 routed tokens (n = W = C + 1)" in title


# (S, prompt lengths, the picture's title begins, a note names the prompts): notebook 2,
# 0.31.0, B = 16,384 (the offline default): C = S, W = S + 1
WOULD_ROWS = [
    (256, "2, 3, 200", "If a batch of n = 257 routed tokens", True),  # no batch routes 257
    (2, "2, 3, 200", "A batch of n = 3 routed tokens", False),       # prompt 3 routes W = 3
]


@pytest.mark.parametrize("s,lens,begins,would", WOULD_ROWS)
def test_notebook_2_says_when_its_picture_is_a_batch_that_never_came(s, lens, begins, would):
    """Where no predicted batch routes W tokens, the picture is titled as the batch that
    would come and names the batches it means (the start-up's and the prompts', each served
    alone) as none of that size; where one does, it is titled as a batch that came."""
    from hisparse_model.views.first_request import startup_dashboard

    dash = startup_dashboard()
    dash.controls["max_num_seqs"].value = s
    dash.controls["prompt_lens"].value = lens
    svg = _pictures(dash.numbers.value + (dash.head.value if dash.head else ""))[0]
    title = svg.get("aria-label")
    assert title.startswith(begins), title
    markup = dash.numbers.value
    assert (f"None of the start-up's batches and the prompts' ({lens} tokens, each served "
            "alone) routes" in html.unescape(markup)) == would


@pytest.mark.parametrize("routing,name", [("stock", "0.31.0"), ("fix", "0.31.0+fix")])
def test_notebook_3_names_the_fix_where_it_is_on(routing, name):
    """With routing = fix the picture's title and the chart's 0.31.0 lane say 0.31.0+fix (the
    fix's predicate: n = W = C + 1 goes all-resident), not plain 0.31.0."""
    from hisparse_model.views.fixes import versions_dashboard

    dash = versions_dashboard(routing=routing, max_num_seqs=26)
    svg = _pictures(dash.numbers.value)[0]
    assert svg.get("aria-label").endswith(f"vLLM {name}")
    assert (svg.get("data-route") == "crash") == (routing == "stock")
    chart = dash.draw()
    assert f">{name}<" in chart and (">0.31.0+fix<" in chart) == (routing == "fix")


def _legend(svg_markup: str) -> list[str]:
    return re.findall(r"class='hs-legend'[^>]*>([^<]*)<", svg_markup)


def test_notebook_6s_legends_word_what_its_cells_are():
    """Notebook 6 (S 7, 0.31.0): the strip's orange is a rank crashing while serving, not a
    first request; the step chart's grey is a FULL graph replay (step 1 of both ranks)."""
    from hisparse_model.views.two_gpus import two_gpus_dashboard

    dash = two_gpus_dashboard()
    dash.controls["max_num_seqs"].value = 7
    markup = dash.numbers.value + dash.draw()
    words = _legend(markup)
    assert "a rank crashes while serving" in words and "first-request crash" not in words
    assert "not routed: a FULL graph replay (or no token handed over)" in words
    assert "not routed (staged)" not in words


# (current S, the strip's end, marked past its end): notebook 2's strip is S 1 ... 256
PAST_ROWS = [(300, True), (256, False), (7, False)]


@pytest.mark.parametrize("current,past", PAST_ROWS)
def test_a_strip_marks_a_value_past_its_end(current, past):
    """A max_num_seqs past the strip's last value is marked at the strip's end ("300 →")
    and said under it; one within the strip is boxed as before."""
    from hisparse_model.views.charts import strip_chart

    data = {"max_num_seqs": list(range(1, 257)), "outcome": ["safe"] * 256}
    svg = html.unescape(strip_chart(data, current, title="t"))
    assert (f">{current} →<" in svg) == past
    assert ("past the strip's end, 256" in svg) == past
    assert ("hs-current'" in svg or "hs-current " in svg) != past


@pytest.mark.parametrize("note_chars", [40, 200, 400])
def test_a_long_note_is_wrapped_at_words_not_cut(note_chars):
    """Every word of the note under the picture is drawn whole, on lines the picture's
    width holds (at most (900 - 20) / 6.6 = 133 characters a line), and the picture grows by
    a line's 16 px for each line past the first."""
    from hisparse_model.views.buffers import buffer_picture
    words = ("batch " * (note_chars // 6)).strip()
    svg = buffer_picture(4, 5, 5, "crash", title="t", note=words)
    lines = re.findall(r"<text[^>]*class='hs-buffers-note'>([^<]*)</text>", svg)
    assert " ".join(lines) == words and all(len(line) <= 133 for line in lines)
    plain = buffer_picture(4, 5, 5, "crash", title="t", note="batch")
    height = lambda s: int(re.search(r"height='(\d+)'", s)[1])  # noqa: E731
    assert height(svg) - height(plain) == 16 * (len(lines) - 1)


# a recording's name part -> what its row's knobs column must say (the NAMING table's knobs)
NAME_PARTS = [(r"^s(\d+)$", "max_num_seqs={}"), (r"^b(\d+)$", "max_num_batched_tokens={}"),
              (r"^l(\d+)$", "max_model_len={}"), (r"^blocks(\d+)$", "num_gpu_blocks_override={}"),
              (r"^mtp(\d)$", "num_speculative_tokens={}"), (r"^eager$", "enforce_eager=True"),
              (r"^piecewise$", "cudagraph_mode=PIECEWISE"), (r"^flashmla$", "FLASHMLA_SPARSE")]


def test_every_knob_a_recordings_name_says_is_in_its_row():
    """Notebook 4's knobs column holds every knob the recording's name gives (it dropped
    blocks100 and l16384): each name part of the NAMING table that is a knob, in words."""
    from hisparse_model.recorded.recordings import load_all, recording_knobs
    from hisparse_model.views.engine_runs import knobs_text

    checked = 0
    for rec in load_all():
        name = os.path.splitext(os.path.basename(rec["_path"]))[0]
        text = knobs_text(recording_knobs(rec))
        for part in name.split("-"):
            for pattern, said in NAME_PARTS:
                m = re.match(pattern, part)
                if m:
                    assert said.format(*m.groups()) in text, (name, part, text)
                    checked += 1
    assert checked > 50
