"""Recorded live engine runs and the one verdict on them: does the engine equal the model?

A recording is one JSON file per engine configuration under ``tests/recorded/``,
written by :mod:`hisparse_model.engine.child` on a real GPU.  It holds:

``provenance``  vLLM/torch/CUDA versions, GPU name, UTC date, the full engine
                arguments, the routing mode, the command that produced it and any
                run-time patches (e.g. the 0.32.0 router-warmup narrowing);
``knobs``       the :class:`~hisparse_model.model.knobs.Knobs` it ran;
``engine``      sizes as the engine reports them (capture sizes, B, C, ...);
``startup`` / ``prompts``  ok or the exact error text;
``routing_log`` one row per routing call on layer 0 (consecutive identical rows folded, ``calls`` counts them).

The verdict, :func:`compare_recording`.  The recording's ``routing_log`` has one row per routing call on layer 0 of
each index group, consecutive identical rows folded with a ``calls`` count
(:class:`hisparse_model.engine.instrument.RouteLog`).  :func:`expected_log`
turns a :class:`~hisparse_model.answers.predict.Prediction` into the rows the engine
should log, in the same folded form:

* every forward of a batch that reaches the routing logs one row per layer
  that routes: the tiny model's 8 target layers (each DeepSeek-V3.2 layer has
  its own indexer, hence its own index group), plus the MTP drafter's one layer
  when speculating;
* a capture runs an eager warmup forward then the capture forward
  (``v1/worker/gpu/cudagraph_utils.py:458-490``, 0.31.0): PIECEWISE logs
  modes NONE then PIECEWISE, FULL logs NONE twice (Python runs while the
  graph is recorded);
* a FULL-graph replay at serving time runs no Python: nothing is logged;
* the engine stops at the first error, raised by the first routing layer.

The instrumentation labels a row with its innermost phase, so captures made
while profiling CUDA-graph memory are logged as ``capture`` too.
"""

from __future__ import annotations

import glob
import json
import os

from ..boundary.files import InputError
from ..boundary.outputs import write_atomic
from ..boundary.json_file import load as load_json
from ..boundary.limits import RECORDING
from ..model.knobs import Knobs
from ..model.kv_layout import layout
from ..answers.predict import Prediction, predict
from ..model.reproduction import DRAFTER_LAYERS, TARGET_LAYERS

SCHEMA_VERSION = 1


