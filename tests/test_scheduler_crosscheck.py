"""Cross-check the workload scheduler model against vLLM's own Scheduler, on CPU.

For each of vLLM 0.31.0 / 0.32.0 / 0.33.0 (the ``.vllm/<version>`` trees of
conftest's ``vllm_trees``; a failed install fails, never skips),
one call of the test run's driver server (conftest's ``vllm_servers``) runs
``hisparse_model/crosscheck/scheduler_driver.py`` over
``NUM_CASES`` seeded random workloads: the real ``Scheduler`` /
``AsyncScheduler`` with the HiSparse connector's scheduler side, fed step by
step.  Every step -- engine step number, tokens per request, drafts, computed
tokens before, finished requests, runner order, ``all_context_pages_resident``
-- must equal ``hisparse_model.schedule.scheduler.schedule`` exactly.
"""

from __future__ import annotations

import pathlib
import random
from collections import Counter

import pytest

from hisparse_model.model.versions import cross_checked
from hisparse_model.crosscheck.client import DriverError
from hisparse_model.schedule.scheduler import SchedulerConfig, schedule
from hisparse_model.schedule.workload import Workload

pytestmark = pytest.mark.vllm_cpu

VERSIONS = cross_checked()  # the versions its driver runs for (versions.cross_checked)
NUM_CASES = 1000
JOBS = 2  # forked driver workers (the CI machine has 2 cores)
NUM_GPU_BLOCKS = 2048  # ample for <= 8 requests; the driver reports any shortage
DRIVER_TIMEOUT_S = 600
MAX_SHOWN = 5

# Prompt lengths around the 64-token block boundaries, where hits and
# chunk ends change.
_EDGE_LENS = (1, 2, 3, 5, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257)


def _prompt(rng: random.Random, n: int) -> list[int]:
    """The fix PR's prompt (shares every prefix) or one diverging from it."""
    ids = list(range(100, 100 + n))
    r = rng.random()
    if r < 0.15:  # diverges after a block-aligned shared prefix
        cut = rng.choice((0, 64, 128, 192))
        ids[cut:] = [7 + (j % 5) for j in range(n - min(cut, n))]
    elif r < 0.2:  # a prompt of its own
        ids = [rng.randint(0, 99) for _ in range(n)]
    return ids


def random_case(rng: random.Random, version: str) -> dict:
    s = rng.choice((1, 1, 2, 2, 3, 4, 5, 8, 16))
    k = rng.choice((0, 0, 1, 2))
    length = rng.choice((320, 320, 320, 200, 130, 130, 512))
    b = rng.choice((s, s + 1, 2 * s, 3, 8, 16)) if rng.random() < 0.2 else \
        rng.choice((63, 64, 65, 128, 129, 320, 1024))
    b = max(b, s, k + 1)
    config = SchedulerConfig(
        max_num_seqs=s, max_num_batched_tokens=b, max_model_len=length,
        num_speculative_tokens=k, enable_prefix_caching=rng.random() < 0.65,
        num_gpu_blocks=NUM_GPU_BLOCKS, async_scheduling=rng.random() < 0.8,
        vllm_version=version)
    requests, step = [], 0
    for _ in range(rng.randint(1, 8)):
        n = min(rng.choice(_EDGE_LENS + (1, 1, 1, rng.randint(1, length - 1),
                                         rng.randint(1, length - 1))), length - 1)
        step += rng.choice((0, 0, 0, 1, 2, 3, 5, 8, 20))
        m = rng.choice((1, 2, 3, 4, 8, 8, rng.randint(1, 24)))
        if rng.random() < 0.06:
            n = length - rng.randint(1, 12)  # runs into max_model_len
        requests.append({"prompt_token_ids": _prompt(rng, n), "max_tokens": m,
                         "arrival_step": step})
    accepted = rng.choice((None, 1, "all", {"seed": rng.randint(0, 999)}))
    return {"config": config.__dict__.copy(), "workload": requests, "accepted": accepted}


def random_cases(version: str, count: int = NUM_CASES, seed: int = 20260601) -> list[dict]:
    rng = random.Random(f"{seed}:{version}")
    return [random_case(rng, version) for _ in range(count)]


def _step_dict(s) -> dict:
    """A model Step in the driver's form (scheduler_driver's docstring)."""
    return {"index": s.index, "scheduled": dict(s.scheduled), "spec": dict(s.spec),
            "computed_before": dict(s.num_computed_before), "finished": list(s.finished),
            "runner_order": s.runner_order(), "resident": s.resident, "drafts": s.drafts}


def model_steps(case: dict) -> list[dict]:
    workload = Workload.from_json(case["workload"])
    return [_step_dict(s) for s in schedule(SchedulerConfig(**case["config"]), workload,
                                            case["accepted"])]


def _norm(steps: list[dict]) -> list[dict]:
    """JSON turned int keys into strings; turn them back."""
    return [{key: ({int(r): v for r, v in val.items()} if isinstance(val, dict) else val)
             for key, val in step.items()} for step in steps]


