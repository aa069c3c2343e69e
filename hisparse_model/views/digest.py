"""A dashboard's digest: its state as one line, hidden in its HTML, for tests to read.

Every dashboard writes its ``labels["summary"]`` (e.g. ``B=640 q=1 C=2 W=3
crash_size=3``) into its numbers' HTML with :func:`summary_html`; nothing of it is
drawn or read aloud (the element has the ``hidden`` attribute).  Every test that reads
a dashboard's state reads it with :func:`read_digests` (or :func:`saved_digests` from a
notebook executed headless): the views' tests, the notebook tests, the GPU tests and
their CPU replay twins.  This module is the only place that knows the markup, so a
change of the writer that the reader does not follow fails those tests instead of
leaving one of them reading nothing.
"""

from __future__ import annotations

import html
import re

from .svg import esc

CLASS = "hs-summary"
SELECTOR = f".{CLASS}"  # the digest in a browser's DOM (tests/test_browser.py)
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

_DIGEST = re.compile(rf"<span class='{CLASS}' data-dashboard='(?P<name>\w+)' hidden>"
                     r"(?P<text>[^<]*)</span>")


def summary_html(name: str, summary: str) -> str:
    """The dashboard's state as one line, hidden: tests read it, a reader never sees it.

    It travels inside the numbers' HTML (so the page's screens ahead carry it too) as an
    element with the ``hidden`` attribute: nothing of it is drawn or read aloud.
    """
    return f"<span class='{CLASS}' data-dashboard='{name}' hidden>{esc(summary)}</span>"


def read_digests(markup: str) -> dict[str, str]:
    """name -> digest line (entities decoded) of every digest in ``markup``."""
    return {m["name"]: html.unescape(m["text"]) for m in _DIGEST.finditer(markup)}


def saved_digests(nb) -> dict[str, tuple[str, str]]:
    """name -> (digest line, the HTML it was found in) of every dashboard a notebook
    executed headless displayed, read from the widget state nbclient saves with it."""
    state = nb["metadata"].get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    out = {}
    for model in state.values():
        value = model.get("state", {}).get("value")
        if isinstance(value, str):
            for name, text in read_digests(value).items():
                out[name] = (text, value)
    return out
