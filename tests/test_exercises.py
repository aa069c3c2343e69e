"""Every "Try this" answer is the model's for the controls its question states, recomputed.

Each question names every control it starts from (``Exercise.start``).  The test sets those
controls on the notebook's own dashboard, reads the knobs and inputs the dashboard then holds
(its ``state``), checks that the answer was computed for exactly that state, and recomputes
the values the answer states from that state with the model's API (``predict``, ``simulate``,
``plan``) and the arithmetic in the comments, never through
:mod:`hisparse_model.views.exercises` itself.
"""

from __future__ import annotations

import html
import pathlib
import re
from dataclasses import fields

import ipywidgets as W
import pytest

from hisparse_model import Knobs, predict, simulate
from hisparse_model.text.chart_data import prompt_lanes
from hisparse_model.inputs.launch import from_command
from hisparse_model.model.plan import plan
from hisparse_model.recorded.recordings import load_all, summary_row
from hisparse_model.views import (off_by_one_dashboard, recordings_dashboard,
                                  startup_dashboard, versions_dashboard)
from hisparse_model.views.controls import UI_RANGE, widen_to
from hisparse_model.views.exercises import EXERCISES, try_this_html
from hisparse_model.views.exposure import exposure_dashboard
from hisparse_model.views.traffic import TrafficDashboard
from hisparse_model.views.two_gpus import two_gpus_dashboard, two_rank_workload
from hisparse_model.schedule.workload import Workload, synthetic
from hisparse_flags import connector_flags

DASHBOARDS = {"off_by_one": off_by_one_dashboard, "startup": startup_dashboard,
              "versions": versions_dashboard, "recordings": recordings_dashboard,
              "traffic": TrafficDashboard, "two_gpus": two_gpus_dashboard,
              "exposure": exposure_dashboard}
VIEW_ONLY = {"draw_step"}  # picks what a picture draws, not what is computed
KNOB_NAMES = {f.name for f in fields(Knobs)}
ROOT = pathlib.Path(__file__).resolve().parents[1]


def set_controls(dash, start: dict):
    """Set each control the question names, as a learner would (a typed value past a
    slider's end widens it); the command first, as its box resets the knobs below it."""
    for name, value in start.items():
        control = dash.controls[name]
        if isinstance(control, W.IntSlider) and not control.min <= value <= control.max:
            widen_to(control, value)
        control.value = value
    return dash


def knobs_of(state: dict) -> Knobs:
    return Knobs(**{n: v for n, v in state.items() if n in KNOB_NAMES})


def k(**kw) -> Knobs:
    return Knobs(**{"vllm_version": "0.31.0", **kw})


def _c(knobs: Knobs):
    try:
        return predict(knobs).sizes.swap_capacity
    except ValueError:
        return None


def _dp_crash(knobs: Knobs):
    crash = simulate(knobs, two_rank_workload(knobs.max_num_seqs)).crash
    return None if crash is None else (crash["step"], crash["rank"], bool(crash["scheduled"]))


def _first_bad(pred):
    return next((i + 1 for i, p in enumerate(pred.prompts) if p.ran and not p.ok), None)


