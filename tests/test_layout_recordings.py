"""Real engine start-ups of a 61-layer, index_topk 2,048 DeepSeek-V3.2 (hidden size shrunk to
fit one GPU) on vLLM 0.31.0 and 0.34.0, against the model's layout.

Invariant: for every start-up the H100 recorded (``scripts/gpu_layout_probe.sh``, committed
under ``tests/recorded/layout/``), the model lays the KV cache out as vLLM did (host blocks,
the host block's stride, the worker's KV-cache groups, each hot group's layers and blocks a
request) and refuses exactly what vLLM refused, in vLLM's words.

These are recordings of real runs, read on CPU; ``scripts/gpu_layout_probe.sh`` makes more.
"""

import json
import pathlib

import pytest

from hisparse_model.model.host_pool import blocks_needed, host_blocks, host_refusal
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.kv_layout import buffer_refusal, layout
from hisparse_model.model.served_model import DEEPSEEK_V32, canonical_overrides

LAYOUT = pathlib.Path(__file__).parent / "recorded" / "layout"
RUNS = sorted(p for p in LAYOUT.glob("*/*.json")
              if not p.name.endswith((".case.json", "provenance.json")))


def knobs_of(case: dict) -> Knobs:
    """The knob set the probe started: DeepSeek-V3.2's config with the case's overrides."""
    quantized = case.get("kv_cache_dtype", "auto") != "auto"
    return Knobs(model=DEEPSEEK_V32, hf_overrides=canonical_overrides(case["hf_overrides"]),
                 num_speculative_tokens=case.get("num_speculative_tokens", 0),
                 kv_cache_dtype=case.get("kv_cache_dtype", "auto"),
                 attention_backend=case.get("attention_backend") or (
                     "FLASHMLA_SPARSE" if quantized else "FLASH_ATTN_MLA_SPARSE"),
                 max_model_len=case["max_model_len"], max_num_seqs=4, enforce_eager=True,
                 host_pool_gib=case["host_pool_gib"])


def test_the_recordings_are_there_with_provenance():
    """Both versions, six start-ups each, every one with its case and the run's provenance."""
    by_version = {}
    for run in RUNS:
        by_version.setdefault(run.parent.name, []).append(run.stem)
        prov = json.loads((run.parent / "provenance.json").read_text())
        assert {"vllm", "torch", "gpu", "date", "command", "env", "patches"} <= set(prov)
        assert "H100" in prov["gpu"] and json.loads(run.read_text())["vllm_version"] == prov["vllm"]
    assert sorted(by_version) == ["v0.31.0-h100", "v0.34.0-h100"]
    assert all(len(names) == 6 for names in by_version.values())


def _laid_out():
    for run in RUNS:
        rec = json.loads(run.read_text())
        if "host_blocks" in rec:
            yield pytest.param(rec, id=f"{run.parent.name}/{run.stem}")


@pytest.mark.parametrize("rec", list(_laid_out()))
def test_the_model_lays_out_what_vllm_laid_out(rec):
    """Host blocks and stride, the group count, each hot group's layers and blocks a request.
    (61 layers bf16: stride 64 x 61 x 1,152 = 4,497,408; indexer page 61 x 64 x 132 = 515,328
    holds 6 pages of 73,728, so 11 hot groups, 24 groups in all; with MTP 62 layers, 7 a group,
    9 groups; fp8_ds_mla: 656-byte rows, 12 a group, 6 groups; hot blocks cdiv((K + 2) x 2048,
    64) = 64, or 96 with K = 1)"""
    knobs = knobs_of(rec["case"])
    lay = layout(knobs)
    assert host_blocks(knobs.host_pool_gib, lay) == rec["host_blocks"]
    assert lay.host_block_bytes == rec["host_block_stride"]
    assert lay.worker_groups == len(rec["groups"])
    hot = [g for g in rec["groups"] if g["kind"] == "HiSparseHotSpec"]
    resident = [g for g in rec["groups"] if g["kind"] == "HiSparseResidentSpec"]
    assert len(hot) == len(resident) == lay.hot_groups
    per = lay.layers_per_hot_group
    want = [per] * (lay.attention_layers // per) + ([lay.attention_layers % per]
                                                    if lay.attention_layers % per else [])
    assert [g["layers"] for g in hot] == want
    assert {g["blocks_per_request"] for g in hot} == {lay.hot_blocks}
    assert {g["page_size_bytes"] for g in hot} == {lay.page_bytes}
    source = rec["groups"][0]
    assert (source["layers"], source["page_size_bytes"]) == (lay.attention_layers,
                                                             lay.source_page_bytes)
    assert rec["groups"][1]["page_size_bytes"] == lay.indexer_page_bytes
    assert host_refusal(knobs) is None and buffer_refusal(knobs) is None


