"""Recorded live engine runs and the one verdict on them: does the engine equal the model?

A recording is one JSON file per engine configuration under ``tests/recorded/``,
written by :mod:`hisparse_model.engine.child` on a real GPU.  It holds:

``provenance``  vLLM/torch/CUDA versions, GPU name, UTC date, the full engine
                arguments, the routing mode, the command that produced it and any
                run-time patches (e.g. the 0.32.0 router-warmup narrowing);
``knobs``       the :class:`~hisparse_model.knobs.Knobs` it ran;
``engine``      sizes as the engine reports them (capture sizes, B, C, ...);
``startup`` / ``prompts``  ok or the exact error text;
``routing_log`` one row per routing call on layer 0 (consecutive identical rows folded, ``calls`` counts them).

The verdict, :func:`compare_recording`.  The recording's ``routing_log`` has one row per routing call on layer 0 of
each index group, consecutive identical rows folded with a ``calls`` count
(:class:`hisparse_model.engine.instrument.RouteLog`).  :func:`expected_log`
turns a :class:`~hisparse_model.predict.Prediction` into the rows the engine
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
import tempfile

from .knobs import Knobs
from .predict import Prediction, predict
from .reproduction import DRAFTER_LAYERS, TARGET_LAYERS

SCHEMA_VERSION = 1
PROVENANCE_KEYS = ("vllm", "torch", "gpu", "date", "engine_args", "mode", "command")


def write_json_atomic(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` via a temporary file and ``os.replace`` (never half-written)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_provenance(rec: dict) -> list[str]:
    """Names of the provenance fields a recording lacks (empty list: complete)."""
    prov = rec.get("provenance") or {}
    missing = [k for k in PROVENANCE_KEYS if not prov.get(k)]
    if rec.get("schema") != SCHEMA_VERSION:
        missing.append("schema")
    return missing


def load(path: str) -> dict:
    with open(path) as f:
        rec = json.load(f)
    rec["_path"] = path
    return rec


def recorded_dir() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(os.path.dirname(here), "tests", "recorded")


def load_all(directory: str | None = None) -> list[dict]:
    directory = directory or recorded_dir()
    return [load(p) for p in sorted(glob.glob(os.path.join(directory, "*.json")))]



LAYERS = {"target": TARGET_LAYERS, "drafter": DRAFTER_LAYERS, "both": TARGET_LAYERS + DRAFTER_LAYERS}
PHASE_ALIASES = {"cudagraph_memory_profile": "capture"}
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


def expected_log(pred: Prediction, ran_prompts: int | None = None) -> list[dict]:
    """The folded routing log the engine should write for this prediction."""
    rows: list[dict] = []

    def add(batch, phase: str, mode: str, calls: int | None) -> None:
        row = {
            "phase": PHASE_ALIASES.get(phase, phase),
            "num_tokens": batch.routed,
            "num_decode_tokens": batch.num_decode_tokens,
            "num_actual_tokens": batch.num_tokens,
            "route": batch.route,
            "cudagraph_mode": mode,
            "error": batch.error,
        }
        if rows and all(rows[-1][k] == row[k] for k in ROW_KEYS):
            prev = rows[-1]["calls"]
            rows[-1]["calls"] = None if prev is None or calls is None else prev + calls
        else:
            rows.append({**row, "calls": calls})

    def run(batches, serving: bool, phase_of) -> bool:
        for b in batches:
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


def _fmt(row: dict) -> str:
    return (
        f"{row.get('phase')}: n={row.get('num_tokens')} decode={row.get('num_decode_tokens')} "
        f"actual={row.get('num_actual_tokens')} {row.get('route')} "
        f"[{row.get('cudagraph_mode')}] x{row.get('calls')}"
        + (f" {row['error']}" if row.get("error") else "")
    )


def compare_recording(rec: dict) -> list[str]:
    """Readable differences between a recording and the model (empty list: they agree)."""
    diffs: list[str] = []
    knobs = Knobs.from_dict(rec["knobs"])
    pred = predict(knobs, rec["prompt_lens"])
    eng = rec.get("engine") or {}
    checks = {
        "capture_sizes": (eng.get("capture_sizes"), pred.capture_sizes),
        "max_num_batched_tokens": (eng.get("max_num_batched_tokens"), pred.sizes.max_num_batched_tokens),
        "max_decode_query_len": (eng.get("max_decode_query_len"), pred.sizes.max_decode_query_len),
        "swap_capacity": (eng.get("swap_capacity"), pred.sizes.swap_capacity),
        "cudagraph_mode": (eng.get("cudagraph_mode"), pred.cudagraph_mode),
        "attention_backends": (eng.get("attention_backends"), [knobs.attention_backend]),
    }
    for name, (got, want) in checks.items():
        if got != want:
            diffs.append(f"{name}: engine {got!r} != model {want!r}")

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

    got_rows = rec.get("routing_log", [])
    want_rows = expected_log(pred, ran_prompts=ran)
    for row in got_rows:
        if row["workspace_rows"] != pred.sizes.workspace_rows or (
            row["swap_capacity"] != pred.sizes.swap_capacity
        ):
            diffs.append(
                f"routing row sizes W={row['workspace_rows']} C={row['swap_capacity']} != "
                f"model W={pred.sizes.workspace_rows} C={pred.sizes.swap_capacity}"
            )
            break
    for i in range(max(len(got_rows), len(want_rows))):
        g = got_rows[i] if i < len(got_rows) else None
        w = want_rows[i] if i < len(want_rows) else None
        same = (
            g is not None
            and w is not None
            and all(g.get(k) == w[k] for k in ROW_KEYS)
            and (w["calls"] is None or g.get("calls") == w["calls"])
        )
        if not same:
            diffs.append(
                f"routing row {i}: engine {_fmt(g) if g else '(none)'} != "
                f"model {_fmt(w) if w else '(none)'}"
            )
            break  # later rows are shifted; the first difference is the useful one
    return diffs
