"""The prompt_lens box: a text box that sends its value to the kernel in one message.

ipywidgets' ``Text`` answers Enter with two messages, a ``submit`` event and then
the value; the kernel dispatches each (with its busy / idle status) before the
dashboard can recompute, which measured 20 ms of a 50 ms budget in the browser
on 2 cores.  :class:`PromptBox` is an anywidget whose front end
(``prompt_box.js``) sends only the value: on Enter, or on leaving the box after
an edit.  It keeps ``Text``'s look (its CSS classes) and its Python face:
``value``, ``description``, ``tooltip``.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import traitlets


class PromptBox(anywidget.AnyWidget):
    """One line of text; ``value`` changes when the reader presses Enter or leaves the box."""

    _esm = Path(__file__).with_name("prompt_box.js")
    value = traitlets.Unicode("").tag(sync=True)
    description = traitlets.Unicode("").tag(sync=True)
    description_width = traitlets.Unicode("").tag(sync=True)
    # a wide text area with a hint that says how it is applied and greys a stale verdict
    # (notebook 7's pasted command)
    multiline = traitlets.Bool(False).tag(sync=True)
