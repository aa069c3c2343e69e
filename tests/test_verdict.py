"""The fast verdicts behind simulate's advice (hisparse_model/answers/verdict.py) give the advice of the
exhaustive search that re-simulates every candidate: same changes, same order, same costs."""

import pytest

from hisparse_model import Knobs
from hisparse_model.answers.advice import SEQS_MAP, advise
from hisparse_model.schedule.scheduler import SchedulerConfig, _Sim, schedule
from hisparse_model.answers.verdict import workload_crashes
from hisparse_model.schedule.workload import Workload, synthetic


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
# bench.advice_workload(24): 22 requests one step apart (arrivals 0-21), the pair at step
# 21 + 2 * 24 = 69, after the rest are done.  Under B < 203 the 200-token prompt (request 3,
# step 3: 200 + 3 decodes) is chunked; B = 150 and B = 151 part there and meet after step 5
MEET = Workload(synthetic(22, prompt_lens=(16, 64, 130, 200), spacing=1).requests
                + _w((3, 69), (2, 69)).requests)

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
    ("meet-s4", dict(max_num_seqs=4), MEET),
    ("meet-s4-no-apc", dict(max_num_seqs=4, enable_prefix_caching=False), MEET),
    ("meet-s4-mtp1", dict(max_num_seqs=4, num_speculative_tokens=1), MEET),
]


@pytest.mark.unmeasured  # the exhaustive searches are most of the suite's traced CPU
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
    from hisparse_model.answers.simulate import simulate

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


def test_schedules_that_part_and_meet_again_share_the_rest():
    """Rule 7: MEET under B = 151 and B = 150 chunks the 200-token prompt differently in
    steps 3-4 (151 - 3 decodes = 148, then 52; 150 - 3 = 147, then 53), after which the
    engine-loop states are equal (once step 4's batch is no longer in flight, after step 5)
    and every later step is the same."""
    from hisparse_model.answers.verdict import _state

    runs = {}
    for b in (151, 150):
        sim = _Sim(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=b), MEET, None)
        states, steps = {}, []
        for st in sim.lazily(MEET):
            states[st.index] = _state(sim, st.index)
            steps.append((st.index, dict(st.scheduled)))
        runs[b] = states, steps
    (s151, x151), (s150, x150) = runs[151], runs[150]
    assert x151[3][1][3] == 148 and x150[3][1][3] == 147  # request 3's first chunk
    assert x151[4][1][3] == 52 and x150[4][1][3] == 53  # its last
    assert s151[4] != s150[4] and s151[5] == s150[5]  # parted in step 3, met after step 5
    assert x151[5:] == x150[5:] and max(sum(n.values()) for _, n in x151[5:]) <= 150


def test_fast_verdicts_take_rule_7(monkeypatch):
    """MEET's advice at S = 4 reaches verdicts through a met schedule (rule 7), and they are
    the exhaustive search's (test_fast_advice_is_the_exhaustive_searchs, meet-s4)."""
    from hisparse_model.answers import verdict

    taken = []
    real = verdict._met
    monkeypatch.setattr(verdict, "_met", lambda *a: taken.append(real(*a)) or taken[-1])
    advise(Knobs(max_num_seqs=4), workload_crashes(MEET), longest_prompt=200,
           seqs_map=SEQS_MAP)
    assert taken.count(True) > 0


def test_the_compared_state_is_all_the_simulator_holds():
    """Every attribute of the simulator is configuration, bookkeeping or compared state, and
    every field of a request but its prompt (P, keys) and max_tokens (M) is compared: a field
    added to the scheduler must be placed here (verdict.py's SIM_* sets) before rule 7 holds."""
    from hisparse_model.schedule.scheduler import _Req
    from hisparse_model.answers.verdict import _REQ_STATE, SIM_BOOKKEEPING, SIM_CONFIG, SIM_STATE

    sim = _Sim(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=1280), MEET, None)
    assert set(vars(sim)) == SIM_CONFIG | SIM_BOOKKEEPING | SIM_STATE
    assert not (SIM_CONFIG & SIM_STATE or SIM_CONFIG & SIM_BOOKKEEPING
                or SIM_STATE & SIM_BOOKKEEPING)
    req = sim.reqs[0]
    assert len(_REQ_STATE(req)) == len(_Req.__slots__) - 3  # all but P, M, keys


def test_the_state_tells_apart_any_change_of_what_it_compares():
    """MEET under B = 150 after 12 engine steps: changing any compared attribute of the
    simulator, or any compared field of a running request, changes ``_state`` (so a schedule
    is never taken as met when one of them differs)."""
    from hisparse_model.answers.verdict import _REQ_STATE, _state

    sim = _Sim(SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=150), MEET, None)
    steps = sim.lazily(MEET)
    for _ in range(12):
        last = next(steps).index
    base = _state(sim, last)
    assert sim.running and sim.waiting and sim.published and sim.queue
    other = sim.reqs[-1]  # not yet arrived: in none of the lists
    changes = {  # attribute -> a value that differs
        "waiting": lambda v: type(v)(list(v)[1:]), "running": lambda v: v[1:],
        "queue": lambda v: type(v)(), "finished_ids": lambda v: not v,
        "published": lambda v: {**v, next(iter(v)): not v[next(iter(v))]},  # same keys
        "to_send": lambda v: v + [other],
        "prev_sent": lambda v: v + [other], "inflight": lambda v: v + 1}
    for name, change in changes.items():
        kept = getattr(sim, name)
        setattr(sim, name, change(kept))
        assert _state(sim, last) != base, name
        setattr(sim, name, kept)
    r = sim.running[0]
    for field in (f for f in type(r).__slots__ if f not in ("P", "M", "keys", "i")):
        kept = getattr(r, field)
        setattr(r, field, not kept if isinstance(kept, bool) else kept + 1)
        assert _state(sim, last) != base, field
        setattr(r, field, kept)
    assert _state(sim, last) == base and len(_REQ_STATE(r)) == len(type(r).__slots__) - 3
