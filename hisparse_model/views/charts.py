"""The dashboards' charts, drawn as SVG from :mod:`hisparse_model.text.chart_data`'s lists.

* :func:`lane_chart`: one lane per routing rule or vLLM version, one cell per
  n (notebooks 1 and 3); crash cells are always at least 3 px wide and marked.
* :func:`strip_chart`: the outcome of every max_num_seqs 1 ... 256, plus a
  zoomed strip around the current value (notebook 2).
* :func:`recordings_chart`: one row per recording, a square for what the engine
  did and a dot for what the model predicts, per event (notebook 4).
"""

from __future__ import annotations

from ..text import chart_data as cd
from .svg import HIGHLIGHT, INK, PALETTE, Svg, runs, ticks

WIDTH = 900
LEFT, RIGHT = 250, 24  # px: lane labels, right margin


def _plot_x(ns: list[int]):
    """x of the left edge of n's cell, and the cell width, for cells of equal width."""
    cw = (WIDTH - LEFT - RIGHT) / max(len(ns), 1)
    return (lambda n: LEFT + (n - ns[0]) * cw), cw


def _slots(ns: list[int]) -> list[int | None]:
    """Columns of a lane chart: each n, and a gap (None) where n skips values."""
    out: list[int | None] = []
    for i, n in enumerate(ns):
        if i and n != ns[i - 1] + 1:
            out.append(None)
        out.append(n)
    return out


TICK_PX = 30  # the least room between two tick labels
CRASH_LABEL_PX = 90  # the room a "crash: n=12345" label takes (11 px sans-serif), and a gap


def tick_labels(slots: list[int | None], named: list[int], cw: float) -> set[int]:
    """The columns whose n is written under its tick: the named ones (C, W) where cells are
    wide enough (else their labels below say n), then, left to right, each other n at least
    :data:`TICK_PX` from every label and every "⋯" already placed."""
    where = {n: i * cw for i, n in enumerate(slots) if n is not None}
    named = named if cw >= TICK_PX else []
    placed = [where[n] for n in named] + [i * cw for i, n in enumerate(slots) if n is None]
    shown = set(named)
    for n, at in where.items():
        if n not in shown and all(abs(at - p) >= TICK_PX for p in placed):
            shown.add(n)
            placed.append(at)
    return shown


def _column_runs(ns: list[int], at: dict[int, int]) -> list[tuple[int, int]]:
    """``ns`` (in order) grouped into runs of adjacent columns (``at``: n -> column):
    ``[(first n, last n), ...]``."""
    out: list[tuple[int, int]] = []
    for n in ns:
        if out and at[n] == at[out[-1][1]] + 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


