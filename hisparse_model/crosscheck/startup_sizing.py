"""The start-up driver's steps of vLLM 0.34.0 that 0.33.0 does not run, driven for real.

* ``extensible``: vLLM's own ``VllmConfig._resolve_extensible_kv_cache``
  (vllm/config/vllm.py:3180@0.34.0 `def _resolve_extensible_kv_cache`) on the knob set, the
  platform answering as CUDA's does (the CPU platform would refuse it): on unless
  ``num_gpu_blocks_override`` is set.
* ``profile``: the runner's real ``profile_cudagraph_memory``
  (vllm/v1/worker/gpu/model_runner.py:1121-1128@0.34.0
  `if self.cache_config.enable_extensible_kv_cache:`), which captures nothing under the
  extensible KV cache.
* ``sizing_warmup``: the real ``run_kv_cache_sizing_warmup``
  (vllm/v1/worker/gpu/warmup.py:483@0.34.0 `def run_kv_cache_sizing_warmup`) through the same
  fake worker as the JIT warmup (``startup_warmup._WarmupWorker``).  The runner has no
  extensible-cache object here: its committable blocks are the KV config's
  (``num_committable_kv_blocks`` falls back to ``kv_cache_config.num_blocks``, "plenty" unless
  the knob set gives a pool), as on the H200 where they never bind.
* ``sampler_warmup``: the dummy forward before the sampler's warmup
  (vllm/v1/worker/gpu_worker.py:1179-1193@0.34.0
  `self.model_runner._dummy_sampler_run(hidden_states=sample_hidden_states)`): the real ``GPUModelRunner._dummy_run`` of
  min(S, B) tokens, whose ``execute_model`` is ``dummy_execute_model`` below: the real
  ``gather_batch_req_state`` (its dummy branch) and the real ``dispatch_cg_and_sync_dp`` at
  one rank, then ``InputBatch.make_dummy`` of the dispatched shape and one forward unless the
  descriptor is a FULL graph (a replay routes nothing); the real ``_dummy_run`` then runs the
  drafter's ``propose`` as it does.  The sampler itself routes nothing (not driven).

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from hisparse_model.crosscheck.standins import _as_h200, _patched
from hisparse_model.crosscheck.startup_engine import _ConfigView
from hisparse_model.crosscheck.startup_recorder import _Meta
from hisparse_model.model.reproduction import BLOCK_SIZE


def extensible(cfg, knobs: dict, device: dict) -> bool:
    """Whether vLLM settles the extensible KV cache on for this knob set (False before
    0.34.0, which has no such cache)."""
    cache = cfg.cache_config
    if not hasattr(cfg, "_resolve_extensible_kv_cache"):
        return False
    from vllm.platforms import current_platform

    cache.num_gpu_blocks_override = knobs.get("num_gpu_blocks_override")
    cache.enable_extensible_kv_cache = None
    cache._extensible_kv_cache_resolved = False
    with _as_h200(device, memory_and_name=False), \
            _patched(type(current_platform), "is_cuda_alike", classmethod(lambda c: True)):
        cfg._resolve_extensible_kv_cache()
    return bool(cache.enable_extensible_kv_cache)


def runner_fields(eng) -> None:
    """What 0.34.0's runner methods read beside 0.33.0's: the model config's
    ``max_logprobs`` (its default), MLA, no extensible-cache object, no EPLB."""
    import dataclasses

    from vllm.config import ModelConfig

    field = {f.name: f for f in dataclasses.fields(ModelConfig)}["max_logprobs"]
    default = getattr(field.default, "default", field.default)  # a pydantic Field's value
    r = eng.runner
    r.model_config = SimpleNamespace(get_vocab_size=lambda: 32, use_mla=True,
                                     max_logprobs=default)
    r.extensible_kv_cache = None
    r.eplb = SimpleNamespace(suppress=contextlib.nullcontext)
    r.device = eng.device
    r.is_first_pp_rank = True
    # MLA's chunked-context workspace reads the model's max_model_len and the cache's
    # 64-token blocks (vllm/model_executor/layers/attention/mla_attention.py:2534-2558@0.34.0 `max_model_len`)
    r.vllm_config = _ConfigView(eng.cfg, model_config=SimpleNamespace(
        max_model_len=eng.knobs["max_model_len"]))
    eng.cfg.cache_config.block_size = BLOCK_SIZE


def profile(V, eng) -> None:
    """determine_available_memory -> the runner's real profile_cudagraph_memory
    (vllm/v1/worker/gpu_worker.py:742-747@0.34.0
    `cudagraph_memory_estimate = self.model_runner.profile_cudagraph_memory()`)."""
    cgu = V["cgu"]
    with _patched(cgu, "_init_minimal_kv_cache_for_profiling",
                  lambda runner: eng.init_managers(True)), \
            _patched(cgu, "_teardown_profiling_state",
                     lambda runner: setattr(runner, "cudagraph_manager", None)):
        V["mr"].GPUModelRunner.profile_cudagraph_memory(eng.runner)


def sizing_warmup(V, eng) -> None:
    """The real run_kv_cache_sizing_warmup through the fake worker."""
    V["wu"].run_kv_cache_sizing_warmup(eng.runner, eng.execute_model, eng.sample_tokens)


def dummy_execute_model(eng, so, intermediate_tensors=None, dummy_run=False,
                        skip_attn_for_dummy_run=False, is_profile=False, **_kw):
    """The runner's execute_model for a dummy run (see the module docstring)."""
    V, r = eng.V, eng.runner
    assert dummy_run, "only _dummy_run calls this stand-in"
    lens = so.num_scheduled_tokens
    num_reqs, num_toks = len(lens), so.total_num_scheduled_tokens
    _, uniform = V["mr"].GPUModelRunner.gather_batch_req_state(r, so, True)
    desc, dp_state = V["dp_utils"].dispatch_cg_and_sync_dp(
        eng.cudagraph_manager, num_reqs, num_toks, uniform, 1, 0,
        max_query_len=max(lens.values()), need_eager=is_profile, num_active_loras=0,
        parallel_config=eng.cfg.parallel_config, allow_ubatching=False,
        uniform_decode=uniform == r.decode_query_len, allow_skip_drafts=so.skip_drafts)
    batch = V["ib"].InputBatch.make_dummy(desc.num_reqs or num_reqs, desc.num_tokens,
                                          eng.input_buffers, max_query_len=desc.max_query_len,
                                          is_padding=not is_profile)
    meta = _Meta([int(x) for x in batch.num_scheduled_tokens], int(batch.num_tokens))
    if desc.cg_mode != V["CUDAGraphMode"].FULL:  # a FULL replay runs no Python
        V["rec"].unit += 1
        V["rec"].forward("target", meta, desc.cg_mode)
    torch = V["torch"]
    r.execute_model_state = SimpleNamespace(
        input_batch=batch, attn_metadata=meta, slot_mappings_by_layer={},
        hidden_states=torch.zeros(batch.num_tokens, 1), aux_hidden_states=None,
        dp_sync_state=dp_state)
    return None


