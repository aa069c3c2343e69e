"""Speed of the model, printed from one run: ``python -m hisparse_model.bench``.

Prints µs per full prediction, seconds for a 100,000-configuration vectorised
sweep, the ratio against vLLM's own path (building its scheduler defaults,
``VllmConfig`` and ``_set_cudagraph_sizes()`` on CPU, vLLM 0.31.0 installed by
``scripts/install_vllm_cpu.sh``), and the notebook widgets' update time.
Targets: < 50 µs per prediction, < 1 s per 100k sweep, >= 1000x vLLM's path,
< 50 ms per widget update.  Nothing here asserts a time; it reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import timeit

import numpy as np

from .knobs import Knobs
from .predict import context, predict
from .sweep import sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_VLLM_TIMER = r"""
import json, sys, time
from hisparse_model.crosscheck import vllm_driver as d
knobs = json.load(sys.stdin)
dev = dict(d.H200_DEVICE)
t0 = time.perf_counter()
for k in knobs:
    sched = d._scheduler_defaults(k, dev)
    d._capture_sizes(sched, k, dev)
print(json.dumps({"seconds": time.perf_counter() - t0, "n": len(knobs)}))
"""


def _configs(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"max_num_seqs": int(s), "max_model_len": 320, "num_speculative_tokens": int(k)}
        for s, k in zip(rng.integers(1, 257, n), rng.integers(0, 3, n))
    ]


def _clear_caches() -> None:
    from . import batches, startup

    batches._route_core.cache_clear()
    startup.startup_batches.cache_clear()


def time_predict(repeat: int = 2000, cold: bool = False) -> float:
    """µs per full prediction (start-up walk + the PR's three prompts).

    warm: the same 64 configurations again (a slider moving back and forth hits
    the memoised start-up walk); cold: caches cleared before every prediction.
    """
    knobs = [Knobs(max_num_seqs=s) for s in range(1, 65)]
    predict(knobs[0], [2, 3, 200])
    if cold:
        def run():
            for k in knobs:
                _clear_caches()
                predict(k, [2, 3, 200])
    else:
        def run():
            for k in knobs:
                predict(k, [2, 3, 200])
    t = timeit.timeit(run, number=repeat // 64)
    return t / ((repeat // 64) * len(knobs)) * 1e6


def time_sweep(n: int = 100_000) -> float:
    rng = np.random.default_rng(1)
    s = rng.integers(1, 513, n)
    k = rng.integers(0, 4, n)
    b = s * 320
    t0 = time.perf_counter()
    sweep(s, b, k)
    return time.perf_counter() - t0


def time_model_config_path(configs: list[dict]) -> float:
    """Seconds per configuration for the model's equivalent: sizes + capture sizes."""
    knobs = [Knobs(max_num_seqs=c["max_num_seqs"], max_model_len=c["max_model_len"],
                   num_speculative_tokens=c["num_speculative_tokens"]) for c in configs]
    t0 = time.perf_counter()
    for k in knobs:
        context(k)
    return (time.perf_counter() - t0) / len(knobs)


def time_vllm_config_path(configs: list[dict], version: str = "0.31.0") -> float | None:
    site = os.path.join(REPO, ".vllm", version)
    if not os.path.isdir(site):
        return None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, REPO]),
           "VLLM_LOGGING_LEVEL": "ERROR"}
    out = subprocess.run([sys.executable, "-c", _VLLM_TIMER], input=json.dumps(configs),
                         capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    res = json.loads(out.stdout.strip().splitlines()[-1])
    return res["seconds"] / res["n"]


def time_widgets() -> dict[str, float]:
    """ms per dashboard update (callback + redraw), if the widget layer is installed."""
    try:
        from . import widgets
    except Exception:  # noqa: BLE001 - optional extra
        return {}
    results = {}
    for name in dir(widgets):
        if not name.endswith("_dashboard"):
            continue
        try:
            dash = getattr(widgets, name)()
            update = getattr(dash, "update")
            update()
            n = 10
            t0 = time.perf_counter()
            for _ in range(n):
                update()
            results[name] = (time.perf_counter() - t0) / n * 1e3
        except Exception as exc:  # noqa: BLE001 - report, don't fail the bench
            print(f"  {name}: not timed ({type(exc).__name__}: {exc})")
    return results


def main() -> int:
    us = time_predict()
    cold = time_predict(cold=True)
    print(f"full prediction (warm):    {us:9.1f} µs   (target < 50 µs)")
    print(f"full prediction (cold):    {cold:9.1f} µs   (caches cleared each time)")
    sw = time_sweep()
    print(f"100,000-config sweep:      {sw:9.3f} s    (target < 1 s)")
    configs = _configs(100)
    model_s = time_model_config_path(configs)
    vllm_s = time_vllm_config_path(configs)
    print(f"model sizes+capture sizes: {model_s * 1e6:9.1f} µs per config")
    if vllm_s is None:
        print("vLLM's own config path:    not measured (run scripts/install_vllm_cpu.sh)")
    else:
        print(f"vLLM's own config path:    {vllm_s * 1e6:9.1f} µs per config")
        print(f"ratio vLLM / model:        {vllm_s / model_s:9.0f} x  (target >= 1000x)")
        print(f"ratio vLLM / cold predict: {vllm_s / (cold * 1e-6):9.0f} x")
    for name, ms in time_widgets().items():
        print(f"widget {name} update: {ms:7.1f} ms  (target < 50 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
