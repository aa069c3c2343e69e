"""The start-up driver's CUDA-graph side: the cudagraph mode, the profiling captures, the capture hook.

``_resolve_mode``: the config-time mode, then the runner's real
``resolve_cudagraph_mode_and_sizes``.  ``_profile_cudagraph_memory``: the real
``profile_cudagraph_memory`` with the minimal profiling KV cache replaced by
the engine's graph managers.  ``_forward_mode_tracker``: the real
``CudaGraphManager.capture``, remembering each capture forward's graph mode.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

from hisparse_model.crosscheck.startup_attention import _Attention


def _resolve_mode(V, cfg, knobs: dict, q: int, attn: _Attention):
    """Config-time mode, then the runner's real resolve_cudagraph_mode_and_sizes."""
    CUDAGraphMode = V["CUDAGraphMode"]
    cc = cfg.compilation_config
    if knobs.get("enforce_eager"):
        return CUDAGraphMode.NONE
    cc.cudagraph_mode = CUDAGraphMode[knobs.get("cudagraph_mode") or "FULL_AND_PIECEWISE"]
    cc.mode = V["CompilationMode"].NONE  # breakable CUDA graphs switch torch.compile off
    cc.splitting_ops = []
    import inspect

    kw = dict(use_v2_model_runner=True, tensor_parallel_size=1, kv_cache_config=None,
              max_num_reqs=None, is_profiling=False, piecewise_capture_available=True)
    params = inspect.signature(cc.resolve_cudagraph_mode_and_sizes).parameters
    mode = cc.resolve_cudagraph_mode_and_sizes(
        attn.cg_support, attn.backend, q, **{k: v for k, v in kw.items() if k in params})
    cc.cudagraph_mode = mode
    return mode


def _profile_cudagraph_memory(V, eng) -> None:
    """determine_available_memory -> the real profile_cudagraph_memory (gpu_worker.py:633-637)."""
    cgu = V["cgu"]
    orig_init = cgu._init_minimal_kv_cache_for_profiling
    orig_tear = cgu._teardown_profiling_state
    cgu._init_minimal_kv_cache_for_profiling = lambda runner: eng.init_managers(True)
    cgu._teardown_profiling_state = lambda runner: setattr(
        runner, "cudagraph_manager", None)
    try:
        cgu.profile_cudagraph_memory(eng.runner)
    finally:
        cgu._init_minimal_kv_cache_for_profiling = orig_init
        cgu._teardown_profiling_state = orig_tear


def _forward_mode_tracker(V):
    """Remember the cudagraph mode each capture forward runs in (from forward_fn's argument)."""
    rec = V["rec"]
    orig = V["cgu"].CudaGraphManager.capture

    def capture(self, create_forward_fn, progress_bar_desc="Capturing CUDA graphs", **kw):
        def wrapped(desc, warmup):
            if warmup:  # cudagraph_utils.py capture(): a new graph starts
                rec.unit += 1
            fn = create_forward_fn(desc, warmup)

            def run(cg_mode):
                rec.cg_mode = desc.cg_mode  # the graph's mode (its eager warmup pass too)
                try:
                    return fn(cg_mode)
                finally:
                    rec.cg_mode = None

            return run

        return orig(self, wrapped, progress_bar_desc, **kw)

    return capture
