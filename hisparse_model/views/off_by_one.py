"""Notebook 1: C swap rows, W = C + 1 workspace rows, the one batch size that crashes."""

from __future__ import annotations

import ipywidgets as W

from ..text import chart_data as cd
from ..answers.predict import predict
from ..model.versions import RULES
from .charts import lane_chart
from .controls import SPECS, knob_control
from .dashboard import Dashboard, Screen
from .buffers import picture_for_prediction, picture_html
from .tables import cite_html, esc, fold, formulas_html

KNOBS = ("max_num_seqs", "num_speculative_tokens", "max_num_batched_tokens", "max_model_len")


class OffByOneDashboard(Dashboard):
    """S, K, B and max_model_len under 0.31.0: C, W, the crash size, where each n goes."""

    name = "off_by_one"

    def __init__(self, **initial):
        super().__init__({n: knob_control(SPECS[n], initial.get(n)) for n in KNOBS})
        # B snapped to C or W in one click: the two values where the crash appears or goes
        self.snaps = {to: W.Button(description=f"B = {to}", tooltip=f"set max_num_batched_tokens "
                                   f"to this {to}", layout={"width": "90px"}) for to in "CW"}
        for to, button in self.snaps.items():
            button.on_click(lambda _, to=to: self.snap_b(to))
        row = W.HBox([W.HTML("<span style='color:#555;font-size:12px'>snap "
                             "max_num_batched_tokens to:</span>"), *self.snaps.values()],
                     layout={"margin": "0 0 0 214px", "align_items": "center"})
        parts = list(self.widget.children)
        parts.insert(2, row)  # under the controls
        self.widget.children = parts

    def snap_b(self, to: str) -> None:
        """max_num_batched_tokens set to the current C or W (nothing while an error shows)."""
        if self.error is None:
            self.controls["max_num_batched_tokens"].value = int(self.labels[to])

    def compute(self) -> Screen:
        knobs = self.knobs(vllm_version="0.31.0")
        pred = predict(knobs)
        s = pred.sizes
        b = s.max_num_batched_tokens
        lanes = cd.route_lanes(s.swap_capacity, max_tokens=b)
        stock = next(iter(cd.OFF_BY_ONE_LANES))
        crash = lanes["crash_sizes"][stock]
        crash_size = str(crash[0]) if crash else "none"
        error = lanes["errors"][stock] or ""
        labels = {"B": str(b), "q": str(s.max_decode_query_len),
                  "C": str(s.swap_capacity), "W": str(s.workspace_rows),
                  "crash_size": crash_size, "crash_error": error,
                  "summary": (f"B={b} q={s.max_decode_query_len} "
                              f"C={s.swap_capacity} W={s.workspace_rows} crash_size={crash_size}")}
        cites = pred.plan.rules.cites
        fixed = RULES["0.32.0"].cites["predicate"]
        w = s.workspace_rows
        if crash:
            headline = (f"A batch of exactly <b>n = W = C + 1 = <span class='hs-crash'>"
                        f"{crash_size}</span></b> routed tokens crashes 0.31.0; every other "
                        f"size is safe.")
            verdict = (f"A batch of n = W = {w} tokens passes that check, but swap_in has only "
                       f"C = {s.swap_capacity} rows, and it raises:<br><code>{esc(error)}</code>")
            fix = (f"0.32.0 checks n ≤ C instead: the same batch of {w} tokens takes the "
                   f"all-resident path, and nothing is raised for it.")
        else:  # C = B: the W-token batch would need more tokens than one step holds
            headline = (f"<b>No step holds W = {w} tokens</b> here: C = B = {b}, so the "
                        "off-by-one's batch never forms.")
            verdict = (f"Here C = B = {b}: a batch of W = {w} tokens would need more than the "
                       f"B = {b} tokens one step holds, so no step routes W tokens to swap_in "
                       "(whether the server runs at all: the verdict above).")
            fix = ("0.32.0 checks n ≤ C instead; with these knobs both versions route every "
                   "batch the same way (no step reaches W).")
        cite_rows = formulas_html(pred) + fold(
            "where vLLM routes, and raises (file:line)", f"<div class='hs-note'>the routing check: "
                         f"{cite_html(cites['predicate'])}; the error: "
                         f"{cite_html(cites['error'])}; 0.32.0's check: {cite_html(fixed)}</div>")
        body = (
            f"<div class='hs-headline'>{headline}</div>"
            f"<div class='hs-big'>swap rows <b>C = <span class='hs-C'>{s.swap_capacity}</span>"
            f"</b> &nbsp;·&nbsp; index-group workspace <b>W = <span class='hs-W'>"
            f"{w}</span></b> &nbsp;·&nbsp; B = {b}, q = {s.max_decode_query_len}</div>"
            f"{picture_html(picture_for_prediction(pred, startup=False))}"
            f"<div class='hs-note'>0.31.0 routes: {esc(pred.plan.rules.predicate_text)}. "
            f"{verdict}</div><div class='hs-note hs-fix-note'>{fix}</div>{cite_rows}")
        state = {**knobs.as_dict()}
        return Screen(state, pred, labels, body, lambda: lanes)

    def draw(self) -> str:
        d = self.plot_data
        c, w, ns, b = d["C"], d["W"], d["n"], d["B"]
        lanes, over_b = d["lanes"], b <= ns[-1]  # the axis reaches n > B: no step holds it
        if b + 1 < ns[-1]:  # so the axis ends at B + 1, its one grey column (W <= B + 1)
            ns, lanes = ns[:b + 2 - ns[0]], {k: v[:b + 2 - ns[0]] for k, v in lanes.items()}
        left = f"← n = 1…{ns[0] - 1}: fit swap_in" if ns[0] > 1 else ""
        return lane_chart(
            ns, lanes, title=f"Where a batch of n routed tokens goes (C = {c}, W = {w})",
            x_label="n, tokens one forward hands to the routing (zoomed around C … W)",
            marks={k: v for k, v in d["crash_sizes"].items()},
            bounds=[(c, f"C = {c}"), (w, f"W = {w}")],
            edge_notes=(left, f"→ n > B = {b}: no step holds it" if over_b else
                        f"→ n > {ns[-1]}: all-resident under every rule"))


def off_by_one_dashboard(**initial) -> OffByOneDashboard:
    """Notebook 1: max_num_seqs, num_speculative_tokens, max_num_batched_tokens, max_model_len."""
    return OffByOneDashboard(**initial)
