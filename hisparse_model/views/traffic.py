"""Notebook 5: your traffic served step by step, the max_num_seqs map, recorded workloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import groupby

import ipywidgets as W

from ..text.plural import count
from ..text import chart_data as cd
from ..model.knobs import KnobSpec, knob_specs
from ..answers import server_verdict as sv
from ..answers.lost import lost_line
from ..answers.predict import Prediction
from ..recorded.recordings import load_all, recorded_dir, recording_knobs
from ..text.report import _step_key
from ..answers.simulate import SIMULATE_ASSUMPTIONS, simulate
from ..schedule.workload import Workload, synthetic
from ..recorded.workload_recordings import compare_workload_recording
from . import outbox
from .controls import SPECS, choice_control, knob_control, parse_prompt_lens, \
    text_control
from .buffers import missing_step_note, picture_for_step, picture_html
from .dashboard import Dashboard, Screen
from .engine_runs import knobs_text, live_output_path, live_status
from .first_request import ranges, ranges_text
from .svg import LABELS, PALETTE
from .tables import advice_list_html, esc, fold, formulas_html, static_html, swatch, table
from .traffic_charts import (REQUEST_COLOURS, STRIP, request_name,  # noqa: F401  re-exported
                             seqs_chart, timeline_chart)

KNOBS = ("vllm_version", "routing", "attention_backend", "max_num_seqs",
         "max_num_batched_tokens", "max_model_len", "num_speculative_tokens",
         "enable_prefix_caching", "enforce_eager", "cudagraph_mode")
WORKLOAD_HELP = {"requests": "number of requests (prompt lengths are cycled over them)",
                 "prompt_lens": "prompt lengths in tokens, comma-separated, cycled over requests",
                 "arrival_spacing": "engine steps between two arrivals (0 = all arrive together)",
                 "max_tokens": "output tokens per request (ignore_eos)"}
WORKLOAD_RANGE = {"requests": (1, 64), "arrival_spacing": (0, 32), "max_tokens": (1, 64)}
NUMBERING = "requests r1, r2, … from 1 (r1 is vLLM's request 0); steps from 0, as arrival_step"
TABLE_ROWS = 300  # folded step groups shown; the command line lists every one


def workload_slider(name: str, value: int, help_text: str | None = None,
                    bounds: tuple[int, int] | None = None):
    """A slider for a workload number (not a knob), built like the knob sliders; its help and
    range are this dashboard's unless given."""
    lo, hi = bounds or WORKLOAD_RANGE[name]
    slider = knob_control(KnobSpec(name, int, value, help_text or WORKLOAD_HELP[name],
                                   minimum=lo))
    slider.max = hi
    return slider


def step_control(value: int = -1) -> W.BoundedIntText:
    """Which engine step the buffers picture draws (-1: the crash step, else the busiest)."""
    return W.BoundedIntText(value=value, min=-1, max=10**6, description="draw_step",
                            tooltip="the engine step the buffers picture draws (-1: the crash "
                                    "step, or else the step with most routed tokens)",
                            style={"description_width": "210px"}, layout={"width": "300px"})


def _tokens(scheduled: dict | None) -> str:
    return " ".join(f"{request_name(r)}:{n}" for r, n in (scheduled or {}).items())


def crash_word(crash: dict | None) -> str:
    """``none``, ``startup`` or ``step<k>``: where a run died."""
    return ("none" if crash is None else "startup" if crash["step"] is None
            else f"step{crash['step']}")


def steps_table(sched) -> str:
    """Every step, identical neighbours folded (as the command line folds), crash row pinned."""
    groups = [list(g) for _, g in groupby(sched.steps, key=_step_key)]
    more = len(groups) - TABLE_ROWS
    if more > 0:
        groups = groups[:TABLE_ROWS - 1] + [groups[-1]]
    rows, classes = [], []
    for g in groups:
        s = g[0]
        steps = f"{s.step}" if len(g) == 1 else f"{s.step}–{g[-1].step} (×{len(g)})"
        rows.append([steps, esc(_tokens(s.scheduled)), str(s.num_tokens),
                     str(s.num_decode_tokens), esc(s.dispatch), str(s.routed_tokens or "–"),
                     swatch(cd.step_key(s), s.route or ("–", "replayed")[s.dispatch == "FULL"]),
                     f"<code class='hs-error-text'>{esc(s.error)}</code>" if s.error else ""])
        classes.append("hs-crash" if s.error else "")
    note = (f"<div class='hs-note'>… {more} more groups not shown (<code>python -m "
            f"hisparse_model simulate</code> lists every step)</div>" if more > 0 else "")
    return ("<details open><summary>every engine step with work, identical neighbours folded "
            f"({NUMBERING})</summary><div class='hs-scroll'>" + table(
                ["steps", "tokens per request", "tokens", "decode", "graph mode", "routed n",
                 "route", "error"], rows, raw=True, row_classes=classes) + f"</div>{note}"
            "</details>")


