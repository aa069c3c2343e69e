"""Notebook 3's dashboard: the same knobs and prompts in every covered version, side by side."""

from __future__ import annotations

from ..text import chart_data as cd
from ..text.plural import count
from ..model.knobs import VLLM_VERSIONS, Knobs
from .buffers import picture_for_prediction, picture_html
from .charts import lane_chart
from .controls import SPECS, knob_control, parse_prompt_lens, text_control
from .dashboard import Dashboard, Screen
from .first_request import DEFAULT_PROMPTS, PROMPTS_HELP, prompt_name, prompt_word
from .tables import (BATCH_HEADERS, cite_html, esc, grouped_batch_rows, outcome_html, swatch,
                     table)

NOT_RUN_CELL = f"<span class='hs-route'>{swatch(cd.NOT_RUN, 'not run')}</span>"  # one line
TOGGLES = ("vllm_version", "attention_backend", "routing")
SLIDERS = ("max_num_seqs", "num_speculative_tokens", "max_num_batched_tokens", "max_model_len")


def _version_word(pred) -> str:
    if isinstance(pred, str):
        return "refused"
    prompts = ",".join(f"{o.n}:{prompt_word(o)}" for o in pred.prompts)
    return f"startup={'ok' if pred.startup_ok else 'crash'} prompts={prompts}"


