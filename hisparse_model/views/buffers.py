"""The one picture of the bug, for any knobs and any step: tokens -> W workspace rows -> C swap rows.

:func:`buffer_picture` draws one forward's n routed tokens as a row of cells
above the two buffers they go through: the index-group workspace (W = C + 1
rows) and ``swap_in``'s swap rows (C rows).  Cell i of each row is stacked
over cell i of the next, so a reader sees at once which token has a row and
which has none.  Colours are :data:`~hisparse_model.views.svg.PALETTE`'s:
green fits ``swap_in``, blue the all-resident path (no swap row used), red the
token past C rows (the crash), grey not routed.

Past :data:`ALL_CELLS` slots only the slots that tell the story are drawn
(the first few, those around C and W, the last token), a "…" between runs.
The ``<svg>`` carries ``data-c``, ``data-w`` and ``data-n`` (what a browser
test compares with the dashboard's numbers).  :func:`picture_for_prediction`,
:func:`picture_for_step` and :func:`picture_for_dp_step` choose the batch to
draw from the model's results; nothing here routes a batch.
"""

from __future__ import annotations

import textwrap
from typing import NamedTuple

from ..text import chart_data as cd
from ..model.versions import ERROR_TEMPLATE
from .svg import INK, PALETTE, Svg

WIDTH, LEFT, CELL_MAX = 900, 200, 40  # px: picture, row labels' column, widest cell
ALL_CELLS = 24  # up to this many slots every one is drawn
NOTE_CHAR_PX = 6.6  # px a character of the 12-px note takes, at most (sans-serif)
TOKEN_ROW, WORK_ROW, SWAP_ROW, ROW_H = 62, 122, 182, 30  # y of each row, height of a cell
EMPTY, FILLED_WORK = "#ffffff", "#e0e0e0"


def shown_slots(c: int, w: int, n: int, most: int = ALL_CELLS) -> list[int | None]:
    """Slot numbers (from 1) drawn for C, W and n routed tokens; None is a "…" gap.

    Every slot up to ``most``; past it the first three, C - 1 … W + 1 and n - 1, n.
    """
    last = max(w, n)
    if last <= most:
        return list(range(1, last + 1))
    keep = {1, 2, 3, c - 1, c, w, w + 1, n - 1, n}
    keep = sorted(k for k in keep if 1 <= k <= last)
    out: list[int | None] = []
    for k in keep:
        if out and out[-1] is not None and k > out[-1] + 1:
            out.append(None)
        out.append(k)
    return out


def _rows(k: int) -> str:
    return f"{k} row" if k == 1 else f"{k} rows"


def token_colour(i: int, c: int, route: str | None) -> str:
    """Token i's colour: routed to swap_in it is green up to C and red past it."""
    if route in (cd.SWAP_IN, cd.CRASH):
        return PALETTE[cd.CRASH] if i > c else PALETTE[cd.SWAP_IN]
    return PALETTE.get(route, PALETTE[cd.NOT_ROUTED])


def sentence(c: int, w: int, n: int, route: str | None, rule: str) -> tuple[str, str]:
    """What happens to these n tokens, in two lines (``rule``: the version's routing check)."""
    if route == cd.CRASH:
        return (f"{rule}: n = {n} passes, so all {n} tokens go to swap_in, which has C = "
                f"{_rows(c)}:", f"token {c + 1} has no row → ValueError stop={n}, capacity={c}.")
    if route == cd.SWAP_IN:
        return f"{rule}: n = {n} passes, so the batch goes to swap_in.", (
            f"n = {n} ≤ C = {c}: every token has a swap row.")
    if route == cd.ALL_RESIDENT:
        return f"{rule}: n = {n} fails it, so the batch takes the all-resident path.", (
            "Its pages are on the GPU already: no swap row is used, nothing can overflow.")
    return ("No token of this forward reaches the routing", "(a replayed CUDA graph, or no "
            "sparse attention layer in it).")


