"""Notebook 5's dashboards, driven without a browser: what they show is ``simulate``'s.

Every expectation is computed here from :func:`hisparse_model.answers.simulate.simulate`
(or from the arithmetic in the case tables), never read back from the view code.
Knobs not named keep their defaults: vLLM 0.31.0, stock routing, FLASH_ATTN_MLA_SPARSE,
max_model_len 320, B = min(S * 320, 16384), no speculation, prefix caching on.
"""

from __future__ import annotations

import json
import os
import random
import re
import xml.etree.ElementTree as ET

import pytest

from hisparse_model import Knobs
from hisparse_model.text import chart_data as cd
from hisparse_model.answers.advice import SEARCH, SearchCapped, advise
from hisparse_model.answers.server_verdict import server_verdict
from hisparse_model.cli import build_parser, knobs_from_args
from hisparse_model.recorded.recordings import load_all, recorded_dir
from hisparse_model.model.routing import swap_error
from hisparse_model.answers.simulate import simulate
from hisparse_model.views import svg as plots
from hisparse_model.views import traffic
from hisparse_model.views.traffic import TrafficDashboard, WorkloadRecordingsDashboard
from hisparse_model.schedule.workload import WorkloadError, synthetic
from hisparse_model.recorded.workload_recordings import compare_workload_recording

WORKLOADS_DIR = os.path.join(recorded_dir(), "workloads")


def _dash(prompt_lens="3, 2", requests=2, spacing=0, max_tokens=8, **knobs) -> TrafficDashboard:
    return TrafficDashboard(requests=requests, prompt_lens=prompt_lens, arrival_spacing=spacing,
                            max_tokens=max_tokens, **knobs)


def _workload(prompt_lens, requests=2, spacing=0, max_tokens=8):
    return synthetic(requests, prompt_lens, spacing, max_tokens)


def _strip_outcome(knobs: Knobs, workload) -> str:
    """One max_num_seqs cell, from simulate(): refused, dies at start-up, crashes, or safe."""
    try:
        sched = simulate(knobs, workload)
    except ValueError:
        return cd.INVALID
    if sched.crash is None:
        return cd.SAFE
    if sched.crash["step"] is None:  # dead at start-up: never starts, or the overflow
        never = server_verdict(knobs).kind == "never_starts"
        return cd.NEVER_STARTS if never else cd.STARTUP_CRASH
    return cd.RUNTIME_CRASH


# knobs, (prompt lens, spacing) -> (C, W, crash step or "startup" or None, error, finished)
TRAFFIC_CASES = [
    # B = 4 * 320 = 1280, q = 1: C = min(1280, 4 * 1) = 4, W = 5. Both arrive at step 0 and
    # are prefilled in one step of 3 + 2 = 5 = W tokens, no decode among them: all 5 are
    # routed, 5 <= W sends them to swap_in, 5 > C rows: the engine dies at step 0.
    ({"max_num_seqs": 4}, ([3, 2], 0), (4, 5, 0, swap_error(5, 4), [])),
    # the same 12 steps apart: step 0 routes 3 <= C, step 12 routes 2 <= C; 8 tokens each
    ({"max_num_seqs": 4}, ([3, 2], 12), (4, 5, None, None, [0, 1])),
    # one step apart: step 1 is r0's decode (1) + r1's prefill (4) = 5 = W tokens, but a mixed
    # step hands only its 1 decode token to the routing: no crash
    ({"max_num_seqs": 4}, ([3, 4], 1), (4, 5, None, None, [0, 1])),
    # S = 3: C = 3, W = 4; the 5-token step is > W: all-resident
    ({"max_num_seqs": 3}, ([3, 2], 0), (3, 4, None, None, [0, 1])),
    # S = 5: C = 5, W = 6; 5 <= C fits swap_in
    ({"max_num_seqs": 5}, ([3, 2], 0), (5, 6, None, None, [0, 1])),
    # 0.32.0 routes on C: 5 > C = 4 takes the all-resident path
    ({"max_num_seqs": 4, "vllm_version": "0.32.0"}, ([3, 2], 0), (4, 5, None, None, [0, 1])),
    # 0.31.0 with the upstream fix's routing: the same
    ({"max_num_seqs": 4, "routing": "fix"}, ([3, 2], 0), (4, 5, None, None, [0, 1])),
    # prefix caching: r1 (69 tokens, step 12) reuses r0's full 64-token block and computes
    # 69 - 64 = 5 = W tokens alone in its step: the engine dies at step 12, r0 finished
    ({"max_num_seqs": 4}, ([64, 69], 12), (4, 5, 12, swap_error(5, 4), [0])),
    # caching off: r1 computes all 69 > W tokens: all-resident, both finish
    ({"max_num_seqs": 4, "enable_prefix_caching": False}, ([64, 69], 12),
     (4, 5, None, None, [0, 1])),
    # S = 1: C = 1, W = 2; the 2-token capture at start-up is W: dead before serving
    ({"max_num_seqs": 1}, ([3, 2], 0), (1, 2, "startup", swap_error(2, 1), [])),
]


