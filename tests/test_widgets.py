"""The notebooks' dashboards, driven without a browser (set ``.value``, read what they show).

Every expectation is computed here from the model's own API
(:func:`hisparse_model.answers.predict`) or from the arithmetic in the case tables, never
read back from the widget code.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
from html import escape
import xml.etree.ElementTree as ET

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hisparse_model import VLLM_VERSIONS, Knobs, predict

from hisparse_model.model import routing
from hisparse_model.text import chart_data as cd
from hisparse_model import views as widgets
from hisparse_model.model.knobs import knob_specs
from hisparse_model.recorded.recordings import compare_recording, expected_log, load_all
from hisparse_model.model.versions import RULES
from hisparse_model.views import primer
from hisparse_model.views import svg as plots
from hisparse_model.views import traffic
from hisparse_model.views.digest import read_digests
from hisparse_model.views.page import app_page
from hisparse_model.views.primer import where_in_vllm

SVG = "<svg"

# (max_num_seqs, num_speculative_tokens, max_num_batched_tokens) -> (B, q, C, W)
OFF_BY_ONE_CASES = [
    ((2, 0, None), (640, 1, 2, 3)),  # B = min(2*320, 16384) = 640; C = min(640, 2*1) = 2; W = 3
    ((1, 0, None), (320, 1, 1, 2)),  # B = min(1*320, 16384) = 320; C = min(320, 1*1) = 1; W = 2
    ((2, 2, None), (640, 3, 6, 7)),  # q = 1 + 2 = 3; C = min(640, 2*3) = 6; W = 7
    ((16, 0, None), (5120, 1, 16, 17)),  # B = 16*320 = 5120; C = 16; W = 17
    ((4, 0, 4), (4, 1, 4, 5)),  # B = 4 (set); C = min(4, 4*1) = 4; W = 5
    ((8, 1, 10), (10, 2, 10, 11)),  # q = 2; C = min(10, 8*2) = 10: B caps C; W = 11
    ((256, 4, None), (16384, 5, 1280, 1281)),  # B = min(81920, 16384); C = min(16384, 256*5) = 1280
]


def _set(dash, **values) -> None:
    for name, value in values.items():
        dash.controls[name].value = value


def _slider_b(b):
    return 0 if b is None else b  # the slider's 0 means "not set"


@pytest.fixture(scope="module")
def off_by_one():
    return widgets.off_by_one_dashboard()


@pytest.mark.parametrize(("knobs", "expected"), OFF_BY_ONE_CASES)
def test_off_by_one_numbers_follow_the_sliders(off_by_one, knobs, expected):
    """The displayed B, q, C, W and crash size equal predict()'s for the slider values."""
    s, k, b = knobs
    dash = off_by_one
    _set(dash, max_num_seqs=s, num_speculative_tokens=k, max_num_batched_tokens=_slider_b(b))
    pred = predict(Knobs(max_num_seqs=s, num_speculative_tokens=k, max_num_batched_tokens=b))
    sz = pred.sizes
    assert (sz.max_num_batched_tokens, sz.max_decode_query_len, sz.swap_capacity,
            sz.workspace_rows) == expected
    assert dash.error is None
    assert dash.labels["B"] == str(expected[0])
    assert dash.labels["q"] == str(expected[1])
    assert dash.labels["C"] == str(expected[2])
    assert dash.labels["W"] == str(expected[3])
    # the crash is at n = W, unless C = B: then no step holds W = B + 1 tokens
    crash = "none" if expected[2] == expected[0] else str(expected[3])
    assert dash.labels["crash_size"] == crash
    assert dash.labels["summary"] == (
        f"B={expected[0]} q={expected[1]} C={expected[2]} W={expected[3]} crash_size={crash}"
    )
    assert dash.labels["crash_error"] == (
        "" if crash == "none" else routing.swap_error(expected[3], expected[2]))
    assert dash.last_prediction.sizes == sz
    assert f"<span class='hs-C'>{expected[2]}</span>" in dash.numbers.value
    assert f"<span class='hs-W'>{expected[3]}</span>" in dash.numbers.value


@pytest.mark.parametrize(("knobs", "expected"), OFF_BY_ONE_CASES)
def test_off_by_one_plot_data_is_the_routing(off_by_one, knobs, expected):
    """Each lane at n <= B is vLLM's rule, stated here: 0.31.0 swap_in up to W = C + 1 (a crash
    at W), 0.32.0 up to C; n > B holds no batch."""
    s, k, b = knobs
    big_b, _, c, w = expected
    dash = off_by_one
    _set(dash, max_num_seqs=s, num_speculative_tokens=k, max_num_batched_tokens=_slider_b(b))
    data = dash.plot_data
    assert data["n"] == list(range(max(1, c - 5), w + 6))  # zoomed: C - 5 ... W + 5
    assert (data["C"], data["W"]) == (c, w)
    stock, fixed = cd.OFF_BY_ONE_LANES
    # 0.31.0 (index_group.py:236): swap_in while n <= W = C + 1; swap_in holds C rows, so n = W
    # raises; no batch holds more than B tokens
    assert data["lanes"][stock] == [
        cd.OVER_B if n > big_b else "swap_in" if n <= c else "crash" if n == w else "all_resident"
        for n in data["n"]]
    # 0.32.0: swap_in while n <= C, all-resident above
    assert data["lanes"][fixed] == [cd.OVER_B if n > big_b else "swap_in" if n <= c
                                    else "all_resident" for n in data["n"]]
    assert data["crash_sizes"][stock] == ([] if w > big_b else [w])  # 0.31.0: one size, if any
    assert data["crash_sizes"][fixed] == []  # 0.32.0: none
    assert dash.chart.value.startswith(SVG)


