"""What every dashboard shares: controls -> the model -> numbers (HTML) and a chart (SVG).

A dashboard, drivable without a browser (set a control's ``.value``, read the rest):

``controls``         ipywidgets keyed by knob name (generated from the knob declaration)
``number_boxes``     the number box paired with each slider
``state``            the knobs (and prompt lengths) behind the screen
``last_prediction``  the :class:`~hisparse_model.answers.predict.Prediction` shown
``labels``           every number shown, as strings; ``labels["summary"]`` is a parseable digest,
                     also in the page hidden (tests read it; a reader never sees it)
``plot_data``        the data behind the chart (from :mod:`hisparse_model.text.chart_data`)
``error``            the message shown instead of numbers, else None
``numbers``          the numbers (:class:`~hisparse_model.views.numbers_pane.NumbersPane`)
``chart`` / ``message``   HTML widgets; ``widget`` the box to display

Every control change calls :meth:`Dashboard.update`, which sends as few widget
messages as it can before the numbers and the chart, since each one the browser
handles first can cost them a frame: the numbers are computed and sent first, and
pushed out of the kernel, with time left to draw them
(:func:`~hisparse_model.views.outbox.send_now`), before the chart's data
(:attr:`Screen.plot`) is computed; then the chart, redrawn only when
its data changed; last the number box that follows its slider (or the slider that
follows its box).  The controls do not echo their own value back
(:func:`~hisparse_model.views.controls.no_echo`).  Once the kernel is idle, the
numbers of every state one move away follow (:meth:`Dashboard.screens_ahead`), so
that the page can show a move's numbers before the kernel has heard of it.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterator
from typing import NamedTuple

import ipywidgets as W

from ..model.knobs import Knobs
from . import outbox
from .controls import (SPECS, CommandTypo, PromptLensTypo, control_rows, knob_value, moves, no_echo,
                       synced_trait, typed_refusal, value_at, widen_to)
from .numbers_pane import NumbersPane, state_part
from ..model.reproduction import ASSUMPTIONS
from .tables import CSS, assumptions_html, esc, summary_html
from .verdict_banner import verdict_html, verdict_of

AHEAD_AFTER_S = 0.05  # after an update, the kernel idle this long: compute the screens ahead


class Screen(NamedTuple):
    """What one update shows; ``plot()`` computes the chart's data after the numbers are out.
    ``head``: the answer in a line or two, shown above the controls where the dashboard puts
    its answer first (``answer_first``: many controls would push it out of sight)."""

    state: dict
    prediction: object
    labels: dict
    html: str
    plot: Callable[[], dict]
    head: str = ""


class Dashboard:
    """Base class: subclasses set ``name``, build ``controls`` and implement compute/draw."""

    name = "dashboard"
    assumptions = ASSUMPTIONS  # what its numbers assume (notebook 6: data parallel's)
    answer_first = False  # the screen's head above the controls (a pane of its own)
    shows_verdict = True  # the verdict on the state's server above the numbers

    def __init__(self, controls: dict[str, W.Widget], intro: str = "") -> None:
        self.controls = controls
        self.state: dict = {}
        self.last_prediction = None
        self.labels: dict[str, str] = {}
        self.plot_data: dict = {}
        self.error: str | None = None
        # control -> value while screens_ahead() computes a screen, per thread: in a kernel it
        # may run on the main thread while a browser's move is handled on another (a subshell)
        self._trying = threading.local()
        self._updates = 0  # updates so far: a scheduled screens_ahead() of an older one stops
        self.message = W.HTML()
        self.numbers = NumbersPane()
        self.numbers.add_class("hs-numbers-box")
        self.chart = W.HTML()
        self.chart.add_class("hs-chart-box")
        rows, self.number_boxes = control_rows(controls)
        # the answer above the controls, moved ahead with the numbers (one more pane)
        self.head = NumbersPane() if self.answer_first else None
        if self.head is not None:
            self.head.add_class("hs-head-box")
        parts = [W.HTML(CSS + intro), *([self.head] if self.head else []), rows, self.message,
                 self.numbers, self.chart, W.HTML(assumptions_html(self.assumptions))]
        self.widget = W.VBox(parts, layout={"width": "100%"})
        self.widget.add_class("hisparse-dashboard")
        self.widget.add_class(f"hs-dashboard-{self.name}")
        for c in controls.values():
            no_echo(c)
            c.observe(self._on_change, names="value")
        for name, box in self.number_boxes.items():
            no_echo(box)
            box.observe(functools.partial(self._on_box, name), names="value")
        self.numbers.controls = (
            [[c.model_id, synced_trait(c), ""] for c in controls.values()]
            + [[box.model_id, "value", controls[name].model_id]
               for name, box in self.number_boxes.items()])
        if self.head is not None:
            self.head.controls = self.numbers.controls
        self.update()

    def _on_change(self, change) -> None:
        self.update()

    def _on_box(self, name: str, change) -> None:
        """A number box typed: the slider follows, its message after the numbers and chart.
        A value past the slider's ends widens it where the knob allows the value, else it
        is refused in one line and the box shows the slider's value again (never a silent
        clamp)."""
        slider, new = self.controls[name], change.new
        if slider.value == new:
            return
        if not slider.min <= new <= slider.max:
            refused = typed_refusal(name, new, slider)
            if refused is not None:
                self.message.value = ("<div class='hs-error hs-refused' style='color:#b2182b'>"
                                      f"{esc(refused)}</div>")
                self.number_boxes[name].value = slider.value
                return
            with slider.hold_sync():
                widen_to(slider, new)
        with slider.hold_sync():
            slider.value = new  # -> _on_change -> update()
        self._sync_boxes()

    def _sync_boxes(self) -> None:
        for name, box in self.number_boxes.items():
            if box.value != self.controls[name].value:
                box.value = self.controls[name].value

    def value(self, name: str):
        """The value of control ``name`` (or the one :meth:`screens_ahead` is trying)."""
        trying = getattr(self._trying, "values", {})
        return trying[name] if name in trying else self.controls[name].value

    def knobs(self, **fixed) -> Knobs:
        """The knobs the controls say, plus ``fixed`` ones."""
        values = {n: knob_value(SPECS[n], self.value(n)) for n in self.controls if n in SPECS}
        return Knobs(**{**values, **fixed})

    def compute(self) -> Screen:
        raise NotImplementedError

    def draw(self) -> str:
        raise NotImplementedError

    def update(self) -> None:
        """Recompute from the controls and redraw (every control change calls this)."""
        plot = self._show_numbers()
        if plot is not None:  # a chart to compute: the numbers leave and are drawn first
            outbox.send_now()
        self._show_plot(plot)
        self._sync_boxes()
        self._updates += 1
        self._plan_ahead()

    def state_key(self, **synced) -> str:
        """A state as the page keys it: each control's synced value, ``synced`` overriding."""
        return "|".join(state_part(synced.get(n, getattr(c, synced_trait(c))))
                        for n, c in self.controls.items())

    def screens_ahead(self) -> dict[str, str]:
        """The numbers of every state one move away, keyed by :meth:`state_key`."""
        return self.heads_and_screens_ahead()[1]

    def heads_and_screens_ahead(self) -> tuple[dict[str, str], dict[str, str]]:
        """The heads and the numbers of every state one move away, each keyed by state."""
        steps = self._ahead_steps()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def _ahead_steps(self) -> Iterator[None]:
        """:meth:`heads_and_screens_ahead`, one screen per step (the kernel takes messages in
        between)."""
        heads: dict[str, str] = {}
        ahead: dict[str, str] = {}
        if self.error is not None:  # the error stays until the kernel's next numbers
            return heads, ahead
        for name, c in self.controls.items():
            for synced in moves(c):
                self._trying.values = {name: value_at(c, synced)}
                try:
                    screen = self.compute()
                    key = self.state_key(**{name: synced})
                    ahead[key], heads[key] = self._numbers_html(screen), screen.head
                except Exception:  # noqa: BLE001  an error is the kernel's to show, never ahead
                    pass
                finally:
                    self._trying.values = {}
                yield
        return heads, ahead

    def _plan_ahead(self) -> None:
        """In a kernel: compute the screens ahead once it is idle, a screen per loop turn.

        The page keeps the previous state's screens until then: a screen is a function of
        the controls, so each stays right (moving back, say).  An error is the exception:
        it stays on screen until the kernel's next numbers, so none are kept with it.
        """
        if self.error is not None:
            self._send_ahead({}, {})
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not in a kernel: screens_ahead() on demand
            return
        update, steps = self._updates, self._ahead_steps()

        def step() -> None:
            if update != self._updates:  # a newer update plans its own
                return
            try:
                next(steps)
            except StopIteration as done:
                self._send_ahead(*done.value)
                return
            loop.call_soon(step)

        loop.call_later(AHEAD_AFTER_S, step)

    def _send_ahead(self, heads: dict[str, str], ahead: dict[str, str]) -> None:
        self.numbers.ahead = ahead
        if self.head is not None:
            self.head.ahead = heads

    def _guarded(self, fn: Callable):
        """``(True, fn())``, or ``(False, None)`` with the error shown instead of numbers."""
        try:
            return True, fn()
        except PromptLensTypo as exc:
            self._show_error(str(exc), "typo in prompt_lens:")
        except CommandTypo as exc:
            self._show_error(str(exc), "typo in the command:")
        except ValueError as exc:  # vLLM would refuse these knobs: the model says why
            self._show_error(str(exc), "vLLM would reject these knobs:")
        except Exception as exc:  # noqa: BLE001  a model bug: shown, not lost in a log
            self._show_error(f"{type(exc).__name__}: {exc}", "the model failed:")
        return False, None

    def _show_numbers(self) -> Callable[[], dict] | None:
        """Compute and send the numbers; the chart's data thunk (None after an error)."""
        ok, screen = self._guarded(self.compute)
        if not ok:
            return None
        self.error = None
        self.state, self.labels = screen.state, screen.labels
        self.last_prediction = screen.prediction
        self.message.value = ""
        if self.head is not None:  # the answer first
            self.head.value = screen.head
        self.numbers.value = self._numbers_html(screen)
        return screen.plot

    def _numbers_html(self, screen: Screen) -> str:
        """The verdict on the server first (one wording, ``verdict_banner``: its kind in
        ``data-verdict``), then the dashboard's own numbers and digest."""
        verdict = verdict_of(screen.state) if self.shows_verdict else None
        banner = verdict_html(verdict) if verdict is not None else ""
        return banner + screen.html + summary_html(self.name, screen.labels["summary"])

    def _show_plot(self, plot: Callable[[], dict] | None) -> None:
        """The chart's data, and the chart redrawn when it changed."""
        ok, data = self._guarded(plot) if plot is not None else (False, None)
        if not ok:
            return
        if data and (data != self.plot_data or not self.chart.value):
            self.plot_data = data
            self.chart.value = self.draw()
        self.chart.layout.display = None if data else "none"

    def _show_error(self, msg: str, title: str) -> None:
        self.error = msg
        self.last_prediction = None
        self.labels = {"error": msg, "summary": f"error: {msg}"}
        self.plot_data = {}
        self.numbers.value = summary_html(self.name, self.labels["summary"])
        self.message.value = (
            "<div class='hs-error' style='color:#b2182b;border-left:4px solid #b2182b;"
            f"padding:4px 8px;font-size:14px'><b>{esc(title)}</b> {esc(msg)}</div>")
        if self.head is not None:  # the answer's place says there is none, and why
            self.head.value = self.message.value
        self.chart.layout.display = "none"

    def _repr_mimebundle_(self, **kwargs):  # display(dashboard) shows the widget
        return self.widget._repr_mimebundle_(**kwargs)
