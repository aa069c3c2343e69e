"""Notebook 7: "Is my server exposed?" -- the verdict for all traffic, its example, the advice.

Paste a ``vllm serve`` command (read as ``check`` reads it, ``launch.py``) or leave the box
empty and move the knobs; the dashboard shows :func:`~hisparse_model.answers.exposure.exposure`'s
verdict, each exposed step kind with its example traffic replayed through ``simulate``
(:func:`~hisparse_model.answers.exposure.verify`), and the changes that make the server safe for
all traffic (:func:`~hisparse_model.answers.deployment_advice.deployment_advice`).
"""

from __future__ import annotations

import json
import math
import shlex

from ..answers.deployment_advice import deployment_advice
from ..answers.exposure import EXPOSURE_ASSUMPTIONS, EXPOSURE_DP_ASSUMPTION, exposure, verify
from ..answers.predict import predict
from ..answers.server_verdict import server_verdict
from ..text import chart_data as cd
from ..inputs.launch import change_as_flags, from_command
from ..model.host_pool import smallest_pool_gib
from ..model.kv_layout import layout
from ..model.plan import plan
from .buffers import buffer_picture, picture_for_plan, picture_for_prediction, picture_html
import ipywidgets as W

from .controls import (NOT_SET, SPECS, CommandTypo, knob_control, knob_value, text_control,
                       widen_to)
from .dashboard import Dashboard, Screen
from .svg import PALETTE
from .tables import esc

TOGGLES = ("vllm_version", "attention_backend", "routing")
SLIDERS = ("max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens", "max_model_len")
OVERRIDES = TOGGLES[1:] + SLIDERS  # knobs that, once moved, override a pasted command's value
COMMAND_HELP = ("a vllm serve command (read as `check` reads it); empty: the knobs below. "
                "vllm_version picks the release; a knob you move overrides the command's")
NOTHING_APPLIED = ("Nothing applied: the command box is empty, so there is no command to "
                   "reset the knobs to; the knobs and the verdict stay as they were.")
# HiSparse on through its connector (vLLM needs its host_pool_gib: model/host_pool.py),
# with a host pool the bundled example traffic cannot outgrow at serve's defaults: with
# DeepSeek-V3.2's own config (4,497,408-byte host blocks) its 4 seeds' requests can hold up
# to 1,954 GiB in 20 minutes at S 1024 by the model's bound (10.74 GiB, enough to start with
# max_model_len 163,840, runs short within seconds; 512 GiB within minutes)
POOL = "host_pool_gib"
SERVE_DEFAULT = ("vllm serve deepseek-ai/DeepSeek-V3.2 --kv-transfer-config "
                 """'{"kv_connector": "HiSparseConnector", "kv_role": "kv_both", """
                 """"kv_connector_extra_config": {"host_pool_gib": 2048}}'""")


