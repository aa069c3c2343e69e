"""Platform and speculative-config stand-ins shared by the drivers of vLLM's code on CPU.

``_patched`` sets an attribute for a block; ``_as_h200`` makes the current
platform answer device queries (capability, and optionally total memory and
name) as the H200; ``_spec_standin`` is the MTP speculative config of
``vllm_driver``'s (a) with the real ``SpeculativeConfig`` predicates bound to it.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import contextlib

# H200 facts for the platform stand-ins (same as hisparse_model.scheduler_defaults).
H200_DEVICE = {
    "total_memory_bytes": 143_771 * (1 << 20),  # bytes, nvidia-smi "143771 MiB"
    "name": "NVIDIA H200",
    "capability": [9, 0],
}


@contextlib.contextmanager
def _patched(obj, name: str, value):
    """Set ``obj.name = value`` for the block, then restore it."""
    missing = object()
    old = obj.__dict__.get(name, missing) if isinstance(obj, type) else getattr(
        obj, name, missing
    )
    setattr(obj, name, value)
    try:
        yield
    finally:
        if old is missing:
            delattr(obj, name)
        else:
            setattr(obj, name, old)


@contextlib.contextmanager
def _as_h200(device: dict, *, memory_and_name: bool):
    """The current platform answers device queries as the H200 would."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    cls = type(current_platform)
    cap = DeviceCapability(*device["capability"])
    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(
            cls, "get_device_capability",
            classmethod(lambda c, device_id=0: cap)))
        stack.enter_context(cuda_hisparse_backend())
        if memory_and_name:
            stack.enter_context(_patched(
                cls, "get_device_total_memory",
                classmethod(lambda c, device_id=0: device["total_memory_bytes"])))
            stack.enter_context(_patched(
                cls, "get_device_name",
                classmethod(lambda c, device_id=0: device["name"])))
        yield


@contextlib.contextmanager
def cuda_hisparse_backend():
    """0.34.0: HiSparse asks the platform for its backend (the CPU platform has none:
    vllm/platforms/interface.py:200-202@0.34.0 `return None` reads as "does not support
    HiSparse"); here the platform answers as CUDA's does
    (vllm/platforms/cuda.py:274-275@0.34.0 `return "vllm.v1.hisparse.backend.CUDAHiSparseBackend"`).
    Nothing is patched in a vLLM without platform backends."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    if not hasattr(cls, "get_hisparse_backend_cls"):
        yield
        return
    from vllm.v1.hisparse.backend import CUDAHiSparseBackend as cuda_backend

    name = f"{cuda_backend.__module__}.{cuda_backend.__qualname__}"
    with _patched(cls, "get_hisparse_backend_cls", classmethod(lambda c: name)):
        yield


def uses_v2_model_runner(cfg) -> bool:
    """Whether the config runs Model Runner V2: its own answer, or (0.34.0, where the V1
    runner is gone and v1/worker/gpu/model_runner.py is the only one) True."""
    return getattr(cfg, "use_v2_model_runner", True)


def _spec_standin(num_speculative_tokens: int, parallel_drafting: bool):
    """A speculative config for MTP with k tokens; real predicate methods bound to it."""
    from vllm.config.speculative import SpeculativeConfig

    attrs = {
        "method": "mtp",
        "num_speculative_tokens": num_speculative_tokens,
        "parallel_drafting": parallel_drafting,
        "num_speculative_tokens_per_batch_size": None,
        # 0.34.0: its defaults; DeepSeek-V3.2's one MTP module (no draft config here) makes
        # use_multi_module_mtp False either way
        "enable_adaptive_verification": False,
        "draft_model_config": None,
    }
    for name in (
        "uses_dynamic_speculative_decoding",
        "use_eagle",
        "use_dflash",
        "use_dspark",
        "uses_draft_model",
        "uses_extract_hidden_states",
        "uses_draft_kv_cache",
        "use_multi_module_mtp",  # 0.34.0: capture sizes ask these two
        "use_gemma4_mtp",
    ):
        fn = getattr(SpeculativeConfig, name, None)
        if fn is not None:
            attrs[name] = fn
    if hasattr(SpeculativeConfig, "max_num_new_slots_for_drafting"):
        # 0.34.0 asks the method's speculator config, whose MTP answer is the base class's:
        # no slot beyond the verified tokens (q = 1 + K on the H200:
        # tests/recorded/v0.34.0-stock-s2-mtp1.json), from
        # vllm/v1/worker/gpu/spec_decode/speculator_config.py:127-130@0.34.0 `def max_num_new_slots_for_drafting`
        attrs["max_num_new_slots_for_drafting"] = 0
    standin = type("SpeculativeConfigStandIn", (), attrs)()
    try:  # 0.34.0: the method's own speculator config, bound to this stand-in
        from vllm.v1.worker.gpu.spec_decode.mtp.config import MTPSpeculatorConfig
    except ImportError:
        return standin
    # DeepSeek-V3.2's MTP (one module): what the engine's config reads of it, e.g. the
    # warmups' lookahead slots (vllm/config/vllm.py:607-614@0.34.0 `num_lookahead_tokens`)
    standin.speculator_config = MTPSpeculatorConfig(standin)
    return standin

