"""Drive vLLM's own V1 ``Scheduler`` / ``AsyncScheduler`` on CPU through workloads.

Run in a subprocess against one vLLM tree installed ``--no-deps`` by
``scripts/install_vllm_cpu.sh`` (vLLM is imported only inside functions)::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.scheduler_driver < in.json

stdin: ``{"cases": [{"config", "workload", "accepted"}, ...], "jobs": n}`` --
``config`` holds the fields of :class:`hisparse_model.scheduler.SchedulerConfig`,
``workload`` a list of ``{"prompt_token_ids", "max_tokens", "arrival_step"}``,
``accepted`` an acceptance spec (:func:`hisparse_model.scheduler.acceptance`),
``jobs`` forked workers -- or ``{"time_10k": {"config", "workload"}}`` to time one
run.  stdout: one JSON object ``{"vllm_version", "vllm_file", "results"}``, one
result per case: ``{"steps": [Step.as_dict()...], "alloc_failures": n}`` or
``{"driver_error", "traceback"}``.  :func:`run_driver` does all of this from a
plain Python (used by the tests and the benchmark).

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

The rules ``hisparse_model/scheduler.py`` cites (0.31.0 lines) sit in 0.32.0 /
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
"""

from __future__ import annotations

import dataclasses
import gc
import inspect
import json
import sys
import time
import traceback
from collections import deque

BLOCK_SIZE = 64
HOST_POOL_GIB = 1
TOKEN_BASE = 10**6


def _stand_ins(cfg: dict):
    from types import SimpleNamespace

    from vllm.config.speculative import SpeculativeConfig

    model = SimpleNamespace(
        uses_mrope=False, max_model_len=cfg["max_model_len"], is_encoder_decoder=False,
        is_diffusion=False, supports_multimodal_inputs=False, return_sampling_mask=False,
        runner_type="generate", skip_tokenizer_init=True, multimodal_config=None,
        is_multimodal_model=False, is_moe=True, pooler_config=None,
        original_max_model_len=cfg["max_model_len"], supports_kv_cache_grouping=False,
        hf_config=SimpleNamespace(index_topk=128, num_nextn_predict_layers=1),
        hf_text_config=SimpleNamespace(index_topk=128),
    )
    spec = None
    k = cfg["num_speculative_tokens"]
    if k:
        attrs = {}
        for f in dataclasses.fields(SpeculativeConfig):  # the field defaults
            default = f.default
            if f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            default = getattr(default, "default", default)  # pydantic FieldInfo
            attrs[f.name] = None if default is dataclasses.MISSING else default
        attrs.update({
            "method": "mtp", "num_speculative_tokens": k, "parallel_drafting": False,
            "num_speculative_tokens_per_batch_size": None,
            "draft_model_config": SimpleNamespace(hf_config=model.hf_config),
        })
        for name, fn in vars(SpeculativeConfig).items():  # the real predicates
            if not name.startswith("_") and (inspect.isfunction(fn)
                                             or isinstance(fn, property)):
                attrs[name] = fn
        spec = type("SpeculativeConfigStandIn", (), attrs)()
    return model, spec


def _layer_specs(num_layers: int):
    import torch
    from vllm.v1.kv_cache_interface import MLAAttentionSpec, SparseCacheRole

    specs = {}
    for i in range(num_layers):
        specs[f"model.layers.{i}.self_attn.indexer.k_cache"] = MLAAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=1, max_tp_shards=1, head_size=132,
            dtype=torch.uint8, cache_role=SparseCacheRole.INDEXER)
        specs[f"model.layers.{i}.self_attn.attn"] = MLAAttentionSpec(
            block_size=BLOCK_SIZE, num_kv_heads=1, max_tp_shards=1, head_size=656,
            dtype=torch.uint8, cache_dtype_str="fp8_ds_mla", state_content_bytes=656,
            is_index_group_leader=True)
    return specs


