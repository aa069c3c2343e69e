"""The notebooks' charts: one palette, the data behind each chart, and the drawing.

Design:

* **Data first.**  Each chart has a pure function that sweeps the model
  (:func:`route_lanes`, :func:`max_num_seqs_sweep`, :func:`prompt_lanes`,
  :func:`recording_rows`) and returns plain lists, so tests compare them with
  :func:`hisparse_model.predict.predict` / :func:`hisparse_model.routing.route`
  without drawing anything.  The widgets keep the last result as
  ``dashboard.plot_data``.
* **One palette.**  :data:`PALETTE` colours an outcome the same way in every
  notebook: green = the batch fits swap_in (ok), blue = the all-resident
  fallback, red = the swap_in overflow (the crash), grey = not routed / not
  run / invalid knobs.
* **Agg only.**  Drawing uses ``matplotlib.figure.Figure`` with the Agg canvas
  (no pyplot, no GUI backend), reuses one figure per dashboard and encodes PNG
  with fast compression, so a redraw stays in the tens of milliseconds.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

from . import routing
from .knobs import VLLM_VERSIONS, Knobs
from .predict import predict
from .sizes import sizes

# --------------------------------------------------------------------------
# palette and outcome keys
# --------------------------------------------------------------------------

SWAP_IN = "swap_in"  # routed to swap_in and fits the swap rows: ok
ALL_RESIDENT = "all_resident"  # routed to the all-resident fallback: ok
CRASH = "crash"  # routed to swap_in past C rows: _step_rows raises
NOT_ROUTED = "not_routed"  # the backend staged the tokens: the routing is not called
INVALID = "invalid"  # vLLM rejects the knobs (ValueError from the model)
OK = "ok"  # a request or start-up that raised nothing
NOT_RUN = "not_run"  # the engine never got to it (died earlier)
OTHER_ERROR = "other_error"  # a recorded failure that is not the HiSparse error
STARTUP_CRASH = "startup_crash"
RUNTIME_CRASH = "runtime_crash"
SAFE = "safe"

PALETTE = {
    SWAP_IN: "#1a9850",  # green
    ALL_RESIDENT: "#4575b4",  # blue
    CRASH: "#d73027",  # red
    NOT_ROUTED: "#bdbdbd",  # grey
    INVALID: "#969696",  # darker grey
    OK: "#1a9850",  # same green: nothing overflowed
    NOT_RUN: "#e0e0e0",  # light grey
    OTHER_ERROR: "#984ea3",  # purple: an engine failure the model does not cover
    STARTUP_CRASH: "#d73027",  # crash red
    RUNTIME_CRASH: "#d73027",  # crash red (different marker)
    SAFE: "#1a9850",  # ok green
}

LABELS = {  # legend texts (short: every glyph costs render time)
    SWAP_IN: "swap_in (fits C)",
    ALL_RESIDENT: "all-resident",
    CRASH: "swap_in > C: crash",
    NOT_ROUTED: "not routed",
    INVALID: "invalid knobs",
    OK: "ok",
    NOT_RUN: "not run",
    OTHER_ERROR: "other failure",
    STARTUP_CRASH: "start-up crash",
    RUNTIME_CRASH: "runtime crash",
    SAFE: "safe",
}

# The two routing rules notebook 1 contrasts (lane label -> (version, routing)).
OFF_BY_ONE_LANES = {
    "0.31.0 (n≤W)": ("0.31.0", "stock"),
    "0.32.0 (n≤C)": ("0.32.0", "stock"),
}


def outcome(path: str | None, error: str | None) -> str:
    """Palette key of one routing result (a Route or a Batch's route/error)."""
    if error:
        return CRASH
    if path is None:
        return NOT_ROUTED
    return path  # SWAP_IN or ALL_RESIDENT


def runs(values: Sequence) -> list[tuple[int, int, object]]:
    """Maximal runs of equal values: ``(start_index, length, value)``."""
    out: list[tuple[int, int, object]] = []
    for i, v in enumerate(values):
        if out and out[-1][2] == v:
            start, length, _ = out[-1]
            out[-1] = (start, length + 1, v)
        else:
            out.append((i, 1, v))
    return out


def sweep_limit(capacity: int) -> int:
    """Largest n of a sweep around C: 3C, and at least C + 3 so W and beyond show."""
    return max(3 * capacity, capacity + 3)


# --------------------------------------------------------------------------
# data behind the charts (pure, no matplotlib)
# --------------------------------------------------------------------------


def route_lanes(
    capacity: int,
    n_max: int | None = None,
    lanes: dict[str, tuple[str, str]] | None = None,
    *,
    has_prefill: bool = True,
) -> dict:
    """Route of every routed-token count n = 1..n_max under each lane's rule.

    Returns ``{"n": [...], "lanes": {label: [outcome...]}, "crash_sizes":
    {label: [n...]}, "C": capacity, "W": capacity + 1}``.
    """
    lanes = OFF_BY_ONE_LANES if lanes is None else lanes
    n_max = sweep_limit(capacity) if n_max is None else n_max
    ns = list(range(1, n_max + 1))
    out_lanes: dict[str, list[str]] = {}
    crashes: dict[str, list[int]] = {}
    for label, (version, mode) in lanes.items():
        row = []
        for n in ns:
            r = routing.route(version, mode, n, capacity, has_prefill=has_prefill)
            row.append(outcome(r.path, r.error))
        out_lanes[label] = row
        crashes[label] = [n for n, o in zip(ns, row) if o == CRASH]
    return {"n": ns, "lanes": out_lanes, "crash_sizes": crashes, "C": capacity,
            "W": capacity + 1}


def max_num_seqs_outcome(knobs: Knobs) -> tuple[str, int, str | None]:
    """``(outcome, W, error)`` of one configuration, for the max_num_seqs chart.

    Start-up crash if any start-up batch raises; else runtime crash if a
    single prompt of W = C + 1 tokens raises (the only routed size that can
    overflow: any other crash would need a routed batch of exactly W tokens,
    and a prompt's chunks are never longer than the prompt); else safe.
    """
    w = sizes(knobs).workspace_rows
    probe = [w] if w < knobs.max_model_len else []  # a W-token prompt must fit
    pred = predict(knobs, probe)
    if not pred.startup_ok:
        return STARTUP_CRASH, w, pred.startup_error
    if pred.prompts and not pred.prompts[0].ok:
        return RUNTIME_CRASH, w, pred.prompts[0].error
    return SAFE, w, None


def max_num_seqs_sweep(base: dict, seqs: Iterable[int] = range(1, 257)) -> dict:
    """Outcome of each max_num_seqs in ``seqs`` with the other knobs of ``base``.

    ``base`` holds :class:`Knobs` keyword arguments (max_num_seqs is replaced).
    Returns ``{"max_num_seqs", "outcome", "W", "error"}`` lists; a value that
    vLLM rejects (e.g. max_num_batched_tokens < max_num_seqs) is ``invalid``.
    """
    out = {"max_num_seqs": [], "outcome": [], "W": [], "error": []}
    for s in seqs:
        try:
            kind, w, err = max_num_seqs_outcome(Knobs(**{**base, "max_num_seqs": s}))
        except ValueError as exc:
            kind, w, err = INVALID, None, str(exc)
        out["max_num_seqs"].append(s)
        out["outcome"].append(kind)
        out["W"].append(w)
        out["error"].append(err)
    return out


def prompt_outcome(outcome_of_prompt) -> str:
    """Palette key of one :class:`PromptOutcome`: crash, else its first batch's route."""
    if not outcome_of_prompt.ok:
        return CRASH
    first = outcome_of_prompt.batches[0]
    return outcome(first.route, first.error)


def prompt_lanes(base: dict, n_values: Sequence[int],
                 versions: Sequence[str] = VLLM_VERSIONS) -> dict:
    """Outcome of a single prompt of each length in ``n_values``, per vLLM version.

    ``base`` holds :class:`Knobs` keyword arguments (vllm_version is replaced;
    routing="fix" applies to 0.31.0 only).  Returns ``{"n": [...],
    "lanes": {version: [outcome...]}, "crash_sizes": {version: [n...]},
    "startup_ok": {version: bool}}``.
    """
    lanes: dict[str, list[str]] = {}
    crashes: dict[str, list[int]] = {}
    startup: dict[str, bool] = {}
    for v in versions:
        kw = {**base, "vllm_version": v}
        if v != "0.31.0":
            kw["routing"] = "stock"
        pred = predict(Knobs(**kw), list(n_values))
        lanes[v] = [prompt_outcome(p) for p in pred.prompts]
        crashes[v] = [p.n for p in pred.prompts if not p.ok]
        startup[v] = pred.startup_ok
    return {"n": list(n_values), "lanes": lanes, "crash_sizes": crashes,
            "startup_ok": startup}


HISPARSE_ERROR_PREFIX = "ValueError: HiSparse swap rows exceed"


def _recorded_outcome(ok, error, ran=True) -> str:
    if not ran or ok is None:
        return NOT_RUN
    if ok:
        return OK
    if error and error.startswith(HISPARSE_ERROR_PREFIX):
        return CRASH
    return OTHER_ERROR


def _model_outcome(ok: bool) -> str:
    return OK if ok else CRASH


def _name(rec: dict) -> str:
    import os

    path = rec.get("_path") or rec.get("name") or "recording"
    return os.path.splitext(os.path.basename(path))[0]


def recording_row(rec: dict) -> dict:
    """One recording against the model's prediction for the same knobs.

    ``verdict`` is ``agree`` when the engine's sizes (B, q, C, capture sizes)
    equal the model's and the recorded start-up and every prompt that ran end
    as predicted (ok, or the exact same error text); ``inconclusive`` when the
    engine died of something the model does not cover (e.g. GPU memory), so
    nothing HiSparse was tested; ``differ`` otherwise.
    """
    row = {"name": _name(rec), "knobs": rec.get("knobs") or {},
           "prompt_lens": list(rec.get("prompt_lens") or []), "mismatches": []}
    startup = rec.get("startup")
    if startup is None:  # run_one's failure stub: the child left no recording
        row.update(verdict="inconclusive", prediction=None, cells=[],
                   note=f"no recording (child {rec.get('child', '?')})")
        return row
    try:
        pred = predict(Knobs(**row["knobs"]), row["prompt_lens"])
    except (TypeError, ValueError) as exc:
        row.update(verdict="differ", prediction=None, cells=[], note=f"model: {exc}")
        row["mismatches"].append(f"model rejects the knobs: {exc}")
        return row
    eng = rec.get("engine") or {}
    sizes_pairs = {
        "max_num_batched_tokens": (pred.sizes.max_num_batched_tokens,
                                   eng.get("max_num_batched_tokens")),
        "max_decode_query_len": (pred.sizes.max_decode_query_len,
                                 eng.get("max_decode_query_len")),
        "swap_capacity": (pred.sizes.swap_capacity, eng.get("swap_capacity")),
        "capture_sizes": (list(pred.capture_sizes), eng.get("capture_sizes")),
    }
    for key, (model, engine) in sizes_pairs.items():
        if engine is not None and model != engine:
            row["mismatches"].append(f"{key}: model {model} != engine {engine}")
    cells = [{
        "label": "start-up",
        "model": _model_outcome(pred.startup_ok),
        "model_error": pred.startup_error,
        "engine": _recorded_outcome(startup.get("ok"), startup.get("error")),
        "engine_error": startup.get("error"),
    }]
    if (startup.get("ok"), startup.get("error")) != (pred.startup_ok, pred.startup_error):
        row["mismatches"].append("start-up ends differently")
    for got, want in zip(rec.get("prompts") or [], pred.prompts):
        ran = bool(got.get("ran"))
        cells.append({
            "label": f"prompt n={got.get('n')}",
            "model": _model_outcome(want.ok),
            "model_error": want.error,
            "engine": _recorded_outcome(got.get("ok"), got.get("error"), ran),
            "engine_error": got.get("error"),
        })
        if ran and (got.get("ok"), got.get("error")) != (want.ok, want.error):
            row["mismatches"].append(f"prompt n={got.get('n')} ends differently")
    if cells[0]["engine"] == OTHER_ERROR:
        verdict = "inconclusive"
        note = "engine failed outside HiSparse: " + (startup.get("error") or "")[-120:]
    elif row["mismatches"]:
        verdict, note = "differ", "; ".join(row["mismatches"])
    else:
        verdict, note = "agree", ""
    row.update(verdict=verdict, prediction=pred, cells=cells, note=note,
               engine=eng)
    return row


def recording_rows(recs: Iterable[dict]) -> list[dict]:
    return [recording_row(r) for r in recs]


# --------------------------------------------------------------------------
# drawing (Agg)
# --------------------------------------------------------------------------


class Canvas:
    """One reusable Agg figure with a single Axes; :meth:`png` encodes it."""

    def __init__(self, figsize=(8.0, 2.8), dpi: int = 80):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.figure = Figure(figsize=figsize, dpi=dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        self.ax = self.figure.add_subplot()

    def resize(self, height: float) -> None:
        w, h = self.figure.get_size_inches()
        if abs(h - height) > 1e-6:
            self.figure.set_size_inches(w, height)

    def png(self) -> bytes:
        from PIL import Image

        self.canvas.draw()
        w, h = self.canvas.get_width_height()
        im = Image.frombuffer("RGBA", (w, h), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        buf = io.BytesIO()
        im.save(buf, format="png", compress_level=1)  # fast: the PNG is small anyway
        return buf.getvalue()


def reset(ax) -> None:
    """Remove the data artists and legend but keep the axes (cheaper than ``ax.clear()``)."""
    for artist in [*ax.collections, *ax.lines, *ax.texts, *ax.patches]:
        artist.remove()
    legend = ax.get_legend()
    if legend is not None:
        legend.remove()
    ax.set_xscale("linear")
    ax.set_yscale("linear")


def margins(ax, left: float = 1.1, right: float = 1.7, bottom: float = 0.5,
            top: float = 0.35) -> None:
    """Fixed margins in inches (room for tick labels and the legend on the right).

    Fixed margins instead of ``tight_layout``: laying out text twice would
    double the redraw time.
    """
    fig = ax.figure
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h)


def _legend_handles(keys: Iterable[str], markers: dict[str, str] | None = None):
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = []
    for k in keys:
        if markers and k in markers:
            handles.append(Line2D([], [], marker=markers[k], linestyle="none",
                                  color=PALETTE[k], markersize=8, label=LABELS[k]))
        else:
            handles.append(Patch(facecolor=PALETTE[k], label=LABELS[k]))
    return handles


def _draw_lanes(ax, ns: list[int], lanes: dict[str, list[str]]) -> list[str]:
    """Horizontal strips, one per lane (top to bottom), coloured by outcome runs."""
    labels = list(lanes)
    seen: list[str] = []
    for i, label in enumerate(labels):
        y = len(labels) - 1 - i
        for start, length, value in runs(lanes[label]):
            ax.broken_barh([(ns[start] - 0.5, length)], (y - 0.35, 0.7),
                           facecolors=PALETTE[value], edgecolors="white", linewidth=0.5)
            if value not in seen:
                seen.append(value)
    ax.set_yticks(range(len(labels)), list(reversed(labels)))
    ax.set_ylim(-0.6, len(labels) - 0.2)
    ax.set_xlim(ns[0] - 0.5, ns[-1] + 0.5)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(nbins=10, integer=True))
    return seen


def draw_route_lanes(ax, data: dict, *, title: str | None = None) -> None:
    """Notebook 1: which path each routed-token count takes, per routing rule."""
    reset(ax)
    ns, lanes = data["n"], data["lanes"]
    seen = _draw_lanes(ax, ns, lanes)
    c, w = data["C"], data["W"]
    ax.axvline(c + 0.5, color="black", linestyle="--", linewidth=1)
    ax.axvline(w + 0.5, color="black", linestyle=":", linewidth=1)
    ax.text(c + 0.5, -0.58, f"C={c} ", va="bottom", ha="right", fontsize=8)
    ax.text(w + 0.5, -0.58, f" W={w}", va="bottom", ha="left", fontsize=8)
    for i, label in enumerate(lanes):
        y = len(lanes) - 1 - i
        for n in data["crash_sizes"][label]:
            ax.plot([n], [y], marker="X", color="black", markersize=9, linestyle="none")
            ax.text(n, y + 0.38, f"crash: n={n}", ha="center", va="bottom", fontsize=8)
    ax.set_xlabel("tokens routed in one batch, n")
    ax.set_ylabel("routing rule")
    ax.set_title(title or f"Path of an n-token batch (C={c}, W={w})")
    margins(ax, left=1.45)
    order = [k for k in (SWAP_IN, CRASH, ALL_RESIDENT, NOT_ROUTED) if k in seen]
    ax.legend(handles=_legend_handles(order), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False)


SEQS_MARKERS = {STARTUP_CRASH: "X", RUNTIME_CRASH: "o", SAFE: "s", INVALID: "."}


def draw_max_num_seqs(ax, data: dict, *, current: int | None = None, title: str | None = None) -> None:
    """Notebook 2: start-up crash / runtime crash / safe for each max_num_seqs."""
    reset(ax)
    seen = []
    for kind in (STARTUP_CRASH, RUNTIME_CRASH, SAFE, INVALID):
        xs = [s for s, o in zip(data["max_num_seqs"], data["outcome"]) if o == kind]
        if not xs:
            continue
        seen.append(kind)
        if kind == INVALID:
            ys = [1] * len(xs)
        else:
            ys = [w for w, o in zip(data["W"], data["outcome"]) if o == kind]
        ax.scatter(xs, ys, s=40 if kind == STARTUP_CRASH else 22, marker=SEQS_MARKERS[kind], color=PALETTE[kind],
                   edgecolors="none" if kind != RUNTIME_CRASH else PALETTE[kind],
                   facecolors=PALETTE[kind] if kind != RUNTIME_CRASH else "none")
    if current is not None:
        ax.axvline(current, color="black", linestyle="--", linewidth=1)
        ax.text(current, ax.get_ylim()[1], f" max_num_seqs={current}", va="top", fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("max_num_seqs (log2)")
    ax.set_ylabel("W = C+1 (tokens, log2)")
    ax.set_title(title or "The W-token batch, per max_num_seqs")
    margins(ax, left=0.8)
    ax.legend(handles=_legend_handles(seen, SEQS_MARKERS), loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def draw_prompt_lanes(ax, data: dict, *, selected: str | None = None, title: str | None = None) -> None:
    """Notebook 3: a single prompt of n tokens under each vLLM version."""
    reset(ax)
    lanes = {}
    for v, row in data["lanes"].items():
        label = v if data["startup_ok"][v] else f"{v} (start-up crashes)"
        if v == selected:
            label = "▶ " + label
        lanes[label] = row
    seen = _draw_lanes(ax, data["n"], lanes)
    for i, (v, row) in enumerate(data["lanes"].items()):
        y = len(lanes) - 1 - i
        for n in data["crash_sizes"][v]:
            ax.plot([n], [y], marker="X", color="black", markersize=8, linestyle="none")
    ax.set_xlabel("prompt length n (tokens), served alone")
    ax.set_ylabel("vLLM version")
    ax.set_title(title or "Path of each prompt's prefill")
    margins(ax, left=1.6)
    order = [k for k in (SWAP_IN, CRASH, ALL_RESIDENT, NOT_ROUTED) if k in seen]
    ax.legend(handles=_legend_handles(order), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False)


def draw_recordings(ax, rows: list[dict], *, title: str | None = None) -> None:
    """Notebook 4: engine outcome (square) and model outcome (dot) per recording."""
    reset(ax)
    seen: list[str] = []
    names = [r["name"] for r in rows]
    width = max([len(r["cells"]) for r in rows] + [1])
    for i, r in enumerate(rows):
        y = len(rows) - 1 - i
        for x, cell in enumerate(r["cells"]):
            ax.scatter([x], [y], marker="s", s=220, color=PALETTE[cell["engine"]])
            ax.scatter([x], [y], marker="o", s=45, color=PALETTE[cell["model"]],
                       edgecolors="white", linewidths=1.0)
            ax.annotate(cell["label"].replace("prompt ", ""), (x, y), xytext=(0, -13),
                        textcoords="offset points", ha="center", fontsize=6, color="#444")
            for key in (cell["engine"], cell["model"]):
                if key not in seen:
                    seen.append(key)
        mark = {"agree": "✓", "differ": "✗", "inconclusive": "?"}[r["verdict"]]
        ax.text(width - 0.4, y, mark, va="center", fontsize=11,
                color=PALETTE[CRASH] if r["verdict"] == "differ" else "black")
    ax.set_yticks(range(len(rows)), list(reversed(names)), fontsize=7)
    ax.set_xticks(range(width), ["start-up"] + [f"prompt {i}" for i in range(1, width)], fontsize=8)
    ax.set_xlim(-0.6, width - 0.1)
    ax.set_ylim(-0.8, max(len(rows), 1) - 0.4)
    ax.set_xlabel("engine event (square = recorded engine, dot = model)")
    ax.set_ylabel("recording")
    ax.set_title(title or "Recorded engine runs vs the model")
    margins(ax, left=1.9, bottom=0.55)
    order = [k for k in (OK, CRASH, OTHER_ERROR, NOT_RUN) if k in seen]
    ax.legend(handles=_legend_handles(order), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              fontsize=8, frameon=False)