def _describe(case: dict) -> str:
    c = case["config"]
    reqs = ", ".join(f"{len(r['prompt_token_ids'])}t/m{r['max_tokens']}@{r['arrival_step']}"
                     for r in case["workload"])
    return (f"S={c['max_num_seqs']} B={c['max_num_batched_tokens']} L={c['max_model_len']} "
            f"K={c['num_speculative_tokens']} apc={c['enable_prefix_caching']} "
            f"async={c['async_scheduling']} accepted={case['accepted']} [{reqs}]")


@pytest.fixture(scope="module", params=VERSIONS)
def driver_run(request, vllm_servers):
    """(version, cases, driver output): all cases of a version in one driver call."""
    version = request.param
    cases = random_cases(version)
    try:
        out = vllm_servers.call(version, "hisparse_model.crosscheck.scheduler_driver:run",
                                {"cases": cases, "jobs": JOBS}, timeout=DRIVER_TIMEOUT_S)
    except DriverError as exc:
        pytest.fail(str(exc))
    return version, cases, out


def test_driver_ran_the_installed_vllm(driver_run, vllm_trees):
    """The driver imported .vllm/<version> and ran every workload without error or shortage."""
    version, cases, out = driver_run
    assert out["vllm_version"] == version
    assert pathlib.Path(out["vllm_file"]).resolve().is_relative_to(
        (vllm_trees / version).resolve())
    results = out["results"]
    assert len(results) == len(cases) == NUM_CASES
    errors = [f"case {i}: {r['driver_error']}\n{r['traceback']}"
              for i, r in enumerate(results) if "driver_error" in r]
    assert not errors, "\n".join(errors[:MAX_SHOWN])
    # the model assumes the KV pools never run short; so must these workloads
    short = [i for i, r in enumerate(results) if r["alloc_failures"]]
    assert not short, f"pools ran short in cases {short[:20]}"


def test_every_step_matches_vllm(driver_run):
    """Every step of every workload equals vLLM's Scheduler exactly: no tolerance."""
    version, cases, out = driver_run
    diffs = []
    for i, (case, res) in enumerate(zip(cases, out["results"])):
        got, want = _norm(res.get("steps", [])), _norm(model_steps(case))
        if got == want:
            continue
        j = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b),
                 min(len(got), len(want)))
        diffs.append(f"case {i} {_describe(case)}\n  step #{j}: vLLM "
                     f"{got[j] if j < len(got) else None}\n  model   "
                     f"{want[j] if j < len(want) else None}")
    assert not diffs, (f"vLLM {version}: {len(diffs)} of {len(cases)} workloads disagree\n"
                       + "\n".join(diffs[:MAX_SHOWN]))


def test_workloads_exercise_every_rule(driver_run):
    """The random workloads reach each modelled rule many times (counted on vLLM's side)."""
    version, cases, out = driver_run
    seen: Counter = Counter()
    for case, res in zip(cases, out["results"]):
        cfg, reqs = case["config"], case["workload"]
        first: dict[int, int] = {}
        chunks: Counter = Counter()
        for st in _norm(res["steps"]):
            seen["steps"] += 1
            seen["async" if cfg["async_scheduling"] else "sync"] += 1
            if not st["resident"]:
                seen["not all resident"] += 1
            if len(st["scheduled"]) > 1 and any(
                    st["computed_before"][r] < len(reqs[r]["prompt_token_ids"])
                    for r in st["scheduled"]):
                seen["prefill mixed with others"] += 1
            for r, n in st["scheduled"].items():
                p = len(reqs[r]["prompt_token_ids"])
                if st["computed_before"][r] < p:
                    chunks[r] += 1
                if r not in first:
                    first[r] = st["computed_before"][r]
                    if first[r]:
                        seen["prefix hit"] += 1
                if st["spec"].get(r):
                    seen["pad" if st["computed_before"][r] < p else "verify"] += 1
            seen["budget-bound step"] += sum(st["scheduled"].values()) == \
                cfg["max_num_batched_tokens"]
            seen["drafts skipped"] += not st["drafts"]  # 0.33.0's skip_drafts
        seen["chunked prefill"] += sum(c > 1 for c in chunks.values())
        for r, req in enumerate(reqs):
            if len(req["prompt_token_ids"]) + req["max_tokens"] > cfg["max_model_len"]:
                seen["stopped by max_model_len"] += 1
    skipped = [("drafts skipped", 1000)] if version == "0.33.0" else []
    for rule, minimum in [*skipped, ("steps", 20000), ("async", 10000), ("sync", 2000),
                          ("prefix hit", 300), ("not all resident", 50), ("verify", 5000),
                          ("pad", 50), ("chunked prefill", 500),
                          ("prefill mixed with others", 1000), ("budget-bound step", 1000),
                          ("stopped by max_model_len", 200)]:
        assert seen[rule] >= minimum, (version, rule, seen[rule], dict(seen))