def build_scheduler(cfg: dict):
    """The real (Async)Scheduler for ``cfg`` with the HiSparse connector attached."""
    from vllm.config import CacheConfig, DeviceConfig, KVTransferConfig, SchedulerConfig
    from vllm.config import VllmConfig
    from vllm.config.attention import HiSparseConfig
    from vllm.v1.core import kv_cache_utils as kcu
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.core.single_type_kv_cache_manager import register_all_kvcache_specs
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm.utils.hashing import get_hash_fn_by_name

    vcfg = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=SchedulerConfig(
            max_num_seqs=cfg["max_num_seqs"],
            max_num_batched_tokens=cfg["max_num_batched_tokens"],
            max_model_len=cfg["max_model_len"], enable_chunked_prefill=True,
            is_encoder_decoder=False, async_scheduling=cfg["async_scheduling"]),
        cache_config=CacheConfig(block_size=BLOCK_SIZE,
                                 enable_prefix_caching=cfg["enable_prefix_caching"]),
    )
    vcfg.model_config, vcfg.speculative_config = _stand_ins(cfg)
    vcfg.kv_transfer_config = KVTransferConfig(
        kv_connector="HiSparseConnector", kv_role="kv_both",
        kv_connector_extra_config={"host_pool_gib": HOST_POOL_GIB})
    vcfg.attention_config.hisparse_config = HiSparseConfig()
    vcfg.cache_config.kv_cache_layout = "BLHNC"  # HiSparseConnector's required layout
    vcfg.cache_config.num_gpu_blocks_override = cfg["num_gpu_blocks"]
    register_all_kvcache_specs(vcfg)
    specs = _layer_specs(8 + (1 if cfg["num_speculative_tokens"] else 0))
    # 0.33.0 moved the planner: vllm/v1/engine/core.py:292-322@0.33.0 `get_kv_cache_configs(`
    try:
        from vllm.v1.core import kv_cache_planning as kcp
    except ImportError:
        kv_configs = kcu.get_kv_cache_configs(vcfg, [specs], [1 << 40])
    else:
        groups = kcp.get_global_kv_cache_groups(vcfg, [specs])
        vcfg.adjust_dcp_kv_cache_interleave_size(groups)
        kv_configs = kcp.get_kv_cache_configs(vcfg, [specs], [1 << 40], groups)
    kv = kcu.generate_scheduler_kv_cache_config(kv_configs)
    vcfg.cache_config.num_gpu_blocks = kv.num_blocks
    block_size, hash_block_size = kcu.resolve_kv_cache_block_sizes(kv, vcfg)
    cls = AsyncScheduler if cfg["async_scheduling"] else Scheduler
    sched = cls(vllm_config=vcfg, kv_cache_config=kv,
                structured_output_manager=StructuredOutputManager(vcfg),
                block_size=block_size, hash_block_size=hash_block_size)
    hash_fn = get_hash_fn_by_name(vcfg.cache_config.prefix_caching_hash_algo)
    kcu.init_none_hash(hash_fn)  # vllm/v1/engine/core.py:225-233 `init_none_hash(caching_hash_fn)`
    hasher = kcu.get_request_block_hasher(hash_block_size, hash_fn)
    return sched, hasher


class FakeWorker:
    """Model-runner outputs consistent with the schedule and the acceptance input."""

    def __init__(self, k: int, accepted, hisparse: bool) -> None:
        self.k = k
        self.accepted = accepted
        self.hisparse = hisparse
        self.prefill_len: dict[str, int] = {}
        self.prev_transfers: list[int] = []
        self.next_token = TOKEN_BASE

    def execute(self, so, step: int):
        from vllm.distributed.kv_transfer.kv_connector.v1.hisparse.connector import (
            HiSparseConnectorWorkerMetadata,
        )
        from vllm.v1.outputs import EMPTY_MODEL_RUNNER_OUTPUT, KVConnectorOutput
        from vllm.v1.outputs import ModelRunnerOutput

        kv_out = None
        meta = so.kv_connector_metadata
        if self.hisparse and meta is not None:
            done = self.prev_transfers
            cmd = meta.command
            self.prev_transfers = [t.transfer_id for t in cmd.page_transfers] if cmd else []
            copies = tuple(c.dst_block_id for c in meta.host_block_copies)
            if done or copies:
                kv_out = KVConnectorOutput(kv_connector_worker_meta=(
                    HiSparseConnectorWorkerMetadata(
                        enqueued_transfer_counts={t: 1 for t in done},
                        completed_transfer_counts={t: 1 for t in done},
                        completed_host_copy_dst_ids=copies)))
        if so.total_num_scheduled_tokens == 0:
            if kv_out is None:
                return EMPTY_MODEL_RUNNER_OUTPUT
            return ModelRunnerOutput.with_kv_conn_output_only(kv_out)
        start = {r.req_id: r.num_computed_tokens for r in so.scheduled_new_reqs}
        for r in so.scheduled_new_reqs:
            ids = r.prefill_token_ids if getattr(r, "prefill_token_ids", None) is not None \
                else r.prompt_token_ids
            self.prefill_len[r.req_id] = len(ids)
        cached = so.scheduled_cached_reqs
        start.update(zip(cached.req_ids, cached.num_computed_tokens))
        req_ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            drafts = len(so.scheduled_spec_decode_tokens.get(rid, ()))
            n = so.num_scheduled_tokens[rid]
            if start[rid] + n - drafts < self.prefill_len[rid]:
                sampled.append([])
                continue
            acc = min(max(int(self.accepted(step, int(rid), drafts)), 0), drafts) if drafts else 0
            sampled.append(list(range(self.next_token, self.next_token + 1 + acc)))
            self.next_token += 1 + acc
        return ModelRunnerOutput(req_ids=req_ids,
                                 req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled, kv_connector_output=kv_out)

    def drafts(self, so):
        from vllm.v1.outputs import DraftTokenIds

        ids = list(so.num_scheduled_tokens)
        return DraftTokenIds(ids, [[TOKEN_BASE - 1] * self.k for _ in ids])


