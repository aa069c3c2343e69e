"""Drive vLLM's own V1 ``Scheduler`` / ``AsyncScheduler`` on CPU through workloads.

Run in a subprocess against one vLLM tree installed ``--no-deps`` by
``scripts/install_vllm_cpu.sh`` (vLLM is imported only inside functions)::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.scheduler_driver < in.json

stdin: ``{"cases": [{"config", "workload", "accepted"}, ...], "jobs": n}`` --
``config`` holds the fields of :class:`hisparse_model.schedule.scheduler.SchedulerConfig`,
``workload`` a list of ``{"prompt_token_ids", "max_tokens", "arrival_step"}``,
``accepted`` an acceptance spec (:func:`hisparse_model.schedule.scheduler.acceptance`),
``jobs`` forked workers -- or ``{"time_10k": {"config", "workload"}}`` to time one
run.  stdout: one JSON object ``{"vllm_version", "vllm_file", "results"}``, one
result per case: ``{"steps": [{"index", "scheduled", "spec", "computed_before",
"finished", "runner_order", "resident"}...], "alloc_failures": n}`` or
``{"driver_error", "traceback"}``.  The tests call :func:`run` through the test run's
driver server (``crosscheck/server.py``); the benchmark runs this module.

The scheduler is built the way ``tests/v1/core/utils.py`` ``create_scheduler``
builds it (a real ``VllmConfig`` on CPU, a ``KVCacheConfig``, the scheduler
class), plus what the H200 engine has:

* ``VllmConfig(device=cpu, SchedulerConfig(S, B, L, chunked prefill,
  async_scheduling), CacheConfig(block_size=64, enable_prefix_caching))``, then
  ``kv_transfer_config`` = HiSparseConnector (kv_both, host_pool_gib 1) and
  ``attention_config.hisparse_config`` attached after construction, which refuses
  HiSparse off CUDA (vllm/config/vllm.py:1822 `HiSparse currently requires NVIDIA CUDA.`);
  ``model_config`` is a stand-in with what the scheduler reads (generate runner,
  no mrope / multimodal / encoder-decoder, ``index_topk=128``, one MTP layer).
* MTP (K > 0): a stand-in ``SpeculativeConfig`` holding the real class's field
  defaults and methods, with ``method="mtp"``, K tokens, no parallel drafting.
* The KV cache config from the real planner and HiSparse layout (host source,
  GPU indexer / resident / hot groups; vllm/v1/hisparse/layout.py:124
  `def _lay_out_hisparse_groups`) with ``num_gpu_blocks_override`` and a 1 GiB
  host pool, from stand-in layer specs of the tiny DeepSeek-V3.2 (8 layers, + 1
  MTP layer; sparse MLA 656-byte rows, indexer 132-byte rows), reduced and sized
  as ``EngineCore`` does (vllm/v1/engine/core.py:333
  `generate_scheduler_kv_cache_config(kv_cache_configs)`).  The HiSparse
  connector's scheduler side and its ``HiSparseCoordinator`` are the real ones;
  its worker side is not (it needs CUDA kernels and pinned host memory).

The engine loop replays ``EngineCore.step`` + ``post_step`` (sync) or
``step_with_batch_queue`` (async), one call per engine step; requests of
``arrival_step`` k are added right before the k-th call.  The model runner is
faked: a request whose chunk reaches the end of its prefill samples ``1 +
accepted`` tokens (fresh ids >= 10**6: never a prefix-cache hit), ``accepted``
being the acceptance input clamped to the drafts scheduled; a partial prefill
samples nothing; sync MTP gets K drafts per scheduled request after each
executed step.  The runner order is the real ``sort_batch_req_ids`` of Model
Runner V2 (its module imports on CPU) with decode_query_len = 1 + K.  HiSparse worker feedback: each step's output reports the page
transfers carried by the *previous* step (empty steps included) as enqueued and
completed, and the step's own host copies as completed (the worker submits
post-forward transfers when the next step starts).  ``alloc_failures`` counts
refused allocations and reuses of unpinned HiSparse pages: the pools ran short,
outside what the model covers.

The rules ``hisparse_model/schedule/scheduler.py`` cites (0.31.0 lines) sit in 0.32.0 /
0.33.0 at:

* vllm/v1/engine/core.py:698@0.32.0 `def step_with_batch_queue`; vllm/v1/engine/core.py:708@0.33.0 `def step_with_batch_queue`
* vllm/config/vllm.py:577@0.32.0 `def max_concurrent_batches`; vllm/config/vllm.py:588@0.33.0 `def max_concurrent_batches`
* vllm/config/vllm.py:1644@0.32.0 `async_scheduling = True`; vllm/config/vllm.py:1719@0.33.0 `async_scheduling = True`
* vllm/engine/arg_utils.py:3022@0.32.0 `= default_prefix_caching`; vllm/engine/arg_utils.py:3076@0.33.0 `= default_prefix_caching`
* vllm/config/model.py:2272@0.32.0 `Generative models support prefix caching.`; vllm/config/model.py:2290@0.33.0 `Generative models support prefix caching.`
* vllm/distributed/kv_transfer/kv_connector/v1/hisparse/worker.py:927@0.32.0 `def _finish_previous_step`; vllm/distributed/kv_transfer/kv_connector/v1/hisparse/worker.py:929@0.33.0 `def _finish_previous_step`
* vllm/config/vllm.py:1822@0.32.0 `scheduler_reserve_full_isl`; vllm/config/vllm.py:1898@0.33.0 `scheduler_reserve_full_isl`
* vllm/v1/core/sched/scheduler.py:802@0.32.0 `self.running[-1]`; vllm/v1/core/sched/scheduler.py:938@0.33.0 `self.running[-1]`
* vllm/v1/hisparse/coordinator.py:392@0.32.0 `def _lose_page`; vllm/v1/hisparse/coordinator.py:392@0.33.0 `def _lose_page`
* vllm/v1/worker/gpu/model_runner.py:2435-2447@0.32.0 `def sort_batch_req_ids`; vllm/v1/worker/gpu/model_runner.py:2507-2519@0.33.0 `def sort_batch_req_ids`
* vllm/v1/attention/backends/utils.py:803-874@0.32.0 `def split_decodes_and_prefills`; vllm/v1/attention/backends/utils.py:837-908@0.33.0 `def split_decodes_and_prefills`
* vllm/v1/hisparse/coordinator.py:489@0.32.0 `def publish_when_ready`; vllm/v1/hisparse/coordinator.py:489@0.33.0 `def publish_when_ready`
* (0.31.0 only: from 0.32.0 the resident group no longer plans transfers in cache_blocks; see the @0.32.0 `advance` citation in scheduler.py)
* vllm/v1/hisparse/coordinator.py:472@0.32.0 `budget = max(self.max_spill_pages`; vllm/v1/hisparse/coordinator.py:472@0.33.0 `budget = max(self.max_spill_pages`
* vllm/v1/hisparse/coordinator.py:796@0.32.0 `def _complete_host_writes`; vllm/v1/hisparse/coordinator.py:796@0.33.0 `def _complete_host_writes`
* vllm/v1/hisparse/coordinator.py:300@0.32.0 `def _record_copy`; vllm/v1/hisparse/coordinator.py:300@0.33.0 `def _record_copy`
* vllm/v1/hisparse/coordinator.py:829@0.32.0 `def _publish_detached_blocks`; vllm/v1/hisparse/coordinator.py:829@0.33.0 `def _publish_detached_blocks`
* vllm/v1/core/kv_cache_manager.py:295@0.32.0 `request.num_tokens - 1`; vllm/v1/core/kv_cache_manager.py:275@0.33.0 `request.num_tokens - 1`
* vllm/v1/core/single_type_kv_cache_manager.py:819@0.32.0 `if drop_eagle_block`; vllm/v1/core/single_type_kv_cache_manager.py:829@0.33.0 `if drop_eagle_block`
* vllm/v1/core/kv_cache_coordinator.py:828@0.32.0 `is_simple_hybrid`; vllm/v1/core/kv_cache_coordinator.py:838@0.33.0 `is_simple_hybrid`
* vllm/v1/hisparse/coordinator.py:254@0.32.0 `def _adopt_copies`; vllm/v1/hisparse/coordinator.py:254@0.33.0 `def _adopt_copies`
* vllm/v1/hisparse/coordinator.py:676-692@0.32.0 `def all_context_pages_resident`; vllm/v1/hisparse/coordinator.py:676-692@0.33.0 `def all_context_pages_resident`
* vllm/v1/hisparse/coordinator.py:198@0.32.0 `def commit_computed_blocks`; vllm/v1/hisparse/coordinator.py:198@0.33.0 `def commit_computed_blocks`
* vllm/v1/core/sched/scheduler.py:2823-2838@0.32.0 `def has_requests`; vllm/v1/core/sched/scheduler.py:3167-3182@0.33.0 `def has_requests`
* vllm/v1/engine/core.py:657-695@0.32.0 `def step(self)`; vllm/v1/engine/core.py:667-705@0.33.0 `def step(self)`
* vllm/v1/core/sched/scheduler.py:2550@0.32.0 `def update_draft_token_ids(`; vllm/v1/core/sched/scheduler.py:2862@0.33.0 `def update_draft_token_ids(`
* vllm/v1/core/sched/scheduler.py:591@0.32.0 `def schedule`; vllm/v1/core/sched/scheduler.py:699@0.33.0 `def schedule`
* vllm/v1/core/sched/scheduler.py:659@0.32.0 `while req_index < len(self.running)`; vllm/v1/core/sched/scheduler.py:795@0.33.0 `while req_index < len(self.running)`
* vllm/v1/core/sched/scheduler.py:669-674@0.32.0 `+ 2 - request.num_output_placeholders`; vllm/v1/core/sched/scheduler.py:805-810@0.33.0 `+ 2 - request.num_output_placeholders`
* vllm/v1/core/sched/scheduler.py:703-721@0.32.0 `request.num_tokens_with_spec`; vllm/v1/core/sched/scheduler.py:839-857@0.33.0 `request.num_tokens_with_spec`
* vllm/v1/core/sched/scheduler.py:755@0.32.0 `if num_new_tokens == 0:`; vllm/v1/core/sched/scheduler.py:891@0.33.0 `if num_new_tokens == 0:`
* vllm/v1/core/sched/scheduler.py:862-873@0.32.0 `num_scheduled_spec_tokens`; vllm/v1/core/sched/scheduler.py:1011-1022@0.33.0 `num_scheduled_spec_tokens`
* vllm/v1/core/kv_cache_manager.py:612-616@0.32.0 `num_tokens_to_cache`; vllm/v1/core/kv_cache_manager.py:621-625@0.33.0 `num_tokens_to_cache`
* vllm/v1/core/sched/scheduler.py:921-924@0.32.0 `num_running >= self.max_num_active_reqs`; vllm/v1/core/sched/scheduler.py:1071-1074@0.33.0 `num_running >= self.max_num_active_reqs`
* vllm/v1/core/sched/scheduler.py:960@0.32.0 `if request.num_computed_tokens == 0:`; vllm/v1/core/sched/scheduler.py:1110@0.33.0 `if request.num_computed_tokens == 0:`
* vllm/v1/core/sched/scheduler.py:1133-1154@0.32.0 `padded_num_tokens = 1 + self.num_spec`; vllm/v1/core/sched/scheduler.py:1310-1331@0.33.0 `padded_num_tokens = 1 + self.num_spec`
* vllm/v1/core/sched/scheduler.py:1169@0.32.0 `request_token_budget)`; vllm/v1/core/sched/scheduler.py:1346@0.33.0 `request_token_budget)`
* vllm/distributed/kv_transfer/kv_connector/v1/hisparse/connector.py:124@0.32.0 `connector_meta`; vllm/distributed/kv_transfer/kv_connector/v1/hisparse/connector.py:124@0.33.0 `connector_meta`
* vllm/v1/core/sched/scheduler.py:1616@0.32.0 `def _update_after_schedule`; vllm/v1/core/sched/scheduler.py:1845@0.33.0 `def _update_after_schedule`
* vllm/v1/core/sched/async_scheduler.py:45@0.32.0 `placeholders +=`; vllm/v1/core/sched/async_scheduler.py:44@0.33.0 `placeholders +=`
* vllm/v1/core/sched/scheduler.py:2026@0.32.0 `def update_from_output`; vllm/v1/core/sched/scheduler.py:2259@0.33.0 `def update_from_output`
* vllm/v1/core/sched/scheduler.py:2119-2129@0.32.0 `num_rejected = num_draft_tokens`; vllm/v1/core/sched/scheduler.py:2355-2365@0.33.0 `num_rejected = num_draft_tokens`
* vllm/v1/core/sched/utils.py:114-119@0.32.0 `request.num_tokens >= max_model_len`; vllm/v1/core/sched/utils.py:114-119@0.33.0 `request.num_tokens >= max_model_len`
* vllm/v1/core/sched/async_scheduler.py:59-78@0.32.0 `_update_request_with_output`; 0.33.0 moved it into update_from_output: vllm/v1/core/sched/scheduler.py:2407-2415@0.33.0 `num_in_flight_tokens`
* vllm/v1/hisparse/coordinator.py:852-879@0.32.0 `def free(self`; vllm/v1/hisparse/coordinator.py:852-879@0.33.0 `def free(self`
* vllm/v1/core/sched/scheduler.py:2295@0.32.0 `remove_all(self.running`; vllm/v1/core/sched/scheduler.py:2544@0.33.0 `remove_all(self.running`

The code lives in ``scheduler_build.py`` (the scheduler and its configs) and
``scheduler_loop.py`` (the engine loop and the fake worker); their names are
re-exported here.
"""

