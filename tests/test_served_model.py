"""The served model's config: a name, a local directory's config.json, hf_overrides.

Invariant: a config the sizing can use gives its ten keys (the shipped DeepSeek-V3.2's, the
fix PR's overrides on it, a local directory's, any of them overridden), and every config it
cannot use is refused in one line that names the model or the key, never read past 1 MiB.
"""

import json

import pytest

from hisparse_model.model.knobs import Knobs
from hisparse_model.model.served_model import (DEEPSEEK_V32, REPRODUCTION, canonical_overrides,
                                               served_model)
from hisparse_model.views.verdict_banner import verdict_of

REAL = json.load(open(__import__("pathlib").Path(__file__).parents[1] / "hisparse_model"
                      / "data" / "dsv32-config.json"))

# (name, overrides, layers, index_topk, label): DeepSeek-V3.2's 61 and 2,048, the PR's 8 and 128
NAMED = [
    (DEEPSEEK_V32, None, 61, 2048, "deepseek-ai/DeepSeek-V3.2"),
    (REPRODUCTION, None, 8, 128, "the fix PR's tiny DeepSeek-V3.2"),
    ("someone/DeepSeek-V3.2-Exp", None, 61, 2048,
     "someone/DeepSeek-V3.2-Exp (deepseek-ai/DeepSeek-V3.2's config)"),
    (DEEPSEEK_V32, '{"num_hidden_layers": 8, "index_topk": 128}', 8, 128,
     "deepseek-ai/DeepSeek-V3.2 + hf_overrides"),
]


@pytest.mark.parametrize("name,overrides,layers,topk,label", NAMED)
def test_a_named_config(name, overrides, layers, topk, label):
    """The name picks the config, the overrides change the keys they name, the label says so."""
    m = served_model(name, overrides)
    assert (m.num_hidden_layers, m.index_topk, m.label) == (layers, topk, label)
    assert m.kv_lora_rank + m.qk_rope_head_dim == 576 and m.num_nextn_predict_layers == 1


def _dir(tmp_path, config, name="model"):
    d = tmp_path / name
    d.mkdir()
    if config is not None:
        (d / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return str(d)


def test_a_local_directory_is_read(tmp_path):
    """A local DeepSeek-V3.2 directory: its own layers and top-k (30 and 1,024 here)."""
    path = _dir(tmp_path, {**REAL, "num_hidden_layers": 30, "index_topk": 1024})
    m = served_model(path)
    assert (m.num_hidden_layers, m.index_topk, m.label) == (30, 1024, f"{path}/config.json")


# (config.json's text or object, None: no file; what the refusal says)
BAD_DIRS = [
    (None, "a local directory without config.json"),
    ("{not json", "config.json is not JSON"),
    ("[1, 2]", "config.json is not a JSON object"),
    ({**REAL, "model_type": "llama"}, "config.json's model_type is 'llama'"),
    ({k: v for k, v in REAL.items() if k != "index_topk"}, "config key 'index_topk' is missing"),
    ({**REAL, "index_topk": "2048"}, "config key 'index_topk' is '2048'"),
    ({**REAL, "num_hidden_layers": 0}, "config key 'num_hidden_layers' must be >= 1, got 0"),
    ({**REAL, "hidden_size": 2**40}, "config key 'hidden_size' must be <= 2147483647"),
    ("{" + " " * (1 << 20) + "}", "config.json is over 1 MiB"),
]


@pytest.mark.parametrize("config,said", BAD_DIRS)
def test_a_local_directory_it_cannot_use_is_refused(tmp_path, config, said):
    """One line naming the model (the directory) and what is wrong."""
    with pytest.raises(ValueError) as exc:
        served_model(_dir(tmp_path, config))
    assert said in str(exc.value) and str(exc.value).startswith("model ")
    assert "\n" not in str(exc.value)


# (name, overrides, the refusal's start): names and overrides the sizing cannot use
BAD = [
    ("", None, "model must be a model name"),
    ("Qwen/Qwen3-8B", None, "model 'Qwen/Qwen3-8B': not a config the model knows"),
    (DEEPSEEK_V32, "{not json", "hf_overrides: not a JSON object"),
    (DEEPSEEK_V32, "[1]", "hf_overrides: expected a JSON object of config keys, got list"),
    (DEEPSEEK_V32, '{"index_topk": "128"}', "hf_overrides.index_topk: expected an integer"),
    (DEEPSEEK_V32, '{"index_topk": true}', "hf_overrides.index_topk: expected an integer"),
]


@pytest.mark.parametrize("name,overrides,said", BAD)
def test_a_name_or_overrides_it_cannot_use_is_refused(name, overrides, said):
    """One line naming the model or the override key."""
    with pytest.raises(ValueError, match="^" + __import__("re").escape(said)):
        served_model(name, overrides)


def test_overrides_have_one_spelling():
    """Keys sorted, no spaces; no overrides is None (an empty object too)."""
    assert canonical_overrides({"index_topk": 128, "num_hidden_layers": 8}) == \
        '{"index_topk":128,"num_hidden_layers":8}'
    assert canonical_overrides("{}") is None and canonical_overrides(None) is None


def test_a_state_without_a_configuration_has_no_verdict_line():
    """A dashboard state that names no server (or one the knobs refuse to build) shows no
    verdict line; one that does shows its server's."""
    assert verdict_of({}) is None and verdict_of({"prompt_lens": [2]}) is None
    assert verdict_of({"max_num_seqs": 0}) is None  # the knob's own refusal: no configuration
    assert verdict_of(Knobs(max_num_seqs=2).as_dict()).kind == "exposed"


# (model, kv_cache_dtype, K, TP, host block bytes): 64 tokens x the sparse layers x a row,
# rounded up to 4,096-byte OS pages when tensor-parallel ranks share one pool
STRIDES = [
    (DEEPSEEK_V32, "auto", 0, 1, 4_497_408),   # 64 x 61 x 1,152 (= 1,098 pages exactly)
    (DEEPSEEK_V32, "auto", 0, 8, 4_497_408),
    (DEEPSEEK_V32, "fp8", 0, 1, 2_561_024),    # 64 x 61 x 656
    (DEEPSEEK_V32, "fp8", 0, 8, 2_564_096),    # 625.25 pages -> 626 x 4,096
    (DEEPSEEK_V32, "fp8", 1, 8, 2_605_056),    # 64 x 62 x 656 = 2,603,008 -> 636 pages
    (REPRODUCTION, "auto", 0, 8, 589_824),     # 64 x 8 x 1,152 = 144 pages exactly
    (REPRODUCTION, "fp8", 1, 2, 380_928),      # 64 x 9 x 656 = 377,856 -> 93 pages
]


@pytest.mark.parametrize("model,dtype,k,tp,stride", STRIDES)
def test_the_host_block_stride(model, dtype, k, tp, stride):
    """The host block is every sparse layer's 64-token page; a shared TP pool rounds it up to
    the OS page (vllm/v1/hisparse/runtime.py `get_hisparse_host_block_stride`)."""
    from hisparse_model.model.kv_layout import layout

    knobs = Knobs(model=model, kv_cache_dtype=dtype, num_speculative_tokens=k,
                  tensor_parallel_size=tp, max_num_seqs=2,
                  attention_backend="FLASHMLA_SPARSE" if dtype != "auto"
                  else "FLASH_ATTN_MLA_SPARSE")
    assert layout(knobs).host_block_bytes == stride
