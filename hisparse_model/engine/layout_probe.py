"""One real engine start-up, to record how vLLM lays out a HiSparse model's KV cache.

``python -m hisparse_model.engine.layout_probe CASE.json OUT.json``: starts the offline
``vllm.LLM`` in this process (dummy weights, eager: the layout does not depend on graphs)
with the case's ``hf_overrides`` applied to DeepSeek-V3.2's shipped config (to the MTP
drafter's config too, as ``llm_args.shrink_hf_config`` does), and writes what vLLM built:
the host pool's blocks and stride, the GPU pool's blocks, the KV-cache groups (kind and
block count a request's hot group holds), or vLLM's refusal in its own words.  The
recording is compared with ``model.kv_layout`` / ``model.host_pool`` by
``tests/test_layout_recordings.py``.

Engine code: vLLM is imported inside functions only.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

OVERRIDES_ENV = "HISPARSE_PROBE_OVERRIDES"


def shrink(hf_config):
    """The case's overrides (module level, so it pickles by reference)."""
    hf_config.update(json.loads(os.environ[OVERRIDES_ENV]))
    return hf_config


def _engine_kwargs(case: dict, model_dir: str) -> dict:
    from vllm.config import AttentionConfig, HiSparseConfig, KVTransferConfig

    att = {"hisparse_config": HiSparseConfig()}
    if case.get("attention_backend"):
        att["backend"] = case["attention_backend"]
    kw = {
        "model": model_dir, "load_format": "dummy", "skip_tokenizer_init": True,
        "hf_overrides": shrink, "max_model_len": case["max_model_len"], "block_size": 64,
        "max_num_seqs": case.get("max_num_seqs", 4), "enforce_eager": True,
        "enable_prefix_caching": False, "gpu_memory_utilization": case.get("gpu", 0.3),
        "kv_cache_dtype": case.get("kv_cache_dtype", "auto"),
        "kv_transfer_config": KVTransferConfig(
            kv_connector="HiSparseConnector", kv_role="kv_both",
            kv_connector_extra_config={"host_pool_gib": case["host_pool_gib"]}),
        "attention_config": AttentionConfig(**att),
    }
    if case.get("num_speculative_tokens"):
        kw["speculative_config"] = {"method": "mtp",
                                    "num_speculative_tokens": case["num_speculative_tokens"]}
    return kw


def _kv_config(llm):
    core = llm.llm_engine.engine_core
    core = getattr(core, "engine_core", core)  # in-process client -> EngineCore
    return core.model_executor.driver_worker.worker.model_runner.kv_cache_config


def _groups(kv) -> list[dict]:
    out = []
    for g in kv.kv_cache_groups:
        spec = g.kv_cache_spec
        out.append({"kind": type(spec).__name__, "layers": len(g.layer_names),
                    "page_size_bytes": int(spec.page_size_bytes),
                    "blocks_per_request": getattr(spec, "blocks_per_request", None),
                    "host_resident": bool(getattr(g, "host_resident", False))})
    return out


def probe(case: dict) -> dict:
    """Start the engine for ``case``; what vLLM laid out, or its refusal."""
    import vllm
    from vllm import LLM

    from hisparse_model.engine.llm_args import write_model_dir

    os.environ[OVERRIDES_ENV] = json.dumps(case["hf_overrides"])
    model_dir = write_model_dir("/tmp/deepseek-v3.2-probe")
    started = time.time()
    out = {"case": case, "vllm_version": vllm.__version__}
    try:
        llm = LLM(**_engine_kwargs(case, model_dir))
    except Exception as exc:  # noqa: BLE001 - vLLM's refusal is the recording
        chain, e = [], exc
        while e is not None:
            chain.append(f"{type(e).__name__}: {e}")
            e = e.__cause__ or e.__context__
        out.update(refused=chain, traceback=traceback.format_exc()[-4000:])
    else:
        try:
            kv = _kv_config(llm)
            out.update(host_blocks=kv.hisparse_host_num_blocks,
                       host_block_stride=kv.hisparse_host_block_stride,
                       gpu_blocks=int(kv.num_blocks), groups=_groups(kv))
        except Exception as exc:  # noqa: BLE001 - the log's HMA line still says it
            out["read_error"] = f"{type(exc).__name__}: {exc}"
    out["seconds"] = round(time.time() - started, 1)
    return out


def main(argv: list[str]) -> int:
    case_path, out_path = argv
    with open(case_path) as f:
        case = json.load(f)
    result = probe(case)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
