"""The numbers pane: the dashboard's numbers, and those of every state one move away.

A control move costs a round trip through the Jupyter server and the kernel before
the new numbers can be drawn.  Once the kernel is idle after an update, the
dashboard computes the numbers of every state one move away (each slider one step,
each other choice, each checkbox flipped: :meth:`Dashboard.screens_ahead
<hisparse_model.views.dashboard.Dashboard.screens_ahead>`) and sends them as
``ahead``, keyed by the state as the page holds it.  The front end
(``numbers_pane.js``) shows them as soon as a control changes, before the kernel
has heard of the move; the kernel's own numbers follow (the same HTML: a screen is
a function of the controls' values).  A state not in ``ahead`` (typed prompt
lengths, a number typed in a box, a refused knob) waits for the kernel.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets


class NumbersPane(anywidget.AnyWidget):
    """``value``: the HTML shown; ``ahead``: state key -> HTML; ``controls``: what keys a state."""

    _esm = Path(__file__).with_name("numbers_pane.js")
    value = traitlets.Unicode("").tag(sync=True)
    ahead = traitlets.Dict().tag(sync=True)
    # [[model id, synced trait, model id of the slider a number box follows, or ""]]
    controls = traitlets.List().tag(sync=True)


def state_part(value) -> str:
    """One control's value in a state key, as the page's ``String(value)`` writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
