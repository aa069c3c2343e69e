"""Tensor- and data-parallel live runs: sizes, engine arguments, environment, workload split.

Pure Python (no vLLM, no torch): what the runner (:mod:`.live`, :mod:`.dp_live`)
and the engine child (:mod:`.child`) need to start a two-GPU run, kept apart so
every piece is testable on a CPU.

Sizes.  ``tensor_parallel_size`` and ``data_parallel_size`` are knobs
(:class:`~hisparse_model.model.knobs.Knobs` declares and validates them; the ``live``
flags are the knob flags, ``-tp`` / ``-dp``, and a sweep entry's ``knobs`` object
goes through ``Knobs``).  What the runner adds is :func:`check_live`: TP or DP,
not both; DP on a workload only; no pipeline or decode-context parallelism.

TP = N runs one ``vllm.LLM(tensor_parallel_size=N)``.  Its workers are separate
processes started by vLLM's multiprocessing executor, so the routing is
recorded inside each worker: ``worker_extension_cls`` names
:class:`.tp_worker.RankRecorder`, whose module vLLM imports in every worker
before the worker is built (vllm/v1/worker/worker_base.py:289-313
`worker_extension_cls`); importing it installs :mod:`.instrument` there
(:mod:`.tp_worker`).  The engine core stays in the child's process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so a worker's exception reaches the
caller as ``RuntimeError: Worker failed with error '<the worker's text>'``
(vllm/v1/executor/multiproc_executor.py:438-442 `Worker failed with error`,
the text is ``str(exception)`` from vllm/v1/executor/multiproc_executor.py:998-999
`ResponseStatus.FAILURE`), not ``EngineDeadError`` (that is what a caller sees when
the engine core is its own process; :func:`hisparse_model.model.parallel.caller_error`
says which); the per-rank rows carry the worker's own ``ValueError``.

DP = N runs N engine children, one per rank, as vLLM's offline data-parallel
example does (``examples/features/data_parallel/data_parallel_offline.py`` in
vLLM's repository): ``VLLM_DP_RANK``, ``VLLM_DP_RANK_LOCAL``, ``VLLM_DP_SIZE``,
``VLLM_DP_MASTER_IP=127.0.0.1``, ``VLLM_DP_MASTER_PORT``, read by the engine
when no ``data_parallel_size`` is passed (vllm/config/parallel.py:957-961
`VLLM_DP_SIZE`; passing ``data_parallel_size`` to ``LLM`` is refused,
vllm/entrypoints/llm.py:284-296 `data_parallel_size`).  Both GPUs stay visible:
rank r's worker takes ``cuda:r`` itself (vllm/v1/worker/gpu_worker.py:409-420
`dp_local_rank`).  Each rank serves the requests the model gives it
(:func:`rank_requests`: a request's ``dp_rank``, else the example's contiguous
split, :func:`hisparse_model.schedule.data_parallel.assign_ranks`), an empty rank the
one-token placeholder the runner adds for it, as the model does
(:func:`hisparse_model.schedule.data_parallel.with_placeholders`).

Which engine core a DP rank gets.  The example keeps vLLM's default
(``VLLM_ENABLE_V1_MULTIPROCESSING=1``): the engine core is its own process, a
``DPEngineCoreProc`` for a MoE model (vllm/v1/engine/core.py:1386-1389
`DPEngineCoreProc`), whose busy loop runs a dummy batch whenever this rank ran
nothing while another rank still has work (vllm/v1/engine/core.py:2284-2287
`execute_dummy_batch`) and all-reduces "unfinished" every ``dp_sync_interval``
steps.  The runner keeps the engine core in-process, as every single-GPU
recording did, so that one ``llm_engine.step()`` is one engine step on every
rank: then ``LLMEngine`` builds the DP group itself
(vllm/v1/engine/llm_engine.py:83-88 `stateless_init_dp_group`), all-reduces
"unfinished" on every ``has_unfinished_requests()``
(vllm/v1/engine/llm_engine.py:203-209 `has_unfinished_requests_dp`) and runs
the dummy batch in the next ``step()`` (vllm/v1/engine/llm_engine.py:306-309
`execute_dummy_batch`).  The dummy batch is the same call
(``execute_dummy_batch``) in both; what differs is when it is asked for (every
step here, not on the busy loop's clock).  The recording says which
(``provenance.parallel.engine_core``).
"""

from __future__ import annotations

import socket

