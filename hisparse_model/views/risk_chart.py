"""How likely, and how soon: the share of seeds crashed by each minute, by kind of step.

:func:`risk_chart` draws an :class:`~hisparse_model.answers.traffic_risk.Estimate`'s curve (a step
function: a seed's crash moves it up by 1 / seeds), stacked by the exposure kind of each
crash step; :func:`risk_html` puts the odds in words above it.  Notebook 7 shows it for the
bundled example traffic (``data/traffic-example.json``) and the README shows the picture
``simulate --traffic ... --plot FILE.svg`` writes.
"""

from __future__ import annotations

from ..text.traffic_report import KIND_WORDS
from ..answers.traffic_risk import SEEDS, STEP_MS, TRAFFIC_ASSUMPTIONS, Estimate
from .svg import INK, Svg, esc, ticks

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 320, 64, 24, 58, 90
Y_LABEL_Y = 42  # px: the y axis's title, between the picture's title and the 100 % line
KIND_COLOURS = {"startup": "#7f0000", "lone_prompt": "#d73027", "last_chunk": "#fc8d59",
                "cached_prefix": "#f46d43", "burst": "#fee090", "mixed": "#984ea3"}
EXAMPLE_TRAFFIC = "traffic-example.json"  # in hisparse_model/data


def example_traffic_path() -> str:
    """The bundled example traffic description (10 requests/s, prompts 1 to 16,000 tokens)."""
    from importlib.resources import files

    return str(files("hisparse_model") / "data" / EXAMPLE_TRAFFIC)


def risk_chart(est: Estimate) -> str:
    """The crash probability against time, stacked by kind (an SVG string)."""
    k = est.knobs
    svg = Svg(WIDTH, HEIGHT, f"Share of {len(est.runs)} seeds crashed by each minute: vLLM "
              f"{k.vllm_version}, S={k.max_num_seqs}, {est.traffic.rate_per_s:g} requests/s",
              cls="hs-chart hs-risk")
    svg.data.update({"share": f"{est.share:.4f}", "seeds": len(est.runs),
                     "crashed": len(est.crashed)})
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    svg.text(LEFT, 20, svg.title, size=14, weight="bold")
    x, y = share_scale(est.minutes, h)
    order = [kind for kind in KIND_COLOURS if kind in est.kinds] + sorted(
        set(est.kinds) - set(KIND_COLOURS))
    times = sorted({0.0, est.minutes, *(min(r.minute(est.step_ms), est.minutes)
                                        for r in est.crashed)})
    below = {t: 0.0 for t in times}
    for kind in order:  # one band per kind: a step function over the crash times
        top = {t: below[t] + sum(1 for r in est.crashed if r.kind == kind
                                 and r.minute(est.step_ms) <= t) / len(est.runs)
               for t in times}
        upper, lower = [], []
        for a, b in zip(times, times[1:] + [times[-1]]):
            upper += [(x(a), y(top[a])), (x(b), y(top[a]))]
            lower += [(x(a), y(below[a])), (x(b), y(below[a]))]
        points = upper + lower[::-1]
        d = "M" + " L".join(f"{px:.1f},{py:.1f}" for px, py in points) + " Z"
        svg.path(d, KIND_COLOURS.get(kind, "#969696"), cls=f"hs-risk-{kind}")
        below = top
    measured = est.step_said and "assumed" not in est.step_said
    share_frame(svg, x, y, est.minutes, f"minutes of traffic (one engine step = "
                f"{est.step_ms:g} ms, {'measured' if measured else 'assumed'})")
    lx, ly = LEFT, HEIGHT - 30
    for kind in order:  # a row of legend entries, wrapped before the right edge
        label = f"{kind}: {KIND_WORDS.get(kind, kind)}"
        width = 30 + 6.5 * len(label)
        if lx > LEFT and lx + width > WIDTH:
            lx, ly = LEFT, ly + 16
        svg.rect(lx, ly - 10, 12, 12, KIND_COLOURS.get(kind, "#969696"),
                 cls="hs-legend-swatch")
        svg.text(lx + 16, ly, label, cls="hs-legend")
        lx += width
    if not est.crashed:
        svg.text(LEFT + w / 2, TOP + h / 2, "no seed crashed" + (
            f": {est.never_because}" if est.never_because else ""), anchor="middle")
    return svg.render()


def risk_view(command: str, traffic_path: str | None = None, minutes: float = 20,
              seeds: int = SEEDS, vllm_version: str = "0.31.0") -> str:
    """The server of a ``vllm serve`` command under a traffic file (default: the bundled
    example), ``seeds`` seeds of ``minutes`` each, as HTML."""
    import shlex

    from ..inputs.launch import from_command

    knobs = from_command(shlex.split(command), vllm_version).knobs
    return risk_for(knobs, traffic_path, minutes, seeds)


def risk_for(knobs, traffic_path: str | None = None, minutes: float = 20,
             seeds: int = SEEDS, step_ms: float = STEP_MS) -> str:
    """The risk of ``knobs``' server under a traffic file (default: the bundled example)."""
    from ..answers.traffic_risk import estimate, load_traffic

    traffic = load_traffic(traffic_path or example_traffic_path())
    return risk_html(estimate(knobs, traffic, minutes, seeds=seeds, step_ms=step_ms))


def share_scale(minutes: float, h: float):
    """``(x, y)``: minute -> px and share of seeds -> px in a risk picture ``h`` px tall."""
    w = WIDTH - LEFT - RIGHT
    return (lambda minute: LEFT + w * minute / minutes), (lambda share: TOP + h * (1 - share))


def share_frame(svg: Svg, x, y, minutes: float, x_label: str) -> None:
    """What every risk picture draws around its data: the grid at each quarter, the two
    axes, a tick per round minute, and the axis titles."""
    w = WIDTH - LEFT - RIGHT
    for share in (0, 0.25, 0.5, 0.75, 1):
        svg.line(LEFT, y(share), LEFT + w, y(share), stroke="#e0e0e0")
        svg.text(LEFT - 6, y(share) + 4, f"{100 * share:.0f} %", anchor="end")
    svg.line(LEFT, y(0), LEFT + w, y(0), stroke=INK)
    svg.line(LEFT, y(0), LEFT, y(1), stroke=INK)
    for t in ticks(0, int(minutes), 12):
        svg.line(x(t), y(0), x(t), y(0) + 4, stroke=INK)
        svg.text(x(t), y(0) + 18, str(t), anchor="middle")
    svg.text(LEFT + w / 2, y(0) + 36, x_label, anchor="middle", cls="hs-axis-label")
    svg.text(LEFT - 6, Y_LABEL_Y, "y: share of seeds crashed by then", anchor="start",
             cls="hs-axis-label")


def risk_html(est: Estimate) -> str:
    """The odds in one sentence, then the chart and what it assumes."""
    median = est.median_minutes
    words = (f"<b>{len(est.crashed)} of {len(est.runs)} seeds crashed within "
             f"{est.minutes:g} minutes</b>"
             + ("" if not est.crashed else f"; median time to the first crash: "
                f"{'over ' + format(est.minutes, 'g') if median is None else f'{median:.1f}'}"
                " min"))
    t = est.traffic
    return f"<p class='hs-risk-odds'>{words}.</p>" + risk_chart(est) + (
        f"<p>Traffic: {t.rate_per_s:g} requests/s, prompt_len {esc(t.prompt_len.describe())}, "
        f"max_tokens {esc(t.max_tokens.describe())}.<br>Assumes: "
        f"{esc(TRAFFIC_ASSUMPTIONS[0].split(': ', 1)[1])}.</p>")
