"""The model's numbers behind every picture in the notebooks; nothing here draws.

Views (``hisparse_model.views``) only draw what these functions return, so a
test can compare each picture's data with :func:`~hisparse_model.answers.predict.predict`
without a browser:

* :func:`formulas`: B, q, C and W of a prediction, each with its arithmetic and
  the vLLM line (:attr:`VersionRules.cites <hisparse_model.model.versions.VersionRules.cites>`);
* :func:`route_lanes`: where a batch of n routed tokens goes under two routing
  rules, for n in a window around C ... W (notebook 1);
* :func:`seqs_strip`: the one verdict (start-up crash, a lone prompt crashes, only requests together crash it, safe, ...) for each
  max_num_seqs with the other knobs fixed, from the vectorised
  :func:`~hisparse_model.answers.sweep.sweep` where it applies (notebook 2);
* :func:`version_predictions` and :func:`prompt_lanes`: the same knobs in every
  vLLM version, and where each prompt length goes (notebook 3);
* :func:`timeline_data`, :func:`traffic_seqs_strip` and :func:`traffic_advice`:
  a served workload step by step, which max_num_seqs crash on it, and the
  nearest single-knob changes that avoid its crash (notebook 5), each from
  :func:`~hisparse_model.answers.simulate.simulate` (``chart_traffic.py``, re-exported here).

Outcome keys are plain strings shared with the views' palette.
"""

from __future__ import annotations

import functools

import numpy as np

from ..model.knobs import DEFAULT_ATTENTION_BACKEND, VLLM_VERSIONS, Knobs
from ..model.plan import default_max_num_batched_tokens, plan, refusal
from ..answers.predict import Prediction, predict
from ..schedule.serving import PromptWalk
from ..model.startup import startup_batches
from ..answers.sweep import sweep
from ..model.versions import ERROR_TEMPLATE, RULES, rules_for

from .chart_keys import (  # noqa: F401 - the outcome keys, re-exported for the views
    ALL_RESIDENT, CRASH, EXPOSED, INVALID, NEVER_STARTS, NOT_ROUTED, NOT_RUN, OTHER_ERROR,
    OVER_B, RUNTIME_CRASH, SAFE, STARTUP_CRASH, SWAP_IN, UNDECIDED)
from .chart_traffic import (  # noqa: F401 - notebook 5's data, re-exported
    ADVICE_CALLS, ADVICE_WORK_CAP, STRIP_WORK_CAP, TIMELINE_WINDOW, TRAFFIC_SEQS,
    recording_step_pairs, step_key, timeline_data, traffic_advice, traffic_outcome,
    traffic_seqs_strip, work_estimate)

# Notebook 1's two lanes: label -> VersionRules key
OFF_BY_ONE_LANES = {"0.31.0: swap_in if n ≤ W": "0.31.0", "0.32.0: swap_in if n ≤ C": "0.32.0"}
ZOOM_MARGIN = 5  # routed-token counts shown either side of C ... W


def formulas(pred: Prediction) -> list[tuple[str, str, object]]:
    """``(symbol, "formula = value", Cite)`` for B, q, C and W."""
    k, s, cites = pred.knobs, pred.sizes, pred.plan.rules.cites
    if k.max_num_batched_tokens is None:
        b = (f"B = min(max_num_seqs * max_model_len, 16384) = min({k.max_num_seqs} * "
             f"{k.max_model_len}, 16384) = {s.max_num_batched_tokens} (default)")
    else:  # set: the line cited is vLLM's check of the set value, not the default's formula
        b = (f"B = max_num_batched_tokens = {s.max_num_batched_tokens} (set; vLLM checks "
             f"B ≥ max_num_seqs = {k.max_num_seqs})")
    if k.num_speculative_tokens:
        q = (f"q = 1 + num_speculative_tokens = 1 + {k.num_speculative_tokens} = "
             f"{s.max_decode_query_len}")
    else:
        q = f"q = 1 (no speculative decoding) = {s.max_decode_query_len}"
    c = (f"C = min(B, max_num_seqs * q) = min({s.max_num_batched_tokens}, "
         f"{k.max_num_seqs} * {s.max_decode_query_len}) = {s.swap_capacity}")
    w = f"W = C + 1 = {s.swap_capacity} + 1 = {s.workspace_rows}"
    b_cite = cites["B"] if k.max_num_batched_tokens is None else cites["B>=S"]
    return [("B", b, b_cite), ("q", q, cites["q"]), ("C", c, cites["C"]),
            ("W", w, cites["W"])]