# NVLink multicast (NVLS) off in every process of a parallel run: the lent
# two-GPU machines do not support it (docs/gpu.md).  Recorded in provenance.env.
#   NCCL_NVLS_ENABLE=0                 NCCL's own NVLS algorithms
#   TORCH_SYMM_MEM_DISABLE_MULTICAST=1 torch symmetric memory without multicast objects
#   NVSHMEM_DISABLE_NVLS=1             NVSHMEM (torch symmetric memory's backend)
#   VLLM_ALLREDUCE_USE_SYMM_MEM=0      vLLM's torch-symmetric-memory all-reduce (on by default)
#   VLLM_USE_NCCL_SYMM_MEM=0           NCCL window registration (vLLM's default, made explicit)
#   VLLM_ALLREDUCE_USE_FLASHINFER=0    FlashInfer's all-reduce, the other TP-group all-reduce on
#                                      by default (it disables itself where FlashInfer is absent,
#                                      as in the offline bundle)
# Defaults: vllm/envs.py:1911-1912 `VLLM_ALLREDUCE_USE_SYMM_MEM`,
# vllm/envs.py:2040-2041 `VLLM_USE_NCCL_SYMM_MEM`,
# vllm/envs.py:1915-1916 `VLLM_ALLREDUCE_USE_FLASHINFER`.
MULTICAST_OFF_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
    "VLLM_USE_NCCL_SYMM_MEM": "0",
    "VLLM_ALLREDUCE_USE_FLASHINFER": "0",
}
# ... and custom all-reduce (CUDA IPC buffers) off through the engine argument.
MULTICAST_OFF_ARGS = {"disable_custom_all_reduce": True}
ENV_PREFIXES = ("VLLM_", "NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")  # recorded in provenance.env

DP_MASTER_IP = "127.0.0.1"
WORKER_EXTENSION = "hisparse_model.engine.tp_worker.RankRecorder"
ENGINE_CORE = ("in-process EngineCore; LLMEngine all-reduces 'unfinished' on every step and "
               "runs the dummy batch in the next step() (not the DPEngineCoreProc busy loop "
               "of vLLM's default multiprocessing)")


def check_live(knobs, has_workload: bool) -> None:
    """What ``live`` runs of the parallel knobs: TP or DP (not both), DP on a workload
    only, and neither pipeline nor decode-context parallelism (not passed to the engine;
    HiSparse refuses both, :mod:`hisparse_model.model.parallel`)."""
    tp, dp = knobs.tensor_parallel_size, knobs.data_parallel_size
    for name in ("pipeline_parallel_size", "decode_context_parallel_size"):
        if getattr(knobs, name) > 1:
            raise ValueError(f"{name}: live runs tensor_parallel_size or data_parallel_size "
                             "only (HiSparse refuses this one; predict says so)")
    if tp > 1 and dp > 1:
        raise ValueError("live runs tensor_parallel_size or data_parallel_size above 1, "
                         f"not both (got {tp} and {dp})")
    if dp > 1 and not has_workload:
        raise ValueError("data_parallel_size > 1 serves a workload (--workload or a sweep "
                         "entry's workload): the ranks split its requests")


def is_parallel(knobs) -> bool:
    return knobs.tensor_parallel_size > 1 or knobs.data_parallel_size > 1


def gpus_needed(knobs) -> int:
    return knobs.tensor_parallel_size * knobs.data_parallel_size


def llm_kwargs(knobs) -> dict:
    """What a parallel run adds to ``LLM(...)`` (:func:`.llm_args.llm_kwargs`)."""
    if not is_parallel(knobs):
        return {}
    kw = dict(MULTICAST_OFF_ARGS)
    if knobs.tensor_parallel_size > 1:
        kw["tensor_parallel_size"] = knobs.tensor_parallel_size
        kw["worker_extension_cls"] = WORKER_EXTENSION
    return kw  # data parallelism comes from the environment (dp_env), never from LLM(...)


def dp_env(rank: int, size: int, port: int) -> dict:
    """The environment of DP rank ``rank`` of ``size`` (one host: local rank = rank)."""
    return {
        "VLLM_DP_RANK": str(rank),
        "VLLM_DP_RANK_LOCAL": str(rank),
        "VLLM_DP_SIZE": str(size),
        "VLLM_DP_MASTER_IP": DP_MASTER_IP,
        "VLLM_DP_MASTER_PORT": str(port),
    }


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the example uses vLLM's ``get_open_port``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((DP_MASTER_IP, 0))
        return s.getsockname()[1]


def rank_requests(workload: list[dict], rank: int, size: int) -> list[int]:
    """The indices of the requests DP rank ``rank`` serves, as the model assigns them
    (:func:`hisparse_model.schedule.data_parallel.assign_ranks`: a request's own ``dp_rank``, else
    vLLM's offline example's contiguous split); ``workload`` holds every rank's requests,
    an idle rank's placeholder included (:func:`hisparse_model.schedule.data_parallel.with_placeholders`)."""
    from ..schedule.data_parallel import assign_ranks
    from ..schedule.workload import Workload

    ranks = assign_ranks(Workload.from_json(workload), size)
    return [i for i, r in enumerate(ranks) if r == rank]


def provenance(knobs) -> dict:
    """What a parallel recording says about how it was run."""
    out = {"tensor_parallel_size": knobs.tensor_parallel_size,
           "data_parallel_size": knobs.data_parallel_size,
           "multicast_off_env": dict(MULTICAST_OFF_ENV), **MULTICAST_OFF_ARGS}
    if knobs.tensor_parallel_size > 1:
        out["worker_extension_cls"] = WORKER_EXTENSION
    if knobs.data_parallel_size > 1:
        out["engine_core"] = ENGINE_CORE
        out["workload_split"] = ("contiguous, as vLLM's data_parallel_offline.py example; an "
                                 "empty rank serves a one-token placeholder request")
    return out