EXPECTED = {
    # S = 2, K = 2: q = 1 + 2 = 3, C = min(640, 2 · 3) = 6, W = 7, the crash is n = W
    ("off_by_one", 0): lambda st: {"q": 3, "C": 6, "W": 7, "crash": [7]},
    # S = B = 4: C = min(4, 4) = 4 = B; W = 5 > B: no crash
    ("off_by_one", 1): lambda st: {"C": 4, "B": 4, "crash": []},
    # B = min(2 · L, 16384) >= 32 > 2 = S · q for every L on the slider: C = 2 throughout
    ("off_by_one", 2): lambda st: {"C": sorted({_c(knobs_of(st).replace(max_model_len=m))
                                                for m in range(UI_RANGE["max_model_len"][0],
                                                               UI_RANGE["max_model_len"][1] + 1,
                                                               97)}),
                                   "range": UI_RANGE["max_model_len"]},
    # C = min(B, 6) for B = 2 … 7 (or refused); K = 2: B = 2, 3 < K + 2 = 4 never start
    # (the MTP warmup has no request: start-up dies of an IndexError, not the overflow)
    ("off_by_one", 3): lambda st: {"C": {b: _c(knobs_of(st).replace(max_num_batched_tokens=b))
                                         for b in range(2, 8)},
                                   "never_starts": [b for b in range(2, 8)
                                                    if b < knobs_of(st).num_speculative_tokens + 2]},
    # captures [1, 2, 4] skip W = 3: start-up survives, the 3-token prompt (prompt 2) crashes
    ("startup", 0): lambda st: {"prompt": _first_bad(predict(knobs_of(st), st["prompt_lens"])),
                                "length": 3, "startup_ok": True},
    # eager, S = 1: W = 2, no start-up batch; prompt 1 (2 tokens) is W
    ("startup", 1): lambda st: {"startup_ok": True, "prompt": _first_bad(
        predict(knobs_of(st), st["prompt_lens"]))},
    # B = 64: each S one by one through predict (the strip uses the vectorised sweep)
    ("startup", 2): lambda st: _strip_by_predict(knobs_of(st)),
    # B = 64: 67 = 64 + 3; lengths 64·j + 3 < 320 crash (3 = W)
    ("versions", 0): lambda st: {"chunks": [64, 3], "crashes": True,
                                 "crash_lengths": [3 + 64 * j for j in range(5)]},
    ("versions", 1): lambda st: {"same": [
        (p.ok, p.error) for p in predict(knobs_of(st), st["prompt_lens"]).prompts]
        == [(p.ok, p.error) for p in predict(knobs_of(st).replace(
            routing="stock", vllm_version="0.32.0"), st["prompt_lens"]).prompts]},
    # FLASHMLA_SPARSE routes decode tokens only: 2- and 3-token prefills are over q = 1
    ("versions", 2): lambda st: {"routed_prefills": []},
    # K = 1: q = 2, C = 4, W = 5: the 5-token prompt, prompt 3
    ("versions", 3): lambda st: {"W": 5, "prompts": [3]},
    ("recordings", 0): lambda st: {"agree": sum(summary_row(r)["agrees"] for r in load_all()),
                                   "total": len(load_all())},
    # the recording's B = 64, S = 2: 67 = 64 + 3; the second chunk routes n = 3 = W
    ("recordings", 1): lambda st: {"routed": 3, "label": "prefill chunk 2/2", "length": 67},
    # prompts 3 + 2 together: step 0 holds 5 = W = C + 1 tokens (S = 4)
    ("traffic", 0): lambda st: {"step": 0, "routed": 5},
    ("traffic", 1): lambda st: _traffic_by_simulate(knobs_of(st), _work(st)),
    # one step apart: 3 tokens, then a decode and 2: never 5 = W
    ("traffic", 2): lambda st: {"crash": simulate(knobs_of(st), _work(st)).crash is not None,
                                "most": max(s.routed_tokens for s in simulate(
                                    knobs_of(st), _work(st)).steps)},
    ("two_gpus", 0): lambda st: {"crash": _dp_crash(knobs_of(st))},
    # a rank crashes where S + 1 is a capture size (3, 7, 15, then every 8) and start-up
    # survives (S = 1: the capture of 2 = W kills start-up)
    ("two_gpus", 1): lambda st: {"crashing": [
        s for s in range(1, 65) if (_dp_crash(knobs_of(st).replace(max_num_seqs=s)) or
                                    (None,))[0] is not None]},
    ("two_gpus", 2): lambda st: {"crash": _dp_crash(knobs_of(st))},
    # serve's defaults: S = 1024, B = 8192, C = 1024; FLASHMLA_SPARSE routes no prefill
    ("exposure", 0): lambda st: _kinds_by_simulate(knobs_of(st)),
    # B = 1024 = C: no step holds C + 1 = 1025 tokens; what a step loses against serve's
    # default B = min(1024 x 163,840, 8192) = 8192: the longest prompt, 163,839 tokens, takes
    # ceil(163,839 / 1024) = 160 steps instead of ceil(163,839 / 8192) = 20
    ("exposure", 1): lambda st: {**_kinds_by_simulate(knobs_of(st)),
                                 "tokens_per_step": (1024, 8192),
                                 "longest_prompt_steps": (160, 20)},
    ("exposure", 2): lambda st: _kinds_by_simulate(knobs_of(st)),
    # max_model_len 1000: a prompt holds at most 999 < 1025 tokens; 513 + 512 together still do
    ("exposure", 3): lambda st: _kinds_by_simulate(knobs_of(st)),
    # S = 2: C = 2, W = 3; a lone 3-token prompt (no burst: 2 + 1 has a 1-token decode-sized one)
    ("exposure", 4): lambda st: _kinds_by_simulate(knobs_of(st)),
    # B = 2 = C: no step holds 3 tokens
    ("exposure", 5): lambda st: _kinds_by_simulate(knobs_of(st)),
}