def crash_html(sched) -> str:
    """The crash (or none) with vLLM's exact text, and in words why that step crashed."""
    crash, p, n = sched.crash, sched.plan, len(sched.workload)
    done = f"finished (received): <b class='hs-finished'>{len(sched.finished)}</b> of {count(n, 'request')}"
    if sched.finished:  # numbered from 1, as the reader counts
        done += f" (r{esc(ranges(sorted(r + 1 for r in sched.finished)))})"
    if crash is None:
        return (f"<div class='hs-big'><b style='color:{PALETTE['ok']}'>no crash</b>: no step "
                f"hands swap_in more than C = {p.swap_capacity} tokens. {done}</div>")
    never = _never_starts(sched)
    why = ("The engine dies <b>at start-up</b> (a CUDA-graph capture or warmup batch; see "
           "notebook 2), before it serves any request." if never is None else
           f"The engine never starts: {esc(never.detail)}; it serves no request (see "
           "notebook 2).")
    if crash["step"] is not None:
        s = sched.steps[-1]
        parts = " + ".join(f"{t} ({request_name(r)})" for r, t in s.scheduled.items())
        why = (f"In step {s.step} the scheduler packed {parts} = {s.num_tokens} tokens, "
               f"{s.num_decode_tokens} of them decode tokens; the attention backend handed "
               f"<b>{s.routed_tokens}</b> of them to the routing. {s.routed_tokens} = W = C + 1 "
               f"passes 0.31.0's check, so they go to swap_in, which has only C = "
               f"{p.swap_capacity} rows.")
    return (f"<div class='hs-big'>{_crash_word(sched)}"
            f"<br><code class='hs-error-text'>{esc(crash['error'])}</code></div>"
            f"<div class='hs-note'>{why} {done}<br>{esc(lost_line(sched.lost, crash, request_name))}</div>")


def head_html(sched) -> str:
    """The answer in one line, above notebook 5's controls: does this traffic crash, where."""
    crash, n = sched.crash, len(sched.workload)
    done = f"{len(sched.finished)} of {count(n, 'request')} finished"
    if crash is None:
        return (f"<div class='hs-head'><b style='color:{PALETTE['ok']}'>✓ no crash</b>: no "
                f"step hands swap_in more than C = {sched.plan.swap_capacity} tokens; "
                f"{done}.</div>")
    return (f"<div class='hs-head'>{_crash_word(sched, '✗ ')}: <code class='hs-error-text'>"
            f"{esc(crash['error'])}</code>; {done}. Why, step by step, under the controls.</div>")


def _never_starts(sched):
    """The one verdict on the run's server where it never starts (start-up dies of an error
    that is not the overflow: ``server_verdict.NEVER_STARTS``), else None."""
    if sched.crash is None or sched.crash["step"] is not None:
        return None
    verdict = sv.server_verdict(sched.knobs)
    return verdict if verdict.kind == sv.NEVER_STARTS else None


def _crash_word(sched, mark: str = "") -> str:
    """Where the run died, bold in its colour: never starts in notebook 2's key, words and
    colour (the verdict's kind), else a crash at start-up or at a step in red."""
    step = sched.crash["step"]
    key = cd.CRASH if _never_starts(sched) is None else cd.NEVER_STARTS
    words = (LABELS[key] if key == cd.NEVER_STARTS else
             f"crash at {'start-up' if step is None else f'step {step}'}")
    return f"<b style='color:{PALETTE[key]}'>{mark}{esc(words)}</b>"


