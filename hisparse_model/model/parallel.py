"""Tensor, data, pipeline and decode-context parallelism: what vLLM refuses and what TP changes.

HiSparse adds two refusals to vLLM's own parallel checks and nothing else
(vllm/config/vllm.py:1820-1828 `HiSparse does not support pipeline parallelism.`;
vllm/config/vllm.py:1807-1815@0.32.0 `HiSparse does not support decode context parallelism.`;
vllm/config/vllm.py:1883-1891@0.33.0 `HiSparse does not support pipeline parallelism.`).
The model's attention heads (the tiny model's 8, DeepSeek-V3.2's 128) must split evenly over the TP ranks
(vllm/config/model.py:1504-1509 `must be divisible by tensor parallel size`), and
DCP reuses the TP ranks (vllm/config/parallel.py:567-570 `must be divisible by dcp_size`).

Tensor parallelism sizes nothing HiSparse uses differently: the capture sizes are
filtered by TP only under sequence parallelism, off by default
(vllm/config/vllm.py:307 `"enable_sp": IS_DENSE`, vllm/config/vllm.py:147 `IS_DENSE = False`;
0.32.0 and 0.33.0 have no such filter); C and W are read
from the global scheduler config on every rank (vllm/v1/hisparse/runtime.py:51-57
`def _get_max_swap_rows`, vllm/v1/attention/backends/mla/index_group.py:393-398
`def get_sparse_mla_index_group_max_rows`), every worker runs the same scheduler
output, and the sparse indexer is not split over heads, so top-k, capture sizes,
batches and routing are the same on every rank and the outcome equals TP = 1.  What
changes is how a crash reaches the caller (:func:`error_surface`).

Data parallelism is a workload question: one scheduler per rank, and every
engine step the ranks agree on a CUDA-graph mode and a padded token count
(``data_parallel.py``).  ``max_num_seqs``, B and the KV pool are per rank
(vllm/config/scheduler.py:100 `which applies per data-parallel rank`).
"""

from __future__ import annotations

from .served_model import model_of

# What the offline LLM's caller sees when the engine raises, by engine layout
# (:func:`caller_error`), written as the last line of the caller's traceback
# (``traceback.format_exception_only``: a vLLM class is named with its module).
ENGINE_DEAD = ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
               "See stack trace (above) for the root cause.")
ENGINE_INIT_FAILED = ("RuntimeError: Engine core initialization failed. See root cause above. "
                      "Failed core proc(s): {{'{proc}': 1}}")

def parallel_config_refusal(knobs) -> str | None:
    """``ParallelConfig``'s own check, made before the scheduler config is built."""
    tp, dcp = knobs.tensor_parallel_size, knobs.decode_context_parallel_size
    if tp % dcp:  # vllm/config/parallel.py:567-570 `must be divisible by dcp_size`
        return f"decode_context_parallel_size: tp_size={tp} must be divisible by dcp_size={dcp}."
    return None


def vllm_config_refusal(knobs) -> str | None:
    """``VllmConfig``'s parallel checks, in its order: heads over TP, then HiSparse's two."""
    tp, heads = knobs.tensor_parallel_size, model_of(knobs).num_attention_heads
    # vllm/config/model.py:1504-1509 `must be divisible by tensor parallel size`
    if heads % tp:
        return (f"tensor_parallel_size: Total number of attention heads ({heads}) "
                f"must be divisible by tensor parallel size ({tp}).")
    if knobs.pipeline_parallel_size > 1:
        return "pipeline_parallel_size: HiSparse does not support pipeline parallelism."
    if knobs.decode_context_parallel_size > 1:
        return ("decode_context_parallel_size: HiSparse does not support decode context "
                "parallelism.")
    return None


def worker_failed(error: str) -> str:
    """The executor's line for a worker that raised ``error`` (``ValueError: ...``).

    The worker sends ``str(exception)``, the message without its type
    (vllm/v1/executor/multiproc_executor.py:998-999 `str(output)`); the executor
    raises it inside a RuntimeError
    (vllm/v1/executor/multiproc_executor.py:438-442 `Worker failed with error`;
    vllm/v1/executor/multiproc_executor.py:443-447@0.32.0 `Worker failed with error`;
    0.33.0 adds a fault-tolerant branch, off by default, vllm/config/parallel.py:466@0.33.0
    `enable_fault_tolerance: bool = False`, and otherwise raises the same,
    vllm/v1/executor/multiproc_executor.py:520-528@0.33.0 `Worker failed with error`).
    """
    message = error.split(": ", 1)[1] if error.startswith("ValueError: ") else error
    return (f"RuntimeError: Worker failed with error '{message}', please check the stack "
            "trace above for the root cause")


