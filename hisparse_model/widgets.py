"""Interactive dashboards behind the notebooks, drivable without a browser.

Each ``*_dashboard()`` factory returns a :class:`Dashboard`:

``controls``         dict of ipywidgets keyed by vLLM knob name (``max_num_seqs``, ...)
``state``            the keyword arguments the model got on the last update
``last_prediction``  the :class:`~hisparse_model.predict.Prediction` behind the screen
``labels``           every number the screen shows, as strings (``labels["C"]``);
                     ``labels["summary"]`` is a one-line, parseable digest
``plot_data``        the lists behind the chart (see :mod:`hisparse_model.plots`)
``error``            the model's ValueError text for invalid knobs, else None
``widget``           the VBox to ``display()``
``update()``         recompute and redraw (what every control change calls)

A change of any control runs :meth:`Dashboard.update`: build
:class:`~hisparse_model.knobs.Knobs`, call :func:`~hisparse_model.predict.predict`,
refresh the HTML and redraw one reused Agg figure into an ``ipywidgets.Image``.
An invalid combination (vLLM would refuse it) shows the model's error message
in the dashboard instead of a traceback.

``max_num_batched_tokens`` is a slider whose 0 means "not set" (vLLM's default,
``min(max_num_seqs * max_model_len, 16384)``); ``cudagraph_mode`` "default"
likewise means not set.
"""

from __future__ import annotations

import html
import os
from functools import lru_cache

import ipywidgets as W

from . import explain, plots, routing
from .knobs import ATTENTION_BACKENDS, CUDAGRAPH_MODES, VLLM_VERSIONS, Knobs
from .predict import predict

DEFAULT_PROMPTS = "2, 3, 200"  # the fix PR's reproduction loop
MAX_SEQS = 256  # slider and sweep range: max_num_seqs 1..256
MAX_SPEC = 4  # num_speculative_tokens 0..4 (MTP)
MAX_BATCHED = 4096  # max_num_batched_tokens slider (0 = vLLM default)

_SLIDER_STYLE = {"description_width": "190px"}
_SLIDER_LAYOUT = {"width": "560px"}


def parse_prompt_lens(text: str) -> list[int]:
    """``"2, 3, 200"`` -> ``[2, 3, 200]``; anything else is a ValueError naming the knob."""
    out = []
    for part in str(text).replace(";", ",").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise ValueError(f"prompt_lens: {part!r} is not an integer") from None
    return out


def _int_slider(name: str, value: int, lo: int, hi: int, tip: str = "") -> W.IntSlider:
    return W.IntSlider(value=value, min=lo, max=hi, step=1, description=name,
                       continuous_update=False, style=_SLIDER_STYLE,
                       layout=_SLIDER_LAYOUT, description_allow_html=False,
                       tooltip=tip or None)


def _batched_value(v: int) -> int | None:
    return None if v == 0 else v


def _mode_value(v: str) -> str | None:
    return None if v == "default" else v


