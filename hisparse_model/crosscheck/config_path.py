"""Drive vLLM's own config path on CPU: scheduler defaults, ``VllmConfig``, capture sizes.

Sections (d), (a) (the config) and (b) of ``vllm_driver``'s docstring, which
lists every stand-in: ``EngineArgs``' defaulting of max_num_seqs /
max_num_batched_tokens with the platform answering as the H200, a CPU
``VllmConfig`` with HiSparse attached after construction and the MTP
speculative stand-in, and the real ``_set_cudagraph_sizes`` with the H200
start-up state.  ``time_config_path`` times the whole path for the benchmark.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

from hisparse_model.crosscheck.standins import H200_DEVICE, _as_h200, _spec_standin


def _scheduler_defaults(knobs: dict, device: dict) -> dict:
    """(d): EngineArgs' own defaulting of max_num_seqs / max_num_batched_tokens."""
    from types import SimpleNamespace

    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    ea = EngineArgs(
        max_model_len=knobs["max_model_len"],
        max_num_seqs=knobs.get("max_num_seqs"),
        max_num_batched_tokens=knobs.get("max_num_batched_tokens"),
    )
    model_config = SimpleNamespace(  # what the two methods read of ModelConfig
        max_model_len=knobs["max_model_len"],
        is_chunked_prefill_supported=True,
        is_prefix_caching_supported=True,
        runner_type="generate",
        is_multimodal_model=False,
        is_mm_prefix_lm=False,
    )
    parallel_config = SimpleNamespace(use_batched_dp_moe=False)
    with _as_h200(device, memory_and_name=True):
        ea._set_default_chunked_prefill_and_prefix_caching_args(model_config)
        ea._set_default_max_num_seqs_and_batched_tokens_args(
            UsageContext.LLM_CLASS, model_config, parallel_config
        )
    return {
        "max_num_seqs": ea.max_num_seqs,
        "max_num_batched_tokens": ea.max_num_batched_tokens,
        "enable_chunked_prefill": ea.enable_chunked_prefill,
    }


def _scheduler_config(sched: dict, knobs: dict):
    """The real SchedulerConfig of the (d) values (its own checks run: B >= S, ...)."""
    from vllm.config import SchedulerConfig

    return SchedulerConfig(
        max_num_seqs=sched["max_num_seqs"],
        max_num_batched_tokens=sched["max_num_batched_tokens"],
        max_model_len=knobs["max_model_len"],
        enable_chunked_prefill=sched["enable_chunked_prefill"],
        is_encoder_decoder=False,
    )


def _vllm_config(sched: dict, knobs: dict):
    """A CPU VllmConfig with the scheduler values, HiSparse and speculative stand-in
    (and the knob set's ``tensor_parallel_size``, default 1)."""
    from vllm.config import DeviceConfig, ParallelConfig, VllmConfig
    from vllm.config.attention import HiSparseConfig

    cfg = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=_scheduler_config(sched, knobs),
        parallel_config=ParallelConfig(tensor_parallel_size=knobs.get("tensor_parallel_size", 1)),
    )
    cfg.attention_config.hisparse_config = HiSparseConfig()
    k = knobs.get("num_speculative_tokens", 0)
    if k:
        cfg.speculative_config = _spec_standin(k, bool(knobs.get("parallel_drafting")))
    return cfg


def _capture_sizes(sched: dict, knobs: dict, device: dict) -> dict:
    """(b): the real _set_cudagraph_sizes with the H200 start-up state."""
    from types import SimpleNamespace

    from vllm.config import CUDAGraphMode

    cfg = _vllm_config(sched, knobs)
    cfg.model_config = SimpleNamespace(enforce_eager=False)
    cc = cfg.compilation_config
    cc.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cc.cudagraph_capture_sizes = None
    cc.max_cudagraph_capture_size = None
    with _as_h200(device, memory_and_name=False):
        cfg._set_cudagraph_sizes()
    return {
        "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes),
        "max_cudagraph_capture_size": cc.max_cudagraph_capture_size,
        # 0.34.0 splits them: token sizes of the mixed graphs, request counts of the decode
        # graphs (vllm/config/vllm.py:2672-2679@0.34.0 `decode_cudagraph_capture_request_sizes`); {} before it
        "split": {name: getattr(cc, name) for name in sorted(vars(cc))
                  if name.startswith(("prefill_cudagraph_", "decode_cudagraph_",
                                      "max_prefill_cudagraph_", "max_decode_cudagraph_"))},
    }


def time_config_path(knobs_list: list[dict], device: dict | None = None) -> float:
    """Seconds vLLM's own config path takes for these knob sets: scheduler defaults, then
    ``VllmConfig`` and ``_set_cudagraph_sizes`` (what ``plan`` answers; for the benchmark)."""
    import time

    dev = dict(device or H200_DEVICE)
    t0 = time.perf_counter()
    for knobs in knobs_list:
        _capture_sizes(_scheduler_defaults(knobs, dev), knobs, dev)
    return time.perf_counter() - t0