def lane_chart(ns: list[int], lanes: dict[str, list[str]], *, title: str, x_label: str,
               marks: dict[str, list[int]] | None = None, bounds=(), highlight=None,
               edge_notes=("", ""), legend_keys=None, repeats=None) -> str:
    """Lanes of coloured cells; ``bounds``: ``(n, text)`` named under n's own tick (C, W).

    ``ns`` may skip values: each skip is one narrow "⋯" column, drawn pale in the colour of
    the cell left of it (the caller leaves out only n whose outcome is its left neighbour's:
    :func:`~hisparse_model.text.chart_data.key_lengths`), or, after an n in ``repeats``
    (n -> p, :func:`~hisparse_model.text.chart_data.folded_lengths`), one "↻" column of p pale
    stripes, the colours of the p cells before it, which the lengths left out repeat.  The
    legend lists the keys drawn, in ``legend_keys`` order when given.
    """
    repeats = repeats or {}
    lane_h, gap, top = 28, 24, 72
    bottom = top + len(lanes) * (lane_h + gap) - gap  # y of the last lane's lower edge
    extra = 14 * x_label.count("\n")  # an x label of several lines: one more row each
    svg = Svg(WIDTH, bottom + 66 + extra, title)
    svg.text(10, 20, title, size=14, weight="bold")
    seen = {k for row in lanes.values() for k in row} | ({cd.CRASH} if any(
        (marks or {}).values()) else set())
    keys = [k for k in dict.fromkeys(legend_keys or PALETTE) if k in seen and k in PALETTE]
    svg.legend(LEFT, 42, keys)
    slots = _slots(ns)
    cw = (WIDTH - LEFT - RIGHT) / max(len(slots), 1)
    at = {n: i for i, n in enumerate(slots) if n is not None}
    x = lambda n: LEFT + at[n] * cw  # noqa: E731
    for i, (label, row) in enumerate(lanes.items()):
        y = top + i * (lane_h + gap)
        if label == highlight:
            svg.rect(4, y - 4, WIDTH - 8, lane_h + 8, HIGHLIGHT, cls="hs-highlight")
        svg.text(LEFT - 8, y + lane_h / 2 + 4, label, anchor="end",
                 weight="bold" if label == highlight else "normal", cls="hs-lane-label")
        for start, length, key in runs(row):  # a run is cut where a gap column falls
            cut = [start] + [k for k in range(start + 1, start + length)
                             if ns[k] != ns[k - 1] + 1] + [start + length]
            for a, b in zip(cut, cut[1:]):
                svg.rect(x(ns[a]), y, (b - a) * cw, lane_h, PALETTE[key], cls=f"hs-cell-{key}")
        for k in range(1, len(ns)):
            if ns[k] == ns[k - 1] + 1:
                continue
            p = repeats.get(ns[k - 1])
            if p:  # the gap repeats the p cells before it: p pale stripes
                for q in range(p):
                    svg.rect(x(ns[k - 1]) + cw + q * cw / p, y, cw / p, lane_h,
                             PALETTE[row[k - p + q]], opacity="0.35", cls="hs-gap-repeat")
            else:  # the gap: the left cell's outcome, pale
                svg.rect(x(ns[k - 1]) + cw, y, cw, lane_h, PALETTE[row[k - 1]], opacity="0.35",
                         cls="hs-gap")
        # a crash left out of the drawn columns is its drawn left neighbour's (the gap)
        drawn = [n for n in (marks or {}).get(label, []) if n in at]
        for n in drawn:
            cx = x(n) + cw / 2
            svg.rect(cx - max(cw, 3) / 2, y, max(cw, 3), lane_h, PALETTE[cd.CRASH])
            svg.path(f"M{cx - 5:.1f},{y - 10:.1f} l10,0 l-5,7 z", PALETTE[cd.CRASH], cls="hs-mark")
        written = None  # x of the last label: one closer than CRASH_LABEL_PX is left out
        for first, last in _column_runs(drawn, at):  # crashes in adjacent columns: one label
            cx = x(first) + cw / 2
            if written is None or cx - written >= CRASH_LABEL_PX:
                text = f"crash: n={first}" + (f"…{last}" if last != first else "")
                svg.text(cx + 7, y - 12 if last != first else y - 4, text, size=11,
                         cls="hs-crash-label")
                written = cx
    named = [n for n, _ in bounds if n in at]
    shown = tick_labels(slots, named, cw)
    named = [n for n in named if cw >= TICK_PX]  # n written under its tick, in bold
    for i, n in enumerate(slots):
        cx = LEFT + i * cw + cw / 2
        if n is None:
            svg.text(cx, bottom + 18, "↻" if slots[i - 1] in repeats else "⋯", anchor="middle",
                     cls="hs-gap-label")
            continue
        svg.line(cx, bottom, cx, bottom + 4)  # every column has its tick, labelled or not
        if n in shown:
            svg.text(cx, bottom + 18, n, anchor="middle",
                     weight="bold" if n in named else "normal", cls="hs-tick")
    for j, (n, text) in enumerate(bounds):  # under n's own tick: C = 2 under the 2
        if n in at:
            cx = x(n) + cw / 2
            svg.line(cx, bottom + 22, cx, bottom + 28, cls="hs-bound-tick")
            wide = cw >= 70  # room to centre it; else the first leans left, the next right
            svg.text(cx + (0 if wide else -3 if j % 2 == 0 else 3), bottom + 40, text,
                     weight="bold", anchor="middle" if wide else "end" if j % 2 == 0
                     else "start", cls="hs-bound")
    left, right = edge_notes
    svg.text(LEFT - 8, bottom + 18, left, anchor="end", size=11)
    for j, line in enumerate(x_label.split("\n")):
        svg.text(LEFT, bottom + 58 + 14 * j, line, cls="hs-axis-label")
    svg.text(WIDTH - RIGHT, bottom + 58, right, anchor="end", size=11)
    return svg.render()