def _ranges(values: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3,7"``; empty -> ``"none"``."""
    if not values:
        return "none"
    parts, start, prev = [], values[0], values[0]
    for v in values[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ",".join(parts)


def _esc(x) -> str:
    return html.escape(str(x))


def _table(headers: list[str], rows: list[list[str]], *, raw: bool = False,
           row_styles: list[str] | None = None, cls: str = "hs-table") -> str:
    """A small HTML table; cells are escaped unless ``raw``."""
    th = "".join(f"<th style='text-align:left;padding:2px 8px'>{_esc(h)}</th>" for h in headers)
    body = []
    for i, r in enumerate(rows):
        style = (row_styles[i] if row_styles else "") or ""
        tds = "".join(
            f"<td style='padding:2px 8px;vertical-align:top'>{c if raw else _esc(c)}</td>" for c in r
        )
        body.append(f"<tr style='{style}'>{tds}</tr>")
    return (f"<table class='{cls}' style='border-collapse:collapse;font-size:12px'>"
            f"<thead><tr style='border-bottom:1px solid #999'>{th}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _swatch(key: str, text: str | None = None) -> str:
    color = plots.PALETTE[key]
    return (f"<span style='display:inline-block;width:10px;height:10px;background:{color};"
            f"margin-right:4px;border-radius:2px'></span>{_esc(text if text is not None else key)}")


class Dashboard:
    """Base class: controls -> model -> labels/plot_data -> HTML + PNG."""

    figsize = (9.0, 2.6)

    def __init__(self) -> None:
        self.controls: dict[str, W.Widget] = {}
        self.state: dict = {}
        self.last_prediction = None
        self.labels: dict[str, str] = {}
        self.plot_data: dict = {}
        self.error: str | None = None
        self.message = W.HTML(layout={"min_height": "0px"})
        self.numbers = W.HTML()
        self.image = W.Image(format="png", layout={"width": "auto"})
        self.canvas = plots.Canvas(figsize=self.figsize)
        self.widget: W.VBox | None = None

    # -- wiring -----------------------------------------------------------
    def _wire(self, extra: list[W.Widget] | None = None) -> None:
        for c in self.controls.values():
            c.observe(self._on_change, names="value")
        self.widget = W.VBox(
            [W.VBox(list(self.controls.values())), self.message, self.numbers,
             self.image] + (extra or []),
            layout={"width": "100%"},
        )
        self.widget.add_class("hisparse-dashboard")
        self.update()

    def _on_change(self, change) -> None:
        self.update()

    # -- subclass hooks ----------------------------------------------------
    def _compute(self) -> dict:
        """Return {"state", "prediction", "labels", "plot_data", "html"}; may raise ValueError."""
        raise NotImplementedError

    def _draw(self, ax) -> None:
        raise NotImplementedError

    # -- update -----------------------------------------------------------
    def update(self) -> None:
        """Recompute from the controls and redraw (every control change calls this)."""
        try:
            out = self._compute()
        except ValueError as exc:  # vLLM would reject these knobs: the model says why
            self._show_error(str(exc))
            return
        except Exception as exc:  # noqa: BLE001  a model bug: shown, not lost in the Lab log
            self._show_error(f"{type(exc).__name__}: {exc}", title="the model failed:")
            return
        self.error = None
        self.state = out["state"]
        self.last_prediction = out["prediction"]
        self.labels = out["labels"]
        redraw = out["plot_data"] != self.plot_data or not self.image.value
        self.plot_data = out["plot_data"]
        self.message.value = ""
        self.numbers.value = out["html"]
        if self.plot_data:
            if redraw:  # e.g. picking another recording leaves the chart as it is
                self._draw(self.canvas.ax)
                self.image.value = self.canvas.png()
            self.image.layout.display = None
        else:
            self.image.layout.display = "none"

    def _show_error(self, msg: str, title: str = "vLLM would reject these knobs:") -> None:
        self.error = msg
        self.last_prediction = None
        self.labels = {"error": msg, "summary": f"error: {msg}"}
        self.plot_data = {}
        self.numbers.value = ""
        self.message.value = (
            "<div class='hs-error' style='color:#b2182b;border-left:4px solid #b2182b;"
            f"padding:4px 8px'><b>{_esc(title)}</b> {_esc(msg)}</div>"
        )
        self.image.layout.display = "none"

    def _repr_mimebundle_(self, **kwargs):  # display(dashboard) shows the widget
        return self.widget._repr_mimebundle_(**kwargs)


# --------------------------------------------------------------------------
# notebook 1: the off-by-one
# --------------------------------------------------------------------------


class OffByOneDashboard(Dashboard):
    """C (swap rows) vs W = C + 1 (workspace rows) and where each batch size goes."""

    def __init__(self, *, max_num_seqs: int = 2, num_speculative_tokens: int = 0,
                 max_num_batched_tokens: int | None = None, max_model_len: int = 320):
        super().__init__()
        self.max_model_len = max_model_len
        self.controls = {
            "max_num_seqs": _int_slider("max_num_seqs", max_num_seqs, 1, MAX_SEQS),
            "num_speculative_tokens": _int_slider("num_speculative_tokens",
                                                  num_speculative_tokens, 0, MAX_SPEC),
            "max_num_batched_tokens": _int_slider(
                "max_num_batched_tokens", max_num_batched_tokens or 0, 0, MAX_BATCHED,
                "0 = not set (vLLM default)"),
        }
        self._wire()

    def _compute(self) -> dict:
        c = self.controls
        state = {
            "vllm_version": "0.31.0",
            "max_num_seqs": c["max_num_seqs"].value,
            "num_speculative_tokens": c["num_speculative_tokens"].value,
            "max_num_batched_tokens": _batched_value(c["max_num_batched_tokens"].value),
            "max_model_len": self.max_model_len,
        }
        pred = predict(Knobs(**state))
        s = pred.sizes
        data = plots.route_lanes(s.swap_capacity)
        crash = data["crash_sizes"][next(iter(data["lanes"]))]
        crash_size = str(crash[0]) if crash else "none"
        stock = routing.route("0.31.0", "stock", s.workspace_rows, s.swap_capacity,
                              has_prefill=True)
        labels = {
            "B": str(s.max_num_batched_tokens),
            "q": str(s.max_decode_query_len),
            "C": str(s.swap_capacity),
            "W": str(s.workspace_rows),
            "crash_size": crash_size,
            "crash_error": stock.error or "",
            "summary": (f"B={s.max_num_batched_tokens} q={s.max_decode_query_len} "
                        f"C={s.swap_capacity} W={s.workspace_rows} crash_size={crash_size}"),
        }
        v = "0.31.0"
        body = (
            "<div class='hs-numbers'>"
            f"<div style='font-size:15px;margin:4px 0'>swap capacity <b>C = <span class='hs-C'>"
            f"{s.swap_capacity}</span></b> rows &nbsp;·&nbsp; index-group workspace "
            f"<b>W = <span class='hs-W'>{s.workspace_rows}</span></b> rows &nbsp;·&nbsp; "
            f"crashing batch size under 0.31.0: <b style='color:{plots.PALETTE[plots.CRASH]}'>"
            f"n = <span class='hs-crash'>{crash_size}</span></b></div>"
            f"{explain.formulas_html(pred)}"
            f"<div style='margin:4px 0'>Routing in 0.31.0 ({explain.cite_html('predicate', v)}): "
            f"{_esc(explain.predicate(v))}. A batch of exactly n = W = {s.workspace_rows} tokens "
            f"passes that check, but swap_in has only C = {s.swap_capacity} rows, so "
            f"{explain.cite_html('error', v)} raises:<br><code>{_esc(stock.error)}</code></div>"
            f"<div style='margin:4px 0'>0.32.0 routes on C instead "
            f"({explain.cite_html('predicate', '0.32.0')}): the same batch goes all-resident.</div>"
            f"<code class='hs-summary'>{_esc(labels['summary'])}</code></div>"
        )
        return {"state": state, "prediction": pred, "labels": labels,
                "plot_data": data, "html": body}

    def _draw(self, ax) -> None:
        plots.draw_route_lanes(ax, self.plot_data)


def off_by_one_dashboard(**initial) -> OffByOneDashboard:
    """Notebook 1: sliders for max_num_seqs, num_speculative_tokens, max_num_batched_tokens."""
    return OffByOneDashboard(**initial)


# --------------------------------------------------------------------------
# notebook 2: start-up or first request
# --------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _cached_seqs_sweep(base_items: tuple) -> dict:
    return plots.max_num_seqs_sweep(dict(base_items), range(1, MAX_SEQS + 1))


def _batch_rows(batches) -> tuple[list[list[str]], list[str]]:
    rows, styles = [], []
    for b in batches:
        key = plots.outcome(b.route, b.error)
        route = _swatch(key, b.route or "not routed")
        rows.append([_esc(b.phase), _esc(b.label), str(b.num_tokens), str(b.num_reqs),
                     str(b.num_decode_tokens), _esc(b.cudagraph_mode),
                     str(b.routed) if b.routed else "–", route,
                     f"<code>{_esc(b.error)}</code>" if b.error else ""])
        styles.append("background:#fde0dd" if b.error else "")
    return rows, styles


BATCH_HEADERS = ["phase", "batch", "tokens", "requests", "decode tokens", "graph mode",
                 "routed n", "route", "error"]


def _prompt_word(p) -> str:
    return "ok" if p.ok else "crash"


class StartupDashboard(Dashboard):
    """Capture sizes, every start-up batch, each prompt, and a max_num_seqs sweep."""

    figsize = (9.0, 3.2)

    def __init__(self, *, max_num_seqs: int = 2, num_speculative_tokens: int = 0,
                 max_num_batched_tokens: int | None = None, enforce_eager: bool = False,
                 cudagraph_mode: str | None = None, vllm_version: str = "0.31.0",
                 attention_backend: str = "FLASH_ATTN_MLA_SPARSE",
                 prompt_lens: str = DEFAULT_PROMPTS, max_model_len: int = 320):
        super().__init__()
        self.max_model_len = max_model_len
        self.controls = {
            "max_num_seqs": _int_slider("max_num_seqs", max_num_seqs, 1, MAX_SEQS),
            "num_speculative_tokens": _int_slider("num_speculative_tokens",
                                                  num_speculative_tokens, 0, MAX_SPEC),
            "max_num_batched_tokens": _int_slider(
                "max_num_batched_tokens", max_num_batched_tokens or 0, 0, MAX_BATCHED,
                "0 = not set (vLLM default)"),
            "enforce_eager": W.Checkbox(value=enforce_eager, description="enforce_eager",
                                        style=_SLIDER_STYLE),
            "cudagraph_mode": W.Dropdown(options=("default",) + CUDAGRAPH_MODES,
                                         value=cudagraph_mode or "default",
                                         description="cudagraph_mode", style=_SLIDER_STYLE),
            "vllm_version": W.Dropdown(options=VLLM_VERSIONS, value=vllm_version,
                                       description="vllm_version", style=_SLIDER_STYLE),
            "attention_backend": W.Dropdown(options=ATTENTION_BACKENDS, value=attention_backend,
                                            description="attention_backend",
                                            style=_SLIDER_STYLE),
            "prompt_lens": W.Text(value=prompt_lens, description="prompt_lens",
                                  continuous_update=False, style=_SLIDER_STYLE,
                                  layout=_SLIDER_LAYOUT),
        }
        self._wire()

    def _compute(self) -> dict:
        c = self.controls
        state = {
            "vllm_version": c["vllm_version"].value,
            "max_num_seqs": c["max_num_seqs"].value,
            "num_speculative_tokens": c["num_speculative_tokens"].value,
            "max_num_batched_tokens": _batched_value(c["max_num_batched_tokens"].value),
            "enforce_eager": c["enforce_eager"].value,
            "cudagraph_mode": _mode_value(c["cudagraph_mode"].value),
            "attention_backend": c["attention_backend"].value,
            "max_model_len": self.max_model_len,
        }
        lens = parse_prompt_lens(c["prompt_lens"].value)
        pred = predict(Knobs(**state), lens)
        state = {**state, "prompt_lens": lens}
        s = pred.sizes
        base = {k: v for k, v in state.items() if k not in ("max_num_seqs", "prompt_lens")}
        sweep = _cached_seqs_sweep(tuple(sorted(base.items())))
        data = {**sweep, "current": state["max_num_seqs"]}
        crash_b = pred.startup_crash_batch
        startup = "ok" if crash_b is None else f"crash(n={crash_b.routed})"
        prompts = ",".join(f"{p.n}:{_prompt_word(p)}" for p in pred.prompts)
        by_kind = {k: [sv for sv, o in zip(sweep["max_num_seqs"], sweep["outcome"]) if o == k]
                   for k in (plots.STARTUP_CRASH, plots.RUNTIME_CRASH, plots.SAFE, plots.INVALID)}
        labels = {
            "B": str(s.max_num_batched_tokens), "q": str(s.max_decode_query_len),
            "C": str(s.swap_capacity), "W": str(s.workspace_rows),
            "capture_sizes": ", ".join(map(str, pred.capture_sizes)) or "none",
            "cudagraph_mode": pred.cudagraph_mode,
            "startup": "ok" if pred.startup_ok else pred.startup_error,
            "startup_crash_batch": ("" if crash_b is None else
                                    f"{crash_b.label} of {crash_b.num_tokens} tokens ({crash_b.phase})"),
            "prompts": prompts,
            "summary": (f"max_num_seqs={state['max_num_seqs']} C={s.swap_capacity} "
                        f"W={s.workspace_rows} capture_sizes={','.join(map(str, pred.capture_sizes))} "
                        f"startup={startup} prompts={prompts or 'none'}"),
            "sweep_summary": (f"sweep startup_crash={_ranges(by_kind[plots.STARTUP_CRASH])} "
                              f"runtime_crash={_ranges(by_kind[plots.RUNTIME_CRASH])} "
                              f"safe={_ranges(by_kind[plots.SAFE])} "
                              f"invalid={_ranges(by_kind[plots.INVALID])}"),
        }
        v = state["vllm_version"]
        rows, styles = _batch_rows(pred.startup)
        if crash_b is None:
            verdict = (f"<b style='color:{plots.PALETTE[plots.OK]}'>start-up survives</b>: no "
                       f"start-up batch hands exactly W = {s.workspace_rows} tokens to swap_in.")
        else:
            verdict = (f"<b style='color:{plots.PALETTE[plots.CRASH]}'>start-up dies</b> at the "
                       f"{_esc(labels['startup_crash_batch'])}: it hands n = {crash_b.routed} tokens "
                       f"to the routing, and n = W = {s.workspace_rows} takes swap_in "
                       f"({explain.cite_html('predicate', v)}) which has only C = "
                       f"{s.swap_capacity} rows:<br><code>{_esc(pred.startup_error)}</code>")
        prow = [[str(p.n), ", ".join(f"{b.label} n={b.routed}→{b.route or 'not routed'}"
                                     for b in p.batches),
                 _swatch(plots.OK if p.ok else plots.CRASH, "ok" if p.ok else p.error)]
                for p in pred.prompts]
        body = (
            "<div class='hs-numbers'>"
            f"<div style='font-size:14px;margin:4px 0'>capture sizes "
            f"<b class='hs-captures'>[{_esc(labels['capture_sizes'])}]</b> "
            f"({explain.cite_html('capture_sizes', v)}); cudagraph_mode "
            f"<b>{_esc(pred.cudagraph_mode)}</b>; C = <b>{s.swap_capacity}</b>, "
            f"W = <b>{s.workspace_rows}</b></div>"
            f"{explain.formulas_html(pred)}"
            f"<div style='margin:6px 0'>{verdict}</div>"
            f"<details open><summary>start-up batches in engine order "
            f"({explain.cite_html('startup', v)})</summary>"
            f"<div style='max-height:260px;overflow:auto'>"
            f"{_table(BATCH_HEADERS, rows, raw=True, row_styles=styles)}</div></details>"
            f"<div style='margin-top:6px'><b>prompts</b> (each served alone, max_tokens=8)</div>"
            f"{_table(['prompt n', 'batches: routed n → route', 'outcome'], prow, raw=True)}"
            f"<code class='hs-summary'>{_esc(labels['summary'])}</code><br>"
            f"<code class='hs-sweep'>{_esc(labels['sweep_summary'])}</code></div>"
        )
        return {"state": state, "prediction": pred, "labels": labels,
                "plot_data": data, "html": body}

    def _draw(self, ax) -> None:
        v = self.state.get("vllm_version", "0.31.0")
        plots.draw_max_num_seqs(
            ax, self.plot_data, current=self.plot_data.get("current"),
            title=f"vLLM {v}: start-up crash, runtime crash or safe, for max_num_seqs 1..{MAX_SEQS}")


def startup_dashboard(**initial) -> StartupDashboard:
    """Notebook 2: capture sizes and start-up batches; a chart over max_num_seqs 1..256."""
    return StartupDashboard(**initial)


# --------------------------------------------------------------------------
# notebook 3: the fix and the next fix
# --------------------------------------------------------------------------


class VersionsDashboard(Dashboard):
    """The same knobs through 0.31.0, 0.32.0 and 0.33.0, side by side."""

    figsize = (9.0, 2.4)

    def __init__(self, *, vllm_version: str = "0.31.0",
                 attention_backend: str = "FLASH_ATTN_MLA_SPARSE", routing: str = "stock",
                 max_num_seqs: int = 2, num_speculative_tokens: int = 0,
                 max_num_batched_tokens: int | None = None,
                 prompt_lens: str = DEFAULT_PROMPTS, max_model_len: int = 320):
        super().__init__()
        self.max_model_len = max_model_len
        self.controls = {
            "vllm_version": W.ToggleButtons(options=VLLM_VERSIONS, value=vllm_version,
                                            description="vllm_version", style=_SLIDER_STYLE),
            "attention_backend": W.ToggleButtons(options=ATTENTION_BACKENDS,
                                                 value=attention_backend,
                                                 description="attention_backend",
                                                 style={**_SLIDER_STYLE, "button_width": "210px"}),
            "routing": W.ToggleButtons(options=("stock", "fix"), value=routing,
                                       description="routing (0.31.0)", style=_SLIDER_STYLE),
            "max_num_seqs": _int_slider("max_num_seqs", max_num_seqs, 1, MAX_SEQS),
            "num_speculative_tokens": _int_slider("num_speculative_tokens",
                                                  num_speculative_tokens, 0, MAX_SPEC),
            "max_num_batched_tokens": _int_slider(
                "max_num_batched_tokens", max_num_batched_tokens or 0, 0, MAX_BATCHED,
                "0 = not set (vLLM default)"),
            "prompt_lens": W.Text(value=prompt_lens, description="prompt_lens",
                                  continuous_update=False, style=_SLIDER_STYLE,
                                  layout=_SLIDER_LAYOUT),
        }
        self._wire()

    def _compute(self) -> dict:
        c = self.controls
        base = {
            "attention_backend": c["attention_backend"].value,
            "routing": c["routing"].value,
            "max_num_seqs": c["max_num_seqs"].value,
            "num_speculative_tokens": c["num_speculative_tokens"].value,
            "max_num_batched_tokens": _batched_value(c["max_num_batched_tokens"].value),
            "max_model_len": self.max_model_len,
        }
        lens = parse_prompt_lens(c["prompt_lens"].value)
        selected = c["vllm_version"].value
        preds = {}
        for v in VLLM_VERSIONS:
            kw = {**base, "vllm_version": v}
            if v != "0.31.0":
                kw["routing"] = "stock"
            preds[v] = predict(Knobs(**kw), lens)
        pred = preds[selected]
        s = pred.sizes
        n_max = min(plots.sweep_limit(s.swap_capacity), self.max_model_len - 1)
        data = plots.prompt_lanes(base, list(range(1, n_max + 1)))
        data["selected"] = selected
        state = {**base, "vllm_version": selected, "prompt_lens": lens}
        if selected != "0.31.0":
            state["routing"] = "stock"
        per_version = {
            v: (f"startup={'ok' if p.startup_ok else 'crash'} "
                f"prompts={','.join(f'{o.n}:{_prompt_word(o)}' for o in p.prompts) or 'none'}")
            for v, p in preds.items()
        }
        labels = {
            "C": str(s.swap_capacity), "W": str(s.workspace_rows),
            "selected": selected, "attention_backend": base["attention_backend"],
            **per_version,  # labels["0.31.0"] = "startup=ok prompts=2:ok,3:crash,200:ok"
            "summary": f"backend={base['attention_backend']} routing={base['routing']} | "
                       + " | ".join(f"{v} {per_version[v]}" for v in VLLM_VERSIONS),
        }
        # side-by-side table: one column per version
        hdr = [""] + [("▶ " if v == selected else "") + v
                      + (" + fix" if v == "0.31.0" and base["routing"] == "fix" else "")
                      for v in VLLM_VERSIONS]
        rows = [["routing rule"] + [
            f"{_esc(explain.predicate(v, preds[v].knobs.routing))}<br>"
            f"<small style='color:#666'>{explain.cite_html('predicate', v)}</small>"
            for v in VLLM_VERSIONS]]
        rows.append(["C (swap rows)"] + [str(preds[v].sizes.swap_capacity) for v in VLLM_VERSIONS])
        rows.append(["W (workspace rows)"] + [str(preds[v].sizes.workspace_rows)
                                              for v in VLLM_VERSIONS])
        rows.append(["capture sizes"] + [_esc(preds[v].capture_sizes) for v in VLLM_VERSIONS])
        rows.append(["start-up"] + [
            _swatch(plots.OK, "ok") if preds[v].startup_ok else
            _swatch(plots.CRASH, f"crash: {preds[v].startup_crash_batch.label} "
                                 f"n={preds[v].startup_crash_batch.routed}")
            for v in VLLM_VERSIONS])
        for i, n in enumerate(lens):
            cells = []
            for v in VLLM_VERSIONS:
                p = preds[v].prompts[i]
                first = p.batches[0]
                path = first.route or "not routed"
                cells.append(_swatch(plots.CRASH, f"crash (prefill n={first.routed} → swap_in)")
                             if not p.ok else
                             _swatch(plots.outcome(first.route, None), f"ok (prefill → {path})"))
            rows.append([f"prompt n={n}"] + cells)
        col = VLLM_VERSIONS.index(selected) + 1
        side = _table(hdr, rows, raw=True).replace("<table", f"<table data-selected='{col}'")
        if base["attention_backend"] == "FLASHMLA_SPARSE":
            backend_note = (
                "FLASHMLA_SPARSE hands only the decode tokens to the routing in 0.31.0 / "
                "0.32.0 (prefill tokens are staged by <code>stage_prefill_rows</code>, "
                f"{explain.cite_html('handoff', '0.31.0')}). Decode tokens are at most "
                "max_num_seqs·q and at most B, so n ≤ C = min(B, max_num_seqs·q) always: "
                "swap_in never overflows and 0.31.0 never crashes.")
        else:
            backend_note = (
                "FLASH_ATTN_MLA_SPARSE hands a batch with no decode token whose pages are all "
                "resident to the routing whole (every prefill here), so a prefill of exactly "
                f"W tokens reaches swap_in ({explain.cite_html('handoff', '0.31.0')}).")
        brow, bstyle = [], []
        for p in pred.prompts:
            r, st = _batch_rows(p.batches)
            for x in r:
                brow.append([str(p.n)] + x[1:])
            bstyle += st
        detail = _table(["prompt n"] + BATCH_HEADERS[1:], brow, raw=True, row_styles=bstyle)
        body = (
            "<div class='hs-numbers'>"
            f"<div style='margin:4px 0'>{backend_note}</div>"
            f"{side}"
            f"<div style='margin-top:8px'><b>each request's batches in {_esc(selected)}</b> "
            f"(selected with vllm_version)</div>{detail}"
            f"<code class='hs-summary'>{_esc(labels['summary'])}</code></div>"
        )
        return {"state": state, "prediction": pred, "labels": labels,
                "plot_data": data, "html": body}

    def _draw(self, ax) -> None:
        plots.draw_prompt_lanes(ax, self.plot_data, selected=self.plot_data.get("selected"),
                                title=f"Where a prompt's prefill goes ({self.state['attention_backend']})")


def versions_dashboard(**initial) -> VersionsDashboard:
    """Notebook 3: versions side by side, backend selector, workload box."""
    return VersionsDashboard(**initial)


# --------------------------------------------------------------------------
# notebook 4: the model against recorded engine runs
# --------------------------------------------------------------------------


def compare_function():
    """``hisparse_model.compare.compare_recording`` if this checkout has it, else None."""
    try:
        from .compare import compare_recording
    except ImportError:
        return None
    return compare_recording


def _outcome_text(key: str, error: str | None) -> str:
    if key == plots.CRASH and error:
        tail = error.split("capacity: ")[-1].rstrip(".")  # "stop=3, capacity=2"
        return _swatch(key, f"crash ({tail})")
    if key == plots.OTHER_ERROR and error:
        return _swatch(key, "failed: " + error[-60:])
    return _swatch(key, {plots.OK: "ok", plots.NOT_RUN: "not run"}.get(key, key))


class RecordingsDashboard(Dashboard):
    """Every recording next to the model's prediction; pick one for details."""

    def __init__(self, recordings: list[dict] | None = None, directory: str | None = None):
        if recordings is None:
            from .recording import load_all

            recordings = load_all(directory)
        self.recordings = list(recordings)
        self.figsize = (9.0, max(1.6, 0.42 * len(self.recordings) + 1.1))
        self.compare = compare_function()
        super().__init__()
        self.rows = plots.recording_rows(self.recordings)
        self.compare_results: list[list[str] | None] = []
        for rec in self.recordings:
            if self.compare is None or rec.get("startup") is None:
                self.compare_results.append(None)
                continue
            try:
                self.compare_results.append(list(self.compare(rec)))
            except Exception as exc:  # noqa: BLE001  a half-finished compare must not kill the page
                self.compare_results.append([f"compare_recording failed: {exc!r}"])
        names = [r["name"] for r in self.rows] or ["(no recordings)"]
        self.controls = {"recording": W.Dropdown(options=names, value=names[0],
                                                 description="recording", style=_SLIDER_STYLE)}
        self._wire()

    def _compute(self) -> dict:
        rows = self.rows
        counts = {k: sum(r["verdict"] == k for r in rows) for k in ("agree", "differ", "inconclusive")}
        summary = (f"recordings={len(rows)} agree={counts['agree']} differ={counts['differ']} "
                   f"inconclusive={counts['inconclusive']}")
        if self.compare is not None:
            judged = [c for c in self.compare_results if c is not None]
            summary += (f" compare_recording_agree={sum(not c for c in judged)}"
                        f"/{len(judged)}")
        labels = {"summary": summary, **{k: str(v) for k, v in counts.items()},
                  "recordings": str(len(rows))}
        if not rows:
            body = ("<div class='hs-numbers'>No recordings found in tests/recorded/ (record some "
                    "with <code>python -m hisparse_model live</code> on a GPU).<br>"
                    f"<code class='hs-summary'>{_esc(summary)}</code></div>")
            return {"state": {}, "prediction": None, "labels": labels, "plot_data": {},
                    "html": body}
        table_rows, styles = [], []
        for r, cmp in zip(rows, self.compare_results):
            k = r["knobs"]
            pred = r.get("prediction")
            eng = r.get("engine") or {}
            knob_txt = (f"S={k.get('max_num_seqs')} spec={k.get('num_speculative_tokens', 0)} "
                        f"B={k.get('max_num_batched_tokens') or 'default'}"
                        + (" eager" if k.get("enforce_eager") else "")
                        + (" FLASHMLA" if k.get("attention_backend") == "FLASHMLA_SPARSE" else ""))
            if pred is not None:
                sizes_txt = (f"C {pred.sizes.swap_capacity} / {eng.get('swap_capacity')}<br>"
                             f"caps {pred.capture_sizes} / {eng.get('capture_sizes')}")
            else:
                sizes_txt = "–"
            cells = "<br>".join(
                f"{_esc(c['label'])}: {_outcome_text(c['model'], c['model_error'])} / "
                f"{_outcome_text(c['engine'], c['engine_error'])}" for c in r["cells"])
            verdict = {"agree": "✓ agree", "differ": "✗ differ",
                       "inconclusive": "? inconclusive"}[r["verdict"]]
            if cmp is not None:
                verdict += "<br><small>compare_recording: " + (
                    "agrees" if not cmp else _esc(cmp[0][:140])) + "</small>"
            if r["note"] and r["verdict"] != "agree":
                verdict += f"<br><small>{_esc(r['note'][:160])}</small>"
            vtxt = f"{k.get('vllm_version')} {k.get('routing', 'stock')}"
            table_rows.append([_esc(r["name"]), _esc(vtxt), _esc(knob_txt), sizes_txt, cells,
                               verdict])
            styles.append({"agree": "", "differ": "background:#fde0dd",
                           "inconclusive": "background:#f0f0f0"}[r["verdict"]])
        table = ("<div style='max-height:420px;overflow:auto'>"
                 + _table(["recording", "vLLM routing", "knobs", "sizes: model / engine",
                           "outcome: model / engine", "verdict"], table_rows, raw=True,
                          row_styles=styles)
                 + "</div>")
        i = [r["name"] for r in rows].index(self.controls["recording"].value)
        rec, row = self.recordings[i], rows[i]
        prov = rec.get("provenance") or {}
        prov_txt = ", ".join(f"{key}={prov.get(key)}" for key in ("vllm", "torch", "gpu", "date")
                             if prov.get(key))
        log = rec.get("routing_log") or []
        log_rows = [[_esc(x.get("phase")), str(x.get("num_actual_tokens")), str(x.get("num_tokens")),
                     _esc(x.get("route")), str(x.get("calls")), _esc(x.get("error") or "")]
                    for x in log[:40]]
        detail = (f"<div style='margin-top:8px'><b>{_esc(row['name'])}</b>: {_esc(prov_txt)}</div>"
                  + _table(["phase", "tokens", "routed n", "route", "calls", "error"], log_rows)
                  + (f"<small>… {len(log) - 40} more rows</small>" if len(log) > 40 else ""))
        body = (f"<div class='hs-numbers'>{table}{detail}"
                f"<code class='hs-summary'>{_esc(summary)}</code></div>")
        return {"state": {"recording": row["name"]}, "prediction": row.get("prediction"),
                "labels": labels, "plot_data": {"rows": [
                    {"name": r["name"], "verdict": r["verdict"], "cells": r["cells"]}
                    for r in rows]},
                "html": body}

    def _draw(self, ax) -> None:
        plots.draw_recordings(ax, self.plot_data["rows"])


def recordings_dashboard(recordings: list[dict] | None = None,
                         directory: str | None = None) -> RecordingsDashboard:
    """Notebook 4: recordings (default: ``tests/recorded/*.json``) against the model."""
    return RecordingsDashboard(recordings, directory)


def live_output_path(name: str = "live-notebook.json") -> str:
    """Where notebook 4's live cell writes its recording (``test-artifacts/``, git-ignored)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(here, "test-artifacts", name)