class ExposureDashboard(Dashboard):
    """A command or the knobs -> exposed or not, for all traffic, with examples and advice."""

    name = "exposure"
    assumptions = EXPOSURE_ASSUMPTIONS + (EXPOSURE_DP_ASSUMPTION,)  # the second: -dp N only

    def __init__(self, command: str = "", **initial):
        controls = {"command": text_control("command", command, COMMAND_HELP, multiline=True)}
        controls.update({n: knob_control(SPECS[n], initial.get(n), toggle=True) for n in TOGGLES})
        controls.update({n: knob_control(SPECS[n], initial.get(n)) for n in SLIDERS})
        self._applying = False
        # the controls show the command's values in effect; what they showed then is the
        # baseline: a knob moved since overrides the command's value
        self.opened_at = show_command(controls)
        super().__init__(controls)
        self.reset = W.Button(description="reset the knobs to the command",
                              tooltip="undo every knob moved since the command was applied",
                              layout={"width": "260px"})
        self.reset.add_class("hs-reset")
        self.reset.on_click(lambda _: self._reset_clicked())
        head, rows, *rest = self.widget.children
        self.widget.children = (head, rows, self.reset, *rest)

    def _on_change(self, change) -> None:
        """A new command shows its values in the controls (earlier moves are dropped, and the
        source line says so no more); any other move updates as usual."""
        if self._applying:
            return
        if change.owner is self.controls["command"]:
            self._apply_command()
        else:
            self.update()

    def _reset_clicked(self) -> None:
        """The reset button: back to the pasted command's values; with an empty box there is
        no command, so nothing changes and one line says so."""
        if str(self.value("command")).strip():
            self._apply_command()
            return
        line = f"<div class='hs-note hs-nothing-applied'>{esc(NOTHING_APPLIED)}</div>"
        shown = self.message.value.replace(line, "")  # an error on screen stays with it
        self.message.value = (shown if self.error is not None else "") + line

    def _apply_command(self) -> None:
        self._applying = True
        try:
            # a pasted command names no vLLM version: it is check's default, as `hisparse
            # check` reads the same command, until the version is clicked after the paste
            if str(self.value("command")).strip():
                self.controls["vllm_version"].value = SPECS["vllm_version"].default
            last = self.opened_at.get(POOL)
            self.opened_at = show_command(self.controls)
            if last is not None:  # an empty box: the knobs keep the last command's pool
                self.opened_at.setdefault(POOL, last)
        finally:
            self._applying = False
        self.update()

    def deployment(self):
        """(knobs, where they came from): the pasted command, with every knob moved since the
        dashboard opened overriding the command's value; else the knobs."""
        command = str(self.value("command")).strip()
        if not command:
            return knobs_with_a_pool(self.knobs(), self.opened_at.get(POOL))
        try:
            argv = shlex.split(command)
        except ValueError as exc:  # a quoting slip: the shell, not vLLM, would stop here
            raise CommandTypo(
                f"{exc} (the shell cannot split it into words, so vLLM never sees it). The "
                "knobs above still show the last command that was read; fix the quoting, or "
                "empty the box to answer for the knobs alone") from None
        launch = from_command(argv, self.value("vllm_version"))
        moved = {n: knob_value(SPECS[n], self.value(n)) for n in OVERRIDES
                 if self.value(n) != self.opened_at[n]}
        if not moved:
            return launch.knobs, "the pasted vllm serve command"
        said = ", ".join(f"{n} = {v if v is not None else 'default'}" for n, v in moved.items())
        return (launch.knobs.replace(**moved),
                f"the pasted vllm serve command, with {said} from the knobs")

    def compute(self) -> Screen:
        knobs, source = self.deployment()
        try:
            exp = exposure(knobs)
        except ValueError as exc:  # say which values came from moved knobs, and the way back
            if "from the knobs" not in source:
                raise
            raise ValueError(f"{exc} (read from {source}; \"reset the knobs to the command\" "
                             "undoes the moves)") from None
        advice = deployment_advice(knobs)
        verified = [verify(knobs, st) for st in exp.steps]
        word = {True: "exposed", False: "safe", None: "undecided"}[exp.exposed]
        tokens = ",".join(str(st.tokens) for st in exp.steps if st.tokens) or "none"
        kinds = ",".join(st.kind for st in exp.steps) or "none"
        ok = str(all(verified)).lower()
        p = plan(knobs)
        c, w = p.swap_capacity, p.workspace_rows
        labels = {"exposed": word, "tokens": tokens, "source": source, "kinds": kinds,
                  "advice": str(len(advice)), "verified": ok,
                  "summary": f"exposed={word} kinds={kinds} tokens={tokens} "
                             f"advice={len(advice)} verified={ok} C={c} W={w}"}
        body = (_verdict_html(exp, verified, source) + picture_html(_picture(p, exp))
                + _advice_html(advice))
        return Screen({**knobs.as_dict(), "source": source}, exp, labels, body, lambda: {})

    def draw(self) -> str:
        return ""


def knobs_with_a_pool(knobs, last: float | None) -> tuple:
    """(knobs, source) for the knobs alone: the dashboard has no host-pool control, so the
    pool is the last pasted command's (``last``), else the smallest whole GiB holding one
    max_model_len request (at least the reproduction's 1 GiB); the source says which."""
    if last is not None:
        return (knobs.replace(host_pool_gib=last),
                f"the knobs above, with the last command's {last:g} GiB host pool")
    gib = max(1, math.ceil(smallest_pool_gib(knobs.max_model_len, layout(knobs))))
    if gib == knobs.host_pool_gib:
        return knobs, "the knobs above"
    return (knobs.replace(host_pool_gib=gib), f"the knobs above, with a {gib} GiB host pool "
            "(the smallest whole GiB that holds max_model_len)")


