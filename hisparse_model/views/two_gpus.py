"""Notebook 6: two DP ranks, one crashing on a batch it never scheduled.

The scenario (:func:`two_rank_workload`): rank 0 serves a 2-token prompt, then a prompt of
``joining_prompt`` tokens (0, the default: S, as many as max_num_seqs) that joins at step 2,
so step 2 is one decode plus an S-token prefill, S + 1 = C + 1 tokens, of which only the
decode is routed; rank 1's one request arrives at step ``late``.  Rank 1 is idle at step 2, so it runs vLLM's dummy batch padded to
the graph of rank 0's count: when S + 1 is a capture size, one request of C + 1
tokens, a prefill the routing sends to swap_in on 0.31.0.  Everything shown comes
from :func:`hisparse_model.answers.simulate.simulate` with ``data_parallel_size=2``.
"""

from __future__ import annotations

from ..text.plural import count
from ..text import chart_data as cd
from ..answers.advice import ranges
from ..model.knobs import Knobs
from ..answers.lost import lost_line
from ..model.parallel import error_surface
from ..text.report import crash_where
from ..answers.simulate import DP_ASSUMPTIONS, Schedule, simulate
from ..schedule.workload import Workload
from .charts import strip_chart
from .controls import SPECS, knob_control
from .buffers import (dp_pick, missing_step_note, picture_for_dp_step, picture_for_step,
                      picture_html)
from .dashboard import Dashboard, Screen
from .first_request import ranges_text
from .svg import PALETTE, Svg
from .tables import esc
from .traffic import NUMBERING, advice_html, step_control, workload_slider
from .traffic_charts import request_name

KNOBS = ("vllm_version", "max_num_seqs")
DP = 2  # the data-parallel ranks of the scenario
DP_SEQS = 64  # the strip's max_num_seqs 1 ... DP_SEQS
JOINING_HELP = ("tokens of the prompt that joins rank 0 at step 2 (0: as many as "
                "max_num_seqs, so step 2 holds C + 1 tokens)")


def two_rank_workload(s: int, late: int = 30) -> Workload:
    """Rank 0: 2 tokens at step 0, S tokens at step 2; rank 1: 2 tokens at step ``late``."""
    return Workload.from_json([{"prompt_len": 2, "dp_rank": 0},
                               {"prompt_len": s, "dp_rank": 0, "arrival_step": 2},
                               {"prompt_len": 2, "dp_rank": 1, "arrival_step": late}])


def scenario(knobs: Knobs, joining: int = 0) -> Workload:
    """The scenario for ``knobs``: the joining prompt has ``joining`` tokens, or with 0 as many
    as max_num_seqs (the prompt that makes step 2 hold C + 1 tokens)."""
    return two_rank_workload(joining or knobs.max_num_seqs)


def dp_strip(knobs: Knobs, joining: int = 0, max_seqs: int = DP_SEQS) -> dict:
    """The scenario under every max_num_seqs 1 ... ``max_seqs``, the rest of ``knobs`` as set
    (a joining prompt of 0 follows each max_num_seqs): its outcome and the step it dies at."""
    seqs = list(range(1, max_seqs + 1))
    out = {"max_num_seqs": seqs, "outcome": [], "crash_step": []}
    for s in seqs:
        k = knobs.replace(max_num_seqs=s)
        try:
            crash = simulate(k, scenario(k, joining)).crash
        except ValueError:  # vLLM refuses the knobs
            out["outcome"].append(cd.INVALID)
            out["crash_step"].append(None)
            continue
        out["outcome"].append(cd.SAFE if crash is None else cd.STARTUP_CRASH
                              if crash["step"] is None else cd.RUNTIME_CRASH)
        out["crash_step"].append(None if crash is None else crash["step"])
    return out


# the legend's words where the shared ones mislead: a rank's crash here is no first request's,
# a green cell says only that this scenario survives (the verdict, above, is for all traffic),
# and a grey forward is a FULL CUDA-graph replay (or one whose tokens none are handed over)
SURVIVES = "this scenario does not crash"
STRIP_LEGEND = {cd.RUNTIME_CRASH: "a rank crashes while serving", cd.SAFE: SURVIVES}
STEP_LEGEND = {cd.NOT_ROUTED: "not routed: a FULL graph replay (or no token handed over)"}
STRIP_WORDS = ((cd.STARTUP_CRASH, "start-up crashes"), (cd.RUNTIME_CRASH, "a rank crashes"),
               (cd.SAFE, SURVIVES), (cd.INVALID, "refused"))  # the strip's caption, in order


def by_outcome(strip: dict) -> dict[str, list[int]]:
    """The strip as ``{outcome: [max_num_seqs with it]}``, outcomes in strip order."""
    out: dict[str, list[int]] = {}
    for s, o in zip(strip["max_num_seqs"], strip["outcome"]):
        out.setdefault(o, []).append(s)
    return out