def test_off_by_one_tracks_a_sequence_of_moves():
    """Moving max_num_seqs 2 -> 1 -> 3 updates C, W and the crash marker each time (the browser test's move)."""
    dash = widgets.off_by_one_dashboard(max_num_seqs=2)
    seen = []
    for s in (2, 1, 3):  # C = s, W = s + 1 with default B and no speculation
        dash.controls["max_num_seqs"].value = s
        seen.append((dash.labels["C"], dash.labels["W"], dash.labels["crash_size"]))
        assert dash.state["max_num_seqs"] == s
    assert seen == [("2", "3", "3"), ("1", "2", "2"), ("3", "4", "4")]


def test_invalid_knobs_show_the_model_error_instead_of_a_traceback():
    """max_num_batched_tokens < max_num_seqs shows vLLM's ValueError text; fixing it clears it."""
    dash = widgets.off_by_one_dashboard(max_num_seqs=2)
    with pytest.raises(ValueError) as exc:
        predict(Knobs(max_num_seqs=5, max_num_batched_tokens=3))
    _set(dash, max_num_batched_tokens=3, max_num_seqs=5)  # B = 3 < S = 5
    assert dash.error == str(exc.value)
    assert "max_num_batched_tokens" in dash.error
    assert str(exc.value) in dash.message.value.replace("&gt;", ">").replace("&lt;", "<")
    assert dash.labels["error"] == dash.error
    assert dash.plot_data == {}
    assert dash.chart.layout.display == "none"
    dash.controls["max_num_seqs"].value = 3  # B = 3 >= S = 3: valid again, C = min(3, 3) = 3
    assert dash.error is None and dash.message.value == ""
    assert dash.labels["C"] == "3" and dash.labels["W"] == "4"
    assert dash.chart.layout.display is None


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(s=st.integers(1, 256), k=st.integers(0, 4), b=st.one_of(st.none(), st.integers(1, 4096)))
def test_route_lanes_crash_only_at_w(s, k, b):
    """For any valid knobs, 0.31.0 crashes at exactly one routed size, W = C + 1; 0.32.0 never."""
    try:
        pred = predict(Knobs(max_num_seqs=s, num_speculative_tokens=k, max_num_batched_tokens=b))
    except ValueError:
        return  # vLLM rejects the knobs (B < S): nothing to route
    c = pred.sizes.swap_capacity
    data = cd.route_lanes(c)
    stock, fixed = cd.OFF_BY_ONE_LANES
    assert data["crash_sizes"][stock] == [pred.sizes.workspace_rows]
    assert data["crash_sizes"][fixed] == []


# --------------------------------------------------------------------------
# notebook 2
# --------------------------------------------------------------------------

# max_num_seqs -> (capture sizes, start-up error or None, outcome of prompts 2, 3, 200)
STARTUP_CASES = [
    # cap = min(2*1*1, 512) = 2 -> [1, 2]; the 2-token capture routes n = 2 = W -> swap_in > C = 1
    (1, [1, 2], routing.swap_error(2, 1), ["crash", "ok", "ok"]),
    # cap = 4 -> [1, 2, 4]; no 3-token start-up batch; the 3-token prompt is W = 3 -> crash
    (2, [1, 2, 4], None, ["ok", "crash", "ok"]),
    # cap = 6 -> [1, 2, 4] + uniform decode size 3 -> [1, 2, 3, 4]; W = 4: no prompt of 4
    (3, [1, 2, 3, 4], None, ["ok", "ok", "ok"]),
]


