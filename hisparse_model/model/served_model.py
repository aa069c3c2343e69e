"""The served model's config: every number of the model that depends on it comes from here.

A knob set names its model (:attr:`Knobs.model`) and, as ``vllm serve --hf-overrides``
does, may override keys of that model's ``config.json`` (:attr:`Knobs.hf_overrides`;
vLLM keeps the flat keys, vllm/config/model.py:580-584 `hf_overrides_kw[key] = value`, and
updates the loaded config with them, vllm/transformers_utils/config.py:959-961
`config.update(hf_overrides_kw)`).  Three kinds of name:

* ``reproduction`` (the default): the fix PR's tiny DeepSeek-V3.2, the real config with
  the PR's overrides (``reproduction.TINY_OVERRIDES``: 8 layers, ``index_topk`` 128);
  every recording of this project was made with it;
* a name containing ``DeepSeek-V3.2`` that is not a local directory: DeepSeek-V3.2's own
  config, shipped with the package (``data/dsv32-config.json``, 61 layers, ``index_topk``
  2,048); the family's other checkpoints (-Exp, -Speciale) share its architecture, and the
  answer says which config it used;
* a local model directory holding ``config.json`` (what ``vllm serve /path`` reads): that
  file, which must be a DeepSeek-V3.2 architecture (``model_type`` ``deepseek_v32``).

What the model reads (:data:`KEYS`) and why:

* ``num_hidden_layers`` and ``num_nextn_predict_layers``: the sparse-MLA layers, each with
  its own indexer (the MTP drafter's layer too, under speculation);
* ``kv_lora_rank`` + ``qk_rope_head_dim``: a token's MLA row (576 values);
* ``index_head_dim``: the indexer's key, fp8 with a 4-byte scale per 128 values
  (vllm/model_executor/models/deepseek_v2.py:730-732 `head_dim=self.head_dim + self.head_dim // self.quant_block_size * 4`);
* ``index_topk``: the rows each token's sparse attention selects (the hot buffer);
* ``num_attention_heads``: split over the tensor-parallel ranks;
* ``hidden_size``: the profiling forward's hidden states;
* ``max_position_embeddings``: the longest ``max_model_len``;
* ``vocab_size``: the token ids a workload may use.

No vLLM or torch import happens here (package rule).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass

from ..boundary.json_file import too_many_digits
from .reproduction import TINY_OVERRIDES

REPRODUCTION = "reproduction"  # the fix PR's tiny DeepSeek-V3.2
DEEPSEEK_V32 = "deepseek-ai/DeepSeek-V3.2"  # the shipped real config
FAMILY = "deepseek-v3.2"  # a name containing it (any case) is the family
ARCHITECTURE = "deepseek_v32"  # config.json's model_type the model covers
KEYS = ("num_hidden_layers", "num_nextn_predict_layers", "kv_lora_rank", "qk_rope_head_dim",
        "index_head_dim", "index_topk", "num_attention_heads", "hidden_size",
        "max_position_embeddings", "vocab_size")
MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KiB; more is not one
MAX_CONFIG_INT = 2**31 - 1  # a config's sizes: int32 at most


@dataclass(frozen=True)
class ServedModel:
    """The keys of one model config the HiSparse sizing reads, and where they came from."""

    label: str  # how answers name it: "the fix PR's tiny DeepSeek-V3.2", a name, a path
    num_hidden_layers: int
    num_nextn_predict_layers: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    index_head_dim: int
    index_topk: int
    num_attention_heads: int
    hidden_size: int
    max_position_embeddings: int
    vocab_size: int



def _shipped() -> dict:
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                           "dsv32-config.json"), encoding="utf-8") as f:
        return json.load(f)


@functools.lru_cache(maxsize=1)
def shipped_config() -> dict:
    """DeepSeek-V3.2's own ``config.json`` (shipped: ``data/dsv32-config.json``)."""
    return _shipped()


