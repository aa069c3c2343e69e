"""A few SVG primitives and the one palette every picture uses.

Charts are SVG strings drawn at their display size (no scaling, labels
>= 11 px), put into an ``ipywidgets.HTML``: a redraw is string formatting, a
few milliseconds, and stays crisp at any zoom.  Colours: green = fits swap_in
(ok), blue = all-resident, red = the swap_in overflow (crash), brown = never starts (not the
overflow), greys = not routed / not run / invalid knobs.
"""

from __future__ import annotations

import html

from ..text import chart_data as cd

PALETTE = {
    cd.SWAP_IN: "#1a9850", "ok": "#1a9850", cd.SAFE: "#1a9850",
    cd.ALL_RESIDENT: "#4575b4",
    cd.CRASH: "#d73027", cd.STARTUP_CRASH: "#d73027",
    cd.RUNTIME_CRASH: "#fc8d59",
    cd.NOT_ROUTED: "#bdbdbd", cd.NOT_RUN: "#e0e0e0", cd.INVALID: "#969696",
    cd.OTHER_ERROR: "#984ea3", cd.OVER_B: "#f0f0f0",
    # dark brown, not a grey: beside "vLLM refuses" (#969696) in notebook 2's strip
    cd.NEVER_STARTS: "#8c510a", cd.EXPOSED: "#fdae61", cd.UNDECIDED: "#fee08b",
}
LABELS = {
    cd.SWAP_IN: "swap_in, fits C rows", "ok": "ok", cd.SAFE: "no traffic crashes it",
    cd.ALL_RESIDENT: "all-resident path", cd.CRASH: "swap_in past C rows: crash",
    cd.STARTUP_CRASH: "start-up crash", cd.RUNTIME_CRASH: "a lone prompt crashes",
    cd.NEVER_STARTS: "never starts (not the overflow)",
    cd.EXPOSED: "requests together crash it", cd.UNDECIDED: "undecided",
    cd.NOT_ROUTED: "not routed (staged)", cd.NOT_RUN: "not run", cd.INVALID: "vLLM refuses",
    cd.OTHER_ERROR: "other failure", cd.OVER_B: "n > B: no step holds it",
}
INK, HIGHLIGHT = "#222222", "#fff3b0"
FONT = 12  # px, tick labels; titles 14 px; nothing under 11 px


def esc(x) -> str:
    return html.escape(str(x), quote=True)


class Svg:
    """An SVG picture built element by element, at its display size in px."""

    def __init__(self, width: int, height: int, title: str, cls: str = "hs-chart"):
        self.width, self.height, self.title, self.cls = width, height, title, cls
        self.parts: list[str] = []
        self.data: dict = {}  # data-* attributes of the <svg> (what a browser test reads)

    def rect(self, x, y, w, h, fill, **attrs) -> None:
        self.parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{max(w, 0):.1f}' "
                          f"height='{h:.1f}' fill='{fill}'{_attrs(attrs)}/>")

    def line(self, x1, y1, x2, y2, stroke=INK, width=1.0, dash=None, cls=None) -> None:
        d = f" stroke-dasharray='{dash}'" if dash else ""
        c = f" class='{cls}'" if cls else ""
        self.parts.append(f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' "
                          f"stroke='{stroke}' stroke-width='{width}'{d}{c}/>")

    def circle(self, x, y, r, fill, **attrs) -> None:
        self.parts.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='{r}' fill='{fill}'"
                          f"{_attrs(attrs)}/>")

    def path(self, d: str, fill, **attrs) -> None:
        self.parts.append(f"<path d='{d}' fill='{fill}'{_attrs(attrs)}/>")

    def text(self, x, y, s, size: int = FONT, anchor: str = "start", weight: str = "normal",
             fill: str = INK, cls: str | None = None) -> None:
        c = f" class='{cls}'" if cls else ""
        self.parts.append(f"<text x='{x:.1f}' y='{y:.1f}' font-size='{max(size, 11)}' "
                          f"text-anchor='{anchor}' font-weight='{weight}' fill='{fill}'{c}>"
                          f"{esc(s)}</text>")

    def legend(self, x, y, keys, labels: dict | None = None) -> None:
        """A one-line legend: a swatch and a label per palette key (``labels`` words a key
        for this chart where the shared word would say something else)."""
        for key in keys:
            label = (labels or {}).get(key, LABELS[key])
            self.rect(x, y - 10, 12, 12, PALETTE[key], cls="hs-legend-swatch")
            self.text(x + 16, y, label, cls="hs-legend")
            x += 24 + 7 * len(label)

    def render(self) -> str:
        data = "".join(f" data-{k}='{esc(v)}'" for k, v in self.data.items())
        return (f"<svg xmlns='http://www.w3.org/2000/svg' class='{self.cls}'{data} "
                f"width='{self.width}' height='{self.height}' "
                f"viewBox='0 0 {self.width} {self.height}' font-family='sans-serif' "
                f"role='img' aria-label='{esc(self.title)}' style='max-width:none'>"
                f"<title>{esc(self.title)}</title>" + "".join(self.parts) + "</svg>")


def _attrs(attrs: dict) -> str:
    # ``cls`` is the element's class (``class`` is a Python keyword)
    return "".join(f" {'class' if k == 'cls' else k.replace('_', '-')}='{esc(v)}'"
                   for k, v in attrs.items())


def runs(values) -> list[tuple[int, int, object]]:
    """Maximal runs of equal values: ``(start index, length, value)``."""
    out: list[list] = []
    for i, v in enumerate(values):
        if out and out[-1][2] == v:
            out[-1][1] += 1
        else:
            out.append([i, 1, v])
    return [tuple(r) for r in out]


def ticks(lo: int, hi: int, most: int = 10) -> list[int]:
    """Round tick values between lo and hi (at most about ``most``), always with lo and hi."""
    span = max(hi - lo, 1)
    step = next(s for s in (1, 2, 5, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 256, 500,
                            1000, 2000, 5000, 10**4, 10**5) if span / s <= most)
    inner = [t for t in range(lo - lo % step + step, hi, step) if t - lo >= step / 2
             and hi - t >= step / 2]
    return [lo] + inner + ([hi] if hi != lo else [])
