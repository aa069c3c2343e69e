"""The HiSparse host pool (host_pool_gib): its blocks, and vLLM's refusal of one too small.

Invariant: the model's host blocks are what vLLM lays out (every recorded H200 start-up
log's count, and vLLM's own planner on CPU at other sizes), and the model refuses exactly
the pools vLLM's planner refuses, naming the knob, with the smallest pool that starts.
"""

import glob
import pathlib
import random
import re

import pytest

from hisparse_model import Knobs, plan
from hisparse_model.inputs.startup_log import from_log
from hisparse_model.model.host_pool import (blocks_needed, host_block_bytes, host_blocks,
                                            smallest_pool_gib)
from hisparse_model.model.kv_layout import layout


def tiny(k: int):
    """The layout of the fix PR's tiny model (bf16 rows), with ``k`` MTP tokens."""
    return layout(Knobs(num_speculative_tokens=k))

RECORDED = pathlib.Path(__file__).parent / "recorded"
LOGGED = re.compile(r"HiSparse HMA: ([0-9.]+) GiB host source \((\d+) blocks\)")

# (K, GiB, blocks): a block is 64 tokens x 576 bf16 values x the layers (8, + 1 MTP with K)
BLOCKS = [
    (0, 1, 1820),    # 2**30 // (64 * 8 * 1152 = 589,824) = 1,820.4
    (1, 1, 1618),    # 2**30 // (64 * 9 * 1152 = 663,552) = 1,618.2
    (3, 1, 1618),    # K adds one MTP layer whatever its value
    (0, 2, 3640),    # 2**31 // 589,824 = 3,640.9
    (0, 1.5, 2730),  # int(1.5 * 2**30) = 1,610,612,736 // 589,824 = 2,730.7
    (1, 2, 3236),    # 2**31 // 663,552 = 3,236.3
    (0, 0.001, 1),   # int(0.001 * 2**30) = 1,073,741 // 589,824 = 1.8
]


@pytest.mark.parametrize("k,gib,blocks", BLOCKS)
def test_host_blocks(k, gib, blocks):
    """A pool of ``gib`` GiB holds int(gib * 2**30) // stride blocks."""
    assert host_blocks(gib, tiny(k)) == blocks


# (K, GiB, the longest max_model_len that starts): (blocks - 2) x 64 (null block, CoW tail)
LONGEST = [
    (0, 1, 116_352),   # (1,820 - 2) x 64
    (1, 1, 103_424),   # (1,618 - 2) x 64
    (0, 2, 232_832),   # (3,640 - 2) x 64: more than DeepSeek-V3.2's 163,840
    (0, 0.01, 1_024),  # int(0.01 * 2**30) // 589,824 = 18 blocks: (18 - 2) x 64
]


@pytest.mark.parametrize("k,gib,longest", LONGEST)
def test_the_longest_max_model_len_a_pool_starts(k, gib, longest):
    """max_model_len up to (blocks - 2) x 64 starts; one token more is refused naming
    host_pool_gib, vLLM's words, and the smallest pool and longest length that start."""
    knobs = Knobs(max_num_seqs=1, num_speculative_tokens=k, host_pool_gib=gib,
                  max_num_batched_tokens=2048)
    if longest <= 163_840:
        plan(knobs.replace(max_model_len=longest))
        with pytest.raises(ValueError) as exc:
            plan(knobs.replace(max_model_len=longest + 1))
        text = str(exc.value)
        assert text.startswith(f"host_pool_gib: {gib:g} GiB holds ")
        assert (f"HiSparse host pool has {host_blocks(gib, tiny(k))} blocks but max_model_len "
                f"needs {host_blocks(gib, tiny(k)) + 1}; increase host_pool_gib.") in text
        assert f"or max_model_len at most {longest}" in text
        assert f"at least {smallest_pool_gib(longest + 1, tiny(k)):g}" in text
    else:
        plan(knobs.replace(max_model_len=163_840))


