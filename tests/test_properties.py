"""Property tests over the knob space (hypothesis)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from hisparse_model.knobs import Knobs
from hisparse_model.predict import predict

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


@settings(max_examples=150, deadline=None)
@given(knob_sets, prompt_lists)
def test_fixed_versions_never_crash(knobs, prompts):
    """0.32.0, 0.33.0 and 0.31.0 + fix never raise the swap-row error, anywhere."""
    for kw in (dict(vllm_version="0.32.0"), dict(vllm_version="0.33.0"), dict(routing="fix")):
        pred = predict(knobs.replace(**kw), prompts)
        # (MTP with B < K + 2 still dies at start-up, of vLLM's warmup IndexError: not this error)
        assert not any("HiSparse swap rows exceed" in (b.error or "") for b in _all_batches(pred))


@settings(max_examples=150, deadline=None)
@given(knob_sets, prompt_lists)
def test_031_crashes_exactly_on_swap_in_above_capacity(knobs, prompts):
    """In 0.31.0 a batch crashes iff the routing sends it to swap_in with more than C tokens, i.e. C+1."""
    pred = predict(knobs, prompts)
    c = pred.sizes.swap_capacity
    for b in _all_batches(pred):
        overflow = b.route == "swap_in" and b.routed > c
        assert (b.error is not None) == overflow
        if overflow:
            assert b.routed == c + 1 == pred.sizes.workspace_rows


@settings(max_examples=100, deadline=None)
@given(knob_sets, prompt_lists)
def test_flashmla_never_routes_prefill(knobs, prompts):
    """FLASHMLA_SPARSE (0.31.0/0.32.0) hands only decode tokens to the routing, so it never crashes."""
    pred = predict(knobs.replace(attention_backend="FLASHMLA_SPARSE"), prompts)
    for b in _all_batches(pred):
        assert b.routed == b.num_decode_tokens <= pred.sizes.swap_capacity
        assert b.error is None
