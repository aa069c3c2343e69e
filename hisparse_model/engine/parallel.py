"""Tensor- and data-parallel live runs: sizes, engine arguments, environment, workload split.

Pure Python (no vLLM, no torch): what the runner (:mod:`.live`, :mod:`.dp_live`)
and the engine child (:mod:`.child`) need to start a two-GPU run, kept apart so
every piece is testable on a CPU.

Sizes.  ``tensor_parallel_size`` and ``data_parallel_size`` are vLLM's names.
Once :class:`~hisparse_model.knobs.Knobs` declares them they are knobs; until
then they travel beside the knobs (a sweep entry's ``knobs`` object or the
``live`` flags), and :func:`split_knobs` / :func:`sizes` read both ways.

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
the engine core is its own process); the per-rank rows carry the worker's own
``ValueError``.

DP = N runs N engine children, one per rank, as vLLM's offline data-parallel
example does (``examples/features/data_parallel/data_parallel_offline.py`` in
vLLM's repository): ``VLLM_DP_RANK``, ``VLLM_DP_RANK_LOCAL``, ``VLLM_DP_SIZE``,
``VLLM_DP_MASTER_IP=127.0.0.1``, ``VLLM_DP_MASTER_PORT``, read by the engine
when no ``data_parallel_size`` is passed (vllm/config/parallel.py:957-961
`VLLM_DP_SIZE`; passing ``data_parallel_size`` to ``LLM`` is refused,
vllm/entrypoints/llm.py:284-296 `data_parallel_size`).  Both GPUs stay visible:
rank r's worker takes ``cuda:r`` itself (vllm/v1/worker/gpu_worker.py:409-420
`dp_local_rank`).  Each rank serves its contiguous share of the workload
(:func:`split_workload`, the example's rule).

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

MAX_SIZE = 8  # one host of the lent machines has at most 8 GPUs
PARALLEL_KNOBS = ("tensor_parallel_size", "data_parallel_size")

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


def knob_declared(name: str) -> bool:
    """Whether :class:`Knobs` already declares ``name`` (after the scale issue's merge)."""
    from ..knobs import knob_specs

    return any(s.name == name for s in knob_specs())


def check_size(name: str, value) -> int:
    """``value`` as a parallel size, or ``ValueError`` naming the knob."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not 1 <= value <= MAX_SIZE:
        raise ValueError(f"{name} must be between 1 and {MAX_SIZE}, got {value}")
    return value


def add_live_args(p, typed) -> None:
    """``live --tensor-parallel-size N --data-parallel-size N``, unless the knobs declare them
    (then the knob flags exist already)."""
    for name, what in (("tensor_parallel_size", "GPUs one engine's model is split over (TP)"),
                       ("data_parallel_size", "engines, one per GPU, each serving its share "
                                              "of the workload (DP)")):
        if not knob_declared(name):
            p.add_argument("--" + name.replace("_", "-"), dest=name, type=typed(name, int),
                           default=1, metavar="N", help=f"{what} (default: 1)")


def from_args(args) -> dict:
    """The sizes given on the command line (``getattr``: flags or knob flags)."""
    return {n: getattr(args, n) for n in PARALLEL_KNOBS if getattr(args, n, None) is not None}


def split_knobs(raw: dict) -> tuple[dict, dict]:
    """A sweep entry's ``knobs`` object -> (what :class:`Knobs` takes, the parallel sizes).

    Sizes that :class:`Knobs` does not declare yet are taken out of the dict;
    declared ones stay in it (and are read back by :func:`sizes`)."""
    knobs = dict(raw)
    par = {}
    for name in PARALLEL_KNOBS:
        if name in knobs and not knob_declared(name):
            par[name] = check_size(name, knobs.pop(name))
    return knobs, par


def sizes(knobs, extra: dict | None = None) -> dict:
    """``{"tensor_parallel_size": t, "data_parallel_size": d}`` from the knobs (when they
    declare them) or ``extra`` (the values carried beside them); 1 when neither has it."""
    extra = extra or {}
    out = {}
    for name in PARALLEL_KNOBS:
        value = extra.get(name, getattr(knobs, name, 1))
        out[name] = check_size(name, value)
    if out["tensor_parallel_size"] * out["data_parallel_size"] > MAX_SIZE:
        raise ValueError("tensor_parallel_size x data_parallel_size must be at most "
                         f"{MAX_SIZE} GPUs, got {out['tensor_parallel_size']} x "
                         f"{out['data_parallel_size']}")
    return out


def check_live(par: dict, has_workload: bool) -> None:
    """What ``live`` runs of parallel sizes: TP or DP (not both), DP on a workload only."""
    tp, dp = par["tensor_parallel_size"], par["data_parallel_size"]
    if tp > 1 and dp > 1:
        raise ValueError("live runs tensor_parallel_size or data_parallel_size above 1, "
                         f"not both (got {tp} and {dp})")
    if dp > 1 and not has_workload:
        raise ValueError("data_parallel_size > 1 serves a workload (--workload or a sweep "
                         "entry's workload): the ranks split its requests")


def is_parallel(par: dict | None) -> bool:
    return bool(par) and (par["tensor_parallel_size"] > 1 or par["data_parallel_size"] > 1)


def gpus_needed(par: dict) -> int:
    return par["tensor_parallel_size"] * par["data_parallel_size"]


def llm_kwargs(par: dict) -> dict:
    """What a parallel run adds to ``LLM(...)`` (:func:`.llm_args.llm_kwargs`)."""
    if not is_parallel(par):
        return {}
    kw = dict(MULTICAST_OFF_ARGS)
    if par["tensor_parallel_size"] > 1:
        kw["tensor_parallel_size"] = par["tensor_parallel_size"]
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


def split_workload(n: int, rank: int, size: int) -> range:
    """The request indices DP rank ``rank`` serves: the example's contiguous split.

    ``floor = n // size``, ``remainder = n % size``, rank r takes
    ``[start(r), start(r + 1))`` with ``start(r) = r * floor + min(r, remainder)``:
    the first ``remainder`` ranks get one request more.  The example then gives an
    empty rank a placeholder prompt so that its ``generate`` call takes part in the
    collectives; the runner's own loop keeps an empty rank stepping instead (it runs
    dummy batches), so no placeholder request is added.
    """
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} outside data_parallel_size {size}")
    floor, remainder = divmod(n, size)

    def start(r: int) -> int:
        return r * floor + min(r, remainder)

    return range(start(rank), start(rank + 1))


def rank_requests(workload: list[dict], rank: int, size: int) -> list[int]:
    """The indices of the requests DP rank ``rank`` serves: a request's own ``dp_rank``
    where it has one (the model's workload field), else :func:`split_workload`'s rule."""
    split = {i: r for r in range(size) for i in split_workload(len(workload), r, size)}
    return [i for i, req in enumerate(workload)
            if (split[i] if req.get("dp_rank") is None else req["dp_rank"]) == rank]


def provenance(par: dict) -> dict:
    """What a parallel recording says about how it was run."""
    out = {**par, "multicast_off_env": dict(MULTICAST_OFF_ENV), **MULTICAST_OFF_ARGS}
    if par["tensor_parallel_size"] > 1:
        out["worker_extension_cls"] = WORKER_EXTENSION
    if par["data_parallel_size"] > 1:
        out["engine_core"] = ENGINE_CORE
        out["workload_split"] = "contiguous, as vLLM's data_parallel_offline.py example"
    return out