def _refused():
    for run in RUNS:
        rec = json.loads(run.read_text())
        if "refused" in rec and rec["refused"][0].startswith("ValueError: HiSparse"):
            yield pytest.param(rec, id=f"{run.parent.name}/{run.stem}")


@pytest.mark.parametrize("rec", list(_refused()))
def test_the_model_refuses_what_vllm_refused(rec):
    """A pool a block short of cdiv(8192, 64) + 2 = 130 (0.54 GiB: 128 blocks of 4,497,408),
    and K = 15 ((15 + 2) x 2,048 = 34,816 hot rows > 32,768): refused in vLLM's words."""
    knobs = knobs_of(rec["case"])
    said = rec["refused"][0].removeprefix("ValueError: ")
    ours = buffer_refusal(knobs) or host_refusal(knobs)
    assert ours is not None and said in ours
    if "host pool" in said:
        assert host_blocks(knobs.host_pool_gib, layout(knobs)) < blocks_needed(
            knobs.max_model_len)


def test_the_start_up_that_failed_later_logged_the_models_layout():
    """0.34.0 with fp8_ds_mla laid the KV cache out, then died (a cuBLAS error in a bf16 GEMM
    of the shrunk model, after sizing), so its recording has no layout of its own: its log
    does, and it is the model's (134 blocks of 2,561,024 bytes in 0.32 GiB; 14 groups)."""
    import re

    rec = json.loads((LAYOUT / "v0.34.0-h100" / "l61-t2048-k0-fp8.json").read_text())
    assert rec["refused"][0].startswith("RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED")
    log = (LAYOUT / "v0.34.0-h100" / "l61-t2048-k0-fp8.log").read_text()
    assert "Using fp8_ds_mla KV cache format for FLASHMLA_SPARSE backend." in log
    knobs = knobs_of(rec["case"])
    blocks = int(re.search(r"HiSparse HMA: [0-9.]+ GiB host source \((\d+) blocks\)", log)[1])
    groups = re.search(r"kv cache group sizes \(([0-9, ]+)\)", log)[1].split(",")
    assert blocks == host_blocks(knobs.host_pool_gib, layout(knobs)) == 134
    assert len(groups) == layout(knobs).worker_groups == 14


def test_check_reads_the_gpu_pool_the_start_up_logged():
    """check --from-log says the GPU pool the log's last layout line reports and how many
    max_model_len requests it holds: 40,804 blocks, a request of 8,192 tokens claiming
    (1 + 11) x 128 + 11 x 64 = 2,240 (the indexer and 11 resident groups' pages, 11 hot groups'
    fixed 64), so 40,803 // 2,240 = 18 at once; the pool must hold 128 + 11 x (128 + 64) + 1 =
    2,241 to start (B 16,384: a resident group reserves min(2B, L) = 8,192 tokens)."""
    from hisparse_model.inputs.startup_log import from_log

    launch = from_log(str(LAYOUT / "v0.31.0-h100" / "l61-t2048-k0-bf16.log"))
    note = next(n for n in launch.notes if n.startswith("GPU KV pool (line "))
    assert note.endswith("40804 blocks: 18 requests of max_model_len (8192 tokens, up to 2240 "
                         "blocks each) at once; 2241 to start")