def caller_error(knobs, error: str, *, startup: bool, in_process: bool,
                 dp_rank: int = 0) -> str:
    """What ``LLM(...)`` (``startup``) or ``LLM.generate`` raises in the caller when the
    engine raises ``error``, as its traceback's last line.

    In process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: ``LLMEngine`` gets an
    ``InprocClient``, vllm/v1/engine/llm_engine.py:164
    `multiprocess_mode=envs.VLLM_ENABLE_V1_MULTIPROCESSING`,
    vllm/v1/engine/core_client.py:133 `return InprocClient`), the engine core's
    exception is the caller's, at start-up and serving alike:

    * TP = 1: the worker runs in the engine core's process and its exception is
      re-raised as is (vllm/v1/executor/uniproc_executor.py:114-116 `future.set_exception(e)`);
    * TP > 1: every worker process raises, replies ``str(exception)``, and the
      executor raises :func:`worker_failed`'s RuntimeError.  Serving, the sampling
      call that follows a failed forward returns nothing
      (vllm/v1/worker/gpu/model_runner.py:2053-2055
      `The prior execute_model call must have failed.`)
      and the engine core re-raises the forward's failure
      (vllm/v1/engine/core.py:749 `exec_model_fut.result()`).

    With vLLM's default multiprocessing the engine core is a process of its own:

    * at start-up it dies before its handshake (vllm/v1/engine/core.py:1431-1436
      `EngineCore failed to start.`, exit status 1) and the caller's ``LLM(...)``
      raises vllm/v1/engine/utils.py:1348-1351 `Engine core initialization failed. `
      naming the process (vllm/v1/engine/utils.py:227 `EngineCore_DP{global_index}`,
      ``EngineCore`` without DP);
    * serving, it tells the client it is dead (vllm/v1/engine/core.py:1436
      `engine_core._send_engine_dead()`) and the caller gets ``EngineDeadError``
      (vllm/v1/engine/core_client.py:550-552 `raise EngineDeadError()`), whose
      text names no cause (vllm/v1/engine/exceptions.py:16 `ENGINE_DEAD_MESSAGE`;
      vllm/v1/engine/exceptions.py:19-21@0.33.0 `ENGINE_DEAD_MESSAGE`, the same words).
    """
    tp = knobs.tensor_parallel_size
    if in_process:
        return error if tp == 1 else worker_failed(error)
    if startup:
        proc = f"EngineCore_DP{dp_rank}" if knobs.data_parallel_size > 1 else "EngineCore"
        return ENGINE_INIT_FAILED.format(proc=proc)
    return ENGINE_DEAD


def error_surface(knobs, error: str | None, *, startup: bool = False,
                  dp_rank: int = 0) -> dict | None:
    """What the user of the offline ``vllm.LLM`` sees when the engine raises ``error``.

    ``caller``: with vLLM's default multiprocessing; ``in_process_caller``: with
    ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (how the live runner and every committed
    recording run); both from :func:`caller_error`.  ``log`` lists each text the
    log holds once: the HiSparse error (under TP > 1 each worker process logs its
    traceback, vllm/v1/executor/multiproc_executor.py:1058 `WorkerProc hit an exception.`)
    and, under TP > 1, the executor's wrap (:func:`worker_failed`); ``workers``:
    how many worker tracebacks hold the error.
    """
    if error is None:
        return None
    tp = knobs.tensor_parallel_size
    log = [error] if tp == 1 else [error, worker_failed(error)]
    return {"caller": caller_error(knobs, error, startup=startup, in_process=False,
                                   dp_rank=dp_rank),
            "log": log, "workers": tp,
            "in_process_caller": caller_error(knobs, error, startup=startup, in_process=True)}


def split_requests(num_requests: int, dp_size: int) -> list[int]:
    """The DP rank of each request when the workload does not say (``dp_rank``).

    vLLM's offline data-parallel example
    (examples/features/data_parallel/data_parallel_offline.py in vLLM's repository, formerly
    examples/offline_inference/data_parallel.py; not shipped in the wheel) gives rank r the contiguous slice
    ``[start(r), start(r + 1))`` with ``start(r) = r * floor + min(r, remainder)``,
    ``floor, remainder = divmod(len(prompts), dp_size)``: the first ``remainder``
    ranks take one request more.
    """
    floor, remainder = divmod(num_requests, dp_size)
    return [r for r in range(dp_size) for _ in range(floor + (r < remainder))]