def schedule_report(sched) -> str:
    """A served workload shown once (notebook 5's worked examples): the crash, then every step.

    The same pieces as the dashboard's numbers, so the examples and the dashboard number
    requests and steps alike.
    """
    return static_html(crash_html(sched) + steps_table(sched))


def advice_html(found: dict, controls=None) -> str:
    capped = (f"<div class='hs-note'>not searched beyond ±{cd.ADVICE_CALLS // 2} values: "
              f"{esc(', '.join(found['capped']))} (<code>hisparse simulate"
              f"</code> searches further)</div>" if found["capped"] else "")
    return (f"<div class='hs-note'><b>what avoids it</b>, in the order an engineer would take "
            f"it (each re-simulated on this traffic):</div>"
            f"{advice_list_html(found['advice'], controls)}{capped}")


class TrafficDashboard(Dashboard):
    """A synthetic workload served by the scheduler model: timeline, steps, crash, advice, strip."""

    name = "traffic"
    answer_first = True  # 17 controls: the answer goes above them

    def __init__(self, requests: int = 2, prompt_lens: str = "3, 2",
                 arrival_spacing: int = 0, max_tokens: int = 8, draw_step: int = -1, **initial):
        initial.setdefault("max_num_seqs", 4)
        controls = {"requests": workload_slider("requests", requests),
                    "prompt_lens": text_control("prompt_lens", prompt_lens,
                                                WORKLOAD_HELP["prompt_lens"]),
                    "arrival_spacing": workload_slider("arrival_spacing", arrival_spacing),
                    "max_tokens": workload_slider("max_tokens", max_tokens)}
        controls.update({n: knob_control(SPECS[n], initial.get(n)) for n in KNOBS})
        controls["draw_step"] = step_control(draw_step)
        # the max_num_seqs map and the advice: searches, drawn under the timeline once it is out
        self.search = W.HTML()
        self.search.add_class("hs-search-box")
        self.search_data: dict = {}
        self._search_args: tuple | None = None
        super().__init__(controls)
        parts = list(self.widget.children)
        parts.insert(parts.index(self.chart) + 1, self.search)
        self.widget.children = parts

    def workload(self) -> Workload:
        """The requests the controls describe: ``synthetic``, the prompt lengths cycled."""
        lens = parse_prompt_lens(self.value("prompt_lens"))
        return synthetic(self.value("requests"), lens, self.value("arrival_spacing"),
                         self.value("max_tokens"))

    def compute(self) -> Screen:
        base = self.knobs(vllm_version="0.31.0")
        knobs = cd.version_knobs(base, self.value("vllm_version"))
        work = self.workload()
        sched = simulate(knobs, work)
        p, crash = sched.plan, sched.crash
        routed = sched.steps[-1].routed_tokens if crash and sched.steps else next(
            (b.routed for b in sched.startup if b.error), 0)
        word = crash_word(crash) + (f"(n={routed})" if crash else "")
        n = len(work)
        labels = {"C": str(p.swap_capacity), "W": str(p.workspace_rows), "requests": str(n),
                  "steps": str(len(sched.steps)), "crash": (crash or {"error": "none"})["error"],
                  "finished": ",".join(map(str, sorted(sched.finished))) or "none",
                  "summary": (f"max_num_seqs={knobs.max_num_seqs} C={p.swap_capacity} "
                              f"W={p.workspace_rows} requests={n} steps={len(sched.steps)} "
                              f"crash={word} finished={len(sched.finished)}/{n}")}
        pred = Prediction(knobs, p, list(sched.startup))
        step = self.value("draw_step")
        # a step that never ran: one note says so; the default step is drawn, untitled so
        missing = missing_step_note(sched, step)
        body = (crash_html(sched) + missing
                + picture_html(picture_for_step(sched, None if step < 0 or missing else step))
                + f"<div class='hs-note'>vLLM {esc(knobs.vllm_version)} ({esc(knobs.routing)} "
                f"routing), {esc(knobs.attention_backend)}, prefix caching "
                f"{'on' if knobs.enable_prefix_caching else 'off'}, cudagraph_mode "
                f"{esc(p.cudagraph_mode)}; {count(n, 'request')}: "
                f"{esc(', '.join(str(r.prompt_len) for r in work.requests[:12]))}"
                f"{' …' if n > 12 else ''} tokens</div>" + formulas_html(pred)
                + steps_table(sched)
                + fold("what the simulation also assumes", "<ul>" + "".join(
                    f"<li>{esc(a.removeprefix('simulate: '))}</li>"
                    for a in SIMULATE_ASSUMPTIONS[2:]) + "</ul>"))
        state = {**knobs.as_dict(), "requests": n, "workload": work.as_json()["requests"]}
        return Screen(state, sched, labels, body, lambda: self._timeline(knobs, work, sched),
                      head_html(sched))

    def _timeline(self, knobs, work, sched) -> dict:
        """The timeline's data (the chart); the searches under it wait for it to be sent."""
        self._search_args = (knobs, work, sched)
        step = self.value("draw_step")
        return {"timeline": cd.timeline_data(sched, around=None if step < 0 else step)}

    def _show_plot(self, plot) -> None:
        """The timeline as the chart, sent; then the map and the advice (searches) under it.

        With 64 requests the map's 64 simulations took 60-130 ms: computed before the
        timeline, they held the chart back that long (170-250 ms in the browser).
        """
        self._search_args = None
        super()._show_plot(plot)
        args, self._search_args = self._search_args, None
        if args is None or self.error is not None:
            return
        outbox.send_now()
        ok, data = self._guarded(lambda: self._search(*args))
        if ok:
            html = seqs_chart(data["strip"]) + (advice_html(data["advice"]) if data["advice"]
                                                else "")
            self.search_data = data
            if self.search.value != html:
                self.search.value = html
            self.search.layout.display = None

    def _show_error(self, msg: str, title: str) -> None:
        super()._show_error(msg, title)
        self.search.layout.display = "none"

    def _search(self, knobs, work, sched) -> dict:
        """The map's and the advice's data: searches, so they come after the timeline."""
        strip = cd.traffic_seqs_strip(knobs, work)
        cells = list(zip(strip["max_num_seqs"], strip["outcome"]))
        self.labels["sweep_summary"] = " ".join(
            f"{w}={ranges([s for s, o in cells if o == k])}" for k, (w, _) in STRIP.items())
        found = (cd.traffic_advice(knobs, work, sched.plan.max_num_batched_tokens)
                 if sched.crash else None)  # after the strip: it reuses the strip's runs
        self.labels["advice"] = "; ".join(", ".join(f"{k}={v}" for k, v in a["change"].items())
                                          for a in (found or {"advice": []})["advice"]) or "none"
        caption = "max_num_seqs " + ranges_text(
            (v, [s for s, o in cells if o == k]) for k, (_, v) in STRIP.items())
        return {"advice": found, "strip": {**strip, "caption": caption}}

    def draw(self) -> str:
        return timeline_chart(self.plot_data["timeline"])


