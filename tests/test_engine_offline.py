"""The engine module's pure parts: engine arguments, atomic recordings, sweeps (no GPU needed)."""

import json
import os

import pytest

from hisparse_model.engine import llm_args
from hisparse_model.model.knobs import Knobs
from hisparse_model.recorded.recordings import write_json_atomic


def test_llm_kwargs_match_the_pr():
    """The PR's reproduction: block 64, util 0.3, no prefix caching, HiSparse connector, 1 GiB pool."""
    kw = llm_args.llm_kwargs(Knobs(max_num_seqs=2, enable_prefix_caching=False), "/m")
    assert kw["max_model_len"] == 320 and kw["block_size"] == 64
    assert kw["gpu_memory_utilization"] == 0.3 and kw["enable_prefix_caching"] is False
    assert kw["kv_transfer_config"] == {
        "kv_connector": "HiSparseConnector", "kv_role": "kv_both",
        "kv_connector_extra_config": {"host_pool_gib": 1}}
    assert "max_num_batched_tokens" not in kw  # left to vLLM's default, like the PR
    assert "backend" not in kw["attention_config"]  # vLLM picks, as in the PR


def test_llm_kwargs_knobs():
    """Speculative decoding, eager mode, B and backend reach the engine arguments."""
    kw = llm_args.llm_kwargs(Knobs(max_num_seqs=2, max_num_batched_tokens=64,
                                   num_speculative_tokens=2, enforce_eager=True,
                                   attention_backend="FLASHMLA_SPARSE"), "/m")
    assert kw["speculative_config"]["method"] == "mtp"
    assert kw["speculative_config"]["num_speculative_tokens"] == 2
    assert kw["enforce_eager"] and kw["max_num_batched_tokens"] == 64
    assert kw["attention_config"]["backend"] == "FLASHMLA_SPARSE"


def test_prefix_caching_knob_reaches_the_engine():
    """vLLM's default (on) unless the knob turns it off, as the PR's reproduction does."""
    assert llm_args.llm_kwargs(Knobs(max_num_seqs=2), "/m")["enable_prefix_caching"] is True


def test_shrink_applies_pr_overrides():
    """The callable override applies exactly the PR's hf_overrides (and reaches the MTP drafter)."""

    class Cfg(dict):
        def update(self, other):
            super().update(other)

    cfg = llm_args.shrink_hf_config(Cfg(hidden_size=7168))
    assert cfg["hidden_size"] == 256 and cfg["index_topk"] == 128 and cfg["num_hidden_layers"] == 8


def test_shipped_config_is_the_public_one():
    """The package ships the public DeepSeek-V3.2 config.json; tests never download it."""
    cfg = json.loads(llm_args.model_config_text())
    assert cfg["architectures"] == ["DeepseekV32ForCausalLM"]
    assert cfg["num_nextn_predict_layers"] == 1 and cfg["index_topk"] == 2048


def test_atomic_write_leaves_nothing_half_written(tmp_path):
    """A failing serialisation leaves neither the target nor a temp file behind."""
    target = tmp_path / "rec.json"
    with pytest.raises(TypeError):
        write_json_atomic(str(target), {"bad": object()})
    assert not target.exists() and os.listdir(tmp_path) == []
    write_json_atomic(str(target), {"ok": 1})
    assert json.loads(target.read_text()) == {"ok": 1}
