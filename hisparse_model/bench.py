"""Speed of the model, from one run: ``python -m hisparse_model.bench [--json]``.

Reports µs per full prediction (warm, and cold with every cache cleared),
seconds for a 100,000-configuration vectorised sweep, and vLLM's own config
path (scheduler defaults, ``VllmConfig`` and ``_set_cudagraph_sizes()`` on CPU,
vLLM 0.31.0 from ``.vllm/0.31.0``) measured in the same run, so the ratios
compare like with like.  Widget update times are measured where the user sees
them, in the real browser (``tests/test_browser.py`` writes them to
``test-artifacts/latency.json``); the bench reports that file when present.
``simulate_advice_2k_s``: ``simulate`` and its advice on a 2,000-request workload
that crashes 0.31.0 on its last step (:func:`advice_workload`).  ``traffic_1h_s``:
``simulate --traffic`` serving one hour at 10 requests/s (one seed) to its end, on a
server it does not crash (:func:`time_traffic_hour`); ``traffic_1h_seeds_s``: the default
estimate (its seeds, one per core) of the same hour.  ``crash_replay_s``: ``simulate
--workload --json`` of a trace-shaped long crash workload, the requests the bundled example
traffic sends vllm serve's default 0.31.0 server until its first crash
(:func:`crash_workload`: 1,761 requests, crash at engine step 7,153), advice included.
Targets: cold prediction < 50 µs, ``ratio_cold`` >= 1000, sweep < 1 s, advice < 5 s,
an hour of traffic < 10 s, the crash replay < 2 s.
Nothing here asserts a time; it reports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import timeit

import numpy as np

from .model.knobs import Knobs
from .model.plan import plan
from .answers.predict import predict
from .answers.sweep import sweep

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def _configs(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {"max_num_seqs": int(s), "max_model_len": 320, "num_speculative_tokens": int(k)}
        for s, k in zip(rng.integers(1, 257, n), rng.integers(0, 3, n))
    ]


def _clear_caches() -> None:
    from .model import startup
    from .schedule import serving

    plan.cache_clear()
    startup.startup_batches.cache_clear()
    serving.served_one_after_another.cache_clear()
    serving.REUSABLE.clear()


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
        plan(k)
    return (time.perf_counter() - t0) / len(knobs)


def time_vllm_config_path(configs: list[dict], version: str = "0.31.0") -> float | None:
    """Seconds per configuration of vLLM's own config path (None: vLLM not installed here)."""
    res = _run_vllm("hisparse_model.crosscheck.bench_config_path", configs, version)
    return None if res is None else res["seconds"] / res["n"]