def traffic_dashboard(**initial) -> TrafficDashboard:
    """Notebook 5: build a workload, see every engine step, the crash and the max_num_seqs map."""
    return TrafficDashboard(**initial)


class WorkloadRecordingsDashboard(Dashboard):
    """Workload recordings (default ``tests/recorded/workloads``) against ``simulate``, per step.

    The verdict is ``compare_workload_recording``'s; pick a recording for its steps side by side.
    """

    name = "workload_recordings"

    def __init__(self, recordings: list[dict] | None = None, directory: str | None = None,
                 name: str = "workload_recordings"):
        self.name = name
        self.recordings = (load_all(directory or os.path.join(recorded_dir(), "workloads"))
                           if recordings is None else list(recordings))
        self.names = [os.path.splitext(os.path.basename(r.get("_path", f"live-{i}")))[0]
                      for i, r in enumerate(self.recordings)]
        self.diffs = [compare_workload_recording(r) for r in self.recordings]
        names = self.names or ["(no recordings)"]
        super().__init__({"recording": choice_control(
            "recording", names, names[0], "the workload recording to compare step by step")})

    def compute(self) -> Screen:
        agree = sum(not d for d in self.diffs)
        n = len(self.diffs)
        summary = f"workload_recordings={n} agree={agree} differ={n - agree}"
        labels = {"summary": summary, "agree": str(agree)}
        if not self.recordings:
            return Screen({}, None, labels, "<div class='hs-note'>No workload recordings.</div>",
                          dict)
        i = self.names.index(self.value("recording"))
        rec, diffs = self.recordings[i], self.diffs[i]
        sched = simulate(recording_knobs(rec), Workload.from_json(rec["workload"]),
                         rec.get("accepted"))
        rows, classes = [], []
        for x in cd.recording_step_pairs(rec, sched):
            routed = [f"{r[0]} → {r[1]}" if r else "–" for r in (x["engine_routed"],
                                                                 x["model_routed"])]
            rows.append([" / ".join("–" if v is None else str(v)
                                    for v in (x["engine_step"], x["model_step"])),
                         _tokens(x["engine"]), _tokens(x["model"]), *routed,
                         "✓" if x["same"] else "✗"])
            classes.append("hs-crash" if x["error"] or not x["same"] else "")
        k = sched.knobs
        labels.update(selected=self.names[i], verdict="agrees" if not diffs else diffs[0],
                      summary=f"{summary} | {self.names[i]}: steps engine={len(rec['steps'])} "
                              f"model={len(sched.steps)} crash engine="
                              f"{crash_word(rec.get('crash'))} model={crash_word(sched.crash)}")
        verdict = ("<b>✓ agrees</b> step by step (compare_workload_recording finds no "
                   "difference)" if not diffs else "<b>✗ differs</b><ul>" + "".join(
                       f"<li><code>{esc(d)}</code></li>" for d in diffs) + "</ul>")
        body = (f"<div class='hs-note'><b>{esc(self.names[i])}</b>: vLLM {esc(k.vllm_version)} "
                f"{esc(k.routing)}, {esc(knobs_text(k))}, prefix caching "
                f"{'on' if k.enable_prefix_caching else 'off'}; {count(len(sched.workload), 'request')}; "
                f"{esc(rec.get('provenance', {}).get('gpu', ''))}. {verdict}</div>"
                + f"<div class='hs-note'>{esc(NUMBERING)}</div>"
                + crash_html(sched) + picture_html(picture_for_step(sched))
                + "<div class='hs-scroll'>" + table(
                    ["step engine / model", "engine: tokens per request", "model: tokens per "
                     "request", "engine routed n → route", "model routed n → route", "same"],
                    rows, row_classes=classes) + "</div>")
        data = {"timeline": cd.timeline_data(sched), "name": self.names[i], "engine": {
            e["step"]: e["num_tokens"] for e in rec["steps"]}}
        return Screen({"recording": self.names[i]}, sched, labels, body, lambda: data)

    def draw(self) -> str:
        return timeline_chart(self.plot_data["timeline"], self.plot_data["engine"],
                              of=f"recording {self.plot_data['name']}")