def zoom_window(capacity: int, margin: int = ZOOM_MARGIN) -> list[int]:
    """Routed-token counts around C ... W: max(1, C - margin) ... W + margin."""
    return list(range(max(1, capacity - margin), capacity + 2 + margin))


def route_lanes(capacity: int, n_values=None, lanes=None, *, has_prefill: bool = True,
                max_tokens: int | None = None) -> dict:
    """Where a batch of n routed tokens goes, per lane's routing rule.

    ``{"n", "lanes": {label: [outcome]}, "crash_sizes": {label: [n]},
    "errors": {label: text of the first crash or None}, "C", "W", "B"}``; n defaults
    to :func:`zoom_window` (below it every n fits swap_in, above it every n goes
    all-resident, under every rule).  With ``max_tokens`` (B, the most tokens one
    step holds) an n above it is :data:`OVER_B`: no batch routes that many, so it
    is neither routed nor a crash (with C = B, 0.31.0's W = B + 1 never happens).
    """
    lanes = OFF_BY_ONE_LANES if lanes is None else lanes
    ns = zoom_window(capacity) if n_values is None else list(n_values)
    out = {"n": ns, "lanes": {}, "crash_sizes": {}, "errors": {}, "C": capacity,
           "W": capacity + 1, "B": max_tokens}
    possible = [max_tokens is None or n <= max_tokens for n in ns]
    for label, key in lanes.items():
        # one request of n tokens: a pure prefill (no decode token) or n decode tokens
        route = RULES[key].router(DEFAULT_ATTENTION_BACKEND, capacity)
        routes = [route(n, 0 if has_prefill else n) if ok else None
                  for n, ok in zip(ns, possible)]  # (routed, path, error), None past B
        out["lanes"][label] = [OVER_B if r is None else CRASH if r[2] else r[1] for r in routes]
        out["crash_sizes"][label] = [n for n, r in zip(ns, routes) if r and r[2]]
        out["errors"][label] = next((r[2] for r in routes if r and r[2]), None)
    return out


def _sweep_applies(knobs: Knobs) -> bool:
    """Whether :func:`~hisparse_model.answers.sweep.sweep`'s closed forms cover these knobs."""
    default_graphs = knobs.enforce_eager or knobs.cudagraph_mode in (None, "FULL_AND_PIECEWISE")
    return (knobs.vllm_version == "0.31.0" and knobs.routing == "stock" and default_graphs
            and knobs.attention_backend == "FLASH_ATTN_MLA_SPARSE"
            and knobs.num_gpu_blocks_override is None)


def _one_seqs_outcome(knobs: Knobs) -> tuple[str, int]:
    """(outcome, smallest crashing prompt or 0) of one configuration, by predict()."""
    w = plan(knobs).workspace_rows
    pred = predict(knobs, [w] if w < knobs.max_model_len else [])
    if not pred.startup_ok:
        return STARTUP_CRASH, 0
    if pred.prompts and not pred.prompts[0].ok:
        return RUNTIME_CRASH, w
    return SAFE, 0


def seqs_strip(knobs: Knobs, max_seqs: int = 256) -> dict:
    """Outcome of every max_num_seqs 1 ... max_seqs with ``knobs``' other knobs: the one
    verdict (``answers/server_verdict.py``) of each, the lone prompt that crashes first.

    ``invalid`` (vLLM refuses the knobs), ``never_starts`` (start-up dies of something that
    is not the overflow), ``startup_crash`` (a start-up batch crashes), ``runtime_crash``
    (exposed, and a prompt served alone crashes: the smallest is ``first_prompt`` = W),
    ``exposed`` (exposed, by several requests together only), ``safe`` (no traffic can crash
    it), ``undecided``.  The lone prompts: 0.31.0 with the default engine shape uses the
    vectorised sweep; anything else asks predict().
    """
    return _seqs_strip(knobs.replace(max_num_seqs=1), max_seqs)  # one cache entry per strip


def _with_verdicts(out: dict, per_s: dict) -> dict:
    """Each max_num_seqs's cell: the server's verdict, the lone-prompt sweep inside it."""
    from ..answers import server_verdict as sv

    cell = {sv.REFUSED: INVALID, sv.NEVER_STARTS: NEVER_STARTS,
            sv.STARTUP_CRASH: STARTUP_CRASH, sv.NOT_EXPOSED: SAFE, sv.UNDECIDED: UNDECIDED}
    for s, knobs in per_s.items():
        kind = sv.server_verdict(knobs).kind
        lone = out["outcome"][s - 1] == RUNTIME_CRASH
        out["outcome"][s - 1] = cell.get(kind) or (RUNTIME_CRASH if lone else EXPOSED)
        if out["outcome"][s - 1] != RUNTIME_CRASH:
            out["first_prompt"][s - 1] = 0
    return out