def write_json_atomic(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` as JSON, whole or not at all, through the one writer of
    every output (``boundary/outputs.py``: never in place of a device, FIFO or link), its
    folder made if missing."""
    write_atomic("--out", path, json.dumps(data, indent=1, sort_keys=False) + "\n",
                 makes_folder=True)


def recording_knobs(rec: dict) -> Knobs:
    """The knobs a recording ran; knobs added to the model later come from its engine arguments."""
    data = dict(rec["knobs"])
    args = (rec.get("provenance") or {}).get("engine_args") or {}
    if "enable_prefix_caching" not in data and "enable_prefix_caching" in args:
        data["enable_prefix_caching"] = args["enable_prefix_caching"]
    return Knobs.from_dict(data)


def load(path: str) -> dict:
    """A recording (a JSON object), read through the input boundary (bounded, one line
    naming the file where it is no JSON object)."""
    rec = load_json(path, f"recording {path}", RECORDING)
    if not isinstance(rec, dict):
        raise InputError(f"recording {path}: not a JSON object")
    rec["_path"] = path
    return rec


def recorded_dir() -> str:
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(os.path.dirname(package), "tests", "recorded")


def load_all(directory: str | None = None) -> list[dict]:
    directory = directory or recorded_dir()
    return [load(p) for p in sorted(glob.glob(os.path.join(directory, "*.json")))]



LAYERS = {"target": TARGET_LAYERS, "drafter": DRAFTER_LAYERS, "both": TARGET_LAYERS + DRAFTER_LAYERS}
# the recorder names a step by the engine function it runs under: the CUDA-graph memory
# profile's captures under capture_model, 0.34.0's sizing and sampler warmups under
# compile_or_warm_up_model (hisparse_model/engine/instrument.py)
PHASE_ALIASES = {"cudagraph_memory_profile": "capture", "kv_cache_sizing_warmup": "compile_warmup",
                 "sampler_warmup": "compile_warmup"}
ROW_KEYS = (
    "phase",
    "num_tokens",
    "num_decode_tokens",
    "num_actual_tokens",
    "route",
    "cudagraph_mode",
    "error",
)


def _forward_modes(batch, serving: bool) -> list[str] | None:
    """Forward-context modes of a batch's forwards (None: count unknown)."""
    if not serving and PHASE_ALIASES.get(batch.phase, batch.phase) == "capture":
        first = "PIECEWISE" if batch.cudagraph_mode == "PIECEWISE" else "NONE"
        return ["NONE", first]  # eager warmup, then the capture forward
    if batch.cudagraph_mode == "FULL":
        return []  # a replayed FULL graph runs no Python
    if batch.forwards is None:
        return None
    return [batch.cudagraph_mode] * batch.forwards


def add_row(rows: list[dict], phase: str, routed: int, decode: int, n: int, route, mode: str,
            error, calls: int | None) -> None:
    """Append one routing row, folded into the last when only the call count differs."""
    row = {"phase": PHASE_ALIASES.get(phase, phase), "num_tokens": routed,
           "num_decode_tokens": decode, "num_actual_tokens": n, "route": route,
           "cudagraph_mode": mode, "error": error}
    if rows and all(rows[-1][k] == row[k] for k in ROW_KEYS):
        prev = rows[-1]["calls"]
        rows[-1]["calls"] = None if prev is None or calls is None else prev + calls
    else:
        rows.append({**row, "calls": calls})


def expected_log(pred: Prediction, ran_prompts: int | None = None) -> list[dict]:
    """The folded routing log the engine should write for this prediction."""
    rows: list[dict] = []

    def add(batch, phase: str, mode: str, calls: int | None) -> None:
        add_row(rows, phase, batch.routed, batch.num_decode_tokens, batch.num_tokens,
                batch.route, mode, batch.error, calls)

    def run(batches, serving: bool, phase_of) -> bool:
        for b in batches:
            if b.error and not b.routed:
                return False  # the engine stopped before this batch reached the routing
            if not b.routed:
                continue
            modes = _forward_modes(b, serving)
            layers = LAYERS[b.runner]
            if modes is None:  # unknown number of forwards, all the same mode
                add(b, phase_of(b), b.cudagraph_mode, None)
                continue
            for mode in modes:
                if b.error:
                    add(b, phase_of(b), mode, 1)  # the first routing layer raises
                    return False
                add(b, phase_of(b), mode, layers)
        return True

    if not run(pred.startup, False, lambda b: b.phase):
        return rows
    for i, p in enumerate(pred.prompts):
        if ran_prompts is not None and i >= ran_prompts:
            break
        if not run(p.batches, True, lambda b, i=i: f"prompt:{i}"):
            break
    return rows


def fmt_row(row: dict) -> str:
    return (
        f"{row.get('phase')}: n={row.get('num_tokens')} decode={row.get('num_decode_tokens')} "
        f"actual={row.get('num_actual_tokens')} {row.get('route')} "
        f"[{row.get('cudagraph_mode')}] x{row.get('calls')}"
        + (f" {row['error']}" if row.get("error") else "")
    )


def compare_engine(eng: dict, plan) -> list[str]:
    """Differences between the sizes the engine reported and the plan."""
    checks = {
        "capture_sizes": (eng.get("capture_sizes"), list(plan.capture_sizes)),
        "max_num_batched_tokens": (eng.get("max_num_batched_tokens"), plan.max_num_batched_tokens),
        "max_decode_query_len": (eng.get("max_decode_query_len"), plan.max_decode_query_len),
        "swap_capacity": (eng.get("swap_capacity"), plan.swap_capacity),
        "cudagraph_mode": (eng.get("cudagraph_mode"), plan.cudagraph_mode),
        "attention_backends": (eng.get("attention_backends"), [plan.knobs.attention_backend]),
    }
    if "kv_cache_groups" in eng:  # recorded since the KV pool was modelled (kv_pool.py)
        checks["kv_cache_groups"] = (eng["kv_cache_groups"], layout(plan.knobs).worker_groups)
        if plan.knobs.num_gpu_blocks_override is not None:
            checks["kv_cache_num_blocks"] = (eng.get("kv_cache_num_blocks"),
                                             plan.knobs.num_gpu_blocks_override)
    return [f"{name}: engine {got!r} != model {want!r}"
            for name, (got, want) in checks.items() if got != want]


def compare_rows(got_rows: list[dict], want_rows: list[dict], plan) -> list[str]:
    """The first difference between the logged and the expected routing rows (or none)."""
    for row in got_rows:
        if (row["workspace_rows"], row["swap_capacity"]) != (plan.workspace_rows,
                                                             plan.swap_capacity):
            return [f"routing row sizes W={row['workspace_rows']} C={row['swap_capacity']} != "
                    f"model W={plan.workspace_rows} C={plan.swap_capacity}"]
    for i in range(max(len(got_rows), len(want_rows))):
        g = got_rows[i] if i < len(got_rows) else None
        w = want_rows[i] if i < len(want_rows) else None
        same = (g is not None and w is not None and all(g.get(k) == w[k] for k in ROW_KEYS)
                and (w["calls"] is None or g.get("calls") == w["calls"]))
        if not same:  # later rows are shifted; the first difference is the useful one
            return [f"routing row {i}: engine {fmt_row(g) if g else '(none)'} != "
                    f"model {fmt_row(w) if w else '(none)'}"]
    return []


def compare_recording(rec: dict) -> list[str]:
    """Readable differences between a recording and the model (empty list: they agree)."""
    knobs = recording_knobs(rec)
    pred = predict(knobs, rec["prompt_lens"])
    diffs = compare_engine(rec.get("engine") or {}, pred.plan)
    startup = rec["startup"]
    if (startup["ok"], startup["error"]) != (pred.startup_ok, pred.startup_error):
        diffs.append(
            f"startup: engine ok={startup['ok']} error={startup['error']!r} != "
            f"model ok={pred.startup_ok} error={pred.startup_error!r}"
        )
    ran = 0
    for got, want in zip(rec["prompts"], pred.prompts):
        if not got["ran"]:
            continue
        ran += 1
        if (got["ok"], got["error"]) != (want.ok, want.error):
            diffs.append(
                f"prompt n={got['n']}: engine ok={got['ok']} error={got['error']!r} != "
                f"model ok={want.ok} error={want.error!r}"
            )
    return diffs + compare_rows(rec.get("routing_log", []),
                                expected_log(pred, ran_prompts=ran), pred.plan)


def summary_row(rec: dict) -> dict:
    """One recording in a line: its knobs, each event's outcome in the model and the engine, agrees.

    Events are start-up, then each prompt.  An outcome is ``"ok"``, the exact
    error text, or ``None`` (not run: the engine had died, or, for the model, a
    start-up crash).  ``agrees`` and ``diffs`` are :func:`compare_recording`'s
    verdict; a child that left no recording (``"startup"`` missing) does not agree.
    """
    name = os.path.splitext(os.path.basename(rec.get("_path") or rec.get("name") or "live"))[0]
    row = {"name": name, "knobs": recording_knobs(rec),
           "prompt_lens": list(rec.get("prompt_lens") or []), "provenance": rec.get("provenance") or {}}
    if "startup" not in rec:
        return {**row, "events": [], "model": [], "engine": [], "sizes": {}, "agrees": False,
                "diffs": [f"no recording: the engine child ended with {rec.get('child', '?')}"]}
    pred = predict(row["knobs"], row["prompt_lens"])
    eng = rec.get("engine") or {}

    def outcome(ran, ok, error):
        return None if not ran else ("ok" if ok else error)

    startup = rec["startup"]
    got = rec.get("prompts") or []
    return {
        **row,
        "events": ["start-up"] + [f"prompt n={p.n}" for p in pred.prompts],
        "model": [outcome(True, pred.startup_ok, pred.startup_error)]
        + [outcome(p.ran, p.ok, p.error) for p in pred.prompts],
        "engine": [outcome(True, startup.get("ok"), startup.get("error"))]
        + [outcome(g.get("ran"), g.get("ok"), g.get("error")) for g in got],
        "sizes": {"C": (pred.sizes.swap_capacity, eng.get("swap_capacity")),
                  "capture_sizes": (pred.capture_sizes, eng.get("capture_sizes"))},
        "diffs": (diffs := compare_recording(rec)),
        "agrees": not diffs,
    }