@pytest.mark.parametrize(("knobs", "work", "expected"), TRAFFIC_CASES)
def test_concurrent_prefills_crash_exactly_at_c_plus_one(knobs, work, expected):
    """The dashboard shows simulate()'s C, W, crash step, exact error and finished requests."""
    lens, spacing = work
    c, w, step, error, finished = expected
    dash = _dash(", ".join(map(str, lens)), spacing=spacing, **knobs)
    sched = simulate(Knobs(**knobs), _workload(lens, spacing=spacing))
    crash = sched.crash
    assert (sched.plan.swap_capacity, sched.plan.workspace_rows) == (c, w)
    assert (None if crash is None else "startup" if crash["step"] is None else crash["step"],
            crash and crash["error"]) == (step, error)
    assert sorted(sched.finished) == finished
    assert dash.error is None
    assert (dash.labels["C"], dash.labels["W"]) == (str(c), str(w))
    assert dash.labels["crash"] == (error or "none")
    assert dash.labels["finished"] == (",".join(map(str, finished)) or "none")
    routed = w  # a 0.31.0 crash is always a batch of exactly W = C + 1 routed tokens
    word = "none" if step is None else f"startup(n={routed})" if step == "startup" \
        else f"step{step}(n={routed})"
    assert dash.labels["summary"] == (
        f"max_num_seqs={knobs['max_num_seqs']} C={c} W={w} requests=2 "
        f"steps={len(sched.steps)} crash={word} finished={len(finished)}/2")
    if error:  # the exact text on screen, and the crash row pinned last in the steps table
        assert f"<code class='hs-error-text'>{error}</code>" in dash.numbers.value
        if step != "startup":
            steps_table = dash.numbers.value.split("identical neighbours folded")[1]
            assert steps_table.split("</table>")[0].rsplit("<tr", 1)[1].startswith(
                " class='hs-crash'>")
    assert dash.plot_data["timeline"]["crash_step"] == (step if step != "startup" else None)


def test_the_two_requests_arriving_together_is_the_h200_crash():
    """S=4, requests of 3 and 2 tokens together: one step of 5 = C+1 tokens, `stop=5, capacity=4`."""
    dash = _dash()  # the dashboard's defaults are exactly this case
    assert dash.labels["summary"] == ("max_num_seqs=4 C=4 W=5 requests=2 steps=1 "
                                      "crash=step0(n=5) finished=0/2")
    step = dash.last_prediction.steps[0]
    assert (step.scheduled, step.num_tokens, step.num_decode_tokens) == ({0: 3, 1: 2}, 5, 0)
    assert "stop=5, capacity=4" in dash.labels["crash"]
    dash.controls["arrival_spacing"].value = 12  # spaced out: served one after the other
    assert dash.labels["crash"] == "none" and dash.labels["finished"] == "0,1"


RANDOM_CASES = 40  # about half crash; some are refused (B < S, a prompt > 320)


