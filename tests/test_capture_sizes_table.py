"""Hand-computed table tests for scheduler_defaults.py and capture_sizes.py.

Every expected value below is worked out by hand from the vLLM rules cited in
the modules (H200 LLM_CLASS defaults: 16384 tokens / 1024 seqs; capture cap =
min(max_num_seqs * (1 + k) * 2, 512), then min(B, cap)).
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

_PKG = pathlib.Path(__file__).resolve().parents[1] / "hisparse_model"


def _load(name: str):
    # Load by path: the package __init__ may not exist (or may import other
    # modules); these two modules are self-contained.
    spec = importlib.util.spec_from_file_location(f"_t_{name}", _PKG / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sd = _load("scheduler_defaults")
cs = _load("capture_sizes")

VERSIONS = ("0.31.0", "0.32.0", "0.33.0")


# ---------------------------------------------------------------- scheduler

# (kwargs, expected (max_num_seqs, max_num_batched_tokens))
SCHED_CASES = [
    # ground truth (live 0.31.0): B = min(2 * 320, 16384) = 640
    (dict(max_model_len=320, max_num_seqs=2), (2, 640)),
    # max_num_seqs=1: B = min(1 * 320, 16384) = 320
    (dict(max_model_len=320, max_num_seqs=1), (1, 320)),
    # nothing set: B = min(1024 * 320 = 327680, 16384) = 16384; S = min(1024, 16384)
    (dict(max_model_len=320), (1024, 16384)),
    # tiny model len: B = min(1024 * 8 = 8192, 16384) = 8192; S = min(1024, 8192)
    (dict(max_model_len=8), (1024, 8192)),
    # chunked off, short len: B = max(320, 16384) = 16384 -> min(2 * 320, 16384) = 640
    (dict(max_model_len=320, max_num_seqs=2, enable_chunked_prefill=False), (2, 640)),
    # chunked off, long len: B = max(32768, 16384) = 32768 -> min(1024*32768, 32768)
    (dict(max_model_len=32768, enable_chunked_prefill=False), (1024, 32768)),
    # chunked on, long len: B = min(1024 * 32768, 16384) = 16384
    (dict(max_model_len=32768), (1024, 16384)),
    # throughput doubles both unset knobs: B = min(2048*320, 32768) = 32768; S = 2048
    (dict(max_model_len=320, performance_mode="throughput"), (2048, 32768)),
    # throughput with S set: only B doubles: min(2 * 320, 32768) = 640
    (dict(max_model_len=320, max_num_seqs=2, performance_mode="throughput"), (2, 640)),
    # explicit B below max_model_len is fine with chunked prefill on; S = min(1024, 100)
    (dict(max_model_len=320, max_num_batched_tokens=100), (100, 100)),
    # A100 80 GB falls to the small tier: B = min(256 * 320, 8192) = 8192; S = 256
    (dict(max_model_len=320, gpu_memory_bytes=80 << 30,
          device_name="NVIDIA A100-SXM4-80GB"), (256, 8192)),
    # 40 GiB GPU: small tier 8192 / 256
    (dict(max_model_len=320, gpu_memory_bytes=40 << 30), (256, 8192)),
    # >= 160 GiB tier: 16384 / 1024
    (dict(max_model_len=320, gpu_memory_bytes=192 << 30), (1024, 16384)),
    # API server on H200: 8192 tokens; B = min(1024 * 320, 8192) = 8192
    (dict(max_model_len=320, usage_context="OPENAI_API_SERVER"), (1024, 8192)),
    # unknown context -> SchedulerConfig defaults 2048 / 128: B = min(128*320, 2048)
    (dict(max_model_len=320, usage_context=None), (128, 2048)),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kwargs,expected", SCHED_CASES)
def test_scheduler_table(version, kwargs, expected):
    """Resolved (max_num_seqs, max_num_batched_tokens) match the hand-computed table."""
    r = sd.resolve_scheduler_sizes(version, **kwargs)
    assert (r.max_num_seqs, r.max_num_batched_tokens) == expected
    assert r.max_num_scheduled_tokens == r.max_num_batched_tokens
    assert r.enable_chunked_prefill is kwargs.get("enable_chunked_prefill", True)


@pytest.mark.parametrize("version", VERSIONS)
def test_ground_truth_wrappers(version):
    """The brief's API returns B=640 for S=2, len=320 and S=1024 when S is unset."""
    assert sd.default_max_num_batched_tokens(
        version, max_num_seqs=2, max_model_len=320) == 640  # 2 * 320
    # min(1024, 16384) = 1024
    assert sd.default_max_num_seqs(version, max_model_len=320) == 1024
    assert sd.batch_defaults(version) == (16384, 1024)  # H200 ~140.4 GiB tier
    assert sd.default_enable_chunked_prefill(version) is True