def buffer_picture(c: int, w: int, n: int, route: str | None, *, title: str,
                   rule: str = "0.31.0 checks n ≤ W", labels=None, note: str = "",
                   says: tuple[str, str] | None = None) -> str:
    """One forward's ``n`` routed tokens into W workspace rows and C swap rows.

    ``route`` is the model's for that forward (:data:`~hisparse_model.text.chart_data.SWAP_IN`,
    ``ALL_RESIDENT``, ``CRASH`` or None); ``labels`` names token i (1-based) when given
    (a request name such as ``r2``); ``note`` is one more line under the picture; ``says``
    replaces the two lines of :func:`sentence` where the forward is not a routing story
    (a start-up failure of another kind, a backend that hands the routing nothing).
    """
    slots = shown_slots(c, w, n)
    cell = min(CELL_MAX, (WIDTH - LEFT - 20) / len(slots))
    # the note wrapped at words to the picture's width (12-px sans: about 6.6 px a character)
    note_lines = textwrap.wrap(note, int((WIDTH - 20) / NOTE_CHAR_PX)) if note else []
    svg = Svg(WIDTH, SWAP_ROW + ROW_H + 84 + (20 + 16 * (len(note_lines) - 1) if note_lines
                                              else 0), title, cls="hs-buffers")
    svg.data = {"c": c, "w": w, "n": n, "route": route or "none"}
    svg.text(10, 20, title, size=14, weight="bold", cls="hs-buffers-title")
    heads = ((TOKEN_ROW, f"routed tokens: n = {n}"), (WORK_ROW, f"workspace: W = {_rows(w)}"),
             (SWAP_ROW, f"swap rows: C = {_rows(c)}"))
    for y, text in heads:
        svg.text(10, y + 20, text, weight="bold", cls="hs-buffers-row")
    svg.text(LEFT - 8, 52, "slot", size=11, fill="#555", anchor="end")
    to_swap = route in (cd.SWAP_IN, cd.CRASH)
    for k, i in enumerate(slots):
        x = LEFT + k * cell
        mid = x + cell / 2
        if i is None:
            for y in (TOKEN_ROW, WORK_ROW, SWAP_ROW):
                svg.text(mid, y + 20, "…", anchor="middle", weight="bold")
            continue
        svg.text(mid, 52, i, anchor="middle", size=11, fill="#555")
        if i <= n:
            colour = token_colour(i, c, route)
            svg.rect(x + 2, TOKEN_ROW, cell - 4, ROW_H, colour, rx=3,
                     cls="hs-token hs-token-nowhere" if to_swap and i > c else "hs-token")
            name = labels[i - 1] if labels and i <= len(labels) else ""
            if name and cell >= 26:
                svg.text(mid, TOKEN_ROW + 20, name, anchor="middle", size=11, fill="#fff")
            if to_swap:
                svg.line(mid, TOKEN_ROW + ROW_H, mid, WORK_ROW, stroke=colour, width=2)
        if i <= w:
            svg.rect(x + 2, WORK_ROW, cell - 4, ROW_H, FILLED_WORK if to_swap and i <= n
                     else EMPTY, stroke="#555", cls="hs-work-row")
            if to_swap and i <= n:
                svg.line(mid, WORK_ROW + ROW_H, mid, SWAP_ROW, stroke=token_colour(i, c, route),
                         width=2, dash="4,3" if i > c else None)
        if i <= c:
            filled = to_swap and i <= n
            svg.rect(x + 2, SWAP_ROW, cell - 4, ROW_H, "#d9f0d3" if filled else EMPTY,
                     stroke="#555", cls="hs-swap-row")
        elif to_swap and i <= n:  # the token past C rows: the row it would need does not exist
            svg.rect(x + 2, SWAP_ROW, cell - 4, ROW_H, EMPTY, stroke=PALETTE[cd.CRASH],
                     stroke_width=2, stroke_dasharray="4,3", cls="hs-no-row")
            svg.text(mid, SWAP_ROW + ROW_H + 16, "no row", anchor="middle", size=11,
                     weight="bold", fill=PALETTE[cd.CRASH])
    if route == cd.ALL_RESIDENT:
        svg.text(LEFT, TOKEN_ROW + ROW_H + 20, "↓ all-resident path: neither buffer below is "
                 "used", size=13, weight="bold", fill=PALETTE[cd.ALL_RESIDENT],
                 cls="hs-all-resident")
    y = SWAP_ROW + ROW_H + 38
    colour = PALETTE[cd.CRASH] if route == cd.CRASH else INK
    if says is not None and route is None and "Error" in says[1]:
        colour = PALETTE[cd.CRASH]  # a start-up failure that is not the swap-row error
    for k, line in enumerate(says or sentence(c, w, n, route, rule)):
        svg.text(10, y + 20 * k, line, size=13, fill=colour if k else INK,
                 weight="bold" if colour != INK and k else "normal", cls="hs-buffers-says")
    for k, line in enumerate(note_lines):
        svg.text(10, y + 40 + 16 * k, line, size=12, fill="#555", cls="hs-buffers-note")
    return svg.render()


