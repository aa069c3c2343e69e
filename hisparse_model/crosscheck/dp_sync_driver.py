"""Drive vLLM's own DP sync in two CPU processes joined by a gloo group.

Run in a subprocess against one vLLM tree::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.dp_sync_driver < pairs.json

stdin: ``{"configs": [{"max_num_seqs", "max_num_batched_tokens", "max_model_len",
"cudagraph_mode", "capture_sizes"}, ...],
"pairs": [[config index, batch of rank 0, batch of rank 1], ...]}``; a batch is
``{"query_lens": [...], "decode_graph_eligible": bool}`` or null (the rank
scheduled nothing and runs ``execute_dummy_batch``).

stdout: ``{"vllm_version", "seconds", "results": [[rank 0, rank 1], ...]}``, each
``{"mode", "padded", "dummy"}`` (``dummy``: the dummy batch's query lengths,
else null).

Per pair, both processes run what ``GPUModelRunner.execute_model`` runs before
the forward: the uniform-decode count from vLLM's ``get_uniform_decode_token_count``
(a dummy: one request of q = 1 tokens, ``_dummy_run(..., uniform_decode=True)``),
then vLLM's ``dispatch_cg_and_sync_dp`` -> ``sync_cudagraph_and_dp_padding``
(vllm/v1/worker/gpu/dp_utils.py:44-210 `def sync_cudagraph_and_dp_padding`), whose
all-reduce crosses the gloo group; a dummy rank then builds its batch with vLLM's
``InputBatch.make_dummy`` from ``batch_desc.num_reqs or num_reqs``
(vllm/v1/worker/gpu/model_runner.py:1794 `dummy_num_reqs = batch_desc.num_reqs or num_reqs`).
The graph manager is vLLM's ``CudaGraphManager`` with its real ``_init_candidates``
and ``dispatch`` over the configuration's capture sizes (those the model computes,
checked against vLLM's ``_set_cudagraph_sizes`` by test_vllm_crosscheck.py), marked
captured; 0.34.0's manager takes its split sizes (PIECEWISE token sizes, FULL decode request
counts) from vLLM's own ``_set_cudagraph_sizes`` for the configuration's S and B
(``config_path._capture_sizes``).  Stand-ins: the DP group coordinator (its CPU group is the gloo group),
the manager's config objects, the input buffers (CPU tensors).

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from types import SimpleNamespace

Q = 1  # tokens per decode request (the driver covers MTP-free configurations)


def _split(cfg: dict) -> dict:
    """0.34.0's split capture sizes for ``cfg`` from vLLM's own ``_set_cudagraph_sizes``
    (config_path._capture_sizes: the PIECEWISE graphs' token sizes, the FULL decode graphs'
    request counts); {} before 0.34.0."""
    from hisparse_model.crosscheck.config_path import _capture_sizes
    from hisparse_model.crosscheck.standins import H200_DEVICE

    sched = {"max_num_seqs": cfg["max_num_seqs"],
             "max_num_batched_tokens": cfg["max_num_batched_tokens"],
             "enable_chunked_prefill": True}
    knobs = {"max_model_len": cfg["max_model_len"], "num_speculative_tokens": 0}
    return _capture_sizes(sched, knobs, H200_DEVICE)["split"]


def _manager(V, cfg: dict):
    """vLLM's CudaGraphManager over ``cfg``'s capture sizes, built without a GPU."""
    cgu = V["cgu"]
    mode = V["CUDAGraphMode"][cfg["cudagraph_mode"]]
    sizes = cfg["capture_sizes"]
    m = object.__new__(cgu.CudaGraphManager)
    m.vllm_config = SimpleNamespace(speculative_config=None, uniform_decode_query_len=Q,
                                    cache_config=SimpleNamespace(use_kda_recoverssm=False))
    m.compilation_config = SimpleNamespace(cudagraph_capture_sizes=list(sizes),
                                           max_cudagraph_capture_size=max(sizes, default=0),
                                           **(_split(cfg) if sizes else {}))
    m.max_num_reqs, m.decode_query_len, m.cudagraph_mode = cfg["max_num_seqs"], Q, mode
    m.varlen_decode, m.ubatch_runner, m.lora_capture_cases = False, None, [0]
    m._lora_dispatch_map, m._max_lora_case = {}, 0
    m._candidates, m._capture_descs, m.graphs = {}, {}, {}
    # 0.34.0: decode graphs by request count per query length
    # (vllm/v1/worker/gpu/cudagraph_utils.py:166-190@0.34.0 `self.decode_max_reqs = {`)
    m.decode_request_sizes, m.decode_max_reqs, m._decode_descs = None, {Q: m.max_num_reqs}, {}
    m._init_candidates()
    m._graphs_captured = True  # start-up captured them
    return m


def _buffers(torch, size: int = 4096):
    return SimpleNamespace(device=torch.device("cpu"),
                           seq_lens=torch.zeros(size, dtype=torch.int32),
                           query_start_loc=torch.zeros(size + 1, dtype=torch.int32),
                           input_ids=torch.zeros(size, dtype=torch.int64),
                           positions=torch.zeros(size, dtype=torch.int64),
                           is_padding=torch.zeros(size, dtype=torch.bool))


def _rank_main(rank: int, store: str, payload: dict, out_path: str) -> None:
    import torch
    import torch.distributed as dist

    from vllm.config.compilation import CUDAGraphMode
    from vllm.v1.worker.gpu import cudagraph_utils as cgu
    from vllm.v1.worker.gpu import dp_utils
    from vllm.v1.worker.gpu import model_runner as mr
    from vllm.v1.worker.gpu.input_batch import InputBatch

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    group = dist.group.WORLD

    class _DPGroup:  # the coordinator's CPU side: the gloo group
        cpu_group = group

        @staticmethod
        def cpu_all_reduce_(tensor):
            dist.all_reduce(tensor, group=group)
            return tensor

    dp_utils.get_dp_group = lambda: _DPGroup
    V = {"cgu": cgu, "CUDAGraphMode": CUDAGraphMode}
    managers = [_manager(V, cfg) for cfg in payload["configs"]]
    buffers = _buffers(torch)
    results = []
    for index, *batches in payload["pairs"]:
        mine = batches[rank]
        if mine is None:  # execute_dummy_batch -> _dummy_run(q, uniform_decode=True)
            lens, eligible, dummy = [Q], True, True
        else:
            lens, eligible, dummy = mine["query_lens"], mine["decode_graph_eligible"], False
        num_reqs, num_toks, longest = len(lens), sum(lens), max(lens)
        uniform = mr.get_uniform_decode_token_count(num_reqs, num_toks, longest, eligible)
        max_query_len = longest if (dummy or eligible) else None  # a prefill: None
        desc, _ = dp_utils.dispatch_cg_and_sync_dp(
            managers[index], num_reqs, num_toks, uniform, 2, rank,
            max_query_len=max_query_len, uniform_decode=uniform == Q)
        shape = None
        if dummy:
            batch = InputBatch.make_dummy(desc.num_reqs or num_reqs, desc.num_tokens, buffers,
                                          max_query_len=desc.max_query_len)
            shape = [int(x) for x in batch.num_scheduled_tokens]
        results.append({"mode": desc.cg_mode.name, "padded": int(desc.num_tokens),
                        "dummy": shape})
    dist.destroy_process_group()
    with open(out_path, "w") as f:
        json.dump(results, f)


def run(payload: dict) -> dict:
    """Both ranks over every pair; (rank 0, rank 1) results per pair."""
    import multiprocessing as mp

    import vllm

    start = time.perf_counter()
    ctx = mp.get_context("fork")  # vLLM is imported once, before the fork
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        outs = [os.path.join(tmp, f"rank{r}.json") for r in range(2)]
        procs = [ctx.Process(target=_rank_main, args=(r, store, payload, outs[r]))
                 for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        codes = [p.exitcode for p in procs]
        if codes != [0, 0]:
            raise RuntimeError(f"DP rank processes exited with {codes}")
        ranks = []
        for path in outs:
            with open(path) as f:
                ranks.append(json.load(f))
    return {"vllm_version": vllm.__version__, "seconds": time.perf_counter() - start,
            "results": [list(pair) for pair in zip(*ranks)]}


def main() -> int:
    from hisparse_model.crosscheck.driver_io import json_main, quiet_vllm

    quiet_vllm()
    return json_main(run)


if __name__ == "__main__":
    sys.exit(main())
