"""The model's KV-cache layout against vLLM's own planner on CPU, for the real DeepSeek-V3.2 and
the fix PR's tiny one, every covered release.

Invariant: for every config of the table (layers 8 and 61, MTP off and on, index_topk 128 and
2,048, bf16 and fp8 rows, TP 1 and 8, max_model_len 8,192 to 163,840), vLLM's planner
(``crosscheck/scheduler_build.plan_kv_cache``: vLLM's ``get_kv_cache_configs`` and HiSparse's
``_lay_out_hisparse_groups`` / ``create_hisparse_layout`` over the layer specs DeepSeek-V3.2's
layers make) lays out the host blocks, the stride, the groups and each hot group's blocks the
model says; it refuses a host pool one block short of ``cdiv(L, 64) + 2`` in the words the
model quotes, and starts at it; and it admits a GPU pool of the model's admission blocks + the
null block and refuses one block less.

The worker's groups name no hot layers here (the stand-in specs are the layers' own; a real
worker adds the derived hot and resident specs), so the layers of each hot group are checked
on the H100's start-ups (``tests/test_layout_recordings.py``); their number is checked here.
The JIT warmup's request cap is vLLM's own warmup code run over that planner's KV-cache
config (``startup_driver``, with the config's keys): the batches it runs, the cap binding in
three of the cases, are the model's.  What the planner does not run: the int16 hot-buffer
refusal, raised as the attention layers are built (``tests/test_layout_recordings.py``: the
H100 raised it).
"""

import pytest

from hisparse_model.model.host_pool import blocks_needed, host_refusal
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.kv_layout import layout
from hisparse_model.model.kv_pool import admission_blocks, admission_refusal
from hisparse_model.model.reproduction import TINY_OVERRIDES
from hisparse_model.model.served_model import DEEPSEEK_V32, REPRODUCTION, canonical_overrides
from hisparse_model.schedule.scheduler_config import SchedulerConfig

pytestmark = pytest.mark.vllm_cpu
DRIVER = "hisparse_model.crosscheck.scheduler_driver:layouts"
VERSIONS = ("0.31.0", "0.32.0", "0.33.0", "0.34.0")
REAL_61 = None  # DeepSeek-V3.2's own config
TINY_2048 = {**TINY_OVERRIDES, "index_topk": 2048}
REAL_128 = {"index_topk": 128}

# (model overrides, K, kv_cache_dtype, TP, max_model_len, B): 26 configs
CONFIGS = [
    # the real model, bf16: 61 layers, 6 a hot group (11 groups); stride 4,497,408
    (REAL_61, 0, "auto", 1, 163_840, 8192),
    (REAL_61, 0, "auto", 1, 8_192, 2048),
    (REAL_61, 0, "auto", 8, 163_840, 8192),   # 4,497,408 = 1,098 OS pages: no rounding
    (REAL_61, 1, "auto", 1, 163_840, 8192),   # 62 layers, 7 a group (9 groups)
    (REAL_61, 1, "auto", 8, 32_768, 8192),    # 4,571,136 = 1,116 pages exactly
    (REAL_61, 2, "auto", 1, 65_536, 4096),
    # fp8_ds_mla: 656-byte rows, 12 a group (6 groups); stride 2,561,024
    (REAL_61, 0, "fp8", 1, 163_840, 8192),
    (REAL_61, 0, "fp8", 8, 163_840, 8192),    # 2,561,024 -> 626 pages = 2,564,096
    (REAL_61, 1, "fp8", 1, 16_384, 2048),
    (REAL_61, 1, "fp8", 8, 163_840, 8192),    # 62 x 41,984 = 2,603,008 -> 2,605,056
    (REAL_61, 0, "fp8_ds_mla", 1, 131_072, 8192),
    # index_topk 128 with 61 layers
    (REAL_128, 0, "auto", 1, 163_840, 8192),
    (REAL_128, 1, "fp8", 8, 65_536, 8192),
    # the fix PR's tiny model: 8 layers, one a group
    (REPRODUCTION, 0, "auto", 1, 320, 640),
    (REPRODUCTION, 0, "auto", 1, 163_840, 8192),
    (REPRODUCTION, 1, "auto", 1, 8_192, 2048),
    (REPRODUCTION, 0, "fp8", 1, 8_192, 2048),
    (REPRODUCTION, 1, "fp8", 8, 65_536, 8192),  # 9 x 41,984 = 377,856 -> 93 pages = 380,928
    (REPRODUCTION, 0, "auto", 8, 163_840, 8192),
    (REPRODUCTION, 3, "auto", 1, 32_768, 8192),
    # 8 layers with index_topk 2,048 (the H100's l8 start-up)
    (TINY_2048, 0, "auto", 1, 8_192, 2048),
    (TINY_2048, 1, "auto", 1, 4_096, 2048),
    (TINY_2048, 1, "fp8", 8, 163_840, 8192),
    (TINY_2048, 2, "auto", 8, 16_384, 4096),
    (TINY_2048, 0, "fp8_ds_mla", 1, 100_000, 8192),
    (REAL_61, 3, "auto", 1, 100_000, 8192),
]