from __future__ import annotations

import gc
import sys
import traceback

from hisparse_model.crosscheck.driver_io import _format_exc, json_main
from hisparse_model.crosscheck.scheduler_build import BLOCK_SIZE, HOST_POOL_GIB, build_scheduler
from hisparse_model.crosscheck.scheduler_loop import TOKEN_BASE, FakeWorker, run_workload
from hisparse_model.crosscheck.standins import cuda_hisparse_backend

__all__ = [  # BLOCK_SIZE .. run_workload: re-exported from scheduler_build / scheduler_loop
    "BLOCK_SIZE", "HOST_POOL_GIB", "TOKEN_BASE", "FakeWorker", "build_scheduler", "run_workload",
    "main", "run", "time_10k",
]


def time_10k(cfg: dict, workload: list[dict]) -> dict:
    """Seconds vLLM's own scheduler loop takes for ``workload`` (schedule, fake
    outputs, update_from_output; after building the scheduler and warming up)."""
    from hisparse_model.schedule.scheduler import acceptance

    run_workload(cfg, workload[:50], acceptance(None))  # warm imports and caches
    timings: dict = {}
    gc.disable()
    try:
        run_workload(cfg, workload, acceptance(None), record=False, timings=timings)
    finally:
        gc.enable()
    return {"vllm_scheduler_s": timings["loop_s"], "num_requests": len(workload)}