def _rule(rules) -> str:
    return f"{rules.key} checks {'n ≤ W' if rules.routes_on_workspace else 'n ≤ C'}"


def picture_for_prediction(pred, title: str | None = None, startup: bool = True) -> str:
    """The start-up batch that crashes (with ``startup``), else the batch of n = W tokens (the
    off-by-one's size), else, where no step holds W tokens (C = B), a batch of B tokens."""
    p = pred.plan
    c, w, b = p.swap_capacity, p.workspace_rows, p.max_num_batched_tokens
    crash = pred.startup_crash_batch if startup else None
    if crash is not None and not is_swap_overflow(crash.error):
        # start-up dies of something else (e.g. MTP with B < K + 2: IndexError in the warmup):
        # the failing batch and its own error, no overflow drawn
        return buffer_picture(
            c, w, crash.routed, None, rule=_rule(p.rules),
            title=title or f"The batch that fails start-up: {crash.label}",
            says=(f"vLLM fails on this batch before any token reaches the HiSparse routing "
                  f"({crash.routed} routed):", f"{crash.error} (not a swap-row overflow)."))
    if crash is not None:
        return buffer_picture(c, w, crash.routed, cd.CRASH, rule=_rule(p.rules),
                              title=title or f"The batch that crashes start-up: {crash.label}")
    return picture_for_plan(p, title, ran=_routed_sizes(pred, startup))


def _routed_sizes(pred, startup: bool) -> tuple[set, list[int], bool]:
    """(the routed sizes of every batch the prediction ran, its prompts' lengths, whether the
    start-up's batches are among them)."""
    batches = (list(pred.startup) if startup else []) + [
        b for pr in getattr(pred, "prompts", []) for b in pr.batches]
    return ({b.routed for b in batches}, [pr.n for pr in getattr(pred, "prompts", [])],
            startup)


def is_swap_overflow(error: str | None) -> bool:
    """Whether an engine error is HiSparse's swap-row overflow (versions.ERROR_TEMPLATE)."""
    return bool(error) and error.startswith(ERROR_TEMPLATE.split("{")[0])


def picture_for_plan(p, title: str | None = None, ran: tuple | None = None) -> str:
    """The batch of n = W tokens (the off-by-one's size) under plan ``p``'s routing, else,
    where no step holds W tokens (C = B), a batch of B tokens.  ``ran``: (the routed sizes of
    the batches a prediction ran, its prompts' lengths, whether the start-up's are among
    them); when some ran and none of them is n, the picture names the batches it means and
    says it is the batch that would come, not one that came."""
    c, w, b = p.swap_capacity, p.workspace_rows, p.max_num_batched_tokens
    n = w if w <= b else b
    routed, path, error = p.rules.router(p.knobs.attention_backend, c)(n, 0)
    key = cd.CRASH if error else path
    note = ("" if n == w else f"No step holds W = {w} tokens here (B = {b}), so this B-token "
            "batch is the largest there is.")
    size = "n = W = C + 1" if n == w else "n = B"
    sizes, lens, with_startup = ran if ran is not None else (set(), [], False)
    would = bool(sizes) and routed not in sizes
    if would:
        served = ", ".join(str(x) for x in lens)
        which = " and ".join(
            (["start-up's batches"] if with_startup else [])
            + ([f"the prompts' ({served} tokens, each served alone)"] if served else []))
        note = (f"None of the {which} routes {routed} tokens: this is the batch that would "
                + ("crash, " if error else "come, ") + "drawn to show what happens to it. "
                + note).strip()
    if routed == 0:  # the backend hands the routing only a step's decode part (FLASHMLA_SPARSE)
        return buffer_picture(
            c, w, 0, None, rule=_rule(p.rules), note=note,
            title=title or f"A prefill step of {n} scheduled tokens "
            f"({'W = C + 1' if n == w else 'B'} of them), vLLM {p.rules.key}, "
            f"{p.knobs.attention_backend}: none of them is routed",
            says=(f"{p.knobs.attention_backend} hands the routing only a step's decode part; "
                  f"these {n} prefill tokens never reach it.",
                  f"A decode part holds at most S × q = C = {c} tokens, so the routing never "
                  f"sees W = {w}."))
    lead, came = ("If a batch of", " came") if would else ("A batch of", "")
    return buffer_picture(c, w, n, key, rule=_rule(p.rules), note=note,
                          title=title or f"{lead} n = {n} routed tokens ({size}){came}, vLLM "
                          f"{p.rules.key}")


