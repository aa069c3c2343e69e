"""Properties an independent reader states about HiSparse, checked over the knob space (hypothesis).

Each is a claim from the bug report or the README, not a restatement of the
model's code: C + 1 routed tokens crash 0.31.0 and nothing crashes 0.32.0; C
grows with max_num_seqs; the fix changes nothing below C + 1; the scheduler
computes every token of a workload once, within B tokens and S requests a step.
"""

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hisparse_model.model.knobs import Knobs
from hisparse_model.model.plan import plan
from hisparse_model.answers.predict import predict
from hisparse_model.schedule.scheduler import SchedulerConfig, schedule
from hisparse_model.answers.simulate import simulate
from hisparse_model.schedule.workload import Workload

# vLLM's text, as the bug report quotes it
SWAP_ERROR = ("ValueError: HiSparse swap rows exceed the configured speculative decode "
              "capacity: stop={stop}, capacity={capacity}.")

knob_sets = st.builds(
    lambda s, extra_b, use_b, k, eager, backend, mml: Knobs(
        max_num_seqs=s,
        # vLLM needs B >= S, and 0.33.0 also B > K under MTP (config/vllm.py:2371)
        max_num_batched_tokens=(max(s, k + 1) + extra_b) if use_b else None,
        num_speculative_tokens=k,
        enforce_eager=eager,
        attention_backend=backend,
        max_model_len=mml,
    ),
    st.integers(1, 300),
    st.integers(0, 400),
    st.booleans(),
    st.integers(0, 3),
    st.booleans(),
    st.sampled_from(["FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"]),
    st.sampled_from([320, 1024, 4096]),
)
prompt_lists = st.lists(st.integers(1, 300), min_size=1, max_size=4)


def _all_batches(pred):
    yield from pred.startup
    for p in pred.prompts:
        yield from p.batches


def _swap_errors(pred):
    return [b.error for b in _all_batches(pred) if "HiSparse swap rows exceed" in (b.error or "")]


@settings(max_examples=150, deadline=None)
@given(knob_sets, prompt_lists)
def test_fixed_versions_never_crash(knobs, prompts):
    """0.32.0, 0.33.0 and 0.31.0 + fix never raise the swap-row error, anywhere."""
    for kw in (dict(vllm_version="0.32.0"), dict(vllm_version="0.33.0"), dict(routing="fix")):
        pred = predict(knobs.replace(**kw), prompts)
        # (MTP with B < K + 2 still dies at start-up, of vLLM's warmup IndexError: not this error)
        assert _swap_errors(pred) == []


@settings(max_examples=150, deadline=None)
@given(knob_sets)
def test_a_prompt_of_c_plus_one_tokens_crashes_031_and_not_032(knobs):
    """A prompt of exactly C + 1 tokens, served alone, crashes 0.31.0 with stop=C+1, capacity=C; never 0.32.0.

    It is one prefill step of C + 1 tokens (C + 1 <= B, so not chunked; C >= q, so not a
    decode), which FLASH_ATTN_MLA_SPARSE hands to the routing whole.
    """
    knobs = knobs.replace(attention_backend="FLASH_ATTN_MLA_SPARSE")
    sizes = predict(knobs, []).sizes
    c = sizes.swap_capacity
    assume(c + 1 <= sizes.max_num_batched_tokens and c + 1 < knobs.max_model_len)
    pred = predict(knobs, [c + 1])
    assume(pred.startup_ok)  # a start-up crash serves nothing
    assert pred.prompts[0].error == SWAP_ERROR.format(stop=c + 1, capacity=c)
    assert _swap_errors(predict(knobs.replace(vllm_version="0.32.0"), [c + 1])) == []


@settings(max_examples=150, deadline=None)
@given(knob_sets, prompt_lists)
def test_031_errors_only_with_c_plus_one_routed_tokens(knobs, prompts):
    """Every swap-row error of 0.31.0 names stop = C + 1 and capacity = C, never another size."""
    pred = predict(knobs, prompts)
    c = pred.sizes.swap_capacity
    for err in _swap_errors(pred):
        assert err == SWAP_ERROR.format(stop=c + 1, capacity=c)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400), st.integers(1, 50), st.integers(0, 4), st.integers(0, 2000),
       st.booleans())