def _run_vllm(module: str, payload, version: str) -> dict | None:
    """Run ``python -m module`` with vLLM ``version`` on the path; its last JSON line, or None.
    The trees are ``.vllm/<version>`` (``$VLLM_TARGET_ROOT/<version>``, as the installer's)."""
    site = os.path.join(os.environ.get("VLLM_TARGET_ROOT") or os.path.join(REPO, ".vllm"),
                        version)
    if not os.path.isfile(os.path.join(site, ".hisparse-installed")):
        return None
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([site, REPO]),
           "VLLM_LOGGING_LEVEL": "ERROR"}
    out = subprocess.run([sys.executable, "-m", module], input=json.dumps(payload),
                         capture_output=True, text=True, env=env, timeout=900)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def browser_latency() -> dict | None:
    """Per-control latencies the real-browser test measured (ms), if it has run here."""
    path = os.path.join(REPO, "test-artifacts", "latency.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def measure() -> dict:
    warm = time_predict()
    cold = time_predict(cold=True)
    configs = _configs(100)
    vllm_s = time_vllm_config_path(configs)
    out = {
        "predict_warm_us": round(warm, 2),
        "predict_cold_us": round(cold, 2),
        "plan_us": round(time_model_config_path(configs) * 1e6, 2),
        "vllm_config_path_us": None if vllm_s is None else round(vllm_s * 1e6, 1),
        "ratio_cold": None if vllm_s is None else round(vllm_s / (cold * 1e-6)),
        "sweep_100k_s": round(time_sweep(), 4),
    }
    out.update(_simulate_figures())
    out["simulate_dp8_10k_s"] = round(time_simulate_dp(), 3)
    out["simulate_advice_2k_s"] = round(time_simulate_advice(), 3)
    out["exposure_us"] = round(time_exposure(), 1)
    out["predict_advice_100_s"] = round(time_predict_advice(), 3)
    out["traffic_1h_s"] = round(time_traffic_hour(seeds=1), 3)
    out["traffic_1h_seeds_s"] = round(time_traffic_hour(), 3)
    out["crash_replay_s"] = round(time_crash_replay(), 3)
    out["browser_latency_ms"] = browser_latency()
    return out


SERVE_DEFAULT = dict(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840,
                     host_pool_gib=512)


def crash_workload(minutes: float = 30.0, seed: int = 0):
    """The requests seed ``seed`` of the bundled example traffic (10 requests/s, prompts up to
    16,000 tokens) sent to vllm serve's default 0.31.0 server until its first crash, as the
    workload ``simulate --traffic --crash-workload`` writes (seed 0: 1,761 requests, the crash
    at engine step 7,153), and the server's knobs."""
    from .answers.traffic_risk import estimate, load_traffic
    from .views.risk_chart import example_traffic_path

    knobs = Knobs(**SERVE_DEFAULT)
    est = estimate(knobs, load_traffic(example_traffic_path()), minutes, seeds=1,
                   first_seed=seed)
    [run] = est.runs
    return knobs, run.workload()


def time_crash_replay(minutes: float = 30.0) -> float:
    """Seconds for ``simulate --workload FILE --json`` of :func:`crash_workload` (the crash,
    then the advice within its step budget), output discarded, as a user runs it."""
    import contextlib
    import io
    import tempfile

    from . import cli

    knobs, work = crash_workload(minutes)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "crash.json")
        with open(path, "w") as f:
            json.dump(work.as_json(), f)
        argv = ["simulate", "--max-num-seqs", str(knobs.max_num_seqs), "--max-num-batched-tokens",
                str(knobs.max_num_batched_tokens), "--max-model-len", str(knobs.max_model_len),
                "--host-pool-gib", f"{knobs.host_pool_gib:g}", "--workload", path, "--json"]
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            status = cli.main(argv)
        took = time.perf_counter() - t0
    if status != 0:  # a refusal takes milliseconds: it is not the replay's time
        raise RuntimeError(f"bench: simulate {' '.join(argv[1:])} exited {status}")
    return took


def _simulate_figures(n: int = 10_000, version: str = "0.31.0") -> dict:
    """Seconds to simulate an n-request workload, vLLM's own Scheduler on it, and the ratio."""
    from dataclasses import asdict

    from .answers.simulate import scheduler_config, simulate
    from .schedule.workload import synthetic

    knobs = Knobs(max_num_seqs=64, max_num_batched_tokens=2048)
    work = synthetic(n, prompt_lens=(5, 17, 64, 130, 200), spacing=0)
    t0 = time.perf_counter()
    simulate(knobs, work)
    sim_s = time.perf_counter() - t0
    payload = {"time_10k": {"config": asdict(scheduler_config(knobs, plan(knobs))),
                            "workload": [{"prompt_token_ids": list(r.prompt_token_ids),
                                          "max_tokens": r.max_tokens,
                                          "arrival_step": r.arrival_step}
                                         for r in work.requests]}}
    res = _run_vllm("hisparse_model.crosscheck.scheduler_driver", payload, version)
    vllm_s = None if res is None else res["vllm_scheduler_s"]
    return {"simulate_10k_s": round(sim_s, 3),
            "vllm_scheduler_10k_s": None if vllm_s is None else round(vllm_s, 3),
            "simulate_ratio": None if vllm_s is None else round(vllm_s / sim_s, 1)}