def _random_case(seed: int) -> tuple[dict, dict]:
    rnd = random.Random(seed)
    knobs = {"max_num_seqs": rnd.randint(1, 8),
             "max_num_batched_tokens": rnd.choice([None, None, None, 3, 16, 64]),
             "num_speculative_tokens": rnd.choice([0, 0, 0, 1, 2]),
             "enable_prefix_caching": rnd.random() < 0.5,
             "vllm_version": rnd.choice(["0.31.0", "0.31.0", "0.31.0", "0.32.0", "0.33.0"])}
    work = {"requests": rnd.randint(1, 10), "prompt_lens": [rnd.choice(
        [1, 2, 2, 3, 3, 4, 5, 9, 64, 67, 69, 130, 200, 330]) for _ in range(rnd.randint(1, 4))],
        "spacing": rnd.randint(0, 3), "max_tokens": rnd.randint(1, 12)}
    if rnd.random() < 0.5:  # aim at a crash: prompts together whose prefills sum to C + 1
        s = knobs["max_num_seqs"] = rnd.randint(3, 8)
        cut = rnd.randint(2, s - 1)  # two prompts of >= 2 tokens (more than q = 1: prefills)
        knobs.update(max_num_batched_tokens=None, num_speculative_tokens=0)
        work.update(requests=2, prompt_lens=[cut, s + 1 - cut], spacing=0)
    return knobs, work


@pytest.mark.parametrize("seed", range(RANDOM_CASES))
def test_what_the_dashboard_shows_is_simulate(seed):
    """For random knobs and workloads, every number, table row and chart bar is simulate()'s."""
    knobs, work = _random_case(seed)
    lens = work.pop("prompt_lens")
    dash = _dash(", ".join(map(str, lens)), **work, **knobs)
    workload = _workload(lens, work["requests"], work["spacing"], work["max_tokens"])
    try:
        sched = simulate(Knobs(**knobs), workload)
    except ValueError as exc:  # vLLM refuses the knobs: the dashboard says so, in its words
        assert dash.error == str(exc)
        return
    assert dash.error is None
    assert dash.last_prediction.steps == sched.steps
    assert dash.labels["steps"] == str(len(sched.steps))
    assert dash.labels["crash"] == (sched.crash["error"] if sched.crash else "none")
    assert dash.labels["finished"] == (",".join(map(str, sorted(sched.finished))) or "none")
    line = dash.plot_data["timeline"]
    shown = [s for s in sched.steps if line["first"] <= s.step <= line["last"]]
    assert [(b["step"], dict(b["tokens"]), b["num_tokens"], b["routed"]) for b in line["steps"]] \
        == [(s.step, s.scheduled, s.num_tokens, s.routed_tokens) for s in shown]
    assert (line["C"], line["W"]) == (sched.plan.swap_capacity, sched.plan.workspace_rows)
    if sched.steps and sched.crash:  # the window ends at the crash, which is drawn
        assert line["last"] == sched.crash["step"] and "crash: step" in dash.chart.value


def test_timeline_window_shows_the_last_steps_before_a_late_crash():
    """A crash after more than TIMELINE_WINDOW steps: the window is the steps just before it."""
    # 40 prompts of 3 tokens every 5 steps, each done in 4 steps, then r40 of 5 = W tokens
    # alone at step 40 * 5 = 200: C = 4, so it crashes there
    sched = simulate(Knobs(max_num_seqs=4), synthetic(41, [3] * 40 + [5], 5, 4))
    assert sched.crash["step"] == 200
    line = cd.timeline_data(sched, window=50)
    assert (line["first"], line["last"]) == (151, 200)  # 200 - 50 + 1 ... 200
    assert [s["step"] for s in line["steps"]] == [s.step for s in sched.steps if s.step >= 151]
    assert line["steps"][-1]["key"] == cd.CRASH