def strip_html(strip: dict, by: dict[str, list[int]], current: int, joining: int) -> str:
    """The strip drawn with its caption (``by``: :func:`by_outcome` of it): which
    max_num_seqs crash the scenario, which not."""
    caption = ranges_text((words, by.get(k, [])) for k, words in STRIP_WORDS)
    which = ("the joining prompt follows max_num_seqs" if not joining
             else f"the joining prompt has {count(joining, 'token')}")
    return strip_chart(strip, current, title=f"This scenario at every max_num_seqs ({which})",
                       caption=caption, labels=STRIP_LEGEND)


# the table's footnote, one point a line: how it numbers, then what a cell says
CELL_LEGEND = (NUMBERING[0].upper() + NUMBERING[1:] + ".",
               "r1:2: request r1 with 2 tokens this step.",
               "dummy 1+1: the dummy batch a rank with nothing scheduled runs, its requests' "
               "tokens (as many requests as the graph both ranks agreed on holds: two decodes "
               "of 1 token in a FULL decode graph, one request of the padded count in a "
               "piecewise one).",
               "pad N: the token count the step runs at, padded to the CUDA graph both ranks "
               "agreed on; then what the routing did with it.",
               "⋯: steps with no work on either rank, skipped.")


def _cell(r) -> str:
    what = ("dummy " + "+".join(map(str, r.dummy)) if r.dummy is not None
            else " + ".join(f"{request_name(i)}:{n}" for i, n in r.scheduled.items()))
    routed = (f"{r.routed_tokens} → {r.route}" if r.routed_tokens
              else "FULL replay" if r.dispatch == "FULL" else "not routed")
    style = " style='color:#d73027;font-weight:bold'" if r.error else ""
    return f"<td{style}>{esc(what)} · pad {r.padded} · {esc(routed)}</td>"


def timelines_html(sched: Schedule) -> str:
    """Both ranks' steps side by side: what each scheduled (or its dummy), padded, routed."""
    ranks = sched.knobs.data_parallel_size
    rows, last = [], None
    for s in sched.steps:
        if last is not None and s.step > last + 1:  # a ⋯ row, as the chart's ⋯ column
            rows.append(f"<tr class='hs-gap-row'><td>⋯</td><td colspan='{ranks + 1}'><i>"
                        f"{count(s.step - last - 1, 'step')} with no work skipped</i></td></tr>")
        rows.append(f"<tr><td>{s.step}</td><td>{s.mode}</td>{''.join(map(_cell, s.ranks))}</tr>")
        last = s.step
    heads = "".join(f"<th>rank {r}</th>" for r in range(ranks))
    notes = "".join(f"<li>{esc(x)}</li>" for x in CELL_LEGEND)
    return (f"<table class='hs-table'><tr><th>step</th><th>agreed mode</th>{heads}</tr>"
            f"{''.join(rows)}</table><ul class='hs-note hs-cell-legend'>{notes}</ul>")


class TwoGpusDashboard(Dashboard):
    """vLLM version and max_num_seqs; both ranks' timelines, the crash, and what avoids it."""

    name = "two_gpus"
    assumptions = DP_ASSUMPTIONS

    def __init__(self, **initial):
        controls = {n: knob_control(SPECS[n], initial.get(n)) for n in KNOBS}
        controls["joining_prompt"] = workload_slider(
            "joining_prompt", initial.get("joining_prompt", 0), JOINING_HELP, (0, 4096))
        controls["draw_step"] = step_control(initial.get("draw_step", -1))
        super().__init__(controls)

    def compute(self) -> Screen:
        knobs = self.knobs(data_parallel_size=DP)
        joining = self.value("joining_prompt")
        work = scenario(knobs, joining)
        sched = simulate(knobs, work)
        crash = sched.crash
        # what avoids it, as notebook 5 searches it (capped per knob, cached)
        found = cd.traffic_advice(knobs, work, sched.plan.max_num_batched_tokens) if crash else None
        where = ("none" if crash is None else "start-up" if crash["step"] is None else
                 f"step {crash['step']} rank {crash['rank']} "
                 f"{'own batch' if crash['scheduled'] else 'dummy batch'}")
        p = sched.plan
        labels = {"C": str(p.swap_capacity), "W": str(p.workspace_rows), "crash": where,
                  "summary": f"C={p.swap_capacity} W={p.workspace_rows} crash={where}"}
        if crash is None:
            verdict = "<div class='hs-big'>No rank crashes in this scenario.</div>"
        else:
            surface = error_surface(knobs, crash["error"], startup=crash["step"] is None,
                                    dp_rank=crash["rank"] or 0)
            verdict = (f"<div class='hs-big' style='color:#d73027'>The run dies at "
                       f"{esc(crash_where(crash))}.</div>"
                       f"<div class='hs-note'>The caller sees <code>{esc(surface['caller'])}"
                       f"</code>; the log holds <code>{esc(crash['error'])}</code></div>"
                       f"<div class='hs-note hs-lost'>{esc(lost_line(sched.lost, crash, request_name))} "
                       f"({esc(NUMBERING)})</div>")
        step = self.value("draw_step")
        pick = dp_pick(sched, None if step < 0 else step)
        picture = missing_step_note(sched, step) + picture_html(
            picture_for_dp_step(sched, *pick) if pick else picture_for_step(sched))
        strip = dp_strip(knobs, joining)
        by = by_outcome(strip)
        labels["strip"] = " ".join(f"{k}={ranges(by[k])}" for k in sorted(by))
        body = (f"{verdict}{picture}<div class='hs-note'>C = {p.swap_capacity}, W = "
                f"{p.workspace_rows}, capture sizes {list(p.capture_sizes)}</div>"
                f"{strip_html(strip, by, knobs.max_num_seqs, joining)}"
                f"{timelines_html(sched)}"
                + (advice_html(found, list(self.controls)) if found else ""))
        state = {**knobs.as_dict(), "workload": work.as_json()["requests"]}
        return Screen(state, sched, labels, body,
                      lambda: {"steps": [[(r.routed_tokens, r.route, bool(r.error),
                                           r.dummy is not None) for r in s.ranks]
                                         for s in sched.steps],
                               "step_numbers": [s.step for s in sched.steps],
                               "C": p.swap_capacity, "W": p.workspace_rows})

    def draw(self) -> str:
        return dp_timeline_chart(self.plot_data)