def test_raising_max_num_seqs_never_lowers_c(s, more, k, extra_b, default_b):
    """C (swap rows) never falls when max_num_seqs rises, B fixed or defaulted."""
    b = None if default_b else max(s + more, k + 1) + extra_b  # valid for both S
    low = plan(Knobs(max_num_seqs=s, num_speculative_tokens=k, max_num_batched_tokens=b))
    high = plan(Knobs(max_num_seqs=s + more, num_speculative_tokens=k, max_num_batched_tokens=b))
    assert high.swap_capacity >= low.swap_capacity
    assert high.workspace_rows >= low.workspace_rows


@settings(max_examples=150, deadline=None)
@given(knob_sets, prompt_lists)
def test_the_fix_changes_no_batch_below_c_plus_one(knobs, prompts):
    """0.31.0 and 0.31.0 + fix agree on every batch except those routing C + 1 tokens, where only 0.31.0 crashes."""
    stock = predict(knobs, prompts)
    fixed = predict(knobs.replace(routing="fix"), prompts)
    c = stock.sizes.swap_capacity
    assert fixed.sizes == stock.sizes
    # the start-up, and each prompt, run the same batches until 0.31.0 raises (then it stops)
    runs = [(stock.startup, fixed.startup)]
    runs += [(a.batches, b.batches) for a, b in zip(stock.prompts, fixed.prompts)]
    for stock_run, fixed_run in runs:
        for a, b in zip(stock_run, fixed_run):
            if a.routed != c + 1:
                assert a == b
            else:  # C + 1 = W: 0.31.0's swap_in overflows, the fix goes all-resident
                assert b.routed == c + 1 and a.error and b.route == "all_resident"
            if a.error:
                break


workloads = st.lists(
    st.tuples(st.integers(1, 200), st.integers(1, 12), st.integers(0, 6)),  # prompt, max_tokens, arrival
    min_size=1, max_size=12)


@settings(max_examples=150, deadline=None)
@given(workloads, st.integers(1, 8), st.integers(0, 3), st.sampled_from([None, 16, 64]))
def test_simulate_computes_every_token_once(reqs, s, extra_b, b):
    """Without prefix caching or MTP, the steps compute each request's prompt and outputs but the last.

    Every request finishes once; no step exceeds B tokens or S requests.
    """
    knobs = Knobs(vllm_version="0.32.0", max_num_seqs=s, enable_prefix_caching=False,
                  max_model_len=320, max_num_batched_tokens=None if b is None else max(b, s) + extra_b)
    work = Workload.from_json([{"prompt_len": p, "max_tokens": m, "arrival_step": a}
                               for p, m, a in reqs])
    sched = simulate(knobs, work)
    assert sched.crash is None  # 0.32.0
    bmax = sched.plan.max_num_batched_tokens
    assert sum(step.num_tokens for step in sched.steps) == sum(p + m - 1 for p, m, _ in reqs)
    assert sorted(sched.finished) == list(range(len(reqs)))
    assert all(step.num_tokens <= bmax and len(step.scheduled) <= s for step in sched.steps)
    # and per request: prompt + max_tokens - 1 tokens (the last output is never fed back)
    per_request = {}
    for step in schedule(SchedulerConfig(s, bmax, enable_prefix_caching=False,
                                         vllm_version="0.32.0"), work):
        for r, n in step.scheduled.items():
            per_request[r] = per_request.get(r, 0) + n
    assert per_request == {i: p + m - 1 for i, (p, m, _) in enumerate(reqs)}


@settings(max_examples=100, deadline=None)
@given(knob_sets, prompt_lists)
def test_flashmla_never_crashes(knobs, prompts):
    """FLASHMLA_SPARSE hands only decode tokens (at most C) to the routing: no swap-row error, any version."""
    for version in ("0.31.0", "0.32.0"):
        pred = predict(knobs.replace(attention_backend="FLASHMLA_SPARSE", vllm_version=version),
                       prompts)
        assert _swap_errors(pred) == []
