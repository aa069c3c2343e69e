"""Hand-computed tables for plan(): default B, capture sizes, cudagraph mode, rejections.

Every expected value is worked out by hand from the vLLM rules cited in
``plan.py`` (offline LLM class on an H200: B = min(S * max_model_len, 16384);
capture cap = min(S * (1 + K) * 2, 512), then min(B, cap)).  Only inputs a
:class:`Knobs` can reach are modelled; the old model's tables for GPU tiers,
usage contexts, performance modes, optimisation levels, user capture lists and
compile ranges went with the code that modelled them.
"""

from __future__ import annotations

import pytest

from hisparse_model.model.knobs import VLLM_VERSIONS

from hisparse_model import Knobs, plan

VERSIONS = VLLM_VERSIONS  # every version the model covers (and a release-check candidate)

# (knobs, expected B)
B_CASES = [
    (dict(max_model_len=320, max_num_seqs=2), 640),  # live 0.31.0: min(2 * 320, 16384) = 640
    (dict(max_model_len=320, max_num_seqs=1), 320),  # min(1 * 320, 16384) = 320
    (dict(max_model_len=32768, max_num_seqs=2), 16384),  # min(2 * 32768, 16384) = 16384
    (dict(max_model_len=8, max_num_seqs=3), 24),  # min(3 * 8, 16384) = 24
    (dict(max_model_len=320, max_num_seqs=2, max_num_batched_tokens=100), 100),  # explicit B
    (dict(max_model_len=320, max_num_seqs=2, num_speculative_tokens=3), 640),  # K leaves B alone
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kw,expected", B_CASES)
def test_default_b(version, kw, expected):
    """B is the user's value, else min(S * max_model_len, 16384) in every version."""
    assert plan(Knobs(vllm_version=version, **kw)).max_num_batched_tokens == expected


# (knobs, substring naming the knob)
REJECTIONS = [
    (dict(max_num_seqs=200, max_num_batched_tokens=100), "max_num_batched_tokens"),  # 100 < 200
    # derived B = min(20000 * 320, 16384) = 16384 < 20000 seqs: says B was derived
    (dict(max_num_seqs=20000), "derived as min(max_num_seqs * max_model_len, 16384)"),
    (dict(max_num_seqs=0), "max_num_seqs"),
    (dict(max_model_len=0), "max_model_len"),
    (dict(max_model_len=163_841), "max_model_len"),  # above DeepSeek-V3.2's 163,840
    (dict(max_num_batched_tokens=0), "max_num_batched_tokens"),
    (dict(num_speculative_tokens=-1), "num_speculative_tokens"),
    (dict(cudagraph_mode="SOMETIMES"), "cudagraph_mode"),
    (dict(attention_backend="TRITON_MLA"), "attention_backend"),
]


@pytest.mark.parametrize("kw,knob", REJECTIONS)
def test_rejections(kw, knob):
    """Knobs vLLM (or its model config) refuses raise ValueError naming the knob."""
    with pytest.raises(ValueError, match=knob.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        plan(Knobs(**kw))


@pytest.mark.parametrize("bad", ["0.30.0", "0.31", None, 31])
def test_bad_version(bad):
    """Unknown versions raise ValueError naming vllm_version."""
    with pytest.raises(ValueError, match="vllm_version"):
        Knobs(vllm_version=bad)


def test_spec_decode_slot_check_differs_by_version():
    """MTP K=3 with B=3: 0.31/0.32 need B > 0 slots, 0.33 needs B > 3 lookahead slots."""
    kw = dict(max_model_len=320, max_num_seqs=1, max_num_batched_tokens=3, num_speculative_tokens=3)
    assert plan(Knobs(vllm_version="0.31.0", **kw)).max_num_batched_tokens == 3
    assert plan(Knobs(vllm_version="0.32.0", **kw)).max_num_batched_tokens == 3
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        plan(Knobs(vllm_version="0.33.0", **kw))
    for v in VERSIONS:  # B = 4 > 3 passes everywhere
        assert plan(Knobs(vllm_version=v, **{**kw, "max_num_batched_tokens": 4})
                    ).max_num_batched_tokens == 4


_GRID_TO_512 = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))