# (kwargs, substring that must name the knob)
SCHED_ERRORS = [
    # 100 < 320 with chunked prefill disabled
    (dict(max_model_len=320, max_num_batched_tokens=100,
          enable_chunked_prefill=False), "max_num_batched_tokens"),
    # B = 100 < max_num_seqs = 200
    (dict(max_model_len=320, max_num_seqs=200, max_num_batched_tokens=100),
     "max_num_batched_tokens"),
    # defaulted B = min(20000 * 320, 16384) = 16384 < 20000 seqs
    (dict(max_model_len=320, max_num_seqs=20000), "max_num_batched_tokens"),
    (dict(max_model_len=320, max_num_seqs=0), "max_num_seqs"),
    (dict(max_model_len=0), "max_model_len"),
    (dict(max_model_len=320, max_num_batched_tokens=0), "max_num_batched_tokens"),
    (dict(max_model_len=320, max_num_seqs=4, max_num_active_seqs=5),
     "max_num_active_seqs"),
    (dict(max_model_len=320, num_speculative_tokens=-1), "num_speculative_tokens"),
    (dict(max_model_len=320, performance_mode="fast"), "performance_mode"),
    (dict(max_model_len=320, usage_context="BOGUS"), "usage_context"),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kwargs,knob", SCHED_ERRORS)
def test_scheduler_rejections(version, kwargs, knob):
    """Combinations vLLM rejects raise ValueError naming the knob."""
    with pytest.raises(ValueError, match=knob):
        sd.resolve_scheduler_sizes(version, **kwargs)


def test_spec_decode_slot_check_differs_by_version():
    """MTP k=3 with B=3: 0.31/0.32 need B > 0 slots, 0.33 needs B > 3 lookahead."""
    kw = dict(max_model_len=320, max_num_seqs=1, max_num_batched_tokens=3,
              num_speculative_tokens=3)
    assert sd.resolve_scheduler_sizes("0.31.0", **kw).max_num_batched_tokens == 3
    assert sd.resolve_scheduler_sizes("0.32.0", **kw).max_num_batched_tokens == 3
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        sd.resolve_scheduler_sizes("0.33.0", **kw)
    # B = 4 > 3 passes everywhere; spec decode never changes the default B:
    # min(2 * 320, 16384) = 640 with or without k.
    for v in VERSIONS:
        assert sd.resolve_scheduler_sizes(
            v, **{**kw, "max_num_batched_tokens": 4}).max_num_batched_tokens == 4
        assert sd.default_max_num_batched_tokens(
            v, max_num_seqs=2, max_model_len=320, num_speculative_tokens=3) == 640


@pytest.mark.parametrize("bad", ["0.30.0", "0.31", None, 31])
def test_bad_version(bad):
    """Unknown versions raise ValueError naming vllm_version in every entry point."""
    for call in (
        lambda: sd.resolve_scheduler_sizes(bad, max_model_len=320),
        lambda: sd.batch_defaults(bad),
        lambda: cs.default_cudagraph_capture_sizes(
            bad, max_num_seqs=2, max_num_batched_tokens=640),
        lambda: cs.compile_ranges(bad, max_num_batched_tokens=640),
        lambda: cs.compile_warmup_sizes(
            bad, max_num_batched_tokens=640, cudagraph_capture_sizes=[1]),
        lambda: cs.resolved_cudagraph_mode(
            bad, "FLASHMLA_SPARSE", enforce_eager=False),
    ):
        with pytest.raises(ValueError, match="vllm_version"):
            call()


# ------------------------------------------------------------ capture sizes

_GRID_TO_512 = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))