def time_simulate_dp(n: int = 10_000, dp: int = 8) -> float:
    """Seconds to simulate an n-request workload split over ``dp`` data-parallel ranks."""
    from .answers.simulate import simulate
    from .schedule.workload import synthetic

    knobs = Knobs(max_num_seqs=64, max_num_batched_tokens=2048, data_parallel_size=dp)
    work = synthetic(n, prompt_lens=(5, 17, 64, 130, 200), spacing=0)
    t0 = time.perf_counter()
    simulate(knobs, work)
    return time.perf_counter() - t0


def advice_workload(n: int, late: bool = True):
    """``n`` requests that crash 0.31.0 at max_num_seqs 4 (C = 4, W = 5): ``n - 2`` prompts of
    16, 64, 130 and 200 tokens one engine step apart, and a 3- and a 2-token prompt together
    (5 = W tokens in one step), after the others are done (``late``: the crash is the last
    step, so no candidate's simulation stops early) or before them."""
    from .schedule.workload import Workload, synthetic

    base = synthetic(n - 2, prompt_lens=(16, 64, 130, 200), spacing=1).as_json()["requests"]
    pair = [{"prompt_len": 3}, {"prompt_len": 2}]
    if late:
        for r in pair:
            r["arrival_step"] = base[-1]["arrival_step"] + 2 * n  # steps, well after the rest
        return Workload.from_json(base + pair)
    for r in base:
        r["arrival_step"] += 5  # steps: the pair crashes step 0 alone
    return Workload.from_json(pair + base)


def time_simulate_advice(n: int = 2000, late: bool = True, fast: bool = True) -> float:
    """Seconds for ``simulate --max-num-seqs 4`` with its advice on :func:`advice_workload`,
    as the command line runs it (``fast=False``: every candidate re-simulated in full)."""
    from .answers.advice import SEQS_MAP, advise
    from .answers.simulate import simulate
    from .answers.verdict import workload_crashes

    knobs, work = Knobs(max_num_seqs=4), advice_workload(n, late)
    _clear_caches()
    t0 = time.perf_counter()
    simulate(knobs, work)  # the answer the advice follows (it crashes: tests/test_bench.py)
    advise(knobs, workload_crashes(work, fast=fast),
           longest_prompt=max(r.prompt_len for r in work.requests), seqs_map=SEQS_MAP)
    return time.perf_counter() - t0


def _options(argv: list[str]):
    """The bench's own flags, read before anything is measured (--help, a typo: exit 0 / 2)."""
    from .cli_args import _Parser  # one line and exit status 2 for a flag it does not know

    p = _Parser(prog="python -m hisparse_model.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return p.parse_args(argv)


def exposure_configs() -> list[Knobs]:
    """Configurations for :func:`time_exposure`: vllm serve's defaults and the fix PR's, each
    under every version, backend and K of 0 to 2."""
    out = []
    for base in (Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840,
                       host_pool_gib=512),
                 Knobs(max_num_seqs=2)):
        for version in ("0.31.0", "0.32.0", "0.33.0"):
            for backend in ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"):
                for k in (0, 1, 2):
                    out.append(base.replace(vllm_version=version, attention_backend=backend,
                                            num_speculative_tokens=k))
    return out


def time_exposure() -> float:
    """µs per exposure analysis (``exposure.py``), cold: every cache cleared before each."""
    from .answers import exposure as exp

    configs = exposure_configs()
    total = 0.0
    for knobs in configs:
        _clear_caches()
        exp.exposure.cache_clear()
        t0 = time.perf_counter()
        exp.exposure(knobs)
        total += time.perf_counter() - t0
    return total / len(configs) * 1e6


def time_predict_advice(n: int = 100) -> float:
    """Seconds for ``predict --max-num-seqs 2 --prompt-lens 1,...,n`` and its advice (prefix
    caching on), caches cleared first."""
    from .answers.advice import SEQS_MAP, advise, prediction_crashes

    lens = list(range(1, n + 1))
    knobs = Knobs(max_num_seqs=2)
    _clear_caches()
    t0 = time.perf_counter()
    predict(knobs, lens)
    advise(knobs, prediction_crashes(lens), longest_prompt=n, seqs_map=SEQS_MAP)
    return time.perf_counter() - t0


