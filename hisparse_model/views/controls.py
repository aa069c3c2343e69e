"""Dashboard controls, generated from the knob declaration (``knobs.knob_specs()``).

:func:`knob_control` builds the control of one :class:`~hisparse_model.model.knobs.KnobSpec`:

* int knob: a slider paired with a number box (type 3, or drag 1 ... 256; the
  dashboard keeps the two equal);
  an optional int (``max_num_batched_tokens``) shows 0 for "not set" (vLLM's default);
* bool knob: a checkbox;
* str knob with choices: a dropdown, or toggle buttons; an optional one
  (``cudagraph_mode``) has a first choice "default" (not set).

Each control carries the knob's help text next to it.  :func:`knob_value`
turns a control's value back into the knob's (0 / "default" -> None).
"""

from __future__ import annotations

import ipywidgets as W

from ..model.knobs import KnobSpec, knob_specs
from ..model.knobs import _check as _check_knob
from .prompt_box import PromptBox

SPECS = {s.name: s for s in knob_specs()}
# Slider ranges on screen; the knob's own limits are wider (vLLM accepts more).
UI_RANGE = {"max_num_seqs": (1, 256), "num_speculative_tokens": (0, 4),
            "max_num_batched_tokens": (0, 4096), "max_model_len": (16, 4096)}
NOT_SET = "default"
STYLE = {"description_width": "210px"}
MAX_CHOICES_AHEAD = 8  # a selection with more options (a recording) gets no screens ahead
WIDTH = "560px"


class PromptLensTypo(ValueError):
    """The prompt_lens box does not hold comma-separated integers."""


class CommandTypo(ValueError):
    """The command box cannot be split into words as a shell splits them (an unclosed quote,
    a trailing backslash): the typist's slip, not something vLLM refuses."""


def parse_prompt_lens(text: str) -> list[int]:
    """``"2, 3, 200"`` -> ``[2, 3, 200]``; a non-integer or no length is a :class:`PromptLensTypo`.

    One rule for every dashboard with a prompt_lens box: at least one length (notebook 2's
    start-up table needs no prompt, but an empty box is read as a slip, as notebook 5 must).
    Prompts are counted from 1 in messages, as a reader counts them.
    """
    out = []
    parts = [part.strip() for part in str(text).replace(";", ",").split(",")]
    for i, part in enumerate((p for p in parts if p), start=1):
        try:
            out.append(int(part))
        except ValueError:
            raise PromptLensTypo(f"prompt_lens: prompt {i} ({part!r}) is not an integer") from None
    if not out:
        raise PromptLensTypo("prompt_lens: give at least one prompt length")
    return out


def _help(text: str) -> W.HTML:
    return W.HTML(f"<span style='color:#555;font-size:12px'>{text}</span>",
                  layout={"margin": "0 0 0 12px", "flex": "1 1 auto"})


def knob_control(spec: KnobSpec, value=None, *, toggle: bool = False) -> W.Widget:
    """The control of one knob, starting at ``value`` (None: the knob's default)."""
    value = spec.default if value is None else value
    common = {"description": spec.name, "style": dict(STYLE), "tooltip": spec.help}
    if spec.kind is bool:
        return W.Checkbox(value=bool(value), indent=True, layout={"width": WIDTH}, **common)
    if spec.kind is int:
        lo, hi = UI_RANGE.get(spec.name, (spec.minimum or 0, max(value or 0, 1024)))
        shown = 0 if value is None else value
        return W.IntSlider(value=shown, min=lo, max=hi, step=1, continuous_update=False,
                           layout={"width": WIDTH, "flex": "0 0 auto"}, **common)
    options = ((NOT_SET,) if spec.optional else ()) + tuple(spec.choices)
    shown = NOT_SET if value is None else value
    if toggle:
        common["style"]["button_width"] = "auto"
        return W.ToggleButtons(options=options, value=shown, **common)
    return W.Dropdown(options=options, value=shown, layout={"width": WIDTH}, **common)


def knob_value(spec: KnobSpec, shown):
    """A control's value as the knob's value: 0 or "default" mean not set (None)."""
    if spec.optional and shown in (0, NOT_SET):
        return None
    return shown


