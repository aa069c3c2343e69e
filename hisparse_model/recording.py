"""Recorded live engine runs: schema, atomic writing, loading and provenance checks.

A recording is one JSON file per engine configuration under ``tests/recorded/``,
written by :mod:`hisparse_model.engine.child` on a real GPU.  It holds:

``provenance``  vLLM/torch/CUDA versions, GPU name, UTC date, the full engine
                arguments, the routing mode, the command that produced it and any
                run-time patches (e.g. the 0.32.0 router-warmup narrowing);
``knobs``       the :class:`~hisparse_model.knobs.Knobs` it ran;
``engine``      sizes as the engine reports them (capture sizes, B, C, ...);
``startup`` / ``prompts``  ok or the exact error text;
``routing_log`` one row per routing call on layer 0 (consecutive identical rows folded, ``calls`` counts them).
"""

from __future__ import annotations

import glob
import json
import os
import tempfile

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