# (knobs, expected capture sizes)
CAPTURE_CASES = [
    # ground truth: cap = min(2*1*2, 512) = 4 -> [1,2,4]; uniform [2] already in
    (dict(max_num_seqs=2, max_num_batched_tokens=640), [1, 2, 4]),
    # ground truth: cap = min(1*2, 512) = 2 -> [1,2]; uniform [1]
    (dict(max_num_seqs=1, max_num_batched_tokens=320), [1, 2]),
    # cap = 6 -> [1,2,4] plus the off-grid uniform decode size S=3
    (dict(max_num_seqs=3, max_num_batched_tokens=960), [1, 2, 3, 4]),
    # cap = 10 -> [1,2,4,8] plus S=5
    (dict(max_num_seqs=5, max_num_batched_tokens=1600), [1, 2, 4, 5, 8]),
    # cap = min(2048, 512) = 512: 3 + 31 (8..248) + 17 (256..512) = 51 sizes
    (dict(max_num_seqs=1024, max_num_batched_tokens=16384), _GRID_TO_512),
    # cap = min(300, 512) = 300: grid to 288, then B=300 and uniform S=256
    (dict(max_num_seqs=256, max_num_batched_tokens=300),
     [1, 2, 4] + list(range(8, 256, 8)) + [256, 272, 288, 300]),
    # cap = min(100, 128) = 100: 8..96 step 8, then B=100; S=64 on grid
    (dict(max_num_seqs=64, max_num_batched_tokens=100), [1, 2, 4] + list(range(8, 97, 8)) + [100]),
    # K=1 (q=2): cap = 2*2*2 = 8; uniform n*2 for n in [1,2] = 2,4; no rounding of 1 up to 2
    (dict(max_num_seqs=2, max_num_batched_tokens=640, num_speculative_tokens=1), [1, 2, 4, 8]),
    # K=2 (q=3): cap = 4*3*2 = 24; grid 1,2,4,8,16,24; uniform 3,6,12
    (dict(max_num_seqs=4, max_num_batched_tokens=4096, num_speculative_tokens=2),
     [1, 2, 3, 4, 6, 8, 12, 16, 24]),
    # eager / NONE -> nothing captured
    (dict(max_num_seqs=2, max_num_batched_tokens=640, enforce_eager=True), []),
    (dict(max_num_seqs=2, max_num_batched_tokens=640, cudagraph_mode="NONE"), []),
]