def _batched_tokens(knobs: Knobs) -> int | None:
    """B of these knobs, or None where vLLM refuses them: :func:`plan`'s checks, no graphs."""
    b = knobs.max_num_batched_tokens
    derived = b is None
    if derived:
        b = default_max_num_batched_tokens(knobs.max_num_seqs, knobs.max_model_len)
    return None if refusal(knobs, rules_for(knobs), b, derived) else b


@functools.lru_cache(maxsize=128)
def _seqs_strip(knobs: Knobs, max_seqs: int) -> dict:
    seqs = list(range(1, max_seqs + 1))
    per_s = {s: knobs.replace(max_num_seqs=s) for s in seqs}
    bs = {s: _batched_tokens(k) for s, k in per_s.items()}
    valid = [s for s in seqs if bs[s] is not None]
    out = {"max_num_seqs": seqs, "outcome": [INVALID] * len(seqs), "W": [None] * len(seqs),
           "first_prompt": [0] * len(seqs), "method": "sweep"}
    if not valid:
        return out
    return _with_verdicts(_lone_prompts(knobs, out, per_s, bs, valid), per_s)


def _lone_prompts(knobs: Knobs, out: dict, per_s: dict, bs: dict, valid: list) -> dict:
    """The sweep of lone prompts: which max_num_seqs a prompt served alone crashes."""
    if _sweep_applies(knobs):  # the closed forms need only B: no capture graphs to build
        got = sweep(np.array(valid), np.array([bs[s] for s in valid]),
                    knobs.num_speculative_tokens, knobs.enforce_eager)
        for i, s in enumerate(valid):
            first = int(got["first_crashing_prompt"][i])
            first = first if 0 < first < knobs.max_model_len else 0
            kind = (STARTUP_CRASH if got["startup_crash"][i] else
                    RUNTIME_CRASH if first else SAFE)
            out["outcome"][s - 1], out["first_prompt"][s - 1] = kind, first
            out["W"][s - 1] = int(got["workspace_rows"][i])
        return out
    plans = {s: plan(per_s[s]) for s in valid}
    for s in valid:
        out["W"][s - 1] = plans[s].workspace_rows
    out["method"] = "rules" if not plans[valid[0]].rules.crashes else "predict"
    for s in valid:
        outcome = (SAFE, 0) if out["method"] == "rules" else _one_seqs_outcome(plans[s].knobs)
        out["outcome"][s - 1], out["first_prompt"][s - 1] = outcome
    return out


def outcome_key(outcome: str | None) -> str:
    """Key of a ``summary_row`` event outcome: ok, the HiSparse crash, another failure, not run."""
    if outcome is None:
        return NOT_RUN
    if outcome == "ok":
        return "ok"
    return CRASH if outcome.startswith(ERROR_TEMPLATE.split("{")[0]) else OTHER_ERROR


def version_knobs(knobs: Knobs, version: str) -> Knobs:
    """``knobs`` in another vLLM version (the upstream fix's routing applies to 0.31.0 only)."""
    return knobs.replace(vllm_version=version,
                         routing=knobs.routing if version == "0.31.0" else "stock")


def version_predictions(knobs: Knobs, prompt_lens) -> dict[str, Prediction | str]:
    """``{version: Prediction, or vLLM's refusal text}`` for every version."""
    out: dict[str, Prediction | str] = {}
    for v in VLLM_VERSIONS:
        try:
            out[v] = predict(version_knobs(knobs, v), prompt_lens)
        except ValueError as exc:
            out[v] = str(exc)
    return out


def prompt_lanes(knobs: Knobs) -> dict:
    """Every prompt length 1 ... max_model_len - 1, each served alone, in every version.

    A prompt served alone is what ``predict(knobs, [n])`` says (no earlier prompt,
    so no prefix-cache hit): start-up, then the prompt's own batches.
    ``{"n", "lanes": {version: [outcome]}, "crash_sizes": {version: [n]},
    "startup_ok": {version: bool or None (refused)}}``.
    """
    out = {"n": list(range(1, knobs.max_model_len)), "lanes": {}, "crash_sizes": {},
           "startup_ok": {}}
    for v in VLLM_VERSIONS:
        lane, crashes, alive = _prompt_lane(version_knobs(knobs, v))
        out["lanes"][v], out["crash_sizes"][v] = list(lane), list(crashes)
        out["startup_ok"][v] = alive
    return out


