"""Feed a workload through vLLM's real scheduler on CPU, one ``EngineCore`` step per call.

``run_workload`` replays ``EngineCore.step`` + ``post_step`` (sync) or
``step_with_batch_queue`` (async) around the scheduler of
``scheduler_build.build_scheduler``; ``FakeWorker`` is the model runner (sampled
tokens from the acceptance input, MTP drafts, HiSparse worker feedback), as
``scheduler_driver``'s docstring describes.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import time
from collections import deque

from hisparse_model.crosscheck.scheduler_build import build_scheduler

TOKEN_BASE = 10**6


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
        index = {}  # 0.34.0's output has no req_id_to_index (vllm/v1/outputs.py:267-269@0.34.0 `req_ids: list[str]`)
        if "req_id_to_index" in getattr(ModelRunnerOutput, "__dataclass_fields__", {}):
            index = {"req_id_to_index": {r: i for i, r in enumerate(req_ids)}}
        return ModelRunnerOutput(req_ids=req_ids, **index, sampled_token_ids=sampled,
                                 kv_connector_output=kv_out)

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
            "drafts": not getattr(so, "skip_drafts", False),  # a 0.33.0 field
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