def _local_config(path: str) -> dict:
    where = os.path.join(path, "config.json")
    if not os.path.isfile(where):
        raise ValueError(f"model {path!r}: a local directory without config.json (vLLM reads "
                         "the model's config from it)")
    try:
        with open(where, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"model {path!r}: config.json cannot be read ({exc.strerror})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ValueError(f"model {path!r}: config.json is over {MAX_CONFIG_BYTES >> 20} MiB; "
                         "not a model config")
    try:
        config = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"model {path!r}: config.json is not JSON ({str(exc)[:80]})") from None
    if not isinstance(config, dict):
        raise ValueError(f"model {path!r}: config.json is not a JSON object")
    if config.get("model_type") != ARCHITECTURE:
        raise ValueError(f"model {path!r}: config.json's model_type is "
                         f"{str(config.get('model_type'))[:40]!r}; the model covers "
                         f"DeepSeek-V3.2 ({ARCHITECTURE!r}) only")
    return config


def parse_overrides(text: str | None) -> dict:
    """``hf_overrides`` as given (JSON text of an object), checked key by key."""
    if text is None:
        return {}
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except (ValueError, RecursionError) as exc:
        said = too_many_digits(text) if type(exc) is ValueError else None  # not malformed
        raise ValueError(f"hf_overrides: {said}" if said else
                         f"hf_overrides: not a JSON object ({str(exc)[:80]})") from None
    if not isinstance(value, dict):
        raise ValueError(f"hf_overrides: expected a JSON object of config keys, got "
                         f"{type(value).__name__}")
    for key in KEYS:
        if key in value and (isinstance(value[key], bool) or not isinstance(value[key], int)):
            raise ValueError(f"hf_overrides.{key}: expected an integer, got {value[key]!r:.40}")
    return value


def canonical_overrides(value) -> str | None:
    """One spelling of an overrides object (sorted keys), as a knob holds it; None for none."""
    value = parse_overrides(value if isinstance(value, str) or value is None
                            else json.dumps(value))
    return json.dumps(value, sort_keys=True, separators=(",", ":")) if value else None


@functools.lru_cache(maxsize=64)
def served_model(name: str, overrides: str | None = None) -> ServedModel:
    """The config named ``name`` with ``overrides`` applied; ValueError naming the knob."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model must be a model name or a local directory, got {name!r:.40}")
    extra = parse_overrides(overrides)
    if name == REPRODUCTION:
        config, label = {**shipped_config(), **TINY_OVERRIDES}, "the fix PR's tiny DeepSeek-V3.2"
    elif os.path.isdir(name):
        config, label = _local_config(name), f"{name}/config.json"
    elif FAMILY in os.path.basename(name.rstrip("/")).lower():
        config = shipped_config()
        label = DEEPSEEK_V32 if name == DEEPSEEK_V32 else f"{name} ({DEEPSEEK_V32}'s config)"
    else:
        raise ValueError(f"model {name[:80]!r}: not a config the model knows: give "
                         f"{REPRODUCTION} (the fix PR's tiny config), {DEEPSEEK_V32}, or a "
                         "local model directory with a DeepSeek-V3.2 config.json")
    if extra:
        label += " + hf_overrides"
    config = {**config, **extra}
    values = {}
    for key in KEYS:
        value = config.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"model {label}: config key {key!r} is "
                             f"{'missing' if value is None else repr(value)[:40]}; HiSparse's "
                             "sizing needs it as a whole number >= 0")
        values[key] = value
    for key in ("num_hidden_layers", "kv_lora_rank", "index_head_dim", "index_topk",
                "num_attention_heads", "hidden_size", "max_position_embeddings"):
        if values[key] < 1:
            raise ValueError(f"model {label}: config key {key!r} must be >= 1, got {values[key]}")
    for key, value in values.items():  # a config's sizes are int32 (vLLM's tensors' shapes)
        if value > MAX_CONFIG_INT:
            raise ValueError(f"model {label}: config key {key!r} must be <= {MAX_CONFIG_INT}, "
                             f"got a number of {len(str(value))} digits")  # JSON: <= 4300
    return ServedModel(label=label, **values)


def model_of(knobs) -> ServedModel:
    """The served model of a knob set."""
    return served_model(knobs.model, knobs.hf_overrides)
