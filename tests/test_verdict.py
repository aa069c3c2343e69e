"""The fast verdicts behind simulate's advice (hisparse_model/verdict.py) give the advice of the
exhaustive search that re-simulates every candidate: same changes, same order, same costs."""

import pytest

from hisparse_model import Knobs
from hisparse_model.advice import SEQS_MAP, advise
from hisparse_model.scheduler import SchedulerConfig, schedule
from hisparse_model.verdict import workload_crashes
from hisparse_model.workload import Workload, synthetic


def _w(*reqs) -> Workload:
    """Requests as (prompt_len, arrival_step) or (prompt_len, arrival_step, max_tokens)."""
    return Workload.from_json([{"prompt_len": r[0], "arrival_step": r[1],
                                **({"max_tokens": r[2]} if len(r) > 2 else {})} for r in reqs])


PAIR = _w((3, 0), (2, 0))  # 3 + 2 = 5 tokens in step 0: W = 5 at S = 4
# 18 requests one step apart, then the pair once they are done: the crash comes last,
# so no candidate stops early
LATE = Workload(synthetic(18, prompt_lens=(16, 64, 130, 200), spacing=1).requests
                + _w((3, 80), (2, 80)).requests)
# the pair first, 18 requests after: every crashing candidate stops at step 0
EARLY = Workload(_w((3, 0), (2, 0)).requests
                 + synthetic(18, prompt_lens=(16, 64, 130, 200), spacing=1).requests)
SHARED = _w((130, 0), (130, 2), (200, 4), (64, 4), (5, 30))  # prefixes shared (prefix caching)
LONG = _w((200, 0), (7, 1), (300, 3), (2, 3))  # chunked prefill under small B
BUSY = synthetic(12, prompt_lens=(5, 17, 64), spacing=0)  # more requests than S at once

SCENARIOS = [  # (id, knobs, workload)
    ("pair-s4", dict(max_num_seqs=4), PAIR),
    ("pair-s4-no-apc", dict(max_num_seqs=4, enable_prefix_caching=False), PAIR),
    ("pair-s4-fix", dict(max_num_seqs=4, routing="fix"), PAIR),
    ("pair-s4-0.32", dict(max_num_seqs=4, vllm_version="0.32.0"), PAIR),
    ("pair-s4-0.33", dict(max_num_seqs=4, vllm_version="0.33.0"), PAIR),
    ("pair-s4-flashmla", dict(max_num_seqs=4, attention_backend="FLASHMLA_SPARSE"), PAIR),
    ("pair-s4-eager", dict(max_num_seqs=4, enforce_eager=True), PAIR),
    ("pair-s4-piecewise", dict(max_num_seqs=4, cudagraph_mode="PIECEWISE"), PAIR),
    ("pair-s4-b8", dict(max_num_seqs=4, max_num_batched_tokens=8), PAIR),
    ("pair-s2-mtp1", dict(max_num_seqs=2, num_speculative_tokens=1), PAIR),
    ("pair-s1-mtp2", dict(max_num_seqs=1, num_speculative_tokens=2), PAIR),
    ("pair-dp2-s2", dict(max_num_seqs=2, data_parallel_size=2), PAIR),
    ("late-s4", dict(max_num_seqs=4), LATE),
    ("late-s4-no-apc", dict(max_num_seqs=4, enable_prefix_caching=False), LATE),
    ("late-s4-0.33", dict(max_num_seqs=4, vllm_version="0.33.0"), LATE),
    ("late-s2-mtp1", dict(max_num_seqs=2, num_speculative_tokens=1), LATE),
    ("early-s4", dict(max_num_seqs=4), EARLY),
    ("early-s4-b300", dict(max_num_seqs=4, max_num_batched_tokens=300), EARLY),
    ("early-s4-mtp1", dict(max_num_seqs=4, num_speculative_tokens=1), EARLY),
    ("shared-s3", dict(max_num_seqs=3), SHARED),
    ("shared-s2-mtp1", dict(max_num_seqs=2, num_speculative_tokens=1), SHARED),
    ("shared-s4-0.32", dict(max_num_seqs=4, vllm_version="0.32.0"), SHARED),
    ("shared-s3-no-apc", dict(max_num_seqs=3, enable_prefix_caching=False), SHARED),
    ("long-s6-b64", dict(max_num_seqs=6, max_num_batched_tokens=64), LONG),
    ("long-s8-b130", dict(max_num_seqs=8, max_num_batched_tokens=130, max_model_len=400), LONG),
    ("long-s2-mtp2-b50", dict(max_num_seqs=2, num_speculative_tokens=2,
                              max_num_batched_tokens=50, max_model_len=400), LONG),
    ("long-s5-pool", dict(max_num_seqs=5, max_model_len=400, num_gpu_blocks_override=4000),
     LONG),
    ("busy-s4", dict(max_num_seqs=4), BUSY),
    ("busy-s8-b16", dict(max_num_seqs=8, max_num_batched_tokens=16), BUSY),
    ("busy-s3-mtp1-0.31", dict(max_num_seqs=3, num_speculative_tokens=1), BUSY),
    ("busy-s16-flashmla", dict(max_num_seqs=16, attention_backend="FLASHMLA_SPARSE"), BUSY),
    ("busy-dp2-s3", dict(max_num_seqs=3, data_parallel_size=2), BUSY),
]


@pytest.mark.parametrize("knobs,workload", [s[1:] for s in SCENARIOS],
                         ids=[s[0] for s in SCENARIOS])
def test_fast_advice_is_the_exhaustive_searchs(knobs, workload):
    """Every scenario: advise() with the fast verdicts equals advise() re-simulating each
    candidate (changes, order, why and costs), and both verdicts agree on the scenario."""
    knobs = Knobs(**knobs)
    longest = max(r.prompt_len for r in workload.requests)
    fast, slow = workload_crashes(workload), workload_crashes(workload, fast=False)
    assert fast(knobs) == slow(knobs)
    got = advise(knobs, fast, longest_prompt=longest, seqs_map=SEQS_MAP)
    want = advise(knobs, slow, longest_prompt=longest, seqs_map=SEQS_MAP)
    assert got == want


def test_the_table_has_crashes_of_each_kind():
    """The scenarios include start-up crashes, serving crashes (early and late) and safe ones,
    so each shortcut of verdict.py is taken somewhere."""
    from hisparse_model.simulate import simulate

    kinds = set()
    for _, knobs, workload in SCENARIOS:
        crash = simulate(Knobs(**knobs), workload).crash
        kinds.add("safe" if crash is None else "startup" if crash["step"] is None
                  else "early" if crash["step"] < 5 else "late")
    assert kinds == {"safe", "startup", "early", "late"}


def test_a_schedule_where_s_and_b_never_bound_is_every_larger_ones():
    """LATE at S = 16, B = 2048: no step over 203 tokens, at most 9 running; the same steps
    under S = 12 (>= 9) and B = 210 (>= 203), which the verdicts reuse."""
    cfg = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=2048)
    base = [(s.index, s.scheduled) for s in schedule(cfg, LATE)]
    assert max(sum(n.values()) for _, n in base) == 203  # the 200-token prompt + 3 decodes
    for s, b in ((12, 2048), (16, 210), (12, 210)):
        other = SchedulerConfig(max_num_seqs=s, max_num_batched_tokens=b)
        assert [(x.index, x.scheduled) for x in schedule(other, LATE)] == base