def show_command(controls: dict) -> dict:
    """Set the knob controls to the pasted command's values (a slider widens to hold one);
    return what the overridable controls show now.  An empty or unreadable command leaves
    them as they are (the dashboard shows why a command cannot be read)."""
    command = str(controls["command"].value).strip()
    try:
        knobs = from_command(shlex.split(command), controls["vllm_version"].value).knobs \
            if command else None
    except ValueError:
        knobs = None
    for n in OVERRIDES if knobs is not None else ():
        value = getattr(knobs, n)
        shown = (0 if n in SLIDERS else NOT_SET) if value is None else value
        c = controls[n]
        if n in SLIDERS:
            widen_to(c, shown)
        c.value = shown
    shown = {n: controls[n].value for n in OVERRIDES}
    if knobs is not None:  # no control shows the host pool: kept for the knobs (below)
        shown[POOL] = knobs.host_pool_gib
    return shown


def _picture(p, exp) -> str:
    """The first exposed step's tokens into the buffers; a server that never starts: the
    start-up batch that fails, as notebook 2 draws it; safe: the batch of W tokens."""
    if exp.never_starts:
        return picture_for_prediction(predict(exp.knobs))
    first = next((st for st in exp.steps if st.tokens), None)
    if first is None:
        return picture_for_plan(p)
    return buffer_picture(p.swap_capacity, p.workspace_rows, first.tokens, cd.CRASH,
                          title=f"The step that kills this server: {first.tokens} routed tokens")


def _verdict_html(exp, verified: list[bool], source: str) -> str:
    colour = (PALETTE[cd.NEVER_STARTS] if exp.never_starts else
              {True: "#d73027", False: "#1a9850", None: "#fc8d59"}[exp.exposed])
    k = exp.knobs
    out = [f"<div class='hs-big' style='color:{colour}'><b class='hs-verdict'>"
           f"{esc(exp.headline.split(' (')[0])}</b></div>",
           f"<div class='hs-note'>Read from {esc(source)}: vLLM {esc(k.vllm_version)}"
           f"{' + fix' if k.routing == 'fix' else ''}, {esc(k.attention_backend)}, "
           f"S = {k.max_num_seqs}, max_model_len = {k.max_model_len}.</div>"]
    if exp.exposed is False:
        out.append(f"<div class='hs-note'>Never: {esc(exp.never_because)}.</div>")
    elif exp.never_starts:  # why, as the verdict says it (no traffic is served at all)
        why = server_verdict(k).detail
        out.append(f"<div class='hs-note hs-never-why'>{esc(why[:1].upper() + why[1:])}.</div>")
    elif exp.exposed is None:
        out.append(f"<div class='hs-note'>The model cannot decide: {esc(exp.undecided)}.</div>")
    for st, ok in zip(exp.steps, verified):
        replay = "replayed through simulate: it crashes so" if ok else "NOT reproduced by simulate"
        out.append(f"<div class='hs-note'><b>{esc(st.what)}</b><br>example traffic: "
                   f"<code class='hs-example'>{esc(json.dumps(st.example))}</code><br>"
                   f"{replay}: <code>{esc(st.error)}</code></div>")
    return "".join(out)


def _advice_html(advice: list[dict]) -> str:
    if not advice:
        return ""
    items = "".join(f"<li><b>{esc(change_as_flags(a['change']))}</b>: {esc(a['why'])}"
                    f"<br><i>cost: {esc(a['cost']['text'])}</i></li>" for a in advice)
    return ("<div class='hs-note'>To make it safe for all traffic (each change checked by the "
            f"exposure analysis):<ol class='hs-advice'>{items}</ol></div>")


def exposure_dashboard(command: str = "", **initial) -> ExposureDashboard:
    """Notebook 7: paste a vllm serve command, or move the knobs."""
    return ExposureDashboard(command, **initial)


__all__ = ["SERVE_DEFAULT", "ExposureDashboard", "exposure_dashboard"]