@pytest.mark.parametrize(("s", "captures", "startup_error", "prompts"), STARTUP_CASES)
def test_startup_dashboard_shows_captures_and_where_it_dies(s, captures, startup_error, prompts):
    """Capture sizes, start-up outcome and prompt outcomes on screen equal predict()'s."""
    dash = widgets.startup_dashboard(max_num_seqs=2)
    dash.controls["max_num_seqs"].value = s
    pred = predict(Knobs(max_num_seqs=s), [2, 3, 200])
    assert pred.capture_sizes == captures
    assert pred.startup_error == startup_error
    assert ["ok" if p.ok else "crash" for p in pred.prompts] == prompts
    assert dash.labels["capture_sizes"] == ", ".join(map(str, captures))
    assert dash.labels["startup"] == ("ok" if startup_error is None else startup_error)
    shown, dead = [], startup_error is not None
    for o in prompts:  # a dead engine serves nothing: after start-up's or a prompt's crash
        shown.append("not_run" if dead else o)
        dead = dead or o == "crash"
    assert dash.labels["prompts"] == ",".join(f"{n}:{o}" for n, o in zip((2, 3, 200), shown))
    crash = pred.startup_crash_batch
    startup_word = "ok" if crash is None else f"crash(n={crash.routed})"
    assert dash.labels["summary"] == (
        f"max_num_seqs={s} C={s} W={s + 1} capture_sizes={','.join(map(str, captures))} "
        f"startup={startup_word} prompts={dash.labels['prompts']}"
    )
    if startup_error:  # the crashing row is highlighted, and is the table's last row
        table = dash.numbers.value.split("start-up batches in engine order")[1]
        table = table.split("</table>")[0]
        assert table.count("<tr class='hs-crash'>") == 1
        assert table.rsplit("<tr", 1)[1].startswith(" class='hs-crash'>")
        assert "not run: the engine died at start-up" in dash.numbers.value
    assert dash.plot_data["current"] == s


def _expected_sweep(base: dict) -> dict[int, str]:
    """Outcome per max_num_seqs, from predict() with every prompt length 1..max_model_len-1."""
    out = {}
    for s in range(1, 257):
        try:
            k = Knobs(**{**base, "max_num_seqs": s})
        except ValueError:
            out[s] = "invalid"
            continue
        try:
            pred = predict(k)
        except ValueError:  # e.g. max_num_batched_tokens < max_num_seqs
            out[s] = "invalid"
            continue
        if not pred.startup_ok:
            out[s] = "startup_crash"
            continue
        w = pred.sizes.workspace_rows
        probe = predict(k, [w]) if w < k.max_model_len else None
        out[s] = "runtime_crash" if probe is not None and not probe.prompts[0].ok else "safe"
    return out


@pytest.mark.parametrize(
    ("base", "summary"),
    [
        # default B: S = 1 dies at start-up (2-token capture), every other S on a W-token prompt
        ({}, "sweep invalid=none never_starts=none startup_crash=1 runtime_crash=2-256 "
             "exposed=none undecided=none safe=none"),
        # B = 64: S = 63 dies at start-up (warmup prefill of min(63, 64 // 2) = 32 requests
        # x 2 tokens = 64 = W); S = 64 has C = B = 64, W = 65 > B: no batch is ever that big;
        # S > 64 is rejected (B < S)
        ({"max_num_batched_tokens": 64},
         "sweep invalid=65-256 never_starts=none startup_crash=1,63 runtime_crash=2-62 "
         "exposed=none undecided=none safe=64"),
    ],
)
def test_max_num_seqs_sweep_matches_predict(base, summary):
    """The chart's outcome per max_num_seqs equals predict() on start-up and on a W-token prompt."""
    dash = widgets.startup_dashboard(max_num_batched_tokens=base.get("max_num_batched_tokens"))
    expected = _expected_sweep({"vllm_version": "0.31.0", **base})
    got = dict(zip(dash.plot_data["max_num_seqs"], dash.plot_data["outcome"]))
    assert got == expected
    assert dash.labels["sweep_summary"] == summary


@pytest.mark.parametrize("s", [1, 2, 3, 5, 8])
def test_w_is_the_only_crashing_prompt_length(s):
    """Under 0.31.0 with default B, the only single-prompt length that crashes is W (the chart's premise)."""
    k = Knobs(max_num_seqs=s)
    alone = [predict(k, [n]) for n in range(1, k.max_model_len)]  # each prompt served alone
    crashing = [p.prompts[0].n for p in alone if not p.prompts[0].ok]
    assert crashing == [alone[0].sizes.workspace_rows]  # W = S + 1 here


def test_enforce_eager_moves_the_crash_from_startup_to_a_prompt():
    """max_num_seqs=1 with enforce_eager: no captures, start-up survives, the 2-token prompt crashes."""
    dash = widgets.startup_dashboard(max_num_seqs=1)
    assert dash.labels["startup"] == routing.swap_error(2, 1)
    dash.controls["enforce_eager"].value = True
    pred = predict(Knobs(max_num_seqs=1, enforce_eager=True), [2, 3, 200])
    assert pred.capture_sizes == [] and pred.startup_ok
    assert dash.labels["capture_sizes"] == "none"
    assert dash.labels["startup"] == "ok"
    assert dash.labels["prompts"] == "2:crash,3:not_run,200:not_run"  # dead after prompt 1
    assert pred.startup == [] and "hs-empty-startup" in dash.numbers.value  # says why it is empty


# --------------------------------------------------------------------------
# notebook 3
# --------------------------------------------------------------------------


