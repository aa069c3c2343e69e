"""Notebook 5's two charts: the timeline of engine steps and the max_num_seqs map.

:func:`timeline_chart` stacks each step's tokens per request (one colour per request,
kept away from the route colours) over the tokens the step handed to the routing
against the C and W lines, the crash marked; an engine that died at start-up gets a
sentence instead of empty axes.  :func:`seqs_chart` is what the same traffic does under
each max_num_seqs 1 … 64, the current value boxed (or pointed at past the map's end).
Both draw :mod:`hisparse_model.text.chart_data`'s lists and nothing else.
"""

from __future__ import annotations

from ..text import chart_data as cd
from .svg import INK, LABELS, PALETTE, Svg, ticks

WIDTH_PX, LEFT, RIGHT = 900, 90, 64
# Requests are drawn in up to 8 colours: pinks, yellows, browns, purples, kept away from the
# route colours the same chart uses (green, blue, red, grey).  Past 8 requests each colour is a
# group of consecutive requests (r1–r8, r9–r16, … for 64), named so in the legend: no colour
# ever stands for two requests the legend does not group.
REQUEST_COLOURS = ("#e78ac3", "#ffd92f", "#a6761d", "#9e86c8", "#fdb462", "#bcbd22",
                   "#e7298a", "#542788")