MIN_RUN_PX = 6  # the least width a run of the strip is drawn at (one S of 256 is 2.4 px)
DIGIT_PX = 7  # px a digit of an 11 px tick label takes, rounded up (sans-serif: about 6.1)


def strip_tick_labels(seqs: list[int], current: int, cw: float) -> list[int]:
    """The values of a zoom strip written under their cells: every one where its label fits
    its cell, else every 2nd (or 4th ...) multiple, the current value always, and no two
    labels closer than the widest label plus 4 px."""
    room = DIGIT_PX * len(str(seqs[-1])) + 4
    step = next(k for k in (1, 2, 4, 5, 8, 10, 16, 32) if k * cw >= room or k == 32)
    x = {s: i * cw for i, s in enumerate(seqs)}
    shown = [current] if current in x else []
    for s in seqs:
        if s % step == 0 or step == 1:
            if all(abs(x[s] - x[t]) >= room for t in shown):
                shown.append(s)
    return sorted(shown)


def _narrow_lefts(spans: list[tuple[float, float]]) -> list[float]:
    """Left edges of runs too narrow to see, ``(left, width)`` each, drawn MIN_RUN_PX wide
    about their own cells, left to right, none over the one before it (two lone values side
    by side stay two cells) and none past the strip's ends."""
    out: list[float] = []
    for left, width in spans:
        at = max(left + width / 2 - MIN_RUN_PX / 2, LEFT, out[-1] + MIN_RUN_PX if out else LEFT)
        out.append(min(at, WIDTH - RIGHT - MIN_RUN_PX))
    return out


def _strip(svg: Svg, y: int, seqs: list[int], outcomes: list[str], current: int,
           label: str, numbered: bool) -> None:
    x, cw = _plot_x(seqs)
    svg.text(LEFT - 8, y + 16, label, anchor="end", cls="hs-lane-label")
    narrow = []
    for start, length, key in runs(outcomes):
        if length * cw >= MIN_RUN_PX:
            svg.rect(x(seqs[start]), y, length * cw, 24, PALETTE[key], cls=f"hs-cell-{key}")
        else:  # drawn after the wide runs, over their edges
            narrow.append((start, length, key))
    box = None  # (left, width) of the current value's cell where it is a narrow run's
    lefts = _narrow_lefts([(x(seqs[a]), n * cw) for a, n, _ in narrow])
    for (start, length, key), left in zip(narrow, lefts):
        svg.rect(left, y, MIN_RUN_PX, 24, PALETTE[key], stroke="#fff", stroke_width=1,
                 cls=f"hs-cell-{key} hs-narrow")
        if seqs[start] <= current < seqs[start] + length:
            box = (left, MIN_RUN_PX)
    for s in seqs[1:] if numbered else ():  # cell borders, where cells are wide enough
        svg.line(x(s), y, x(s), y + 24, stroke="#fff")
    for s in (strip_tick_labels(seqs, current, cw) if numbered else ticks(seqs[0], seqs[-1])):
        svg.text(x(s) + cw / 2, y + 40, s, anchor="middle", size=11,
                 weight="bold" if numbered and s == current else "normal", cls="hs-strip-tick")
    if current > seqs[-1]:  # past the strip's end: an arrow there says where it is
        end = x(seqs[-1]) + cw
        svg.text(end + 4, y + 16, f"{current} →", size=12, cls="hs-current-past")
    if seqs[0] <= current <= seqs[-1]:
        left, w = box or (x(current), cw)  # a narrow run's cell boxed where it is drawn
        cx = left + w / 2
        svg.rect(left - 1, y - 3, w + 2, 30, "none", stroke="#000", stroke_width=2,
                 cls="hs-current")
        svg.path(f"M{cx - 6:.1f},{y - 12:.1f} l12,0 l-6,8 z", "#000")