def _per_version(backend: str, s: int, lens: list[int], routing_mode: str = "stock") -> dict:
    out = {}
    for v in VLLM_VERSIONS:
        mode = routing_mode if v == "0.31.0" else "stock"
        p = predict(Knobs(vllm_version=v, max_num_seqs=s, attention_backend=backend,
                          routing=mode), lens)
        prompts = ",".join(f"{o.n}:{'not_run' if not o.ran else 'ok' if o.ok else 'crash'}"
                           for o in p.prompts)
        out[v] = f"startup={'ok' if p.startup_ok else 'crash'} prompts={prompts}"
    return out


# (backend, routing, max_num_seqs, prompts) -> which versions crash where
VERSION_CASES = [
    ("FLASH_ATTN_MLA_SPARSE", "stock", 2, [2, 3, 200]),  # 0.31.0: prompt 3 = W crashes
    ("FLASH_ATTN_MLA_SPARSE", "fix", 2, [2, 3, 200]),  # the fix: 3 > C = 2 -> all-resident
    ("FLASH_ATTN_MLA_SPARSE", "stock", 1, [2, 3, 200]),  # 0.31.0: start-up crash (n = 2 = W)
    ("FLASHMLA_SPARSE", "stock", 1, [2, 3, 200]),  # prefill staged: never routed, no crash
    ("FLASHMLA_SPARSE", "stock", 2, [2, 3, 200]),
]


@pytest.mark.parametrize(("backend", "routing_mode", "s", "lens"), VERSION_CASES)
def test_versions_side_by_side_equal_predict(backend, routing_mode, s, lens):
    """Each version column's start-up and prompt outcomes equal predict() for that version."""
    dash = widgets.versions_dashboard()
    _set(dash, attention_backend=backend, routing=routing_mode, max_num_seqs=s,
         prompt_lens=", ".join(map(str, lens)))
    want = _per_version(backend, s, lens, routing_mode)
    for v in VLLM_VERSIONS:
        assert dash.labels[v] == want[v]
    assert dash.labels["summary"] == (
        f"backend={backend} routing={routing_mode} | "
        + " | ".join(f"{v} {want[v]}" for v in VLLM_VERSIONS)
    )


def test_version_selector_picks_the_detailed_version():
    """The selected version's prediction and batch table are the ones shown in detail."""
    dash = widgets.versions_dashboard(max_num_seqs=2, prompt_lens="3")
    for v in VLLM_VERSIONS:
        dash.controls["vllm_version"].value = v
        pred = predict(Knobs(vllm_version=v, max_num_seqs=2), [3])
        assert dash.last_prediction.knobs.vllm_version == v
        assert dash.state["vllm_version"] == v
        first = pred.prompts[0].batches[0]
        assert dash.last_prediction.prompts[0].batches[0] == first
        assert f"each request's batches in {v}" in dash.numbers.value
        assert dash.plot_data["selected"] == v


@pytest.mark.parametrize("s", [1, 2, 3, 16])
def test_flashmla_sparse_never_crashes(s):
    """With FLASHMLA_SPARSE no prompt length crashes in any version (prefill tokens are staged)."""
    dash = widgets.versions_dashboard(attention_backend="FLASHMLA_SPARSE", max_num_seqs=s)
    for v in VLLM_VERSIONS:
        assert CRASH_FREE(dash.plot_data["lanes"][v])
        knobs = Knobs(vllm_version=v, max_num_seqs=s, attention_backend="FLASHMLA_SPARSE")
        alone = [predict(knobs, [n]) for n in range(1, 320)]  # each prompt served alone
        assert all(p.startup_ok and p.prompts[0].ok for p in alone)


def CRASH_FREE(outcomes: list[str]) -> bool:
    return cd.CRASH not in outcomes


