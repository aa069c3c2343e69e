"""Notebook 1's primer: the two buffers as a picture, and where in vLLM each rule lives.

:func:`buffers_diagram` draws a batch of n routed tokens going through the
index-group workspace (W = C + 1 rows) into the swap rows (C rows); with
n = C + 1 the last token has no swap row.  :func:`where_in_vllm` is a
collapsible table of every rule the model follows, read from
:attr:`VersionRules.cites <hisparse_model.versions.VersionRules.cites>`.
"""

from __future__ import annotations

from ..versions import RULES
from .svg import PALETTE, Svg
from .tables import cite_html, esc, table

# What each cited rule is, in words (every name in VersionRules.cites has one).
MEANING = {
    "B": "B: the default max_num_batched_tokens, min(S · max_model_len, 16384)",
    "B>=S": "vLLM refuses max_num_batched_tokens < max_num_seqs",
    "q": "q: tokens of one decode request, 1 + num_speculative_tokens",
    "C": "C: the swap rows, min(B, S · q)",
    "max_rows": "the index group's decode rows, C",
    "W": "W: the index-group workspace, C + 1 rows",
    "predicate": "the routing check: swap_in or the all-resident path",
    "error": "the ValueError swap_in raises past C rows",
    "handoff": "which tokens FLASH_ATTN_MLA_SPARSE hands to the routing",
    "handoff_flashmla": "which tokens FLASHMLA_SPARSE hands to the routing",
    "spec_slots": "vLLM's check that B leaves room for speculative tokens",
    "capture_sizes": "the default CUDA-graph capture sizes",
    "memory_profile": "start-up 1: memory profiling, which captures CUDA graphs",
    "startup": "start-up 2: JIT warmup, then CUDA-graph capture",
    "warmup": "the JIT warmup: one prefill, then decode steps",
    "dispatch": "serving: FULL graph, PIECEWISE graph or eager for each step",
    "spec_warmup": "the JIT warmup's passes under MTP (0.33.0 adds a greedy one)",
    "full_refused": "HiSparse refuses cudagraph_mode=FULL (0.32.0 and later)",
}


def where_in_vllm(key: str = "0.31.0", open_: bool = False) -> str:
    """A collapsible "Where in vLLM" table for one :data:`~hisparse_model.versions.RULES` key."""
    rules = RULES[key]
    rows = [[esc(MEANING[name]), cite_html(cite)] for name, cite in rules.cites.items()]
    return (f"<details class='hs-where'{' open' if open_ else ''}><summary><b>Where in vLLM "
            f"{esc(rules.vllm_version)}</b> (file:line of every rule the model follows; a test "
            f"opens each one in vLLM's installed sources)</summary>"
            f"{table(['rule', 'vLLM source'], rows, raw=True)}</details>")


DIAGRAM_ROWS = 6  # most token rows drawn; a larger batch shows its first two and last two


def diagram_rows(w: int) -> list[int | None]:
    """Token numbers (from 1) drawn for a batch of ``w`` tokens; None is a "…" row."""
    if w <= DIAGRAM_ROWS:
        return list(range(1, w + 1))
    return [1, 2, None, w - 1, w]


def buffers_diagram(c: int = 2, caption: str = "") -> str:
    """A batch of n = C + 1 routed tokens: W = C + 1 workspace rows hold it, C swap rows do not.

    Rows are numbered from 1, as a reader counts; past :data:`DIAGRAM_ROWS` the middle rows
    are one "…" row.  ``caption`` is a line under the picture (the app: whose knobs these are).
    """
    w = c + 1
    rows = diagram_rows(w)
    row_h, top = 30, 70
    svg = Svg(900, top + len(rows) * row_h + 70 + (22 if caption else 0),
              f"A batch of {w} routed tokens with C = {c}", cls="hs-diagram")
    svg.text(10, 20, f"A batch of n = C + 1 = {w} routed tokens, C = {c}", size=14,
             weight="bold", cls="hs-diagram-title")
    heads = [(40, "the batch's routed tokens"), (300, f"index-group workspace: W = {w} rows"),
             (600, f"swap rows of swap_in: C = {c} rows")]
    for x, text in heads:
        svg.text(x, 50, text, weight="bold")
    for i, t in enumerate(rows):
        y = top + i * row_h
        if t is None:
            for x in (115, 395, 695):
                svg.text(x, y + 20, "…", anchor="middle", weight="bold")
            continue
        last = t == w
        colour = PALETTE["crash"] if last else PALETTE["swap_in"]
        svg.rect(40, y + 3, 150, row_h - 6, colour, rx=4)
        svg.text(115, y + 20, f"token {t}", anchor="middle", fill="#fff", weight="bold")
        svg.line(190, y + row_h / 2, 300, y + row_h / 2, stroke="#555")
        svg.rect(300, y, 190, row_h, "#f7f7f7", stroke="#555")
        svg.text(395, y + 20, f"workspace row {t}", anchor="middle")
        svg.line(490, y + row_h / 2, 600, y + row_h / 2,
                 stroke=colour, width=2, dash="5,3" if last else None)
        if last:
            svg.rect(600, y, 190, row_h, "#fff", stroke=PALETTE["crash"], stroke_dasharray="5,3")
            svg.text(695, y + 20, "no row: stop = C + 1", anchor="middle",
                     fill=PALETTE["crash"], weight="bold")
        else:
            svg.rect(600, y, 190, row_h, "#e5f5e0", stroke="#555")
            svg.text(695, y + 20, f"swap row {t}", anchor="middle")
    y = top + len(rows) * row_h + 26
    svg.text(40, y, f"0.31.0 checks n ≤ W = {w}: true, so the batch goes to swap_in ...",
             size=13)
    svg.text(40, y + 22, f"... which needs a swap row per token, {w} rows, has {c}, and raises "
             f"ValueError: stop={w}, capacity={c}.", size=13, fill=PALETTE["crash"],
             weight="bold")
    if caption:
        svg.text(40, y + 44, caption, size=12, cls="hs-diagram-caption")
    return svg.render()