# (max_model_len, K, smallest GiB to the hundredth): cdiv(L, 64) + 2 blocks x the stride
SMALLEST = [
    (163_840, 0, 1.41),  # 2,562 x 589,824 = 1.4074 GiB; 1.40 holds 2,548
    (163_840, 1, 1.59),  # 2,562 x 663,552 = 1.5833 GiB; 1.58 holds 2,556
    (320, 0, 0.01),      # 7 blocks: 0.0038 GiB; 0.01 holds 18
    (116_352, 0, 1.0),   # 1,820 blocks: exactly what 1 GiB holds
]


@pytest.mark.parametrize("length,k,gib", SMALLEST)
def test_the_smallest_pool_is_the_smallest_hundredth_that_starts(length, k, gib):
    """smallest_pool_gib holds one request and a hundredth of a GiB less does not."""
    lay = tiny(k)
    assert smallest_pool_gib(length, lay) == gib
    assert host_blocks(gib, lay) >= blocks_needed(length) > host_blocks(round(gib - 0.01, 2), lay)


def _recorded_logs():
    for path in sorted(glob.glob(str(RECORDED / "**" / "*.log"), recursive=True)):
        text = pathlib.Path(path).read_text(errors="replace")
        if LOGGED.search(text) and "non-default args" in text and "/layout/" not in path:
            yield pathlib.Path(path).relative_to(RECORDED).as_posix()


LOGS = list(_recorded_logs())


def test_every_recorded_start_up_is_read():
    """The GPU logs that print the host pool are many, with MTP and without, and three pool sizes."""
    assert len(LOGS) >= 50
    counts = {LOGGED.search((RECORDED / p).read_text(errors="replace")).group(2) for p in LOGS}
    # 1 GiB, K=0: 1,073,741,824 // 589,824 = 1,820;  1 GiB, K=1: // 663,552 = 1,618
    # 5 GiB, K=0 (the H100 served replay): 5,368,709,120 // 589,824 = 9,102
    # 6 GiB, K=0 (the H100 replays of 2026-12-06, the 0.34.0 server that compiled DeepGEMM at
    # start-up): 6,442,450,944 // 589,824 = 10,922
    # 2 GiB, K=0 (the lone 144-token prompt's server): 2,147,483,648 // 589,824 = 3,640
    assert counts == {"1820", "1618", "9102", "10922", "3640"}


@pytest.mark.parametrize("name", LOGS)
def test_the_model_has_the_blocks_each_h200_start_up_logged(name):
    """The knobs check --from-log reads from a real start-up give the blocks it logged."""
    text = (RECORDED / name).read_text(errors="replace")
    gib, blocks = LOGGED.search(text).groups()
    knobs = from_log(str(RECORDED / name)).knobs
    assert f"{knobs.host_pool_gib:.1f}" == gib
    assert host_blocks(knobs.host_pool_gib, layout(knobs)) == int(blocks)
    assert host_block_bytes(layout(knobs)) * int(blocks) <= 2**30 * float(gib)


# -- vLLM's own planner on CPU ----------------------------------------------------------------
# Each case gives the planner the pool in blocks of the tiny model's stride (bf16 rows, as on
# the H200): the refusal rule, cdiv(L, 64) + 2 blocks, is then compared block for block
# (other models and row formats: tests/test_layout_crosscheck.py).

# (K, host blocks, max_model_len): vLLM starts iff blocks >= cdiv(L, 64) + 2
PLANNER = [
    (0, 10, 512),    # 8 + 2 = 10: starts
    (0, 10, 513),    # 9 + 2 = 11 > 10: refused
    (1, 10, 512),    # the MTP layer changes the stride, not the rule
    (1, 10, 513),
    (0, 3, 64),      # 1 + 2 = 3: the smallest pool vLLM starts with
    (0, 2, 64),
    (0, 1820, 116_352),  # the H200's 1 GiB, block for block
    (0, 1820, 116_353),
]