# An hour of the bundled example's traffic shape that no seed of it crashes: prompts of 1 to
# 1,000 tokens never reach C + 1 = 1025 alone, and the 1024-request server is rarely idle
# of decodes at 10 requests/s with 64-token outputs (checked by the bench's own result).
HOUR_TRAFFIC = {"rate_per_s": 10, "prompt_len": [{"min": 1, "max": 1000, "weight": 1}], "max_tokens": 64}


def time_traffic_hour(minutes: float = 60.0, seeds: int | None = None,
                      jobs: int | None = None) -> float:
    """Seconds for ``simulate --traffic`` of :data:`HOUR_TRAFFIC` on vllm serve's default
    0.31.0 server (S = 1024, B = 8192): ``seeds`` seeds (default: the estimate's), ``jobs``
    at a time (default: one per core)."""
    import tempfile

    from .answers.traffic_risk import SEEDS, estimate, load_traffic

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "traffic.json")
        with open(path, "w") as f:
            json.dump(HOUR_TRAFFIC, f)
        traffic = load_traffic(path)
    knobs = Knobs(max_num_seqs=1024, max_num_batched_tokens=8192, max_model_len=163840,
                  host_pool_gib=512)
    t0 = time.perf_counter()
    estimate(knobs, traffic, minutes, seeds=seeds or SEEDS, jobs=jobs or os.cpu_count() or 1)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = _options(argv)
    except SystemExit as exc:  # --help (0) or a flag it does not know (2, said on stderr)
        return int(exc.code or 0)
    res = measure()
    if opts.json:
        print(json.dumps(res))
        return 0
    # "µs" where the output's encoding has µ (PYTHONIOENCODING=ascii has not)
    us = "µs" if "µ".encode(sys.stdout.encoding or "ascii", "ignore") else "us"
    print(f"full prediction (warm):    {res['predict_warm_us']:9.1f} {us}")
    print(f"full prediction (cold):    {res['predict_cold_us']:9.1f} {us}   (target < 50 {us})")
    print(f"plan (sizes + graphs):     {res['plan_us']:9.1f} {us} per config")
    print(f"100,000-config sweep:      {res['sweep_100k_s']:9.3f} s    (target < 1 s)")
    if res["vllm_config_path_us"] is None:
        print("vLLM's own config path:    not measured (run scripts/install_vllm_cpu.sh)")
    else:
        print(f"vLLM's own config path:    {res['vllm_config_path_us']:9.1f} {us} per config")
        print(f"ratio vLLM / cold predict: {res['ratio_cold']:9d} x  (target >= 1000x)")
    for key in ("simulate_10k_s", "vllm_scheduler_10k_s", "simulate_ratio",
                "simulate_dp8_10k_s"):
        if key in res:
            print(f"{key + ':':<27}{res[key]}")
    if "simulate_advice_2k_s" in res:
        print(f"simulate + advice, 2,000 requests: {res['simulate_advice_2k_s']} s  (target < 5 s)")
    if "traffic_1h_s" in res:
        print(f"simulate --traffic, 1 h at 10 requests/s: {res['traffic_1h_s']} s  "
              "(target < 10 s); the default seeds, one per core: "
              f"{res['traffic_1h_seeds_s']} s")
    if "crash_replay_s" in res:
        print(f"simulate --workload of a 1,761-request crash workload: {res['crash_replay_s']} s"
              "  (target < 2 s)")
    lat = res["browser_latency_ms"]
    if lat is None:
        print("widget latency in the browser: not measured yet (pytest -m browser writes it)")
    else:
        for control, ms in lat.items():
            print(f"browser {control}: {ms}")
    return 0


if __name__ == "__main__":
    from .exits import run

    sys.exit(run("python -m hisparse_model.bench", main))
