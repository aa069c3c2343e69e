"""The fix PR's reproduction, in one place: the tiny model, the engine settings, the prompts.

The upstream fix reproduces the crash with a DeepSeek-V3.2 config shrunk by
``hf_overrides``, dummy weights, 64-token KV blocks, 30 % of the GPU's memory,
a 1 GiB HiSparse host pool and prompts ``list(range(100, 100 + n))`` generating
8 tokens each.  The model (``recordings.py``: how many layers log a routing
call), the workload simulation (prompt ids) and the engine companion
(``engine/llm_args.py``) all read these constants from here.
"""

from __future__ import annotations

TINY_OVERRIDES = {
    "num_hidden_layers": 8,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "index_topk": 128,
}
TARGET_LAYERS = TINY_OVERRIDES["num_hidden_layers"]  # index groups in the tiny target
DRAFTER_LAYERS = 1  # DeepSeek-V3.2 MTP: num_nextn_predict_layers = 1
INDEX_TOPK = TINY_OVERRIDES["index_topk"]  # KV rows each token's sparse attention selects
BLOCK_SIZE = 64  # tokens per KV block
GPU_MEMORY_UTILIZATION = 0.3  # fraction of the GPU's memory
HOST_POOL_GIB = 1  # HiSparse host pool, GiB
MAX_TOKENS = 8  # generated tokens per prompt
PROMPT_FIRST_TOKEN_ID = 100  # prompts are list(range(100, 100 + n))
DEFAULT_MAX_MODEL_LEN = 320  # max_model_len of the reproduction


def prompt_token_ids(n: int) -> list[int]:
    """The reproduction's prompt of ``n`` tokens (prompts of any length share prefixes)."""
    return list(range(PROMPT_FIRST_TOKEN_ID, PROMPT_FIRST_TOKEN_ID + n))

# What every prediction assumes; printed by the command line and shown in the notebooks.
ASSUMPTIONS = (
    "DeepSeek-V3.2 through the offline vllm.LLM class, one NVIDIA H200 per rank: the fix "
    "PR's tiny config (8 layers, index_topk 128) unless the model is named (--model, a "
    "command's MODEL and --hf-overrides), and every block count and byte size from the named "
    "config; tensor parallel: C, W, captures and routing are the "
    "same on every rank (so TP=N predicts what TP=1 does); with vLLM's default "
    "multiprocessing a crash reaches the caller as 'Engine core initialization failed' at "
    "start-up and EngineDeadError serving, the HiSparse text in the log (in process, as the "
    "live runner runs: the ValueError itself, or under TP > 1 the 'Worker failed' wrap); "
    "data parallel: simulate -dp N; pipeline and decode context parallel are refused, as "
    "vLLM refuses them with HiSparse",
    "HiSparse on (so Model Runner V2), 64-token KV blocks, the default -O2 compilation "
    "(breakable CUDA graphs, no torch.compile)",
    "predict: the prompts are served one after another, each alone in the engine, 8 output "
    "tokens each (ignore_eos); with prefix caching on, an earlier prompt's full 64-token "
    "blocks shorten a later prefill; several requests at once: use simulate",
    "MTP verify steps: how many drafts the dummy-weight target accepts is not modelled; "
    "predict leaves the number of verify steps open",
    "KV pool: what memory profiling leaves unless num_gpu_blocks_override sets it (then the "
    "JIT warmup's request cap and vLLM's one-request admission check are modelled); the "
    "pool never runs short while serving (a set pool that could is declined); the HiSparse "
    "host pool is host_pool_gib (the reproduction's 1 GiB unless set): vLLM's refusal of one "
    "too small for a max_model_len request is modelled, and a workload whose requests may "
    "outgrow it while serving is declined (vLLM would hold requests back); 0.34.0's "
    "extensible KV cache (on without num_gpu_blocks_override) is assumed supported, as on "
    "an H200, and its sizing warmup's blocks committable",
)
