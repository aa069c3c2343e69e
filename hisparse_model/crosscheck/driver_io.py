"""The JSON plumbing every cross-check driver shares: knob sets in, one result each, JSON out.

``json_main(run)`` is the drivers' ``main``: stdin JSON -> ``run`` -> stdout
JSON, with anything vLLM prints sent to stderr.  ``run_each`` computes one
result per knob set and reports a knob set that fails inside the driver as
``{"knobs", "driver_error", "traceback"}``.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _format_exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def quiet_vllm() -> None:
    """vLLM logs errors only, Python warnings are off (call before importing vLLM)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import warnings

    warnings.filterwarnings("ignore")


def device_and_knobs(payload, default_device: dict) -> tuple[dict, list]:
    """A plain list of knob sets, or ``{"device": {...}, "knobs": [...]}`` over the default."""
    if isinstance(payload, dict):
        return {**default_device, **payload.get("device", {})}, payload["knobs"]
    return dict(default_device), payload


def run_each(one, knob_list: list, device) -> list[dict]:
    """``one(knobs, device)`` for every knob set; a failure is that knob set's result."""
    results = []
    for knobs in knob_list:
        try:
            results.append(one(knobs, device))
        except Exception as exc:  # noqa: BLE001 - reported per knob set
            results.append({"knobs": knobs, "driver_error": _format_exc(exc),
                            "traceback": traceback.format_exc()})
    return results


def json_main(run) -> int:
    """stdin JSON -> ``run(payload)`` -> stdout JSON (one line)."""
    payload = json.load(sys.stdin)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything vLLM prints must not corrupt the JSON
    try:
        result = run(payload)
    finally:
        sys.stdout = out
    # one C-encoded string, one write: json.dump encodes in Python, a call per fragment
    out.write(json.dumps(result, separators=(",", ":")) + "\n")
    out.flush()
    return 0
