"""How soon, over the step times a server may have: the band notebook 7 shows without one.

An estimate turns arrival times into engine steps with one step time (``traffic_risk``),
and its answer swings with it (a step of 6 ms packs fewer arrivals into a step than one of
25 ms).  Without a measured step time (``hisparse_model.inputs.step_time``: a server's /metrics or
its log), :func:`band_html` estimates the same server under the same traffic at each of
:data:`BAND_STEP_MS` and draws the share of seeds crashed by each minute for every one of
them: the spread between the lines is what the missing measurement leaves open.
"""

from __future__ import annotations

from ..answers.traffic_risk import Estimate
from .risk_chart import LEFT, TOP, WIDTH, share_frame, share_scale
from .svg import Svg, esc

BAND_STEP_MS = (6.0, 12.0, 25.0)  # ms per engine step: a fast decode ... the fallback
HEIGHT, BOTTOM = 300, 80  # px: the picture (one legend row) and the room under the plot
SHADES = ("#08519c", "#4292c6", "#9ecae1", "#c6dbef")  # one per step time, darkest first
# each step time's line: (width px, dash pattern), widest first and drawn first, so that
# lines that coincide (the same seeds crashed by the same minute) still show each one
STROKES = ((8.0, ""), (4.5, "9 4"), (2.0, "3 3"), (1.0, "1 2"))


def band_chart(estimates: list[Estimate]) -> str:
    """One line per step time: the share of seeds crashed by each minute."""
    first = estimates[0]
    k = first.knobs
    svg = Svg(WIDTH, HEIGHT, f"Share of seeds crashed by each minute at {len(estimates)} step "
              f"times: vLLM {k.vllm_version}, S={k.max_num_seqs}", cls="hs-chart hs-risk-band")
    svg.data.update({"step-ms": ",".join(f"{e.step_ms:g}" for e in estimates),
                     "shares": ",".join(f"{e.share:.4f}" for e in estimates)})
    h = HEIGHT - TOP - BOTTOM
    svg.text(LEFT, 20, svg.title, size=14, weight="bold")
    x, y = share_scale(first.minutes, h)
    share_frame(svg, x, y, first.minutes, "minutes of traffic")
    for i, est in enumerate(estimates):
        times = sorted({0.0, est.minutes, *(min(r.minute(est.step_ms), est.minutes)
                                            for r in est.crashed)})
        points = []
        for a, b in zip(times, times[1:] + [times[-1]]):
            points += [(x(a), y(est.by(a))), (x(b), y(est.by(a)))]
        d = "M" + " L".join(f"{px:.1f},{py:.1f}" for px, py in points)
        width, dash = STROKES[i % len(STROKES)]
        svg.path(d, "none", stroke=SHADES[i % len(SHADES)], stroke_width=width,
                 stroke_dasharray=dash or "none", cls="hs-band-line")
    lx = LEFT
    for i, est in enumerate(estimates):
        label = f"{est.step_ms:g} ms per step: {len(est.crashed)} of {len(est.runs)} crashed"
        width, dash = STROKES[i % len(STROKES)]
        svg.line(lx, HEIGHT - 18, lx + 22, HEIGHT - 18, stroke=SHADES[i % len(SHADES)],
                 width=width, dash=dash or None, cls="hs-legend-swatch")
        svg.text(lx + 28, HEIGHT - 14, label, cls="hs-legend")
        lx += 40 + 6.5 * len(label)
    return svg.render()


def band_html(knobs, traffic_path: str, minutes: float, seeds: int,
              step_times=BAND_STEP_MS) -> str:
    """The odds at each step time in words, then :func:`band_chart`."""
    from ..answers.traffic_risk import estimate, load_traffic

    traffic = load_traffic(traffic_path)
    ests = [estimate(knobs, traffic, minutes, seeds=seeds, step_ms=ms) for ms in step_times]
    words = "; ".join(f"at {e.step_ms:g} ms per step <b>{len(e.crashed)} of {len(e.runs)}"
                      f"</b> seeds crashed within {e.minutes:g} minutes" for e in ests)
    return (f"<p class='hs-risk-odds'>No step time was measured, so the answer is shown at "
            f"{len(ests)} step times: {words}. Measure yours (<code>hisparse_model.inputs.step_time"
            f".from_metrics(URL)</code>, or <code>simulate --step-ms-from-metrics URL</code>) "
            f"to pick one line.</p>" + band_chart(ests)
            + f"<p>Traffic: {esc(traffic.source.rsplit('/', 1)[-1])}, "
            f"{traffic.rate_per_s:g} requests/s ({esc(traffic.arrivals_words())}).</p>")