def strip_chart(data: dict, current: int, *, title: str, caption: str = "",
                labels: dict | None = None) -> str:
    """Every max_num_seqs in one strip, then a zoom of 32 values around ``current`` (a
    ``current`` past the strip's end is marked at its end, and said under it); ``labels``
    words the legend for this strip."""
    seqs, outcomes = data["max_num_seqs"], data["outcome"]
    svg = Svg(WIDTH, 212, title)
    svg.text(10, 20, title, size=14, weight="bold")
    keys = [cd.STARTUP_CRASH, cd.NEVER_STARTS, cd.RUNTIME_CRASH, cd.EXPOSED, cd.SAFE,
            cd.UNDECIDED, cd.INVALID]  # every colour a cell can have
    svg.legend(LEFT, 42, [k for k in keys if k in outcomes], labels)
    _strip(svg, 68, seqs, outcomes, current, f"max_num_seqs 1…{seqs[-1]}", numbered=False)
    lo = max(1, min(current - 15, seqs[-1] - 31))
    zoom = [s for s in seqs if lo <= s < lo + 32]
    _strip(svg, 134, zoom, outcomes[zoom[0] - 1:zoom[-1]], current,
           f"zoom {zoom[0]}…{zoom[-1]}", numbered=True)
    past = (f" (past the strip's end, {seqs[-1]}: not drawn)" if current > seqs[-1] else "")
    svg.text(10, 186, f"▼ current max_num_seqs = {current}{past}", size=12,
             cls="hs-current-label")
    svg.text(WIDTH - RIGHT, 186, "x: max_num_seqs", size=12, anchor="end", cls="hs-axis-label")
    svg.text(10, 206, caption, size=12, cls="hs-sweep")
    return svg.render()


def recordings_chart(rows: list[dict], selected: str | None) -> str:
    """A row per recording: engine (square) and model (dot) per event, ✓ when they agree."""
    width = max([len(r["engine_keys"]) for r in rows] + [1])
    row_h, top = 30, 96
    title = "Recorded engine runs against the model"
    svg = Svg(WIDTH, top + row_h * len(rows) + 16, title)
    svg.text(10, 20, title, size=14, weight="bold")
    svg.legend(LEFT, 42, ["ok", cd.CRASH, cd.OTHER_ERROR, cd.NOT_RUN])
    svg.rect(LEFT, 54, 14, 14, PALETTE["ok"])
    svg.text(LEFT + 20, 66, "big square = what the engine did (recorded)", size=12)
    svg.circle(LEFT + 357, 61, 5, PALETTE["ok"], stroke=INK, stroke_width=1.5)
    svg.text(LEFT + 368, 66, "ringed dot = what the model predicts; the square's colour = agree", size=12)
    col = lambda i: LEFT + 30 + i * 90  # noqa: E731  centre of event column i
    for i in range(width):
        svg.text(col(i), top - 10, "start-up" if i == 0 else f"prompt {i}", anchor="middle",
                 cls="hs-axis-label")
    for j, r in enumerate(rows):
        y = top + j * row_h
        if r["name"] == selected:
            svg.rect(4, y, WIDTH - 8, row_h, HIGHLIGHT, cls="hs-highlight")
        svg.text(LEFT - 8, y + 20, r["name"], anchor="end",
                 weight="bold" if r["name"] == selected else "normal", cls="hs-lane-label")
        for i, (eng, model) in enumerate(zip(r["engine_keys"], r["model_keys"])):
            svg.rect(col(i) - 11, y + 4, 22, 22, PALETTE[eng], cls=f"hs-engine-{eng}")
            svg.circle(col(i), y + 15, 5, PALETTE[model], stroke=INK, stroke_width=1.5,
                       cls=f"hs-model-{model}")
        svg.text(col(width) - 20, y + 20, "✓ agrees" if r["agrees"] else "✗ differs",
                 fill=INK if r["agrees"] else PALETTE[cd.CRASH], cls="hs-verdict")
    return svg.render()