STRIP_WORKLOADS = [
    ({"max_num_seqs": 4}, ([3, 2], 0)),  # S = 4 crashes (5 = W); S = 1 dies at start-up
    ({"max_num_seqs": 4, "max_num_batched_tokens": 32}, ([3, 2, 9], 0)),  # S > 32 refused
    ({"max_num_seqs": 4}, ([64, 69], 12)),  # prefix caching: 5 computed tokens
    ({"max_num_seqs": 8, "vllm_version": "0.32.0"}, ([3, 2], 0)),  # the fix: safe everywhere
]


@pytest.mark.parametrize(("knobs", "work"), STRIP_WORKLOADS)
def test_max_num_seqs_map_equals_simulate_for_every_value(knobs, work):
    """Each strip cell (max_num_seqs 1...64) is simulate()'s outcome for that max_num_seqs."""
    lens, spacing = work
    dash = _dash(", ".join(map(str, lens)), spacing=spacing, **knobs)
    strip = dash.search_data["strip"]
    workload = _workload(lens, spacing=spacing)
    assert strip["max_num_seqs"] == list(range(1, 65))
    want = [_strip_outcome(Knobs(**{**knobs, "max_num_seqs": s}), workload) for s in range(1, 65)]
    assert strip["outcome"] == want  # small workloads: the work cap leaves nothing out
    assert strip["current"] == knobs["max_num_seqs"]
    if knobs == {"max_num_seqs": 4} and lens == [3, 2]:
        # S = 1: start-up (W = 2 capture); S = 4: the 5-token step; S = 2, 3: 5 > W; S >= 5: 5 <= C
        assert dash.labels["sweep_summary"] == (
            "never_starts=none startup_crash=1 crash=4 safe=2-3,5-64 invalid=none "
            "not_computed=none")


def test_strip_work_cap_keeps_the_values_nearest_the_current_one():
    """Under a small work cap the computed cells are a window around the current max_num_seqs."""
    knobs, workload = Knobs(max_num_seqs=20), _workload([9, 5], requests=16, max_tokens=16)
    cost = cd.work_estimate(simulate(knobs, workload).plan, workload)
    full = cd.traffic_seqs_strip(knobs, workload, work_cap=10**9)
    capped = cd.traffic_seqs_strip(knobs, workload, work_cap=5 * cost)
    computed = [s for s, o in zip(capped["max_num_seqs"], capped["outcome"]) if o != cd.NOT_RUN]
    assert 20 in computed and computed == list(range(computed[0], computed[-1] + 1))
    assert abs(computed[0] - 20) <= 1 + abs(computed[-1] - 20)  # nearest first, ties low
    assert len(computed) < 64 and cd.NOT_RUN not in full["outcome"]
    for s in computed:  # what is computed is exact
        assert capped["outcome"][s - 1] == full["outcome"][s - 1]
    assert capped == cd.traffic_seqs_strip(knobs, workload, work_cap=5 * cost)  # deterministic


def test_advice_changes_each_avoid_the_crash_and_match_the_full_search():
    """Every advised change re-simulates crash-free; a capped search agrees with advise() in its window."""
    dash = _dash()  # S = 4, [3, 2] together: crashes at step 0
    knobs, workload = Knobs(max_num_seqs=4), _workload([3, 2])
    # the fix first (0.32.0, or 0.31.0 patched, route on C), then by cost: S = 5: C = 5 >= 5
    # (keeps throughput); K = 1: q = 2, C = 8, W = 9 > 5 (more drafts); S = 3: C = 3, W = 4
    # < 5 and one 3-token prefill per step (fewer requests per step)
    assert dash.labels["advice"] == ("vllm_version=0.32.0; routing=fix; max_num_seqs=5; "
                                     "num_speculative_tokens=1; max_num_seqs=3")
    found = cd.traffic_advice(knobs, workload, 1280)
    for a in found["advice"]:
        changed = knobs.replace(**a["change"], **({"routing": "stock"} if "vllm_version"
                                                  in a["change"] else {}))
        assert simulate(changed, workload).crash is None
    full = advise(knobs, lambda k: simulate(k, workload).crash is not None, 1280,
                  longest_prompt=3)  # the costs count the 3-token prompt's prefill chunks
    assert [a for a in full if "max_num_batched_tokens" not in a["change"]] == found["advice"]
    # B: only B = 4 = S (C = B, W = 5 > every step) avoids it, 1276 values away: past the
    # cap; 1280 -> 4 tokens per step cripples the engine: it comes last
    assert full[-1]["change"] == {"max_num_batched_tokens": 4} and full[-1]["cost"]["cripples"]
    assert found["capped"] == ["max_num_batched_tokens"]
    assert "max_num_batched_tokens" in dash.search.value.split("not searched beyond")[1]


