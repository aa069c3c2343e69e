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
    """``value``: the HTML shown; ``ahead``: state key -> HTML; ``controls``: what keys a state.

    The screens ahead travel as one binary buffer (``ahead_blob``, their UTF-8 HTML one
    after another) and an index (``ahead_index``: state key -> [start, end) in bytes), so
    the page decodes only the screen a move needs instead of parsing every one as a
    string on each update (tens of KB of garbage per update in the page).
    """

    _esm = Path(__file__).with_name("numbers_pane.js")
    value = traitlets.Unicode("").tag(sync=True)
    ahead_index = traitlets.Dict().tag(sync=True)
    ahead_blob = traitlets.Bytes(b"").tag(sync=True)
    # [[model id, synced trait, model id of the slider a number box follows, or ""]]
    controls = traitlets.List().tag(sync=True)

    @property
    def ahead(self) -> dict[str, str]:
        """The screens ahead the page holds: state key -> HTML."""
        return {k: self.ahead_blob[a:b].decode() for k, (a, b) in self.ahead_index.items()}

    @ahead.setter
    def ahead(self, screens: dict[str, str]) -> None:
        index, parts, at = {}, [], 0
        for key, html in screens.items():
            data = html.encode()
            index[key], at = [at, at + len(data)], at + len(data)
            parts.append(data)
        with self.hold_sync():  # one message
            self.ahead_blob = b"".join(parts)
            self.ahead_index = index


def state_part(value) -> str:
    """One control's value in a state key, as the page's ``String(value)`` writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
