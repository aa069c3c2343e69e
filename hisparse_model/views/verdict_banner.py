"""The one verdict on the dashboard's server, drawn the same on every dashboard.

Every dashboard whose state names a configuration shows :func:`verdict_html` above its own
numbers (``dashboard.Dashboard``): the sentence ``answers/server_verdict.py`` words, in the
colour of its kind, with its advice; its kind is the line's ``data-verdict`` attribute, so a
test reads what a reader sees.  Nothing here words a verdict.
"""

from __future__ import annotations

from dataclasses import fields

from ..answers.server_verdict import ServerVerdict, server_verdict
from ..model.knobs import Knobs
from ..text import chart_data as cd
from .svg import PALETTE, esc

KNOB_NAMES = frozenset(f.name for f in fields(Knobs))
COLOURS = {"red": "#b2182b", "green": "#1a9850", "amber": "#b35806", "grey": "#525252",
           "brown": PALETTE[cd.NEVER_STARTS]}  # never starts: the strips' own colour


def verdict_of(state: dict) -> ServerVerdict | None:
    """The verdict on the configuration a dashboard's state holds (None: it holds none)."""
    if not state or "max_num_seqs" not in state:
        return None
    try:
        knobs = Knobs.from_dict({k: v for k, v in state.items() if k in KNOB_NAMES})
    except (TypeError, ValueError):
        return None
    return server_verdict(knobs)


def verdict_html(v: ServerVerdict) -> str:
    """The verdict as one line: 'This server (vLLM X):' and the headline, coloured by kind."""
    colour = COLOURS[v.colour]
    advice = (f"<div class='hs-verdict-advice'>To make it start: {esc(v.advice)}</div>"
              if v.advice else "")
    return (f"<div class='hs-verdict' data-verdict='{v.kind}' style='border-left:4px solid "
            f"{colour};padding:2px 8px;margin:2px 0 6px 0'><b>This server (vLLM "
            f"{esc(v.knobs.vllm_version)}, all traffic):</b> <span style='color:{colour}'>"
            f"{esc(v.headline)}</span>{advice}</div>")