def number_box(slider: W.IntSlider) -> W.IntText:
    """A number box for ``slider``; the dashboard moves each with the other (type, or drag).

    Unbounded: a value past the slider's ends is not clamped in silence but widens the
    slider or is refused in one line (:func:`typed_refusal`, ``Dashboard._on_box``)."""
    box = W.IntText(value=slider.value, layout={"width": "90px", "flex": "0 0 auto"})
    box.add_class("hs-number-box")
    return box


def widen_to(slider: W.IntSlider, value: int) -> None:
    """Stretch ``slider``'s range so that it holds ``value`` (a typed or pasted value)."""
    slider.max, slider.min = max(slider.max, value), min(slider.min, value)


def typed_refusal(name: str, value: int, slider: W.IntSlider) -> str | None:
    """Why a value typed into ``name``'s number box past its slider's ends is refused, or
    None: a knob takes any value its declaration allows (the slider widens to it; vLLM's own
    refusals are the dashboard's to show), another control keeps its range."""
    if name in SPECS:
        try:
            _check_knob(SPECS[name], knob_value(SPECS[name], value))
        except ValueError as exc:
            return f"{exc}; {name} stays {slider.value}"
        return None
    return (f"{name}: {value} is outside this control's range {slider.min}-{slider.max}; "
            f"it stays {slider.value}")


def synced_trait(control: W.Widget) -> str:
    """The trait the page changes when a reader moves ``control``: a selection syncs its index."""
    return "index" if control.has_trait("index") else "value"


def moves(control: W.Widget) -> list:
    """The values of :func:`synced_trait` one move away: a slider step, another choice, a flip."""
    if isinstance(control, W.IntSlider):
        return [v for v in (control.value - 1, control.value + 1)
                if control.min <= v <= control.max]
    if control.has_trait("index"):  # a list of recordings is read, not stepped through
        n = len(control.options)
        return [i for i in range(n) if i != control.index] if n <= MAX_CHOICES_AHEAD else []
    if isinstance(control, W.Checkbox):
        return [not control.value]
    return []  # free text: nothing to guess


def value_at(control: W.Widget, synced) -> object:
    """The control's value when its synced trait is ``synced`` (options here are plain values)."""
    return list(control.options)[synced] if control.has_trait("index") else synced


def no_echo(control: W.Widget) -> None:
    """The kernel does not echo this control's value back to the browser that sent it.

    ipywidgets 8 answers every value a browser sends with an ``echo_update``
    message (for other browsers on the same kernel); the browser handles it
    before the dashboard's numbers, which costs the numbers a frame.  The
    ``_<trait>_metadata`` override is traitlets' per-object trait metadata, and
    ``echo_update=False`` is ipywidgets' switch for it (``FileUpload.value`` has it).
    """
    setattr(control, f"_{synced_trait(control)}_metadata", {"echo_update": False})


def text_control(name: str, value: str, help_text: str, multiline: bool = False) -> PromptBox:
    """A free-text control (``prompt_lens``); updates on Enter or leaving the box.
    ``multiline``: a text area as wide as the output (a pasted command), with its hint."""
    return PromptBox(value=value, description=name, tooltip=help_text,
                     description_width=STYLE["description_width"], multiline=multiline,
                     layout={"width": "100%", "flex": "1 1 100%"} if multiline
                     else {"width": WIDTH})


def choice_control(name: str, options, value, help_text: str) -> W.Dropdown:
    """A dropdown of things that are not knobs (a recording)."""
    return W.Dropdown(options=list(options), value=value, description=name, tooltip=help_text,
                      style=dict(STYLE), layout={"width": "760px"})


def control_rows(controls: dict[str, W.Widget]) -> tuple[W.VBox, dict[str, W.Widget]]:
    """One row per control, with its help text (and a number box for sliders)."""
    rows, boxes = [], {}
    for name, c in controls.items():
        extra = []
        if isinstance(c, W.IntSlider):
            boxes[name] = number_box(c)
            extra.append(boxes[name])
        help_text = SPECS[name].help if name in SPECS else c.tooltip or ""
        if name in SPECS and SPECS[name].optional and isinstance(c, W.IntSlider):
            help_text += " (0 = not set)"
        if getattr(c, "multiline", False):  # a wide text area: its help under it
            row = W.VBox([c, _help(help_text)], layout={"width": "100%"})
        else:
            row = W.HBox([c, *extra, _help(help_text)], layout={"align_items": "center"})
        row.add_class(f"hs-control-{name}")
        rows.append(row)
    return W.VBox(rows), boxes