@pytest.mark.parametrize(("s", "b", "crashes"), [
    (2, None, [3]),  # C = 2, W = 3; B = 640 > every prompt: only n = 3 has a 3-token chunk
    (2, 64, [3, 67, 131, 195, 259]),  # chunks of 64: the last chunk is 3 when n = 64k + 3
    (1, None, []),  # W = 2 is a capture: start-up crashes, no prompt runs in 0.31.0
])
def test_prompt_lanes_follow_predict(s, b, crashes):
    """Each lane cell is predict()'s for that prompt served alone: its crash or its last prefill
    chunk's route (``prefill_route``)."""
    dash = widgets.versions_dashboard(max_num_seqs=s)
    dash.controls["max_num_batched_tokens"].value = _slider_b(b)
    data = dash.plot_data
    assert data["n"] == list(range(1, 320))  # every prompt length below max_model_len = 320
    for v in VLLM_VERSIONS:
        knobs = Knobs(vllm_version=v, max_num_seqs=s, max_num_batched_tokens=b)
        want = []
        for p in (predict(knobs, [n]).prompts[0] for n in data["n"]):
            want.append("not_run" if not p.ran else "crash" if not p.ok
                        else (p.prefill_route or "not_routed"))
        assert data["lanes"][v] == want
    assert data["crash_sizes"] == {"0.31.0": crashes, "0.32.0": [], "0.33.0": [], "0.34.0": []}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2, abc", "prompt_lens: prompt 2 ('abc') is not an integer"),  # counted from 1
        ("2, 400", None),  # 400 >= max_model_len = 320: the model's own message
    ],
)
def test_workload_box_errors_are_shown(text, message):
    """A bad workload shows the error text in the dashboard, then a good one recovers."""
    dash = widgets.versions_dashboard()
    dash.controls["prompt_lens"].value = text
    if message is None:
        with pytest.raises(ValueError) as exc:
            predict(Knobs(), [2, 400])
        message = str(exc.value)
    assert dash.error == message
    title = "typo in prompt_lens:" if "not an integer" in message else "vLLM would reject"
    assert title in dash.message.value  # a typo is called a typo
    dash.controls["prompt_lens"].value = "2, 3"
    assert dash.error is None
    assert dash.state["prompt_lens"] == [2, 3]


# --------------------------------------------------------------------------
# notebook 4
# --------------------------------------------------------------------------


def _fake_recording(knobs: dict, lens: list[int], **override) -> dict:
    """A recording as the engine would write it if it behaved exactly as predicted."""
    pred = predict(Knobs(**knobs), lens)
    ran, prompts, ran_count = pred.startup_ok, [], 0
    for p in pred.prompts:
        prompts.append({"n": p.n, "ran": ran, "ok": p.ok if ran else None,
                        "error": p.error if ran else None})
        ran_count += ran
        if ran and not p.ok:
            ran = False  # the engine is dead after a crash
    sizes = {"workspace_rows": pred.sizes.workspace_rows, "swap_capacity": pred.sizes.swap_capacity}
    rec = {
        "schema": 1, "knobs": Knobs(**knobs).as_dict(), "prompt_lens": lens,
        "provenance": {"vllm": knobs.get("vllm_version", "0.31.0"), "torch": "x", "gpu": "H200",
                       "date": "2026-01-01"},
        "engine": {"capture_sizes": pred.capture_sizes,
                   "max_num_batched_tokens": pred.sizes.max_num_batched_tokens,
                   "max_decode_query_len": pred.sizes.max_decode_query_len,
                   "swap_capacity": pred.sizes.swap_capacity,
                   "cudagraph_mode": pred.cudagraph_mode,
                   "attention_backends": [pred.knobs.attention_backend]},
        "startup": {"ok": pred.startup_ok, "error": pred.startup_error},
        "prompts": prompts,
        "routing_log": [{**row, **sizes} for row in expected_log(pred, ran_prompts=ran_count)],
    }
    rec.update(override)
    return rec


def test_recordings_table_shows_compare_recordings_verdict(tmp_path):
    """Recordings equal to predict() agree; a changed error, an OOM or a missing recording differ."""
    agree = _fake_recording({"max_num_seqs": 2}, [2, 3, 200])
    dies = _fake_recording({"max_num_seqs": 1}, [2, 3])
    wrong = _fake_recording({"max_num_seqs": 2}, [2, 3, 200])
    wrong["prompts"][1]["error"] = routing.swap_error(4, 3)  # not what the model says
    oom = _fake_recording({"max_num_seqs": 2}, [2], startup={
        "ok": False, "error": "ValueError: No available memory for the cache blocks."})
    oom["prompts"][0].update(ran=False, ok=None, error=None)
    stub = {"knobs": Knobs().as_dict(), "prompt_lens": [2], "child": "exit 1"}
    for i, rec in enumerate([agree, dies, wrong, oom]):
        (tmp_path / f"r{i}.json").write_text(json.dumps(rec))
    dash = widgets.recordings_dashboard(directory=str(tmp_path))
    verdicts = {r["name"]: r["agrees"] for r in dash.rows}
    assert verdicts == {"r0": True, "r1": True, "r2": False, "r3": False}
    for row, rec in zip(dash.rows, load_all(str(tmp_path))):
        assert row["diffs"] == compare_recording(rec)  # the one verdict, not a second one
    assert dash.labels["summary"].startswith("recordings=4 agree=2 differ=2 | r0: ")
    # the chart: start-up + each prompt; the engine's square vs the model's dot
    row = dash.plot_data["rows"][1]  # max_num_seqs=1: dies at start-up, no prompt runs
    assert list(zip(row["model_keys"], row["engine_keys"])) == [
        ("crash", "crash"), ("not_run", "not_run"), ("not_run", "not_run")]
    assert dash.plot_data["rows"][3]["engine_keys"][0] == "other_error"  # the OOM
    live = widgets.recordings_dashboard([stub], name="live")
    assert live.rows[0]["agrees"] is False and "no recording" in live.rows[0]["diffs"][0]
    assert "live" in read_digests(live.numbers.value)
    empty = widgets.recordings_dashboard([])
    assert empty.labels["summary"] == "recordings=0 agree=0 differ=0"