@pytest.mark.vllm_cpu
def test_vllms_planner_refuses_what_the_model_refuses(vllm_servers):
    """vLLM 0.31.0's and 0.34.0's planner lay out the blocks asked for and refuse the pool
    exactly where the model's rule does, in vLLM's words; without the connector they
    refuse HiSparse as check does."""
    from hisparse_model.schedule.scheduler_config import SchedulerConfig

    driver = "hisparse_model.crosscheck.scheduler_driver:host_blocks"
    for version in ("0.31.0", "0.34.0"):
        for k, blocks, length in PLANNER:
            stride = tiny(k).host_block_bytes  # 64 x 1,152 x (8, + 1 with MTP)
            config = {**SchedulerConfig(
                max_num_seqs=4, max_num_batched_tokens=2048, max_model_len=length,
                num_speculative_tokens=k, enable_prefix_caching=True, num_gpu_blocks=580519,
                async_scheduling=True, vllm_version=version).__dict__,
                "host_pool_gib": blocks * stride / 2**30}
            got = vllm_servers.call(version, driver, config)
            starts = blocks >= -(-length // 64) + 2
            if starts:
                assert got == {"host_blocks": blocks, "stride": stride}, (version, k, length)
            else:
                assert got["refused"] == (f"HiSparse host pool has {blocks} blocks but "
                                          f"max_model_len needs {-(-length // 64) + 2}; "
                                          "increase host_pool_gib."), (version, k, length)
        config["host_pool_gib"] = None
        assert vllm_servers.call(version, driver, config) == {
            "refused": "HiSparse requires HiSparseConnector with host_pool_gib"}


# -- serving: the bound on what a schedule's requests hold ------------------------------------
# (prompt, max_tokens, arrival step) x requests, S, B: each request holds the blocks of
# the tokens allocated so far, cdiv(computed + scheduled + K, 64), at least its whole prompt
# from admission, + 1 tail, from its first step to two steps after the step finishing it
USE = [
    # A decodes while B arrives at step 2 and decodes: A holds cdiv(65 + 1, 64) + 1 = 3,
    # B cdiv(640 + 1, 64) + 1 = 12 from step 3: 15 (A's whole 264 tokens would be 6 + 12)
    ([(64, 200, 0), (640, 8, 2)], 4, 2048, 15),
    # one request: cdiv(107, 64) + 1 = 3 (its last decode allocates token 107)
    ([(100, 8, 0)], 4, 2048, 3),
    # two at once: 3 + (cdiv(1007, 64) + 1 = 17) = 20
    ([(100, 8, 0), (1000, 8, 0)], 4, 2048, 20),
    # the second arrives long after the first finished and was freed: max(3, 17)
    ([(100, 8, 0), (1000, 8, 500)], 4, 2048, 17),
    # S = 1: the second waits for the first, but its first step is within the first's
    # two-step tail only if it follows at once: 3 + 17 = 20 (it does)
    ([(100, 8, 0), (1000, 8, 0)], 1, 2048, 20),
]


@pytest.mark.parametrize("fed", ["done", "lazily"])
@pytest.mark.parametrize("reqs,s,b,peak", USE)
def test_the_host_bound_of_a_schedule(reqs, s, b, peak, fed):
    """HostUse's peak is the most the requests alive together can hold at one step, whether
    it is fed the finished schedule (simulate) or each step as the engine loop hands it over,
    before its output is processed (``lazily``: simulate --traffic and the stream, where a
    step's finished requests are known only a step later; they were never freed there)."""
    from hisparse_model.model.host_pool import HostUse
    from hisparse_model.schedule.scheduler import _Sim, schedule
    from hisparse_model.schedule.scheduler_config import SchedulerConfig, acceptance
    from hisparse_model.schedule.workload import Workload

    work = Workload.from_json({"requests": [{"prompt_len": p, "max_tokens": m,
                                             "arrival_step": a} for p, m, a in reqs]})
    knobs = Knobs(max_num_seqs=s, max_num_batched_tokens=b, max_model_len=2048)
    use = HostUse(knobs, [p for p, _, _ in reqs])
    cfg = SchedulerConfig(max_num_seqs=s, max_num_batched_tokens=b, max_model_len=2048,
                          num_speculative_tokens=0, enable_prefix_caching=True,
                          vllm_version="0.31.0")
    steps = schedule(cfg, work) if fed == "done" else \
        _Sim(cfg, work, acceptance(None)).lazily(work)
    for st in steps:
        use.step(st)
    assert use.peak == peak and use.short is None and use.refusal() is None


def test_simulate_declines_where_the_host_pool_may_run_short():
    """Two prompts of 100,000 and 50,000 tokens (8 output tokens each) at once on a 1 GiB
    pool (1,820 blocks): cdiv(100000, 64) + 1 = 1,564 and cdiv(50000, 64) + 1 = 783 (their
    decodes stay in those blocks), so 2,347 > 1,819 once the second is admitted (engine
    step 12: the first's prefill takes cdiv(100000, 8192) = 13 steps, the second joins
    its last); 1.29 GiB holds 2,348."""
    from hisparse_model import simulate
    from hisparse_model.schedule.workload import Workload

    work = Workload.from_json({"requests": [{"prompt_len": 100_000}, {"prompt_len": 50_000}]})
    knobs = Knobs(max_num_seqs=4, max_num_batched_tokens=8192, max_model_len=116_000)
    with pytest.raises(ValueError) as exc:
        simulate(knobs, work)
    assert str(exc.value).startswith("host_pool_gib: 1 GiB (1820 host blocks, the fix PR's tiny "
                                     "DeepSeek-V3.2: 8 layers, index_topk 128, bf16 rows of "
                                     "1,152 bytes) may run short "
                                     "serving this workload: by engine step 12 its requests "
                                     "can hold 2347 blocks")
    # 2,348 x 589,824 bytes = 1.2898 GiB
    assert str(exc.value).endswith("set host_pool_gib to at least 1.29")
    assert simulate(knobs.replace(host_pool_gib=1.29), work).steps
    with pytest.raises(ValueError, match="^host_pool_gib: 1.28 GiB"):
        simulate(knobs.replace(host_pool_gib=1.28), work)


@pytest.mark.vllm_cpu
def test_vllms_scheduler_never_finds_short_a_pool_the_model_says_holds(vllm_servers):
    """vLLM's own scheduler and HiSparse coordinator (0.31.0, 0.34.0) serve random workloads
    with a host pool of exactly the model's bound (+ the null block): no admission or
    allocation is refused; with a third of it some are (so the count can fail)."""
    from hisparse_model.model.host_pool import HostUse
    from test_scheduler_crosscheck import model_steps, random_case

    rng_seed = 20261204
    driver = "hisparse_model.crosscheck.scheduler_driver:run"
    for version in ("0.31.0", "0.34.0"):
        rng = random.Random(f"{rng_seed}:{version}")
        cases, tight = [], []
        for _ in range(50):
            case = random_case(rng, version)
            for r in case["workload"]:  # longer prompts: tens of blocks, not one
                r["prompt_token_ids"] = r["prompt_token_ids"] * 3
                r["prompt_token_ids"] = r["prompt_token_ids"][:case["config"]["max_model_len"]
                                                              * 4 // 5]
            cfg = case["config"]
            k = cfg["num_speculative_tokens"]
            knobs = Knobs(max_num_seqs=cfg["max_num_seqs"], num_speculative_tokens=k,
                          max_num_batched_tokens=cfg["max_num_batched_tokens"],
                          max_model_len=cfg["max_model_len"])
            use = HostUse(knobs, [len(r["prompt_token_ids"]) for r in case["workload"]])
            for st in model_steps(case):
                use.step(type("St", (), {"index": st["index"], "scheduled": st["scheduled"],
                                         "num_computed_before": st["computed_before"],
                                         "finished": st["finished"]}))
            stride = tiny(k).host_block_bytes  # 64 x 1,152 x (8, + 1 with MTP)
            least = -(-cfg["max_model_len"] // 64) + 2  # the planner's own minimum
            for blocks, holds in ((max(use.peak + 1, least), True),
                                  (max(use.peak // 3, least), None)):
                cases.append({**case, "config": {**cfg, "host_pool_gib":
                                                 blocks * stride / 2**30}})
                tight.append(holds)
        out = vllm_servers.call(version, driver, {"cases": cases, "jobs": 2}, timeout=600)
        results = out["results"]
        assert all("driver_error" not in r for r in results), version
        held = [r["alloc_failures"] for r, h in zip(results, tight) if h]
        short = [r["alloc_failures"] for r, h in zip(results, tight) if h is None]
        assert held and all(n == 0 for n in held), (version, held)
        assert any(n > 0 for n in short), (version, short)