def knobs_for(overrides, k, dtype, tp, length, b, pool=1.0, gpu=None) -> Knobs:
    model, extra = (REPRODUCTION, None) if overrides == REPRODUCTION else (
        DEEPSEEK_V32, canonical_overrides(overrides))
    return Knobs(model=model, hf_overrides=extra, num_speculative_tokens=k, kv_cache_dtype=dtype,
                 attention_backend="FLASHMLA_SPARSE" if dtype != "auto"
                 else "FLASH_ATTN_MLA_SPARSE", tensor_parallel_size=tp, max_model_len=length,
                 max_num_batched_tokens=b, max_num_seqs=4, host_pool_gib=pool,
                 num_gpu_blocks_override=gpu)


def planner_config(knobs: Knobs, version: str, pool: float | None, gpu: int) -> dict:
    """The planner's inputs: the scheduler's, the pool, and the model's config keys (its
    inputs, not the model's results)."""
    from hisparse_model.model.served_model import model_of

    m = model_of(knobs)
    return {**SchedulerConfig(
        max_num_seqs=knobs.max_num_seqs, max_num_batched_tokens=knobs.max_num_batched_tokens,
        max_model_len=knobs.max_model_len, num_speculative_tokens=knobs.num_speculative_tokens,
        enable_prefix_caching=True, num_gpu_blocks=gpu, async_scheduling=True,
        vllm_version=version).__dict__,
        "host_pool_gib": pool, "tensor_parallel_size": knobs.tensor_parallel_size,
        "model": {"layers": m.num_hidden_layers, "mtp_layers": m.num_nextn_predict_layers,
                  "index_topk": m.index_topk, "kv_lora_rank": m.kv_lora_rank,
                  "qk_rope_head_dim": m.qk_rope_head_dim, "index_head_dim": m.index_head_dim,
                  "kv_cache_dtype": knobs.kv_cache_dtype}}


def test_the_table_covers_what_it_says():
    """At least 24 configs: both layer counts, K off and on, both top-ks, both row formats,
    TP 1 and 8, max_model_len from 8,192 to 163,840."""
    assert len(CONFIGS) >= 24
    lays = [layout(knobs_for(*c)) for c in CONFIGS]
    assert {lay.model.num_hidden_layers for lay in lays} == {8, 61}
    assert {lay.model.index_topk for lay in lays} == {128, 2048}
    assert {lay.cache_format for lay in lays} == {"bf16", "fp8_ds_mla"}
    assert {c[1] > 0 for c in CONFIGS} == {True, False} and {c[3] for c in CONFIGS} == {1, 8}
    assert {c[4] for c in CONFIGS} >= {8_192, 163_840}


def _cases(config) -> list[tuple[str, Knobs, int]]:
    """(what, knobs, GPU pool) of one config: the host pool at the edge, a block short and
    seven above (in blocks of the model's stride: a power of two divides them exactly), and
    the GPU pool one block short of the admission edge."""
    base = knobs_for(*config)
    lay = layout(base)
    need = blocks_needed(base.max_model_len)
    gpu = admission_blocks(base.max_model_len, base.max_num_batched_tokens, lay) + 1
    pools = [(f"host {blocks}", blocks * lay.host_block_bytes / 2**30, gpu)
             for blocks in (need, need - 1, need + 7)]
    pools.append(("gpu short", (need + 7) * lay.host_block_bytes / 2**30, gpu - 1))
    return [(what, base.replace(host_pool_gib=pool, num_gpu_blocks_override=blocks), blocks)
            for what, pool, blocks in pools]


_PLANNED: dict = {}


def planned(vllm_servers, version: str) -> list[list[dict]]:
    """vLLM's planner on every case of every config, one call per version (cached)."""
    if version not in _PLANNED:
        cases = [_cases(c) for c in CONFIGS]
        configs = [planner_config(k, version, k.host_pool_gib, gpu)
                   for per in cases for _, k, gpu in per]
        got = vllm_servers.call(version, DRIVER, {"configs": configs}, timeout=600)["results"]
        _PLANNED[version] = [got[i:i + 4] for i in range(0, len(got), 4)]
    return _PLANNED[version]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("index", range(len(CONFIGS)), ids=[
    f"{'tiny' if c[0] == REPRODUCTION else 'l8-t2048' if c[0] == TINY_2048 else 't128' if c[0] == REAL_128 else 'real'}"
    f"-k{c[1]}-{c[2]}-tp{c[3]}-L{c[4]}" for c in CONFIGS])
def test_vllms_planner_lays_out_and_refuses_what_the_model_says(vllm_servers, version, index):
    """Host blocks at the edge (the model's smallest pool, in bytes of its stride) and one
    block short; the groups and hot blocks; the GPU pool's admission edge."""
    results = planned(vllm_servers, version)[index]
    for (what, knobs, gpu), got in zip(_cases(CONFIGS[index]), results):
        lay = layout(knobs)
        if what == "gpu short":  # the GPU pool one block short of the admission edge
            assert "refused" in got and admission_refusal(knobs, knobs.max_num_batched_tokens)
            continue
        blocks = int(what.split()[1])
        ours = host_refusal(knobs)
        if blocks < blocks_needed(knobs.max_model_len):
            assert ours is not None and got["refused"] in ours, (what, got)
            continue
        assert ours is None, ours
        assert got["host_blocks"] == blocks and got["stride"] == lay.host_block_bytes
        assert len(got["groups"]) == lay.worker_groups
        hot = [g for g in got["groups"] if g["kind"] == "HiSparseHotSpec"]
        assert len(hot) == lay.hot_groups
        assert {g["blocks_per_request"] for g in hot} == {lay.hot_blocks}
        assert got["gpu_blocks"] == gpu