def test_recordings_dashboard_loads_the_committed_recordings():
    """Notebook 4's default source is tests/recorded/*.json, one row per file, in file order."""
    recs = load_all()
    dash = widgets.recordings_dashboard()
    assert [r["name"] for r in dash.rows] == [
        os.path.splitext(os.path.basename(r["_path"]))[0] for r in recs]
    assert dash.labels["recordings"] == str(len(recs))
    if recs:
        name = dash.rows[-1]["name"]
        dash.controls["recording"].value = name
        assert dash.state["recording"] == name
        assert dash.plot_data["selected"] == name  # the chart highlights the picked row
        assert f"<tr class='hs-selected'><td><b>{name}</b>" in dash.numbers.value


# --------------------------------------------------------------------------
# every chart and every control
# --------------------------------------------------------------------------

FACTORIES = ["off_by_one_dashboard", "startup_dashboard", "versions_dashboard",
             "recordings_dashboard"]


@pytest.mark.parametrize("factory", FACTORIES)
def test_charts_have_title_labels_legend_and_palette_colours(factory):
    """Every chart has a title, lane labels, a legend, palette colours only and no text under 11 px."""
    dash = getattr(widgets, factory)()
    root = ET.fromstring(dash.chart.value)
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert root.find("s:title", ns).text
    texts = root.findall(".//s:text", ns)
    classes = [t.get("class") for t in texts]
    assert "hs-lane-label" in classes and "hs-legend" in classes
    assert all(int(t.get("font-size")) >= 11 for t in texts)  # drawn at display size
    fills = {r.get("fill").lower() for r in root.iter() if r.get("fill")}
    allowed = {c.lower() for c in plots.PALETTE.values()} | {
        plots.INK, plots.HIGHLIGHT, "#fff", "#ffffff", "none", "#000", "#e5f5e0", "#f7f7f7"}
    assert fills <= allowed, fills - allowed


@pytest.mark.parametrize("factory", FACTORIES[:3])
def test_controls_are_generated_from_the_knob_declaration(factory):
    """Each knob control is named after its knob, carries its help, and honours its limits."""
    dash = getattr(widgets, factory)()
    specs = {s.name: s for s in knob_specs()}
    knob_controls = {n: c for n, c in dash.controls.items() if n in specs}
    assert knob_controls
    for name, c in knob_controls.items():
        spec = specs[name]
        assert c.description == name and c.tooltip == spec.help
        if spec.kind is int:
            assert c.min >= (0 if spec.optional else spec.minimum)
            box = dash.number_boxes[name]  # the slider's number box follows it both ways
            c.value = c.min + 1
            assert box.value == c.min + 1
            box.value = c.min + 2
            assert c.value == c.min + 2
        elif spec.kind is str:
            assert set(spec.choices) <= set(c.options)
            assert ("default" in c.options) == spec.optional


STRIP_BASES = [
    {},  # default B: S = 1 dies at start-up, every other S on a W-token prompt
    {"max_num_batched_tokens": 64},  # S = 63 start-up (warmup prefill 32 x 2 = 64 = W), 64 safe
    {"num_speculative_tokens": 2},  # q = 3
    {"enforce_eager": True},  # no captures, no warmup: never a start-up crash
    {"cudagraph_mode": "PIECEWISE"},  # outside the sweep's closed forms: predict() per S
    {"attention_backend": "FLASHMLA_SPARSE"},  # prefill staged: safe everywhere
    {"vllm_version": "0.32.0"},  # the fix: safe everywhere
]


STRIP_FULL_CHECK = {1, 2, 3, 4, 5, 8, 63, 64, 65, 200}  # S checked on every prompt length


@pytest.mark.parametrize("moved", ["slider", "box"])
def test_a_browser_move_sends_the_numbers_first_and_no_echo(monkeypatch, moved):
    """A browser's value: the numbers go out (and are flushed), then the chart, then the partner.

    Every widget message the browser handles before the numbers or the chart can delay
    them, so the control's own echo is off, the numbers leave the kernel before the chart
    is computed, and the number box (or slider) that follows is sent last.
    """
    sent = []
    monkeypatch.setattr(widgets.dashboard.W.Widget, "_send",
                        lambda self, msg, buffers=None: sent.append((self, msg["method"])))
    monkeypatch.setattr(widgets.dashboard.outbox, "send_now",
                        lambda: sent.append(("send_now", "flush")))
    dash = widgets.off_by_one_dashboard(max_num_seqs=2)
    slider, box = dash.controls["max_num_seqs"], dash.number_boxes["max_num_seqs"]
    source, partner = (slider, box) if moved == "slider" else (box, slider)
    sent.clear()
    source.set_state({"value": 3})  # what the widget's comm does with a browser's message
    assert (slider.value, box.value, dash.labels["C"]) == (3, 3, "3")
    assert [(w, m) for w, m in sent if m not in ("update", "flush")] == []  # no echo_update
    assert [w for w, _ in sent] == [dash.numbers, "send_now", dash.chart, partner]