# what the exposure rows' states must be: the command's knobs, or the knobs typed
SERVED = {0: ("--attention-backend FLASHMLA_SPARSE", "0.31.0"),
          1: ("--max-num-batched-tokens 1024", "0.31.0"), 2: ("", "0.32.0"),
          3: ("--max-model-len 1000", "0.31.0")}


def _work(st: dict) -> Workload:
    return Workload.from_json(st["workload"])


SERVE = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", *connector_flags()]


def _served(extra: str = "", version: str = "0.31.0") -> Knobs:
    return from_command(SERVE + extra.split(), version).knobs


def _kinds_by_simulate(knobs: Knobs) -> dict:
    """Which canonical C + 1-token workloads crash ``simulate``: a lone prompt of C + 1, a
    prompt whose last chunk is C + 1 (B + C + 1 tokens), two prompts arriving together that
    add up to C + 1 (each longer than q = 1); the stops they crash with."""
    p = plan(knobs)
    c, b, top = p.swap_capacity, p.max_num_batched_tokens, knobs.max_model_len - 1
    half = (c + 1) // 2
    canonical = {"lone_prompt": [c + 1] if c + 1 <= min(b, top) else None,
                 "last_chunk": [b + c + 1] if c + 1 <= b and b + c + 1 <= top else None,
                 "burst": [c + 1 - half, half] if half > 1 and knobs.max_num_seqs >= 2
                 and c + 1 <= b else None}
    kinds, stops = [], set()
    for kind, lens in canonical.items():
        if lens is None:
            continue
        crash = simulate(knobs, Workload.from_json([{"prompt_len": n} for n in lens])).crash
        if crash is not None:
            kinds.append(kind)
            stops.add(int(crash["error"].split("stop=")[1].split(",")[0]))
    return {"exposed": bool(kinds), "tokens": sorted(stops), "kinds": kinds}


def _strip_by_predict(base: Knobs) -> dict:
    """The strip by the per-length walk (prompt_lanes), not the vectorised sweep it uses;
    where no lone prompt crashes, the exposure analysis for all traffic."""
    from hisparse_model.answers.exposure import exposure

    out = {"startup_crash": [], "runtime_crash": [], "exposed": [], "safe": [], "invalid": []}
    for s in range(1, 257):
        knobs = base.replace(max_num_seqs=s)
        lanes = prompt_lanes(knobs)
        alive, crashes = lanes["startup_ok"]["0.31.0"], lanes["crash_sizes"]["0.31.0"]
        kind = ("invalid" if alive is None else "startup_crash" if not alive else
                "runtime_crash" if crashes else
                "exposed" if exposure(knobs).exposed else "safe")
        out[kind].append(s)
    return out


def _traffic_by_simulate(base: Knobs, work: Workload) -> dict:
    out = {"startup_crash": [], "runtime_crash": [], "safe": []}
    for s in range(1, 65):
        sched = simulate(base.replace(max_num_seqs=s), work)
        kind = ("safe" if sched.crash is None else
                "startup_crash" if sched.crash["step"] is None else "runtime_crash")
        out[kind].append(s)
    return out


def _state(nb: str, i: int) -> dict:
    """The notebook's dashboard, each control the question names set: what it then holds."""
    return set_controls(DASHBOARDS[nb](), EXERCISES[nb][i].start).state


KEYS = sorted(EXPECTED)
ids = lambda key: f"{key[0]}-{key[1]}"  # noqa: E731


def test_every_exercise_has_a_check():
    """No answer without a recomputation here (a new exercise needs a row)."""
    assert set(EXPECTED) == {(nb, i) for nb, exs in EXERCISES.items() for i in range(len(exs))}


@pytest.mark.parametrize("key", KEYS, ids=ids)
def test_each_answer_is_for_the_controls_its_question_states(key):
    """The answer was computed for the knobs and inputs the dashboard holds once the
    question's controls are set: nothing it assumes is left unsaid."""
    nb, i = key
    ex = EXERCISES[nb][i]
    state = _state(nb, i)
    given = ex.answer(ex.start).given
    assert given == {n: state[n] for n in given}
    assert KNOB_NAMES <= set(given) or nb == "recordings"  # every knob, none implicit


@pytest.mark.parametrize("key", KEYS, ids=ids)
def test_each_answer_states_what_the_model_says(key):
    """The answer's values equal the model's for the dashboard's state, recomputed another
    way."""
    nb, i = key
    ex = EXERCISES[nb][i]
    assert ex.answer(ex.start).values == EXPECTED[key](_state(nb, i))