# (kwargs, expected sizes)
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
    (dict(max_num_seqs=64, max_num_batched_tokens=100),
     [1, 2, 4] + list(range(8, 97, 8)) + [100]),
    # k=1 (q=2): cap = 2*2*2 = 8; uniform n*2 for n in [1,2] = 2,4; no rounding
    # of 1 up to 2 (that is V1-only)
    (dict(max_num_seqs=2, max_num_batched_tokens=640, num_speculative_tokens=1),
     [1, 2, 4, 8]),
    # k=2 (q=3): cap = 4*3*2 = 24; grid 1,2,4,8,16,24; uniform 3,6,12
    (dict(max_num_seqs=4, max_num_batched_tokens=4096, num_speculative_tokens=2),
     [1, 2, 3, 4, 6, 8, 12, 16, 24]),
    # interactivity: cap = 32 -> 1..32 (stride-8 entries are duplicates)
    (dict(max_num_seqs=16, max_num_batched_tokens=4096,
          performance_mode="interactivity"), list(range(1, 33))),
    # SM100 family: platform cap 1024 -> grid continues 528..1024 step 16
    (dict(max_num_seqs=1024, max_num_batched_tokens=16384, device_capability=(10, 0)),
     _GRID_TO_512 + list(range(528, 1025, 16))),
    # user list: dedup {1,4,1000}, drop 1000 > B=640
    (dict(max_num_seqs=2, max_num_batched_tokens=640,
          cudagraph_capture_sizes=[4, 1, 1000, 4]), [1, 4]),
    # user max 20 (no list): cap = min(640, 20) = 20 -> 1,2,4,8,16; no uniform sizes
    (dict(max_num_seqs=2, max_num_batched_tokens=640, max_cudagraph_capture_size=20),
     [1, 2, 4, 8, 16]),
    # eager / NONE -> nothing captured
    (dict(max_num_seqs=2, max_num_batched_tokens=640, enforce_eager=True), []),
    (dict(max_num_seqs=2, max_num_batched_tokens=640, cudagraph_mode="NONE"), []),
    # -O0 defaults cudagraph_mode to NONE
    (dict(max_num_seqs=2, max_num_batched_tokens=640, optimization_level=0), []),
    # PIECEWISE with breakable graphs off and -O0 (no VLLM_COMPILE) drops to NONE
    (dict(max_num_seqs=2, max_num_batched_tokens=640, cudagraph_mode="PIECEWISE",
          optimization_level=0, breakable_cudagraph=False), []),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kwargs,expected", CAPTURE_CASES)
def test_capture_sizes_table(version, kwargs, expected):
    """Capture sizes match the table and the max is the last size (0 when empty)."""
    assert cs.default_cudagraph_capture_sizes(version, **kwargs) == expected
    assert cs.max_cudagraph_capture_size(version, **kwargs) == (
        expected[-1] if expected else 0)


CAPTURE_ERRORS = [
    (dict(max_num_seqs=0, max_num_batched_tokens=640), "max_num_seqs"),
    (dict(max_num_seqs=2, max_num_batched_tokens=0), "max_num_batched_tokens"),
    # scheduler already rejects B=1 < S=2
    (dict(max_num_seqs=2, max_num_batched_tokens=1), "max_num_batched_tokens"),
    (dict(max_num_seqs=2, max_num_batched_tokens=640, num_speculative_tokens=-1),
     "num_speculative_tokens"),
    (dict(max_num_seqs=2, max_num_batched_tokens=640, cudagraph_mode="SOMETIMES"),
     "cudagraph_mode"),
    # both user knobs, inconsistent: list max 4 != 8
    (dict(max_num_seqs=2, max_num_batched_tokens=640, cudagraph_capture_sizes=[1, 4],
          max_cudagraph_capture_size=8), "max_cudagraph_capture_size"),
    (dict(max_num_seqs=2, max_num_batched_tokens=640, max_cudagraph_capture_size=0),
     "max_cudagraph_capture_size"),
    (dict(max_num_seqs=2, max_num_batched_tokens=640, cudagraph_capture_sizes=[]),
     "cudagraph_capture_sizes"),
]


@pytest.mark.parametrize("kwargs,knob", CAPTURE_ERRORS)
def test_capture_rejections(kwargs, knob):
    """Invalid capture-size inputs raise ValueError naming the knob."""
    with pytest.raises(ValueError, match=knob):
        cs.default_cudagraph_capture_sizes("0.31.0", **kwargs)


def test_result_is_a_fresh_list():
    """Mutating a returned list must not poison the memoized result."""
    a = cs.default_cudagraph_capture_sizes("0.31.0", max_num_seqs=2,
                                           max_num_batched_tokens=640)
    a.append(999)
    assert cs.default_cudagraph_capture_sizes(
        "0.31.0", max_num_seqs=2, max_num_batched_tokens=640) == [1, 2, 4]


# ---------------------------------------------------- compile ranges/warmup

@pytest.mark.parametrize("version", VERSIONS)
def test_compile_ranges(version):
    """Ranges are (prev+1, end) over {B} plus user endpoints strictly in (1, B)."""
    assert cs.compile_ranges(version, max_num_batched_tokens=640) == [(1, 640)]
    # endpoints 1 (not > 1) and 700 (not < 640) are ignored -> {100, 640}
    assert cs.compile_ranges(version, max_num_batched_tokens=640,
                             compile_ranges_endpoints=[1, 100, 700]) == [
        (1, 100), (101, 640)]
    with pytest.raises(ValueError, match="compile_ranges_endpoints"):
        cs.compile_ranges(version, max_num_batched_tokens=640,
                          compile_ranges_endpoints=[0])