# dashboard -> (moves one step away, screens ahead).  B = 1 is refused everywhere (B >= S = 2,
# traffic: S = 4), so it is the one move left out; a prompt box has no move.
AHEAD_CASES = [
    # max_model_len 319 and 321 are two more moves on every knob dashboard
    ("off_by_one_dashboard", 6, 5),  # S 1, 3; K 1; B 1 (refused); max_model_len 2
    ("startup_dashboard", 16, 15),  # version 3 + backend 1 + S 2 + K 1 + B 1 + len 2 + eager 1
    #                                 + graphs 5
    ("versions_dashboard", 11, 10),  # version 3 + backend 1 + routing 1 + S 2 + K 1 + B 1 + len 2
    ("traffic_dashboard", 23, 22),  # requests 2 + spacing 1 + max_tokens 2 + version 3 + routing 1
    #                                 + backend 1 + S 2 + B 1 + len 2 + K 1 + caching 1 + eager 1
    #                                 + graphs 5
    ("recordings_dashboard", 0, 0),  # one of 36 recordings (> MAX_CHOICES_AHEAD): none ahead
]


@pytest.mark.parametrize(("factory", "n_moves", "n_ahead"), AHEAD_CASES)
def test_each_screen_ahead_is_what_that_move_shows(factory, n_moves, n_ahead):
    """A screen ahead is, byte for byte, the numbers the kernel shows after that one move."""
    dash = (getattr(widgets, factory, None) or getattr(traffic, factory))()
    ahead = dash.screens_ahead()
    tried = []
    for name, c in dash.controls.items():
        for synced in widgets.controls.moves(c):
            key, before = dash.state_key(**{name: synced}), c.value
            c.value = widgets.controls.value_at(c, synced)
            assert dash.state_key() == key  # the page keys the state the same way
            tried.append(key)
            if key in ahead:
                assert dash.numbers.value == ahead[key], (name, synced)
            else:  # only a move the kernel answers with an error is left out
                assert dash.error is not None, (name, synced)
            c.value = before
    assert (len(tried), len(ahead)) == (n_moves, n_ahead)
    assert set(ahead) <= set(tried)


def test_no_screens_ahead_while_an_error_is_shown():
    """After an error the page waits for the kernel: nothing ahead would clear the message."""
    dash = widgets.startup_dashboard()
    dash.controls["prompt_lens"].value = "2, x"
    assert dash.error is not None and dash.screens_ahead() == {}


# a control's synced value -> its part of a state key, as the page's String(value) writes it
STATE_PARTS = [(3, "3"), (0, "0"), (True, "true"), (False, "false"), (None, "null"),
               ("FLASHMLA_SPARSE", "FLASHMLA_SPARSE"), ("2, 3, 200", "2, 3, 200")]


@pytest.mark.parametrize(("value", "text"), STATE_PARTS)
def test_state_key_parts_are_javascripts_strings(value, text):
    """Python writes each value as JavaScript's String() does, so both sides key a state alike."""
    assert widgets.numbers_pane.state_part(value) == text


def test_the_kernel_sends_the_screens_ahead_once_idle():
    """In a running loop: all of them once idle, anew per update, none while an error shows."""
    async def moves():
        dash = widgets.off_by_one_dashboard(max_num_seqs=2)
        assert dash.numbers.ahead == {}
        await asyncio.sleep(widgets.dashboard.AHEAD_AFTER_S + 0.3)
        first = dash.numbers.ahead
        assert first and first == dash.screens_ahead()
        dash.controls["max_num_seqs"].value = 3
        assert dash.numbers.ahead == first  # still right (S = 2 is one of them) until replaced
        await asyncio.sleep(widgets.dashboard.AHEAD_AFTER_S + 0.3)
        assert dash.numbers.ahead == dash.screens_ahead() != first
        dash.controls["max_num_batched_tokens"].value = 1  # refused: B = 1 < S = 3
        assert dash.error is not None and dash.numbers.ahead == {}  # withdrawn at once

    asyncio.run(moves())


# (prompt_lens typed, pauses for the browser): only numbers followed by a chart are pushed out
PAUSES = [
    ("2, 3, 67", 1),  # numbers, then the strip: one send_now between them
    ("2, x", 0),  # a typo: the message is shown, no chart follows, nothing to wait for
]


@pytest.mark.parametrize("typed,pauses", PAUSES)
def test_the_kernel_pauses_for_the_browser_only_before_a_chart(monkeypatch, typed, pauses):
    """send_now runs once per update that has a chart to compute, never after an error."""
    dash = widgets.startup_dashboard(max_num_seqs=2)
    calls = []
    monkeypatch.setattr(widgets.dashboard.outbox, "send_now", lambda: calls.append(1))
    dash.controls["prompt_lens"].value = typed
    assert len(calls) == pauses
    assert (dash.error is None) == (pauses == 1)