def run_workload(cfg: dict, workload: list[dict], accepted, max_steps: int = 1000000,
                 record: bool = True, alloc_failures: list | None = None,
                 timings: dict | None = None) -> list[dict]:
    """Feed ``workload`` through the real scheduler; one dict per non-empty step.

    ``alloc_failures`` (a list) collects the engine steps at which
    ``allocate_slots`` refused a request or the pool reused an unpinned
    HiSparse page: the pools ran short, outside what the model covers.
    """
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request
    from vllm.v1.worker.gpu.model_runner import sort_batch_req_ids

    sched, hasher = build_scheduler(cfg)
    k = cfg["num_speculative_tokens"]
    step = 0
    if alloc_failures is not None:
        real_allocate = sched.kv_cache_manager.allocate_slots

        def allocate_slots(*args, **kwargs):
            blocks = real_allocate(*args, **kwargs)
            if blocks is None:
                alloc_failures.append(step)
            return blocks
        sched.kv_cache_manager.allocate_slots = allocate_slots
        coordinator = getattr(sched.connector.connector_scheduler, "coordinator", None)
        real_reused = coordinator._on_block_reused  # the pool reused an unpinned page

        def on_block_reused(*args, **kwargs):
            alloc_failures.append(step)
            return real_reused(*args, **kwargs)
        coordinator._on_block_reused = on_block_reused
    worker = FakeWorker(k, accepted, sched.connector is not None)
    arrivals: dict[int, list[int]] = {}
    for i, r in enumerate(workload):
        arrivals.setdefault(r.get("arrival_step", 0), []).append(i)
    last_arrival = max(arrivals)
    steps: list[dict] = []
    by_so: dict[int, dict] = {}
    queue: deque = deque()
    q = 1 + k

    def record_schedule(so, step):
        if so.total_num_scheduled_tokens == 0 or not record:
            return
        before = {r.req_id: r.num_computed_tokens for r in so.scheduled_new_reqs}
        cached = so.scheduled_cached_reqs
        before.update(zip(cached.req_ids, cached.num_computed_tokens))
        spec = so.scheduled_spec_decode_tokens
        nst = so.num_scheduled_tokens
        order = sort_batch_req_ids(nst, spec, q)  # Model Runner V2's own batch order
        meta = so.kv_connector_metadata
        row = {
            "index": step,
            "scheduled": {int(r): n for r, n in nst.items()},
            "spec": {int(r): len(v) for r, v in spec.items() if v},
            "computed_before": {int(r): before[r] for r in nst},
            "finished": [],
            "runner_order": [int(r) for r in order],
            "resident": None if meta is None else bool(meta.all_context_pages_resident),
        }
        steps.append(row)
        by_so[id(so)] = row

    def update(so, out):
        before = set(sched.finished_req_ids)
        sched.update_from_output(so, out)
        row = by_so.pop(id(so), None)
        if row is not None:
            row["finished"] = sorted(int(r) for r in sched.finished_req_ids - before)

    t0 = time.perf_counter()
    while step <= max_steps:
        for i in arrivals.get(step, ()):
            r = workload[i]
            sp = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True)
            sched.add_request(Request(request_id=str(i),
                                      prompt_token_ids=list(r["prompt_token_ids"]),
                                      sampling_params=sp, pooling_params=None,
                                      arrival_time=float(i), block_hasher=hasher))
        if step > last_arrival and not sched.has_requests() and not queue:
            break
        if cfg["async_scheduling"]:  # EngineCore.step_with_batch_queue
            go_on = False
            if sched.has_requests():
                so = sched.schedule()
                record_schedule(so, step)
                out = worker.execute(so, step)
                executed = so.total_num_scheduled_tokens > 0
                queue.appendleft((out, so))
                go_on = len(queue) < 2 and (executed or sched.has_requests())
            elif not queue:
                go_on = True
            if not go_on:
                out, so = queue.pop()
                update(so, out)
        elif sched.has_requests():  # EngineCore.step + post_step
            so = sched.schedule()
            record_schedule(so, step)
            update(so, worker.execute(so, step))
            if k and so.total_num_scheduled_tokens > 0:
                sched.update_draft_token_ids(worker.drafts(so))
        step += 1
    else:
        raise RuntimeError(f"workload did not finish within {max_steps} steps")
    if timings is not None:
        timings["loop_s"] = time.perf_counter() - t0
    return steps