@pytest.mark.parametrize("i, extra_and_version", sorted(SERVED.items()))
def test_a_pasted_command_is_read_as_check_reads_it(i, extra_and_version):
    """Notebook 7's questions that paste a command answer for the knobs ``check`` reads from
    it (the fix PR's knobs: those typed, with the command box empty)."""
    extra, version = extra_and_version
    assert knobs_of(_state("exposure", i)) == _served(extra, version)


@pytest.mark.parametrize("i, b", [(4, None), (5, 2)])
def test_the_fix_pr_knobs_are_the_typed_ones(i, b):
    """With the command box empty, the knobs are the controls' (0.31.0, S 2, L 320)."""
    assert knobs_of(_state("exposure", i)) == k(max_num_seqs=2, max_model_len=320,
                                                max_num_batched_tokens=b)


@pytest.mark.parametrize("nb", sorted(EXERCISES))
def test_each_question_names_every_control(nb):
    """A question's start names every control of its notebook's dashboard (notebook 7's
    knobs show the pasted command's values: a question with a command names the command)."""
    controls = set(DASHBOARDS[nb]().controls) - VIEW_ONLY
    for ex in EXERCISES[nb]:
        if nb == "exposure" and ex.start["command"]:
            assert set(ex.start) == {"command", "vllm_version"}
        elif nb == "recordings" and not ex.start:
            continue  # how many recordings agree: no control changes it
        else:
            assert set(ex.start) == controls


@pytest.mark.parametrize("nb", sorted(EXERCISES))
def test_the_page_shows_each_start(nb):
    """Rendered, every question shows each control it starts from with its value."""
    items = try_this_html(nb).split("<li>")[1:]
    assert len(items) == len(EXERCISES[nb])
    for item, ex in zip(items, EXERCISES[nb]):
        start = re.search(r"<div class='hs-start'>Start from: (.*?)</div>", item).group(1)
        for name, value in ex.start.items():
            if name == "command":
                continue  # pasted below, as a learner copies it
            assert html.escape(f"{name} = {value}") in start, (nb, name)


PASTED = [i for i, ex in enumerate(EXERCISES["exposure"]) if ex.start["command"]]


@pytest.mark.parametrize("i", PASTED)
def test_each_command_as_rendered_pastes_into_the_dashboard(i):
    """What the page shows as a question's command, copied as a learner copies it (the text
    of its code element), is the command itself, and pasted into notebook 7's box it is read
    as ``check`` reads it: no refusal, the knobs of the question."""
    ex = EXERCISES["exposure"][i]
    item = try_this_html("exposure").split("<li>")[1:][i]
    shown = re.search(r"<code class='hs-command'>(.*?)</code>", item, re.S).group(1)
    pasted = html.unescape(shown)
    assert pasted == ex.start["command"] and "\\'" not in pasted
    dash = set_controls(DASHBOARDS["exposure"](), {**ex.start, "command": pasted})
    assert dash.error is None, dash.error
    extra, version = SERVED[i]
    assert knobs_of(dash.state) == _served(extra, version)


@pytest.mark.parametrize("nb", sorted(EXERCISES))
def test_answers_are_folded_away(nb):
    """Each question shows; its answer is in a closed <details>, one click to open."""
    markup = try_this_html(nb)
    assert markup.count("<details class='hs-answer'>") == len(EXERCISES[nb])
    assert " open" not in markup


def test_try_this_is_headed_once():
    """Each notebook heads its "Try this" cell in markdown; the list under it adds no second
    heading."""
    for nb in EXERCISES:
        assert "Try this" not in try_this_html(nb).split("<ol>")[0], nb


def test_notebook_5s_assumptions_are_lists_the_page_wraps():
    """Notebook 5 shows the assumptions as HTML lists (wrapped between words), not printed
    text (cut mid-word at the output's edge): every assumption once, predict's extra ones
    under their heading."""
    from hisparse_model.answers.simulate import SIMULATE_ASSUMPTIONS
    from hisparse_model.model.reproduction import ASSUMPTIONS
    from hisparse_model.views.tables import assumption_lists_html

    markup = html.unescape(assumption_lists_html(SIMULATE_ASSUMPTIONS, "predict instead:",
                                                 ASSUMPTIONS))
    extra = [a for a in ASSUMPTIONS if a not in SIMULATE_ASSUMPTIONS]
    assert markup.count("<li>") == len(SIMULATE_ASSUMPTIONS) + len(extra)
    assert all(f"<li>{a}</li>" in markup for a in (*SIMULATE_ASSUMPTIONS, *extra))
    source = (ROOT / "notebooks" / "05_your_traffic.py").read_text()
    assert "assumption_lists_html(" in source and 'print("-", line)' not in source