def key_lengths(data: dict, keep=(), margin: int = 1) -> list[int]:
    """The prompt lengths worth drawing of :func:`prompt_lanes`' ``data``: nothing is lost.

    The first and last length, every length in ``keep`` (notebook 3: C - 5 … W + 5), and
    each length where some lane changes outcome, with ``margin`` lengths either side.  A
    length left out has, in every lane, the outcome of the nearest drawn length below it,
    so the chart can draw it as a gap ("same as left").
    """
    ns = data["n"]
    if not ns:
        return []
    rows = [row for row in data["lanes"].values() if row]
    shown = {ns[0], ns[-1]} | {n for n in keep if ns[0] <= n <= ns[-1]}
    for i in range(1, len(ns)):
        if any(row[i] != row[i - 1] for row in rows):
            shown |= {ns[j] for j in range(max(0, i - margin - 1), min(len(ns), i + margin + 1))}
    return sorted(shown)


MOST_COLUMNS = 60  # notebook 3's chart: at least ~10 px a column
MAX_PERIOD = 8  # the longest repeating pattern folded (B 2 alternates with period 2)


def folded_lengths(data: dict, keep=(), margin: int = 1,
                   most: int = MOST_COLUMNS) -> tuple[list[int], dict[int, int]]:
    """:func:`key_lengths`, and where that draws more than ``most`` columns, every long stretch
    whose outcomes repeat with a period p (2 … :data:`MAX_PERIOD`) in every lane folded: its
    first two periods and its last one drawn, the lengths between left out as one gap that
    repeats the p lengths before it (at B 2 a prompt's last chunk is 1 or 2 tokens by n's
    parity, so 0.33.0's lane alternates at every n).  ``(shown, repeats)``: ``repeats`` maps
    the last length drawn before such a gap to p; every other gap is :func:`key_lengths`'
    (each length left out like its left neighbour).  Lengths in ``keep`` are never folded."""
    shown = key_lengths(data, keep, margin)
    if len(shown) <= most:
        return shown, {}
    ns, rows = data["n"], [row for row in data["lanes"].values() if row]
    kept = set(keep)
    same = lambda a, b: all(row[a] == row[b] for row in rows)  # noqa: E731
    drop, repeats, i = set(), {}, 0
    while i < len(ns):
        best = None
        for p in range(2, min(MAX_PERIOD, (len(ns) - i) // 5) + 1):  # 5 periods fit
            j = i + p
            while j < len(ns) and ns[j] not in kept and same(j, j - p):
                j += 1
            varies = any(not same(t, t - 1) for t in range(i + 1, min(j, i + p + 1)))
            if varies and j - i >= 5 * p and not any(ns[t] in kept for t in range(i, i + p)):
                best = (p, j)
                break
        if best is None:
            i += 1
            continue
        p, j = best
        drop |= {ns[t] for t in range(i + 2 * p, j - p)}
        repeats[ns[i + 2 * p - 1]] = p
        i = j
    folded = set(shown) - drop
    for last, p in repeats.items():  # each fold's two periods before its gap, drawn
        k = ns.index(last)
        folded |= set(ns[k - 2 * p + 1:k + 1])
        t = k + 1  # and the period after it
        while t < len(ns) and ns[t] in drop:
            t += 1
        folded |= set(ns[t:t + p])
    return sorted(set(folded)), repeats


@functools.lru_cache(maxsize=128)
def _prompt_lane(knobs: Knobs) -> tuple[tuple, tuple, bool | None]:
    """(outcome per prompt length, crashing lengths, start-up ok) in one version (None: refused)."""
    try:
        p = plan(knobs)
    except ValueError:  # vLLM refuses these knobs in this version
        return (), (), None
    alive = not any(b.error for b in startup_batches(p))
    if not alive:  # no prompt is served by a server that dies at start-up
        return (NOT_RUN,) * (knobs.max_model_len - 1), (), alive
    lane, crashes, walk = [], [], PromptWalk(p)
    for n in range(1, knobs.max_model_len):
        errs, route = walk.ends(n)  # what walk.batches(0, n) says, from its distinct steps
        if errs:
            lane.append(CRASH)
            crashes.append(n)
        else:
            lane.append(route or NOT_ROUTED)  # predict()'s prefill_route
    return tuple(lane), tuple(crashes), alive


# --------------------------------------------------------------------------
# notebook 5: a workload served step by step
# --------------------------------------------------------------------------