# checks each knob may run -> crashes() calls advise() makes for S = 4, K = 0 on 0.31.0 when
# every value crashes.  S and B have values on both sides: budget + 1 calls each (the last
# finds the budget spent); K has 4 legal values (1..4; -1.. are refused before any check):
# min(budget + 1, 4); the upgrade to 0.32.0 and the patched 0.31.0 are checked once each.
# 2 (b + 1) + min(b + 1, 4) + 2:
@pytest.mark.parametrize(("budget", "calls"), [
    (0, 5),  # 2 * 1 + 1 + 2
    (1, 8),  # 2 * 2 + 2 + 2
    (5, 18),  # 2 * 6 + 4 + 2
])
def test_a_spent_search_budget_ends_that_knobs_search(budget, calls):
    """Once a knob's budget is spent, no further value of it is checked."""
    knobs, checked, used = Knobs(max_num_seqs=4), [], {}

    def crashes(changed: Knobs) -> bool:
        checked.append(changed)
        name = next((n for n in SEARCH if getattr(changed, n) != getattr(knobs, n)), None)
        if name is not None:
            used[name] = used.get(name, 0) + 1
            if used[name] > budget:
                raise SearchCapped(name)
        return True  # every value crashes: only the budget ends a search

    assert advise(knobs, crashes, 1280) == []
    assert len(checked) == calls


@pytest.mark.parametrize(("text", "title", "message"), [
    ("3, x", "typo in prompt_lens:", "prompt_lens: prompt 2 ('x') is not an integer"),
    (" , ", "typo in prompt_lens:", "prompt_lens: give at least one prompt length"),
    ("3, 400", "vLLM would reject", None),  # 400 > max_model_len = 320: vLLM's own words
])
def test_workload_typos_are_typos_and_refusals_are_vllms(text, title, message):
    """A typo in prompt_lens is reported as a typo; a prompt vLLM refuses, in vLLM's words."""
    dash = _dash()
    dash.controls["prompt_lens"].value = text
    if message is None:
        with pytest.raises(WorkloadError) as exc:
            simulate(Knobs(max_num_seqs=4), _workload([3, 400]))
        message = str(exc.value)
    assert dash.error == message and title in dash.message.value
    assert dash.chart.layout.display == "none"
    dash.controls["prompt_lens"].value = "2, 2"  # recovers: 2 + 2 = 4 = C fits swap_in
    assert dash.error is None and dash.labels["crash"] == "none"


def test_workload_controls_and_knob_controls():
    """Workload sliders carry their ranges; every knob control is generated from its declaration."""
    dash = _dash()
    for name, (lo, hi) in traffic.WORKLOAD_RANGE.items():
        c = dash.controls[name]
        assert (c.min, c.max, c.description, c.tooltip) == (lo, hi, name,
                                                            traffic.WORKLOAD_HELP[name])
        dash.number_boxes[name].value = lo + 1  # the number box moves the slider
        assert c.value == lo + 1
    specs = {s.name: s for s in traffic.knob_specs()}
    assert set(traffic.KNOBS) <= set(dash.controls)
    for name in traffic.KNOBS:
        assert dash.controls[name].tooltip == specs[name].help
    dash.controls["requests"].value = 3  # lengths 3, 2 cycled; spacing 1; max_tokens 2
    assert dash.state["workload"] == [{"prompt_len": n, "max_tokens": 2, "arrival_step": i}
                                      for i, n in enumerate((3, 2, 3))]