# (model overrides, K, max_model_len, S, B, pool blocks): the JIT warmup under a set pool of
# DeepSeek-V3.2's own layout, where its request cap binds: each warmup request claims
# worker_groups x cdiv(tokens, 64) blocks (24 groups in bf16, 20 with MTP, 14 in fp8)
WARMUP = [
    (REAL_61, 0, 8192, 64, 8192, 6200),    # 24 groups: (6200 - 1) // 24 = 258 >= 64: no cap
    # the cap binds: (2300 - 1) // 24 = 95 < min(256, 8192 // 2); 2,241 blocks start it
    # (128 + 11 x (128 + 64) + 1)
    (REAL_61, 0, 8192, 256, 8192, 2300),
    # K = 1: 20 groups, a request cdiv(2 + 5 x 2 + 1, 64) = 1 block a group: (2500 - 1) // 20
    # = 124 < min(256, 8192 // 3); 128 + 9 x (128 + 96) + 1 = 2,145 start it
    (REAL_61, 1, 8192, 256, 8192, 2500),
    # K = 2: 62 layers, 9 groups, hot cdiv(4 x 2048, 64) = 128: 64 + 9 x (64 + 128) + 1 = 1793
    # to start; 1500 is refused by both, 2000 starts
    (REAL_61, 2, 4096, 16, 4096, 1500),
    (REAL_61, 2, 4096, 16, 4096, 2000),
    # 8 + 1 layers of index_topk 2,048, one a group (9 x 8,448 < 2 x 73,728): 20 groups;
    # 64 + 9 x (64 + 96) + 1 = 1,505 start it; (1600 - 1) // 20 = 79 < 128: capped
    (TINY_2048, 1, 4096, 128, 4096, 1600),
]
STARTUP_DRIVER = "hisparse_model.crosscheck.startup_driver:run"


@pytest.mark.parametrize("version", ("0.31.0", "0.34.0"))
def test_the_jit_warmup_runs_what_the_model_says_under_the_real_layout(vllm_servers, version):
    """vLLM's own JIT warmup, sized from its planner's KV-cache config of the served model's
    layout (startup_driver with the config's keys), runs the start-up batches the model
    predicts: its request count, capped where the pool binds, and every batch after it."""
    import sys

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_startup_crosscheck import COMPARED, _upto_error

    from hisparse_model import predict
    from hisparse_model.model.served_model import model_of

    payload, ours = [], []
    for overrides, k, length, s, b, pool in WARMUP:
        knobs = knobs_for(overrides, k, "auto", 1, length, b, gpu=pool).replace(max_num_seqs=s)
        m = model_of(knobs)
        payload.append({"max_num_seqs": s, "max_model_len": length, "max_num_batched_tokens": b,
                        "num_speculative_tokens": k, "attention_backend": knobs.attention_backend,
                        "enforce_eager": False, "cudagraph_mode": None, "routing": "stock",
                        "num_gpu_blocks_override": pool, "model_geometry": {
                            "layers": m.num_hidden_layers, "mtp_layers": m.num_nextn_predict_layers,
                            "index_topk": m.index_topk, "kv_lora_rank": m.kv_lora_rank,
                            "qk_rope_head_dim": m.qk_rope_head_dim,
                            "index_head_dim": m.index_head_dim, "kv_cache_dtype": "auto"}})
        ours.append(knobs.replace(vllm_version=version))
    out = vllm_servers.call(version, STARTUP_DRIVER, payload, timeout=600)
    capped = 0
    for knobs, res in zip(ours, out["results"]):
        assert "driver_error" not in res, res
        try:
            predict(knobs)
        except ValueError as exc:  # the pool cannot hold one request: both refuse it
            assert str(exc).startswith("num_gpu_blocks_override: ")
            assert res.get("rejected") and res["stage"] == "kv_cache", res
            continue
        assert not res.get("rejected"), res
        assert res["kv_cache"]["groups"] == layout(knobs).worker_groups
        got = _upto_error(res["batches"])
        pred = predict(knobs)
        want = _upto_error([{f: getattr(b, f) for f in COMPARED} for b in pred.startup])
        assert [{f: g.get(f) for f in COMPARED} for g in got] == want, knobs
        prefill = next(b for b in pred.startup if b.phase == "jit_warmup")
        q = pred.sizes.max_decode_query_len
        capped += prefill.num_reqs < min(knobs.max_num_seqs,
                                         pred.sizes.max_num_batched_tokens // (q + 1))
    assert capped >= 3  # the pool binds the warmup: the agreement covers the cap