def time_10k(cfg: dict, workload: list[dict]) -> dict:
    """Seconds vLLM's own scheduler loop takes for ``workload`` (schedule, fake
    outputs, update_from_output; after building the scheduler and warming up)."""
    from hisparse_model.scheduler import acceptance

    run_workload(cfg, workload[:50], acceptance(None))  # warm imports and caches
    timings: dict = {}
    gc.disable()
    try:
        run_workload(cfg, workload, acceptance(None), record=False, timings=timings)
    finally:
        gc.enable()
    return {"vllm_scheduler_s": timings["loop_s"], "num_requests": len(workload)}


def _run_case(case: dict) -> dict:
    from hisparse_model.scheduler import acceptance

    gc.disable()
    try:
        failures: list[int] = []
        steps = run_workload(case["config"], case["workload"],
                             acceptance(case.get("accepted")), alloc_failures=failures)
        return {"steps": steps, "alloc_failures": len(failures)}
    except Exception as exc:  # noqa: BLE001 - reported per case
        return {"driver_error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()}
    finally:
        gc.enable()


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


def run_driver(version: str, payload: dict, *, vllm_root=None, timeout: float = 900) -> dict:
    """Run this driver in a subprocess on ``<vllm_root>/<version>`` (default the
    repo's ``.vllm``, or ``$VLLM_TARGET_ROOT``); return its JSON output."""
    import os
    import pathlib
    import subprocess

    repo = pathlib.Path(__file__).resolve().parents[2]
    root = pathlib.Path(vllm_root or os.environ.get("VLLM_TARGET_ROOT", repo / ".vllm"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(root / version), str(repo)])
    proc = subprocess.run([sys.executable, "-m", "hisparse_model.crosscheck.scheduler_driver"],
                          input=json.dumps(payload), cwd=repo, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"scheduler_driver ({version}) failed rc={proc.returncode}:\n"
                           f"{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def vllm_scheduler_10k_s(config, workload, *, vllm_root=None) -> float:
    """The benchmark's ``vllm_scheduler_10k_s``: vLLM's own scheduler (config.vllm_version)
    on ``workload`` (a Workload), in seconds; pass num_gpu_blocks large enough for it."""
    payload = {"time_10k": {"config": dataclasses.asdict(config), "workload": [
        {"prompt_token_ids": list(r.prompt_token_ids), "max_tokens": r.max_tokens,
         "arrival_step": r.arrival_step} for r in workload.requests]}}
    return run_driver(config.vllm_version, payload, vllm_root=vllm_root)["vllm_scheduler_s"]


def main() -> int:
    payload = json.load(sys.stdin)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # vLLM's prints go to stderr
    try:
        result = run(payload)
    finally:
        sys.stdout = real_stdout
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