@pytest.mark.parametrize("version", VERSIONS)
def test_compile_warmup_sizes(version):
    """Warmup adds the end of every compile range that holds no capture/compile size."""
    kw = dict(max_num_batched_tokens=640, cudagraph_capture_sizes=[1, 2, 4])
    # DSV3.2 is never torch-compiled on CUDA -> no warmup runs at all
    assert cs.compile_warmup_sizes(version, **kw) == []
    # compiled, one range (1, 640) contains 1 -> nothing extra
    assert cs.compile_warmup_sizes(version, model_is_compiled=True, **kw) == []
    # ranges (1, 100), (101, 640): the second holds no size -> its end 640
    assert cs.compile_warmup_sizes(version, model_is_compiled=True,
                                   compile_ranges_endpoints=[100], **kw) == [640]
    # no cudagraphs: nothing covers (1, 640) -> 640
    assert cs.compile_warmup_sizes(version, model_is_compiled=True,
                                   max_num_batched_tokens=640,
                                   cudagraph_capture_sizes=[],
                                   cudagraph_mode="NONE") == [640]
    # compile_sizes [8, 2]: 2 is a capture size and is dropped -> [8]
    assert cs.compile_warmup_sizes(version, model_is_compiled=True,
                                   compile_sizes=[8, 2], **kw) == [8]


# ------------------------------------------------------------ cudagraph mode

# (requested, breakable_cudagraph, expected on H200 for UNIFORM_BATCH backends)
MODE_CASES = [
    (None, None, "FULL_AND_PIECEWISE"),  # O2 default, breakable auto-enabled
    (None, False, "FULL_DECODE_ONLY"),  # no compiled submodule -> drop piecewise
    ("FULL_AND_PIECEWISE", None, "FULL_AND_PIECEWISE"),
    ("PIECEWISE", None, "PIECEWISE"),
    ("PIECEWISE", False, "NONE"),
    ("FULL", None, "FULL_DECODE_ONLY"),  # mixed FULL needs ALWAYS; no attn split
    ("FULL", False, "FULL_DECODE_ONLY"),  # -> FULL_AND_PIECEWISE -> drop piecewise
    ("FULL_DECODE_ONLY", None, "FULL_DECODE_ONLY"),
    ("NONE", None, "NONE"),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "backend",
    ["FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM90"],
)
@pytest.mark.parametrize("requested,breakable,expected", MODE_CASES)
def test_resolved_mode_h200(version, backend, requested, breakable, expected):
    """On SM90 every UNIFORM_BATCH sparse backend resolves per the table."""
    assert cs.resolved_cudagraph_mode(
        version, backend, enforce_eager=False, requested=requested,
        breakable_cudagraph=breakable) == expected
    assert cs.resolved_cudagraph_mode(
        version, backend, enforce_eager=True, requested=requested,
        breakable_cudagraph=breakable) == "NONE"


def test_flashinfer_mla_sparse_is_sm100_only():
    """FLASHINFER_MLA_SPARSE: rejected on SM90; on SM100 FULL survives only in 0.31.0."""
    for v in VERSIONS:
        with pytest.raises(ValueError, match="attention_backend"):
            cs.resolved_cudagraph_mode(v, "FLASHINFER_MLA_SPARSE", enforce_eager=False)
        assert cs.resolved_cudagraph_mode(
            v, "FLASHINFER_MLA_SPARSE", enforce_eager=False,
            device_capability=(10, 0)) == "FULL_AND_PIECEWISE"
    # 0.31.0 builder reports ALWAYS; 0.32.0/0.33.0 UNIFORM_BATCH
    assert cs.resolved_cudagraph_mode(
        "0.31.0", "FLASHINFER_MLA_SPARSE", enforce_eager=False, requested="FULL",
        device_capability=(10, 0)) == "FULL"
    for v in ("0.32.0", "0.33.0"):
        assert cs.resolved_cudagraph_mode(
            v, "FLASHINFER_MLA_SPARSE", enforce_eager=False, requested="FULL",
            device_capability=(10, 0)) == "FULL_DECODE_ONLY"
    with pytest.raises(ValueError, match="attention_backend"):
        cs.resolved_cudagraph_mode("0.31.0", "TRITON_MLA", enforce_eager=False)