def forward_key(routed: int, route: str | None, error: bool) -> str:
    """A rank's forward in the palette's words: crash, swap_in, all-resident or not routed."""
    return cd.CRASH if error else (route or cd.NOT_ROUTED) if routed else cd.NOT_ROUTED


def dp_timeline_chart(d: dict) -> str:
    """Both ranks' forwards per engine step, coloured as every chart; skipped steps marked.

    Only steps with work are drawn; where step numbers jump (9 → 30) a narrow "⋯" column says
    how many were skipped.  A dummy batch is hatched with a "d".
    """
    steps = d["steps"]
    title = f"Each rank's forward per engine step (C = {d['C']}, W = {d['W']})"
    cols: list[int | None] = []
    for s in d["step_numbers"]:
        if cols and cols[-1] is not None and s > cols[-1] + 1:
            cols.append(None)
        cols.append(s)
    left, top, row_h = 80, 70, 30
    cw = min(30, (860 - left) / max(len(cols), 1))
    svg = Svg(900, top + 2 * row_h + 70, title)
    svg.text(10, 20, title, size=14, weight="bold")
    svg.legend(left, 44, [cd.SWAP_IN, cd.ALL_RESIDENT, cd.CRASH, cd.NOT_ROUTED], STEP_LEGEND)
    by_step = dict(zip(d["step_numbers"], steps))
    for y in range(len(steps[0]) if steps else 0):
        svg.text(left - 8, top + y * row_h + 19, f"rank {y}", anchor="end", cls="hs-lane-label")
    prev = None
    for i, s in enumerate(cols):
        x = left + i * cw
        if s is None:
            svg.text(x + cw / 2, top + row_h + 4, "⋯", anchor="middle", cls="hs-gap-label")
            svg.text(x + cw / 2, top + 2 * row_h + 16, f"+{_skipped(cols, i)}", anchor="middle",
                     size=11, fill="#555", cls="hs-skipped")
            continue
        for y, (routed, route, error, dummy) in enumerate(by_step[s]):
            key = forward_key(routed, route, error)
            svg.rect(x + 1, top + y * row_h, cw - 2, row_h - 4, PALETTE[key],
                     cls=f"hs-cell-{key}")
            if dummy:
                svg.text(x + cw / 2, top + y * row_h + 18, "d", anchor="middle", size=11,
                         fill="#fff", weight="bold")
        if prev is None or len(cols) <= 30 or i % 5 == 0:
            svg.text(x + cw / 2, top + 2 * row_h + 16, s, anchor="middle", size=11)
        prev = s
    svg.text(left, top + 2 * row_h + 40, "x: engine step with work (⋯ +k: k steps with no "
             "work skipped); d = the idle rank's dummy batch", size=12, cls="hs-axis-label")
    return svg.render()


def _skipped(cols: list, i: int) -> int:
    return cols[i + 1] - cols[i - 1] - 1


def two_gpus_dashboard(**initial) -> TwoGpusDashboard:
    """Notebook 6: a DP = 2 workload, version and max_num_seqs under your control."""
    return TwoGpusDashboard(**initial)