def sampler_warmup(V, eng) -> None:
    """The dummy forward of min(S, B) tokens that gives the sampler warmup its hidden
    states (the real _dummy_run)."""
    r = eng.runner
    sched = eng.cfg.scheduler_config
    torch = V["torch"]
    r.execute_model = lambda so, **kw: dummy_execute_model(eng, so, **kw)
    r.maybe_dummy_run_with_lora = lambda *a, **k: contextlib.nullcontext()
    r.step_timing = SimpleNamespace(forward_end=lambda: None, drafter_start=lambda: None,
                                    drafter_end=lambda: None, collect=contextlib.nullcontext)
    r.sampler = SimpleNamespace(sampling_states=SimpleNamespace(
        temperature=SimpleNamespace(gpu=torch.zeros(r.max_num_reqs)),
        seeds=SimpleNamespace(gpu=torch.zeros(r.max_num_reqs, dtype=torch.int64))))
    r.req_states = SimpleNamespace(
        last_sampled_tokens=torch.zeros(r.max_num_reqs, dtype=torch.int64),
        next_prefill_tokens=torch.zeros(r.max_num_reqs, dtype=torch.int32))
    V["mr"].GPUModelRunner._dummy_run(
        r, num_tokens=min(sched.max_num_seqs, sched.max_num_batched_tokens), skip_eplb=True)