# 0.34.0 records every graph's token count: the shared sizes above (its PIECEWISE graphs),
# the FULL decode graphs' n * q for the request counts n = min(ceil(t / q), S) of the shared
# sizes t with ceil(t / q) * q <= the largest, and under K >= 2 the drafter's one-token
# graphs, the request grid 1..S (vllm/config/vllm.py:2558-2666@0.34.0 `min(cdiv(s, q), max_num_seqs)`).
# Where they add nothing the table above holds for 0.34.0 too.  (knobs, 0.34.0's sizes)
SPLIT_CASES = {
    # S 4, K 2, q 3, shared [1,2,3,4,6,8,12,16,24]: requests 1,2,3,4 -> 3,6,9,12 (9 is new);
    # drafter 1,2,3,4
    8: [1, 2, 3, 4, 6, 8, 9, 12, 16, 24],
}
CAPTURE_CASES_034 = [
    # recorded on the H200 (tests/recorded/workloads/w-v0.34.0-stock-mtp2-s5.json): S 5, K 2,
    # B 256, shared [1,2,3,4,6,8,12,15,16,24]; requests 1..5 -> 3,6,9,12,15; drafter 1..5
    (dict(max_num_seqs=5, max_num_batched_tokens=256, num_speculative_tokens=2),
     [1, 2, 3, 4, 5, 6, 8, 9, 12, 15, 16, 24]),
    # S 2, K 2, B 640: shared [1,2,3,4,6,8]; requests 1,2 -> 3,6; drafter 1,2: nothing new
    (dict(max_num_seqs=2, max_num_batched_tokens=640, num_speculative_tokens=2),
     [1, 2, 3, 4, 6, 8]),
    # FULL_DECODE_ONLY: no PIECEWISE graph, so only the decode graphs' sizes: S 4, q 1,
    # shared [1,2,4,8]: requests 1,2,4 (8 -> min(8, 4))
    (dict(max_num_seqs=4, max_num_batched_tokens=1280, cudagraph_mode="FULL_DECODE_ONLY"),
     [1, 2, 4]),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", range(len(CAPTURE_CASES)))
def test_capture_sizes_table(version, case):
    """Capture sizes match the hand-computed table in every version."""
    kw, expected = CAPTURE_CASES[case]
    if version == "0.34.0":
        expected = SPLIT_CASES.get(case, expected)
    assert list(plan(Knobs(vllm_version=version, **kw)).capture_sizes) == expected


@pytest.mark.parametrize("kw,expected", CAPTURE_CASES_034)
def test_capture_sizes_of_034(kw, expected):
    """0.34.0's recorded sizes: prefill, decode-request and draft graphs' token counts."""
    assert list(plan(Knobs(vllm_version="0.34.0", **kw)).capture_sizes) == expected


# (requested cudagraph_mode, expected on an H200: both backends report UNIFORM_BATCH)
MODE_CASES = [
    (None, "FULL_AND_PIECEWISE"),  # -O2 default, breakable graphs auto-enabled
    ("FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE"),
    ("PIECEWISE", "PIECEWISE"),
    ("FULL_DECODE_ONLY", "FULL_DECODE_ONLY"),
    ("NONE", "NONE"),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("backend", ["FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"])
@pytest.mark.parametrize("requested,expected", MODE_CASES)
def test_resolved_mode_h200(version, backend, requested, expected):
    """On SM90 both sparse backends resolve per the table; enforce_eager is always NONE."""
    kw = dict(vllm_version=version, attention_backend=backend, max_num_seqs=2)
    assert plan(Knobs(cudagraph_mode=requested, **kw)).cudagraph_mode == expected
    assert plan(Knobs(enforce_eager=True, **kw)).cudagraph_mode == "NONE"


@pytest.mark.parametrize("backend", ["FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"])
def test_full_cudagraph_mode(backend):
    """FULL becomes FULL_DECODE_ONLY in 0.31.0; HiSparse refuses it from 0.32.0 (not when eager)."""
    kw = dict(attention_backend=backend, max_num_seqs=2, cudagraph_mode="FULL")
    # mixed FULL needs ALWAYS support (both backends: UNIFORM_BATCH); no attention split
    assert plan(Knobs(vllm_version="0.31.0", **kw)).cudagraph_mode == "FULL_DECODE_ONLY"
    for version in ("0.32.0", "0.33.0"):  # vllm/config/vllm.py:1816 in 0.32.0
        with pytest.raises(ValueError, match="^cudagraph_mode: HiSparse does not support"):
            plan(Knobs(vllm_version=version, **kw))
        # enforce_eager turns the mode into NONE before HiSparse's check
        assert plan(Knobs(vllm_version=version, enforce_eager=True, **kw)).cudagraph_mode == "NONE"


@pytest.mark.parametrize("max_model_len, error", [
    (1, "ZeroDivisionError: integer division or modulo by zero"),  # max_model_len - 1 = 0 tokens
    (2, None),  # a prefill of max_model_len - 1 = 1 token: the sizing steps run
])
def test_034_sizing_warmup_divides_by_max_model_len_minus_one(max_model_len, error):
    """0.34.0's sizing warmup splits prefills into max_model_len - 1 tokens each and divides by
    it (vllm/v1/worker/gpu/warmup.py:191@0.34.0 `max_prefill_len = model_runner.max_model_len - 1`):
    max_model_len 1 raises at start-up; 0.33.0 has no such step."""
    from hisparse_model.model.startup import startup_batches

    def first_error(version):
        p = plan(Knobs(vllm_version=version, max_num_seqs=2, max_model_len=max_model_len))
        return next((b.error for b in startup_batches(p) if b.error), None)

    assert first_error("0.34.0") == error
    assert first_error("0.33.0") is None