def live_command(knobs, workload_path: str, out: str) -> list[str]:
    """``hisparse live --workload`` for ``knobs`` (the installed vLLM's version)."""
    cmd = [sys.executable, "-m", "hisparse_model", "live", "--workload", workload_path,
           "--out", out]
    for spec in knob_specs():
        value = getattr(knobs, spec.name)
        flag = {"routing": "--vllm-mode"}.get(spec.name, "--" + spec.name.replace("_", "-"))
        if spec.name == "vllm_version" or value is None:
            continue
        if spec.kind is bool:
            cmd += [flag] if value else ([f"--no-{flag[2:]}"] if spec.default else [])
        else:
            cmd += [flag, str(value)]
    return cmd


def run_live(dash: TrafficDashboard, skip: str | None = None, timeout: float = 900):
    """The dashboard's workload on the real engine (GPU, vLLM): its recording, or None + why."""
    if live_status(skip) is None:
        return None
    work_path = live_output_path("live-traffic-workload.json")
    out = live_output_path("live-traffic.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    if os.path.exists(out):  # a recording of an earlier run is not this run's
        os.remove(out)
    with open(work_path, "w") as f:
        json.dump(dash.workload().as_json(), f)
    cmd = live_command(dash.last_prediction.knobs, work_path, out)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if not os.path.exists(out):
        raise RuntimeError(f"live run left no recording (exit {done.returncode}): "
                           f"{done.stderr.strip()[-500:]}")
    with open(out) as f:
        return {**json.load(f), "_path": out}
