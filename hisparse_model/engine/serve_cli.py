"""The ``vllm serve`` command line of the fix PR's reproduction, built from :class:`Knobs`.

:func:`.llm_args.llm_kwargs` describes the engine as ``vllm.LLM`` keyword arguments; a real
OpenAI server takes the same settings as flags (vllm/engine/arg_utils.py:1821@0.31.0
`"--attention-config", "-ac", **vllm_kwargs["attention_config"]`).  Two differences:

* the tiny model's overrides go in as a JSON object (``--hf-overrides``), which vLLM applies
  to the target model only (:mod:`.llm_args`): with MTP the drafter would keep the full
  size, so a served MTP engine is refused here rather than run wrong;
* the tokenizer is skipped (the model folder holds config.json alone), so requests send
  token ids (``"prompt": [ids]``), which the completions endpoint takes without one.

No vLLM import (package rule): the command runs in a process of its own.
"""

from __future__ import annotations

import json

from ..model.knobs import Knobs
from ..model.reproduction import TINY_OVERRIDES
from .llm_args import llm_kwargs

SERVED_NAME = "deepseek-v3.2-tiny"  # --served-model-name: what requests name
VLLM_MAIN = "vllm.entrypoints.cli.main"  # `vllm` console script's module (python -m)

# llm_kwargs key -> the flag that carries it (a value, or a JSON object)
_FLAGS = {
    "load_format": "--load-format", "block_size": "--block-size",
    "max_model_len": "--max-model-len", "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "num_gpu_blocks_override": "--num-gpu-blocks-override",
    "kv_transfer_config": "--kv-transfer-config", "attention_config": "--attention-config",
    "compilation_config": "--compilation-config",
}
_SWITCHES = {"skip_tokenizer_init": "--skip-tokenizer-init",
             "enforce_eager": "--enforce-eager"}


class ServeFlagsError(ValueError):
    """Knobs a served reproduction cannot take (one line naming the knob)."""


def serve_flags(knobs: Knobs, model_dir: str, port: int) -> list[str]:
    """``[model_dir, --flag, value, ...]``: what follows ``vllm serve`` for these knobs."""
    if knobs.num_speculative_tokens:
        raise ServeFlagsError("num_speculative_tokens: a served reproduction takes the tiny "
                              "overrides as JSON, which vLLM applies to the target model only "
                              "(the MTP drafter would keep DeepSeek-V3.2's full size)")
    kw = llm_kwargs(knobs, model_dir)
    out = [kw.pop("model")]
    kw.pop("hf_overrides")
    out += ["--hf-overrides", json.dumps(dict(TINY_OVERRIDES), sort_keys=True)]
    prefix = kw.pop("enable_prefix_caching")
    out.append("--enable-prefix-caching" if prefix else "--no-enable-prefix-caching")
    for key, value in kw.items():
        if key in _SWITCHES:
            if value:
                out.append(_SWITCHES[key])
        elif key in _FLAGS:
            out += [_FLAGS[key], json.dumps(value, sort_keys=True)
                    if isinstance(value, dict) else str(value)]
        else:
            raise ServeFlagsError(f"{key}: no vllm serve flag is known for it here")
    return out + ["--served-model-name", SERVED_NAME, "--port", str(port),
                  "--disable-uvicorn-access-log"]