class VersionsDashboard(Dashboard):
    """One column per vLLM version; the selected version's batches in full; prompt lanes."""

    name = "versions"

    def __init__(self, prompt_lens: str = DEFAULT_PROMPTS, **initial):
        controls = {n: knob_control(SPECS[n], initial.get(n), toggle=True) for n in TOGGLES}
        controls.update({n: knob_control(SPECS[n], initial.get(n)) for n in SLIDERS})
        controls["prompt_lens"] = text_control("prompt_lens", prompt_lens, PROMPTS_HELP)
        super().__init__(controls)

    def compute(self) -> Screen:
        # the fix's routing is a 0.31.0 patch: the knobs are built as 0.31.0, then per version
        knobs = self.knobs(vllm_version="0.31.0")
        selected = self.value("vllm_version")
        lens = parse_prompt_lens(self.value("prompt_lens"))
        preds = cd.version_predictions(knobs, lens)
        pred = preds[selected]
        if isinstance(pred, str):
            raise ValueError(pred)
        words = {v: _version_word(p) for v, p in preds.items()}
        backend = knobs.attention_backend
        labels = {"C": str(pred.sizes.swap_capacity), "W": str(pred.sizes.workspace_rows),
                  "B": str(pred.sizes.max_num_batched_tokens), "selected": selected,
                  "attention_backend": backend, **words,
                  "summary": f"backend={backend} routing={knobs.routing} | "
                             + " | ".join(f"{v} {words[v]}" for v in VLLM_VERSIONS)}
        body = (picture_html(picture_for_prediction(pred)) + self._backend_note(pred) + self._side_by_side(preds, selected, lens)
                + f"<div class='hs-note'><b>each request's batches in {esc(selected)}</b> "
                  f"(pick another with vllm_version)</div>" + self._detail(pred))
        state = {**cd.version_knobs(knobs, selected).as_dict(), "prompt_lens": lens}
        return Screen(state, pred, labels, body, lambda: {
            **cd.prompt_lanes(knobs), "selected": selected, "backend": backend,
            "routing": knobs.routing,
            "C": pred.sizes.swap_capacity})

    def _backend_note(self, pred) -> str:
        cites = pred.plan.rules.cites
        if pred.knobs.attention_backend == "FLASHMLA_SPARSE":
            return ("<div class='hs-note'>FLASHMLA_SPARSE hands only the decode tokens to the "
                    f"routing before 0.33.0 ({cite_html(cites['handoff_flashmla'])}); prefill "
                    "tokens are staged. Decode tokens are at most max_num_seqs·q and at most B, "
                    "so n ≤ C = min(B, max_num_seqs·q) always: swap_in never overflows, and "
                    "0.31.0 never crashes.</div>")
        return ("<div class='hs-note'>FLASH_ATTN_MLA_SPARSE hands a batch with no decode token "
                "whose pages are all resident to the routing whole (every prefill here), so a "
                "prefill chunk of exactly W tokens reaches swap_in "
                f"({cite_html(cites['handoff'])}). A chunk of at most q tokens counts as decode "
                "tokens.</div>")

    def _side_by_side(self, preds, selected: str, lens) -> str:
        def cell(v, fn):
            p = preds[v]
            return esc(p) if isinstance(p, str) else fn(p)

        def head(v):
            fix = not isinstance(preds[v], str) and preds[v].knobs.routing == "fix"
            return ("▶ " if v == selected else "") + v + (" + fix" if fix else "")

        hdr = [""] + [head(v) for v in VLLM_VERSIONS]
        rows = [
            ("routing rule", lambda p: f"{esc(p.plan.rules.predicate_text)}<br>"
                                       f"{cite_html(p.plan.rules.cites['predicate'])}"),
            ("B (tokens per step)", lambda p: str(p.sizes.max_num_batched_tokens)),
            ("q (tokens per decode)", lambda p: str(p.sizes.max_decode_query_len)),
            ("C (swap rows)", lambda p: str(p.sizes.swap_capacity)),
            ("W (workspace rows)", lambda p: str(p.sizes.workspace_rows)),
            ("capture sizes", lambda p: esc(p.capture_sizes)),
            ("start-up", lambda p: outcome_html("ok" if p.startup_ok else p.startup_error)),
        ] + [(prompt_name(i, n), lambda p, i=i: self._prompt_cell(p, i))
             for i, n in enumerate(lens)]
        body = [[label] + [cell(v, fn) for v in VLLM_VERSIONS] for label, fn in rows]
        col = VLLM_VERSIONS.index(selected) + 1
        # one column per covered version: a fixed layout shares the output area's width
        # between them (their cells wrap) instead of growing past it
        return table(hdr, body, raw=True, cls="hs-table hs-versions").replace(
            "<table", f"<table data-selected='{col}'", 1)

    @staticmethod
    def _prompt_cell(pred, i: int) -> str:
        p = pred.prompts[i]
        if not p.ran or not p.ok:
            return outcome_html(p.error, p.ran, f": the engine died at {p.died_at}")
        routes = sorted({b.route or "not routed" for b in p.batches if b.label != "decode"})
        return swatch("ok", f"ok (prefill → {', '.join(routes)})")

    def _detail(self, pred) -> str:
        rows, classes = [], []
        for i, p in enumerate(pred.prompts):
            if not p.ran:  # the engine died before it: no batch of it runs
                rows.append([esc(prompt_name(i, p.n)), NOT_RUN_CELL,
                             f"the engine died at {esc(p.died_at)}"]
                            + [""] * (len(BATCH_HEADERS) - 3))
                classes.append("hs-not-run")
                continue
            r, c = grouped_batch_rows(p.ran_batches)  # to its crash: the engine dies there
            rows += [[esc(prompt_name(i, p.n))] + x[1:] for x in r]
            classes += c
            if later := len(p.batches) - len(p.ran_batches):  # as predict says them
                rows.append([esc(prompt_name(i, p.n)), NOT_RUN_CELL,
                             f"{esc(count(later, 'later batch', 'later batches'))} (the "
                             "engine died)"] + [""] * (len(BATCH_HEADERS) - 3))
                classes.append("hs-not-run")
        return table(["prompt"] + BATCH_HEADERS[1:], rows, raw=True, row_classes=classes)

    def draw(self) -> str:
        d = self.plot_data
        c, every = d["C"], d["n"]
        lanes = {}
        for v, row in d["lanes"].items():
            ok = d["startup_ok"][v]
            name = v + ("+fix" if cd.version_knobs(Knobs(routing=d["routing"]), v).routing
                        == "fix" else "")  # 0.31.0 patched with the fix: say so
            label = name + ("" if ok else " (refused)" if ok is None else " (start-up crashes)")
            lanes[label] = row or [cd.INVALID] * len(every)
        shown, repeats = cd.folded_lengths({"n": every, "lanes": lanes}, keep=cd.zoom_window(c))
        index = [n - every[0] for n in shown]
        marks = {label: d["crash_sizes"][v] for label, v in zip(lanes, d["lanes"])}
        selected = next(lb for lb, v in zip(lanes, d["lanes"]) if v == d["selected"])
        return lane_chart(
            shown, {label: [row[i] for i in index] for label, row in lanes.items()},
            marks=marks, highlight=selected, bounds=[(c, f"C = {c}"), (c + 1, f"W = {c + 1}")],
            title=f"A prompt of n tokens served alone: its last prefill chunk's route, or the "
                  f"crash of any chunk ({d['backend']})",
            x_label=(f"prompt length n < max_model_len: C − 5 … W + 5 and where a lane changes "
                     f"(⋯ = left out, each like its left neighbour"
                     + (")\n(↻ = left out, the lengths before it repeating: a prompt's last "
                        "chunk takes the same sizes again every B lengths" if repeats else "")
                     + ")"),
            legend_keys=[cd.SWAP_IN, cd.ALL_RESIDENT, cd.CRASH, cd.NOT_ROUTED, cd.NOT_RUN,
                         cd.INVALID], repeats=repeats)


def versions_dashboard(**initial) -> VersionsDashboard:
    """Notebook 3: versions side by side, backend and routing toggles, a workload box."""
    return VersionsDashboard(**initial)