def picture_for_step(sched, step: int | None = None) -> str:
    """Engine step ``step`` of a schedule (default: the crash step, else the busiest)."""
    p = sched.plan
    steps = sched.steps
    if not steps:  # died at start-up (or nothing to serve): the start-up picture
        return picture_for_prediction(_Startup(p, next((b for b in sched.startup if b.error),
                                                       None)))
    chosen = pick_step(sched, step)
    s = next(x for x in steps if x.step == chosen)
    missed = (f"Step {step} ran no work (steps with work: {steps[0].step}…{steps[-1].step}); "
              "drawn instead: " if step is not None and step != chosen else "")
    # tokens named by request only when the whole step is routed (else which ones are is
    # the decode split's, not drawn here)
    labels = ([f"r{r + 1}" for r, t in sorted(s.scheduled.items()) for _ in range(t)]
              if s.routed_tokens == s.num_tokens else None)
    return buffer_picture(p.swap_capacity, p.workspace_rows, s.routed_tokens, cd.step_key(s),
                          rule=_rule(p.rules), labels=labels,
                          title=f"{missed}{'e' if missed else 'E'}ngine step {s.step}: its "
                          f"{s.routed_tokens} routed tokens (of {s.num_tokens} scheduled)")


class _Startup(NamedTuple):
    plan: object
    startup_crash_batch: object


def pick_step(sched, step: int | None = None) -> int:
    """``step`` if the schedule ran it, else the crash step, else the step with most routed
    tokens (the first of them)."""
    numbers = [s.step for s in sched.steps]
    if step in numbers:
        return step
    if sched.crash is not None and sched.crash["step"] is not None:
        return sched.crash["step"]
    return max(sched.steps, key=lambda s: (s.routed_tokens, -s.step)).step


def picture_for_dp_step(sched, step: int, rank: int) -> str:
    """Rank ``rank``'s forward at DP step ``step`` (its dummy batch labelled as such)."""
    p = sched.plan
    r = next(s for s in sched.steps if s.step == step).ranks[rank]
    key = cd.CRASH if r.error else r.route
    if r.dummy is not None:
        labels, what = None, "its dummy batch (nothing scheduled)"
    else:
        labels = ([f"r{i + 1}" for i, t in sorted(r.scheduled.items()) for _ in range(t)]
                  if r.routed_tokens == r.num_tokens else None)
        what = "its own batch"
    return buffer_picture(p.swap_capacity, p.workspace_rows, r.routed_tokens, key,
                          rule=_rule(p.rules), labels=labels,
                          title=f"Step {step}, rank {rank}: {what}, {r.routed_tokens} routed")


def dp_pick(sched, step: int | None = None) -> tuple[int, int] | None:
    """(step, rank) to draw: at ``step`` if it ran, the rank that failed or routed most there;
    else the crash's forward; else the forward with most routed tokens."""
    crash = sched.crash
    chosen = [s for s in sched.steps if s.step == step]
    if chosen:
        ranks = chosen[0].ranks
        return step, max(ranks, key=lambda r: (bool(r.error), r.routed_tokens, -r.rank)).rank
    if crash is not None and crash["step"] is not None:
        return crash["step"], crash["rank"] or 0
    forwards = [(r.routed_tokens, -s.step, -r.rank) for s in sched.steps for r in s.ranks]
    if not forwards:
        return None
    _, step, rank = max(forwards)
    return -step, -rank


def missing_step_note(sched, step: int) -> str:
    """A note where ``draw_step`` names a step that never ran (past the crash, or past the
    last step): the picture then shows the default step, and says so ('' otherwise)."""
    if step < 0 or any(s.step == step for s in sched.steps):
        return ""
    crash = sched.crash
    why = (f"the run died at step {crash['step']}" if crash is not None
           and crash.get("step") is not None else
           f"the run's steps are {sched.steps[0].step}-{sched.steps[-1].step}"
           if sched.steps else "no step ran")
    return (f"<div class='hs-note hs-missing-step'>draw_step {step}: no such step ran ({why}); "
            "the picture shows the default step instead.</div>")


def picture_html(svg: str) -> str:
    """The picture in a box that never overflows the output area."""
    return f"<div class='hs-buffers-box' style='max-width:100%;overflow:hidden'>{svg}</div>"


__all__ = ["buffer_picture", "dp_pick", "is_swap_overflow", "missing_step_note", "pick_step", "picture_for_dp_step",
           "picture_for_plan", "picture_for_prediction", "picture_for_step", "shown_slots"]