@pytest.mark.parametrize("base", STRIP_BASES)
def test_seqs_strip_equals_predict_for_every_max_num_seqs(base):
    """The strip's cell for each S is predict()'s: start-up crash, the smallest crashing prompt;
    where no prompt served alone crashes, the exposure analysis's word for all traffic (several
    requests together may still crash it: exposed, else safe)."""
    from hisparse_model.answers.exposure import exposure

    dash = widgets.startup_dashboard(**base)
    data = dash.plot_data
    for s, shown in zip(data["max_num_seqs"], data["outcome"]):
        try:
            knobs = Knobs(**{**base, "max_num_seqs": s})
            pred = predict(knobs)
        except ValueError:
            assert shown == "invalid", s
            continue
        # the smallest prompt that crashes served alone: every length for a sample of S,
        # else the only candidate, W (a prefill chunk of W tokens is the one that can crash)
        lens = range(1, 320) if s in STRIP_FULL_CHECK else [pred.sizes.workspace_rows]
        first = next((n for n in lens if n < 320 and not predict(knobs, [n]).prompts[0].ok),
                     None)
        want = ("startup_crash" if not pred.startup_ok else
                "runtime_crash" if first is not None else
                "exposed" if exposure(knobs).exposed else "safe")
        assert shown == want, s
        if want == "runtime_crash":
            assert data["first_prompt"][s - 1] == first == pred.sizes.workspace_rows


def test_where_in_vllm_lists_every_version_rule_citation():
    """The collapsible table shows each VersionRules citation of the version, with its meaning."""
    for key, rules in RULES.items():
        html = where_in_vllm(key)
        assert html.startswith("<details")
        for name, cite in rules.cites.items():
            assert escape(primer.MEANING[name]) in html
            # the path may wrap at each "/" (<wbr>), never inside a name
            assert f"vllm/{cite.path}:" in html.replace("<wbr>", "") and escape(cite.symbol) in html
    assert set(primer.MEANING) == set().union(*(r.cites for r in RULES.values()))


def test_app_page_holds_every_dashboard():
    """The standalone app's page has one tab per notebook dashboard, each with its digest."""
    page, dashboards = app_page()
    assert [d.name for d in dashboards.values()] == ["off_by_one", "startup", "versions",
                                                     "recordings", "traffic", "two_gpus",
                                                     "exposure"]
    for d in dashboards.values():
        assert d.name in read_digests(d.numbers.value)


def test_each_app_tab_opens_where_its_notebook_opens():
    """The app's tab of each notebook makes its dashboard with the notebook's own opening
    call's arguments (read from notebooks/*.py), so tab 6 opens at S 3 as notebook 6 does."""
    import ast
    import pathlib

    from hisparse_model.views import exposure, page

    calls = {}
    for nb in sorted(pathlib.Path(__file__).parents[1].glob("notebooks/0*.py")):
        for node in ast.walk(ast.parse(nb.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id.endswith("_dashboard")
                    and node.func.id != "recordings_dashboard"):  # its 2nd call is a live run
                args = tuple(getattr(exposure, a.id) if isinstance(a, ast.Name)
                             else ast.literal_eval(a) for a in node.args)
                kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                calls.setdefault(node.func.id, (args, kwargs))  # the first: the opening
    for title, make in page.TABS:
        if make.__name__ == "recordings_dashboard":
            continue  # notebook 4's second call (a live recording) is not its opening
        assert page.OPENINGS.get(title, ((), {})) == calls.get(make.__name__, ((), {})), title


@pytest.mark.parametrize("make, knobs, step, said", [
    # notebook 6 at S 3 dies at step 2 (an idle rank's dummy padded to C + 1 = 4): step 9
    # never ran; step 2 did
    ("two_gpus", {"max_num_seqs": 3}, 9, True),
    ("two_gpus", {"max_num_seqs": 3}, 2, False),
    ("two_gpus", {"max_num_seqs": 3}, -1, False),   # -1: the default step, nothing to say
    ("traffic", {"max_num_seqs": 4}, 10**5, True),  # far past the last step
])
def test_draw_step_past_the_run_says_so(make, knobs, step, said):
    """A draw_step that names a step the run never reached is said above the picture, which
    then shows the default step; a step that ran is drawn without the note."""
    from hisparse_model.views.traffic import traffic_dashboard
    from hisparse_model.views.two_gpus import two_gpus_dashboard
    dash = {"two_gpus": two_gpus_dashboard, "traffic": traffic_dashboard}[make](
        draw_step=step, **knobs)
    assert dash.error is None
    assert ("hs-missing-step" in dash.numbers.value) is said
    if said:
        assert f"draw_step {step:}: no such step ran" in html.unescape(dash.numbers.value)