def _run_case(case: dict) -> dict:
    from hisparse_model.schedule.scheduler import acceptance

    gc.disable()
    try:
        failures: list[int] = []
        with cuda_hisparse_backend():  # 0.34.0's platform backend (standins.py)
            steps = run_workload(case["config"], case["workload"],
                                 acceptance(case.get("accepted")), alloc_failures=failures)
        return {"steps": steps, "alloc_failures": len(failures)}
    except Exception as exc:  # noqa: BLE001 - reported per case
        return {"driver_error": _format_exc(exc),
                "traceback": traceback.format_exc()}
    finally:
        gc.enable()


def host_blocks(config: dict) -> dict:
    """``{"host_blocks": n, "stride": bytes}``: the host pool vLLM's planner lays out for
    ``config`` (a case's config, ``host_pool_gib`` included; None: no HiSparseConnector), or
    ``{"refused": message}``: the planner's ValueError."""
    from hisparse_model.crosscheck.scheduler_build import plan_kv_cache

    with cuda_hisparse_backend():
        try:
            _, worker, kv = plan_kv_cache(config)
        except ValueError as exc:
            return {"refused": str(exc)}
        return {"host_blocks": kv.hisparse_host_num_blocks,
                "stride": worker.hisparse_host_block_stride}


def layout(config: dict) -> dict:
    """What vLLM's planner lays out for ``config`` (a case's config with its ``model`` keys
    and ``tensor_parallel_size``): the host pool's blocks and stride, the worker's KV-cache
    groups (kind, layers, blocks a request's hot group holds) and the GPU pool's blocks, or
    ``{"refused": message}``.  Under TP > 1 the platform answers as CUDA's does
    (vllm/v1/hisparse/runtime.py:254-266 `current_platform.is_cuda_alike()`)."""
    import contextlib

    from vllm.platforms import current_platform

    from hisparse_model.crosscheck.scheduler_build import plan_kv_cache
    from hisparse_model.crosscheck.standins import _patched

    cuda = (_patched(type(current_platform), "is_cuda_alike", classmethod(lambda c: True))
            if config.get("tensor_parallel_size", 1) > 1 else contextlib.nullcontext())
    with cuda_hisparse_backend(), cuda:
        try:
            _, worker, kv = plan_kv_cache(config)
        except ValueError as exc:
            return {"refused": str(exc)}
    groups = [{"kind": type(g.kv_cache_spec).__name__, "layers": len(g.layer_names),
               "blocks_per_request": getattr(g.kv_cache_spec, "blocks_per_request", None)}
              for g in worker.kv_cache_groups]
    return {"host_blocks": kv.hisparse_host_num_blocks,
            "stride": worker.hisparse_host_block_stride, "groups": groups,
            "gpu_blocks": kv.num_blocks}


def layouts(payload: dict) -> dict:
    """:func:`layout` of each of ``payload["configs"]``, in one call (one fork of the server)."""
    return {"results": [layout(config) for config in payload["configs"]]}


def run(payload: dict) -> dict:
    """All cases of ``payload`` (``jobs`` > 1: forked workers after the import)."""
    import logging

    import vllm

    logging.disable(logging.WARNING)
    out = {"vllm_version": vllm.__version__, "vllm_file": vllm.__file__}
    if "time_10k" in payload:
        out.update(time_10k(payload["time_10k"]["config"], payload["time_10k"]["workload"]))
        return out
    cases, jobs = payload["cases"], int(payload.get("jobs", 1))
    if jobs > 1 and len(cases) > 1:
        import multiprocessing

        _run_case(cases[0])  # import everything lazily imported before forking
        gc.freeze()
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            out["results"] = pool.map(_run_case, cases,
                                      chunksize=max(1, len(cases) // (8 * jobs)))
    else:
        out["results"] = [_run_case(case) for case in cases]
    return out


def main() -> int:
    return json_main(run)


if __name__ == "__main__":
    sys.exit(main())