def _svg_ok(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert root.find("s:title", ns).text
    texts = root.findall(".//s:text", ns)
    assert all(int(t.get("font-size")) >= 11 for t in texts)
    classes = {c for t in texts for c in (t.get("class") or "").split()}
    assert {"hs-lane-label", "hs-legend", "hs-axis-label"} <= classes
    fills = {e.get("fill").lower() for e in root.iter() if e.get("fill")}
    allowed = {c.lower() for c in (*plots.PALETTE.values(), *traffic.REQUEST_COLOURS)} | {
        plots.INK.lower(), "none"}
    assert fills <= allowed, fills - allowed
    return root


def test_charts_are_labelled_and_use_the_palette():
    """Timeline and strip: title, axis labels, legends, palette colours, text >= 11 px, crash marked."""
    # 12 requests (two a colour past 8) that all fit: no crash label; the prefix-caching
    # pair crashes at step 12 (69 - 64 = 5 = W computed tokens): one label, at step 12
    for kw, crash in (({"requests": 12, "prompt_lens": "3, 2, 9"}, []),
                      ({"prompt_lens": "64, 69", "spacing": 12}, ["crash: step 12"])):
        dash = _dash(**kw)
        timeline, strip = dash.chart.value, dash.search.value.split("</svg>")[0]
        root = _svg_ok(timeline)
        _svg_ok(strip + "</svg>")
        ns = "{http://www.w3.org/2000/svg}"
        labels = [t.text for t in root.iter(ns + "text") if t.get("class") == "hs-crash-label"]
        assert labels == crash
        assert "hs-current" in strip and "▢ current max_num_seqs = 4" in strip


def test_workload_recordings_show_compare_workload_recordings_verdict(tmp_path):
    """One verdict per committed recording (compare_workload_recording's); a tampered one differs."""
    recs = load_all(WORKLOADS_DIR)
    assert len(recs) >= 8
    dash = WorkloadRecordingsDashboard()
    assert dash.diffs == [compare_workload_recording(r) for r in recs]
    agree = sum(not d for d in dash.diffs)
    assert dash.labels["summary"].startswith(
        f"workload_recordings={len(recs)} agree={agree} differ={len(recs) - agree} | ")
    for name, rec in zip(dash.names, recs):
        dash.controls["recording"].value = name
        sched = dash.last_prediction
        rows = dash.numbers.value.split("<tbody>")[-1].count("<tr")
        assert rows == max(len(rec["steps"]), len(sched.steps))  # engine and model side by side
        assert dash.plot_data["engine"] == {s["step"]: s["num_tokens"] for s in rec["steps"]}
    bad = json.loads(json.dumps(recs[0], default=str))
    first = bad["steps"][0]["scheduled"]
    key = next(iter(first))
    first[key] += 1  # the engine "scheduled" one more token than the model says
    dash = WorkloadRecordingsDashboard([bad], name="tampered")
    assert dash.diffs[0] and "✗ differs" in dash.numbers.value
    assert "<tr class='hs-crash'><td>0 / 0</td>" in dash.numbers.value


def test_live_command_parses_back_to_the_same_knobs():
    """The live cell's command line gives the CLI exactly the dashboard's knobs."""
    for knobs in (Knobs(max_num_seqs=4), Knobs(max_num_seqs=3, routing="fix",
                                               max_num_batched_tokens=64,
                                               enable_prefix_caching=False, enforce_eager=True),
                  Knobs(max_num_seqs=2, num_speculative_tokens=1, cudagraph_mode="PIECEWISE")):
        cmd = traffic.live_command(knobs, "w.json", "out.json")
        assert cmd[1:4] == ["-m", "hisparse_model", "live"]
        args = build_parser().parse_args(cmd[3:])
        assert (args.workload, args.out) == ("w.json", "out.json")
        assert knobs_from_args(args, vllm_version=knobs.vllm_version) == knobs


def test_traffic_view_module_stays_small():
    """views/traffic.py is at most 400 lines (the brief's limit for a dashboard module)."""
    with open(traffic.__file__) as f:
        assert len(f.read().splitlines()) <= 400


@pytest.mark.parametrize("c, w, most, stretched", [
    # C = 16, W = 17, a 64-token all-resident step (the learner's case): linear would give
    # 80 px / 64 = 1.25 px per token, so the row C ... W is drawn ROW_PX tall
    (16, 17, 64, True),
    (16, 17, 17, True),  # top 17 + 8 = 25: 80 / 25 = 3.2 px per token < ROW_PX
    (1024, 1025, 1025, True),  # serve's defaults
    (2, 3, 3, False),  # top 3 + 2 = 5: 16 px per token, linear
    (4, 5, 40, True),  # 80 / 40 = 2 px per token
])
def test_the_routed_plot_keeps_c_and_w_apart_and_draws_every_bar_whole(c, w, most, stretched):
    """The routed plot reaches the largest routed count (no bar clipped), keeps C's and W's
    lines at least ROW_PX apart, and rises with the count; it says when it is not to scale."""
    from hisparse_model.views.traffic_charts import ROW_PX, routed_scale
    y, hi, is_stretched = routed_scale(c, w, most, 282, 80)
    assert is_stretched == stretched
    assert hi >= most and y(most) >= 282 and y(0) == 282 + 80
    assert y(c) - y(w) >= ROW_PX - 1e-9
    values = sorted({0, 1, c, w, most, hi})
    assert all(y(a) > y(b) for a, b in zip(values, values[1:]))


def test_the_timeline_draws_a_64_token_step_whole_beside_c_16():
    """S 16 (C = 16, W = 17), one 64-token prompt: its step routes 64 tokens all-resident; the
    chart's top is 64 and the caption says the C ... W row is not to scale."""
    dash = TrafficDashboard(max_num_seqs=16, requests=1, prompt_lens="64", max_tokens=2)
    line = dash.plot_data["timeline"]
    assert max(s["routed"] for s in line["steps"]) == 64
    assert ">64</text>" in dash.chart.value and "not to scale" in dash.chart.value
    assert "▲" not in dash.chart.value


@pytest.mark.parametrize("spacing, head", [
    # 3 + 2 together: step 0 holds 5 = W tokens (S 4: C = 4)
    (0, "✗ crash at step 0</b>: <code class='hs-error-text'>ValueError: HiSparse swap rows "
        "exceed the configured speculative decode capacity: stop=5, capacity=4.</code>"),
    # one step apart: never 5 tokens in a step
    (1, "✓ no crash</b>: no step hands swap_in more than C = 4 tokens; 2 of 2 requests"),
])
def test_notebook_5_says_its_answer_above_its_controls(spacing, head):
    """The answer (crash or not, where) is the first thing under the intro, above the 17
    controls, and is moved ahead with the numbers: each state one move away has its head."""
    dash = TrafficDashboard(max_num_seqs=4, arrival_spacing=spacing)
    parts = list(dash.widget.children)
    assert parts.index(dash.head) == 1 < parts.index(dash.numbers)
    assert head in dash.head.value
    heads, screens = dash.heads_and_screens_ahead()
    assert heads.keys() == screens.keys() and heads
    moved = dash.state_key(arrival_spacing=1 - spacing)
    assert ("no crash" in heads[moved]) == (spacing == 0)
    dash.controls["prompt_lens"].value = "3, x"  # a typo: the head says so, in its place
    assert "typo in prompt_lens" in dash.head.value


def test_a_cut_timeline_says_so_and_draw_step_moves_it():
    """No crash and more steps than the window: the timeline says how many steps with work it
    leaves out; a draw_step the schedule ran centres the window there; one it never ran is
    drawn as the busiest step with a title saying the asked step ran no work."""
    from hisparse_model.views.buffers import picture_for_step
    from hisparse_model.views.traffic_charts import timeline_chart

    # 40 prompts of 3 tokens every 5 steps, each done in 4 (3 + 3 decodes): 0.32.0 never
    # crashes; steps with work: 40 x 4 = 160 of steps 0 ... 198
    sched = simulate(Knobs(max_num_seqs=4, vllm_version="0.32.0"), synthetic(40, [3] * 40, 5, 4))
    assert sched.crash is None and len(sched.steps) == 160
    line = cd.timeline_data(sched, window=50)
    assert (line["first"], line["hidden_before"], line["hidden_after"]) == (0, 0, 120)
    assert "120 steps with work after not drawn" in timeline_chart(line)
    moved = cd.timeline_data(sched, window=50, around=100)  # steps 75 ... 124
    assert moved["first"] == 75 and moved["hidden_before"] == 60 and moved["hidden_after"] == 60
    title = re.search(r"<title>(.*?)</title>", picture_for_step(sched, 500)).group(1)
    assert title.startswith("Step 500 ran no work (steps with work: 0…198); drawn instead:")
    title = re.search(r"<title>(.*?)</title>", picture_for_step(sched, 100)).group(1)
    assert title.startswith("Engine step 100:")


# (knobs, the head's words, their colour (notebook 2's for the kind), the map's legend, the map's cells at S 1 ... 3);
# the 2 + 3 prompts of the default workload
START_ROWS = [
    # S 2, K 2, B 2: the MTP warmup needs B >= K + 2 = 4, so start-up dies of IndexError, not
    # the overflow: never starts (notebook 2's key, brown); S 3 > B = 2 refused
    ({"max_num_seqs": 2, "num_speculative_tokens": 2, "max_num_batched_tokens": 2},
     "✗ never starts (not the overflow)", "#8c510a", "never starts (not the overflow)",
     ["never_starts", "never_starts", "invalid"]),
    # S 1, K 0: C = 1, W = 2 is the 2-token capture: the overflow at start-up, red; S 2, 3:
    # the 5-token step exceeds W = 3, 4 and is all-resident, so they serve it all
    ({"max_num_seqs": 1}, "✗ crash at start-up", plots.PALETTE[cd.CRASH], "start-up crash",
     ["startup_crash", "safe", "safe"]),
]


@pytest.mark.parametrize("knobs, words, colour, legend, cells", START_ROWS)
def test_a_server_that_never_starts_is_never_a_start_up_crash(knobs, words, colour, legend,
                                                              cells):
    """A run dead at start-up is named by the one verdict's kind: never starts (grey, notebook
    2's words) where the server never starts, a red start-up crash only for the overflow."""
    dash = _dash(**knobs)
    assert f"<b style='color:{colour}'>{words}</b>" in dash.head.value
    assert f"<b style='color:{colour}'>{words.removeprefix('✗ ')}</b>" in dash.numbers.value
    assert f"class='hs-legend'>{legend}</text>" in dash.search.value
    assert dash.search_data["strip"]["outcome"][:3] == cells
    assert ("crash at start-up" in dash.head.value) == (cells[0] == "startup_crash")


# draw_step past the run: the default S 4 run of 3 + 2 dies at step 0 (5 = W tokens); every
# step it never ran, near or far, gets the one note and the default step's own title
MISSING_ROWS = [(1, "step 0"), (5, "step 0"), (99, "step 0")]


@pytest.mark.parametrize("step, drawn", MISSING_ROWS)
def test_a_draw_step_that_never_ran_is_said_once(step, drawn):
    """A draw_step the run never reached gets one note above the picture, and the picture's
    title does not say it again."""
    dash = _dash(draw_step=step)
    assert dash.numbers.value.count(f"draw_step {step}: no such step ran (the run died at "
                                    "step 0)") == 1
    assert "ran no work" not in dash.numbers.value
    assert f"<title>Engine {drawn}: its 5 routed tokens" in dash.numbers.value