def request_groups(requests: int, colours: int = len(REQUEST_COLOURS)) -> int:
    """Requests per colour: 1 up to ``colours`` requests, else ceil(requests / colours)."""
    return max(1, -(-requests // colours))


def group_name(g: int, size: int, requests: int) -> str:
    """Colour ``g``'s legend entry: ``r3``, or ``r9–r16`` for a group."""
    lo, hi = g * size, min((g + 1) * size, requests) - 1
    return request_name(lo) if lo == hi else f"{request_name(lo)}–{request_name(hi)}"
STEP_LABELS = {cd.SWAP_IN: "swap_in (n ≤ C)", cd.ALL_RESIDENT: "all-resident",
               cd.CRASH: "swap_in past C: crash", cd.NOT_ROUTED: "replayed / not routed"}
# key: (digest word, legend); a server that never starts has notebook 2's key, words, colour
STRIP = {cd.NEVER_STARTS: ("never_starts", LABELS[cd.NEVER_STARTS]),
         cd.STARTUP_CRASH: ("startup_crash", "start-up crash"),
         cd.RUNTIME_CRASH: ("crash", "crashes on this traffic"), cd.SAFE: ("safe", "serves it all"),
         cd.INVALID: ("invalid", "vLLM refuses"), cd.NOT_RUN: ("not_computed", "not computed")}


def request_name(r: int) -> str:
    """Request ``r`` (vLLM's index, from 0) as a reader counts it: ``r1`` is vLLM's request 0."""
    return f"r{r + 1}"


def _legend(svg: Svg, x: float, y: float, items) -> None:
    for colour, label in items:
        svg.rect(x, y - 10, 12, 12, colour, cls="hs-legend-swatch")
        svg.text(x + 16, y, label, cls="hs-legend")
        x += 26 + 7 * len(label)


def _y_axis(svg: Svg, top: float, h: float, hi: int, label: str, marks, label_dy: int = 8):
    """A linear vertical axis from 0 to ``hi`` over ``h`` px; returns v -> y.

    Its title sits ``label_dy`` px above the plot.
    """
    y = lambda v: top + h - h * min(v, hi) / hi  # noqa: E731
    for t in marks:
        svg.text(LEFT - 6, y(t) + 4, t, anchor="end", size=11)
    svg.line(LEFT, top, LEFT, top + h)
    svg.text(10, top - label_dy, label, size=12, cls="hs-lane-label hs-axis-label")
    return y


ROW_PX = 10  # the routed plot draws the one row from C to W at least this tall


def routed_scale(c: int, w: int, most: int, top: float, h: float):
    """The routed plot's v -> y over ``h`` px from ``top``, and the value at its top.

    It reaches the largest routed count (``most``: a bar past W is drawn whole, never
    clipped) and leaves headroom over W.  Linear where that keeps the one row from C to W at
    least :data:`ROW_PX` tall; else in three linear parts, 0 … C, the row C … W (ROW_PX),
    W … the top, so that C's and W's lines never merge into one.
    """
    hi = max(w + max(2, w // 2), most)
    if h * (w - c) / hi >= ROW_PX:
        return (lambda v: top + h - h * min(v, hi) / hi), hi, False
    high = (h - ROW_PX) * (0.35 if most > w else 0.15)  # W ... hi
    low = h - ROW_PX - high  # 0 ... C

    def y(v: float) -> float:
        v = min(v, hi)
        if v <= c:
            return top + h - low * v / max(c, 1)
        if v <= w:
            return top + h - low - ROW_PX * (v - c) / (w - c)
        return top + h - low - ROW_PX - high * (v - w) / (hi - w)
    return y, hi, True


def timeline_chart(d: dict, engine: dict | None = None, of: str = "your traffic") -> str:
    """Tokens per request per step (stacked), the routed tokens against C and W, the crash."""
    if d["startup_error"] is not None and not d["steps"]:
        return _dead_at_startup(d, of)
    title = (f"Engine steps {d['first']}…{d['last']} of {of} (steps with work: "
             f"{d['total_steps']}; C = {d['C']}, W = {d['W']})")
    hidden = [f"{n} step{'s' if n != 1 else ''} with work {where} not drawn"
              for n, where in ((d.get("hidden_before", 0), "before"),
                               (d.get("hidden_after", 0), "after")) if n]
    svg = Svg(WIDTH_PX, 420, title)
    svg.text(10, 20, title, size=14, weight="bold")
    if hidden:  # the window is cut: say so, and how to move it
        svg.text(10, 80, f"{' and '.join(hidden)} (draw_step moves the window)", size=12,
                 cls="hs-window-note")
    size = request_groups(d["requests"])
    groups = -(-d["requests"] // size)
    _legend(svg, LEFT, 42, [(REQUEST_COLOURS[g], group_name(g, size, d["requests"]))
                            for g in range(groups)])
    _legend(svg, LEFT, 62, [(PALETTE[k], v) for k, v in STEP_LABELS.items()])
    bw = (WIDTH_PX - LEFT - RIGHT) / max(d["last"] - d["first"] + 1, 24)
    x = lambda s: LEFT + (s - d["first"]) * bw  # noqa: E731
    c, w = d["C"], d["W"]
    hi = max([s["num_tokens"] for s in d["steps"]] + [1])
    y1 = _y_axis(svg, 110, 135, hi, "tokens in the step, by request (linear)",
                 ticks(0, hi, 4))
    y2, top2, stretched = routed_scale(c, w, max([s["routed"] for s in d["steps"]] + [0]),
                                       282, 80)
    for t in (0, top2):
        svg.text(LEFT - 6, y2(t) + 4, t, anchor="end", size=11)
    svg.line(LEFT, 282, LEFT, 362)
    svg.text(10, 282 - 18, "routed tokens vs C and W = C + 1" + (
        f" (not to scale: the one row from C to W is drawn {ROW_PX} px tall)"
        if stretched else ""), size=12, cls="hs-lane-label hs-axis-label")
    # Every block of one colour is one <path> of rectangles: a few elements for the page to
    # lay out however many steps and requests (64 requests: ~1,000 rects before).
    blocks: dict[tuple[str, str], list[str]] = {}

    def block(colour: str, cls: str, bx: float, by: float, bwidth: float, bh: float) -> None:
        blocks.setdefault((colour, cls), []).append(
            f"M{bx:.1f},{by:.1f}h{bwidth:.1f}v{bh:.1f}h{-bwidth:.1f}z")

    for s in d["steps"]:
        sx, sw, base = x(s["step"]), max(bw - 1, 1), 0
        for i in range(groups):  # one block per colour: a request, or a group of them
            n = sum(t for r, t in s["tokens"] if r // size == i)
            if n:
                block(REQUEST_COLOURS[i], "hs-step-tokens", sx, y1(base + n), sw,
                      y1(base) - y1(base + n))
                base += n
        if engine and s["step"] in engine:
            svg.circle(sx + bw / 2, y1(engine[s["step"]]), 3, INK, cls="hs-engine")
        h = max(y2(0) - y2(s["routed"]), 3)
        block(PALETTE[s["key"]], f"hs-routed-{s['key']}", sx, y2(0) - h, sw, h)
    for (colour, cls), parts in blocks.items():
        svg.path("".join(parts), colour, cls=cls)
    for v, dy in ((c, 11), (w, -2)):  # labels right of the plot: C under its line, W over
        svg.line(LEFT, y2(v), WIDTH_PX - RIGHT + 4, y2(v), dash="5,3")
        svg.text(WIDTH_PX - RIGHT + 6, y2(v) + dy, f"{'C' if v == c else 'W'} = {v}", size=11,
                 cls="hs-bound")
    for t in ticks(d["first"], d["last"], 12):
        svg.text(x(t) + bw / 2, 378, t, anchor="middle", size=11)
    svg.text(LEFT, 398, "x: engine step, counted from 0 as arrival_step counts (steps with no "
             "work are blank)", size=12, cls="hs-axis-label")
    if d["crash_step"] is not None:
        cx = x(d["crash_step"]) + bw / 2
        for y_from, y_to in PLOT_SPANS:  # over the two plots, never through their axis titles
            svg.line(cx, y_from, cx, y_to, stroke=PALETTE[cd.CRASH], width=2, dash="4,2",
                     cls="hs-crash-line")
        svg.path(f"M{cx - 6:.1f},76 l12,0 l-6,8 z", PALETTE[cd.CRASH], cls="hs-mark")
        svg.text(cx + (8 if cx < 700 else -8), 84, f"crash: step {d['crash_step']}", size=12,
                 anchor="start" if cx < 700 else "end", weight="bold", fill=PALETTE[cd.CRASH],
                 cls="hs-crash-label")
    if engine:
        svg.circle(WIDTH_PX - 260, 394, 3, INK)
        svg.text(WIDTH_PX - 252, 398, "engine's tokens in the step (recorded)", size=11)
    return svg.render()


PLOT_SPANS = ((110, 245), (282, 362))  # y ranges of the timeline's two plots (the crash line)


def _dead_at_startup(d: dict, of: str) -> str:
    """The timeline when the engine died at start-up: no step ran, and the chart says so."""
    title = f"Engine steps of {of}: none ran (C = {d['C']}, W = {d['W']})"
    svg = Svg(WIDTH_PX, 120, title)
    svg.text(10, 20, title, size=14, weight="bold")
    svg.text(10, 56, "The engine died at start-up, before its first step: no request was "
             "scheduled.", size=13, weight="bold", fill=PALETTE[cd.CRASH], cls="hs-dead")
    svg.text(10, 80, d["startup_error"][:120], size=12, cls="hs-dead-error")
    svg.text(10, 104, "Notebook 2 lists the start-up batch that crashed (a CUDA-graph capture "
             "or the JIT warmup).", size=12)
    return svg.render()


def seqs_chart(d: dict) -> str:
    """One cell per max_num_seqs 1…64: what this traffic does there; the current one boxed."""
    seqs, title = d["max_num_seqs"], "The same traffic under each max_num_seqs (the rest as set)"
    svg = Svg(WIDTH_PX, 150, title)
    svg.text(10, 20, title, size=14, weight="bold")
    _legend(svg, LEFT, 42, [(PALETTE[k], v) for k, (_, v) in STRIP.items()
                            if k in d["outcome"]])
    cw = (WIDTH_PX - LEFT - RIGHT) / len(seqs)
    svg.text(LEFT - 8, 102, "max_num_seqs", anchor="end", size=11,
             cls="hs-lane-label hs-axis-label")
    for i, key in enumerate(d["outcome"]):
        svg.rect(LEFT + i * cw, 60, cw - 1, 26, PALETTE[key], cls=f"hs-cell-{key}")
    for s in [1] + [s for s in seqs if s % 4 == 0]:
        svg.text(LEFT + (s - 0.5) * cw, 102, s, anchor="middle", size=11)
    cur = d["current"]
    if cur <= len(seqs):
        svg.rect(LEFT + (cur - 1) * cw - 1, 57, cw + 1, 32, "none", stroke="#000",
                 stroke_width=2, cls="hs-current")
        svg.text(10, 124, f"▢ current max_num_seqs = {cur}", size=12, cls="hs-current-label")
    else:  # the slider goes further than the map: an arrow past its right end says where
        edge = LEFT + len(seqs) * cw
        svg.path(f"M{edge + 4:.1f},62 l10,11 l-10,11 z", "#000", cls="hs-current-beyond")
        svg.text(edge + 18, 78, f"{cur}", size=11, weight="bold")
        svg.text(10, 124, f"▶ current max_num_seqs = {cur}, beyond the map (1…{len(seqs)}): "
                 "the numbers and the timeline above are for it", size=12,
                 cls="hs-current-label")
    svg.text(10, 142, d["caption"], size=12, cls="hs-sweep")
    return svg.render()
