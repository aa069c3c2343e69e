"""Run-time wrappers on vLLM's own methods (no vLLM file is edited).

Installed inside the engine child process, before ``LLM(...)`` is built, with
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` so the engine core, the worker and the model
runner all live in this process and every wrapper sees every batch.

What is wrapped, and why (paths under ``vllm/``, 0.31.0 lines):

* ``HiSparseMLAIndexGroup.convert_logical_to_physical_topk``
  (``v1/attention/backends/mla/index_group.py:224-260``): the top-k routing.
  One log row per call on layer 0 of an index group (each DeepSeek-V3.2 layer
  has its own indexer, so one call per layer and forward): token count, workspace
  rows, swap capacity, the attention metadata's decode/actual token counts, the
  forward's CUDA-graph mode, the route taken and any error raised.
* ``HiSparseCacheHandle.swap_in`` (``v1/hisparse/runtime.py:1216``) and
  ``SparseMLAIndexGroup._convert_once`` (``index_group.py:114``): mark which
  route the routing call took (swap_in or the all-resident fallback).
* Start-up phases, to label each row: ``Worker.determine_available_memory``
  (memory profile), ``GPUModelRunner.profile_cudagraph_memory``,
  ``Worker.compile_or_warm_up_model`` with its ``kernel_warmup``,
  ``warmup_kernels`` (JIT warmup prefill/decodes) and ``capture_model``.

``routing="fix"`` swaps in the upstream fix's predicate on 0.31.0: a batch goes
to swap_in only if it fits the swap rows (``max_swap_rows``), otherwise to the
same all-resident fallback 0.32.0 uses (``index_group.py:236`` in 0.32.0).
"""

from __future__ import annotations

import functools
import threading
import traceback
from contextlib import contextmanager

_state = threading.local()


class RouteLog:
    """Collects routing rows and phase marks for one engine run."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.phase_stack: list[str] = ["init"]
        self.engine_report: dict = {}
        self.patches: list[str] = []

    @property
    def phase(self) -> str:
        return self.phase_stack[-1]

    @contextmanager
    def in_phase(self, name: str):
        self.phase_stack.append(name)
        try:
            yield
        finally:
            self.phase_stack.pop()

    def add(self, row: dict) -> None:
        """Append a row, folding it into the previous one when only the call count differs."""
        row = {"phase": self.phase, **row}
        if self.rows:
            last = dict(self.rows[-1])
            calls = last.pop("calls")
            if last == row:
                self.rows[-1]["calls"] = calls + 1
                return
        row["calls"] = 1
        self.rows.append(row)

    def first_error(self, phase_prefix: str) -> str | None:
        for row in self.rows:
            if row["phase"].startswith(phase_prefix) and row.get("error"):
                return row["error"]
        return None


def _phase_wrapper(log: RouteLog, name: str, fn):
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with log.in_phase(name):
            return fn(*args, **kwargs)

    return wrapped


def _forward_mode() -> str | None:
    try:
        from vllm.forward_context import get_forward_context, is_forward_context_available

        if not is_forward_context_available():
            return None
        mode = get_forward_context().cudagraph_runtime_mode
        return getattr(mode, "name", str(mode))
    except Exception:  # pragma: no cover - version drift
        return None


def _swap_capacity(cache) -> int:
    return int(cache.runtime.index_group.shared_topk.physical_topk_indices.shape[0])


def snapshot_engine(log: RouteLog, worker) -> None:
    """Record the sizes as the engine itself reports them (first call wins)."""
    if "capture_sizes" in log.engine_report or "snapshot_error" in log.engine_report:
        return
    report: dict = {}
    try:
        cfg = worker.vllm_config
        cc = cfg.compilation_config
        report["capture_sizes"] = sorted(cc.cudagraph_capture_sizes or [])
        report["max_cudagraph_capture_size"] = cc.max_cudagraph_capture_size
        report["cudagraph_mode"] = getattr(cc.cudagraph_mode, "name", str(cc.cudagraph_mode))
        report["compile_sizes"] = list(cc.compile_sizes or [])
        report["max_num_batched_tokens"] = cfg.scheduler_config.max_num_batched_tokens
        report["max_num_seqs"] = cfg.scheduler_config.max_num_seqs
        report["enable_chunked_prefill"] = cfg.scheduler_config.enable_chunked_prefill
        report["use_v2_model_runner"] = bool(getattr(cfg, "use_v2_model_runner", False))
        from vllm.v1.attention.backend import max_decode_query_len
        from vllm.v1.hisparse.runtime import _get_max_swap_rows

        report["max_decode_query_len"] = max_decode_query_len(cfg)
        report["swap_capacity"] = _get_max_swap_rows(cfg)
        backends = set()
        for layer in cc.static_forward_context.values():
            backend = getattr(layer, "attn_backend", None)
            if backend is not None and hasattr(backend, "get_name"):
                backends.add(backend.get_name())
        report["attention_backends"] = sorted(backends)
    except Exception as exc:  # pragma: no cover - recorded, not fatal
        report["snapshot_error"] = f"{type(exc).__name__}: {exc}"
    log.engine_report.update(report)


def _snapshot_kv_cache(log: RouteLog, worker) -> None:
    """The KV pool the JIT warmup sizes its requests from (``kv_cache_config.num_blocks``)."""
    try:
        kv = worker.model_runner.kv_cache_config
        log.engine_report["kv_cache_num_blocks"] = int(kv.num_blocks)
        log.engine_report["kv_cache_groups"] = len(kv.kv_cache_groups)
    except Exception as exc:  # pragma: no cover - recorded, not fatal
        log.engine_report["kv_cache_error"] = f"{type(exc).__name__}: {exc}"


def _wrap_worker_phase(log: RouteLog, cls, method: str, phase: str) -> None:
    """Snapshot the engine's sizes, then run ``cls.method`` labelled ``phase``."""
    orig = getattr(cls, method)

    @functools.wraps(orig)
    def wrapped(self, *a, **k):
        snapshot_engine(log, self)
        with log.in_phase(phase):
            return orig(self, *a, **k)

    setattr(cls, method, wrapped)


def install(log: RouteLog, routing: str = "stock", narrow_router_warmup: bool = False,
            on_kv_cache_ready=None) -> None:
    """Wrap vLLM's methods for this process. Call before building ``LLM``.

    ``on_kv_cache_ready()`` is called once, when ``Worker.initialize_from_config``
    has allocated the KV cache (memory profiling is over and this engine's big
    allocation is made; ``v1/worker/gpu_worker.py:786`` / ``:853`` / ``:866`` in
    0.31.0 / 0.32.0 / 0.33.0): the engine child releases its start-up lock there.
    """
    from vllm.v1.attention.backends.mla import index_group as ig
    from vllm.v1.hisparse import runtime as rt
    from vllm.v1.worker import gpu_worker
    from vllm.v1.worker.gpu import model_runner as mr

    # --- route markers -----------------------------------------------------
    orig_swap_in = rt.HiSparseCacheHandle.swap_in
    orig_once = ig.SparseMLAIndexGroup._convert_once

    @functools.wraps(orig_swap_in)
    def swap_in(self, *args, **kwargs):
        if getattr(_state, "routing", False):
            _state.route = "swap_in"
        return orig_swap_in(self, *args, **kwargs)

    @functools.wraps(orig_once)
    def convert_once(self, *args, **kwargs):
        if getattr(_state, "routing", False) and _state.route is None:
            _state.route = "all_resident"
        return orig_once(self, *args, **kwargs)

    rt.HiSparseCacheHandle.swap_in = swap_in
    ig.SparseMLAIndexGroup._convert_once = convert_once

    # --- the routing itself ---------------------------------------------------
    orig_convert = ig.HiSparseMLAIndexGroup.convert_logical_to_physical_topk

    def fixed_convert(self, layer_index, logical_topk_indices, attn_metadata, **kw):
        """0.31.0 with the upstream fix: route on the swap rows, not the workspace."""
        cache = self.cache(layer_index)
        num_tokens = logical_topk_indices.shape[0]
        if _swap_capacity(cache) < num_tokens <= self.physical_topk_indices.shape[0]:
            assert cache.all_context_pages_resident
            leader = self.cache(0)
            return self._convert_once(
                layer_index,
                logical_topk_indices,
                attn_metadata.req_id_per_token[:num_tokens],
                leader.block_table,
                leader.view.block_size,
                block_stride_rows=leader.view.attention_block_stride,
                return_valid_counts=kw["return_valid_counts"],
            )
        return orig_convert(self, layer_index, logical_topk_indices, attn_metadata, **kw)

    inner = fixed_convert if routing == "fix" else orig_convert
    if routing == "fix":
        log.patches.append("routing=fix: 0.31.0 routes on max_swap_rows (upstream fix)")

    @functools.wraps(orig_convert)
    def convert(self, layer_index, logical_topk_indices, attn_metadata, **kw):
        if layer_index != 0:
            return inner(self, layer_index, logical_topk_indices, attn_metadata, **kw)
        cache = self.cache(layer_index)
        row = {
            "num_tokens": int(logical_topk_indices.shape[0]),
            "workspace_rows": int(self.physical_topk_indices.shape[0]),
            "swap_capacity": _swap_capacity(cache),
            "num_decode_tokens": int(getattr(attn_metadata, "num_decode_tokens", -1)),
            "num_actual_tokens": int(getattr(attn_metadata, "num_actual_tokens", -1)),
            "all_context_pages_resident": bool(cache.all_context_pages_resident),
            "cudagraph_mode": _forward_mode(),
        }
        _state.routing, _state.route = True, None
        try:
            out = inner(self, layer_index, logical_topk_indices, attn_metadata, **kw)
        except Exception as exc:
            row["route"] = _state.route
            row["error"] = f"{type(exc).__name__}: {exc}"
            log.add(row)
            raise
        finally:
            _state.routing = False
        row["route"] = _state.route
        row["error"] = None
        log.add(row)
        return out

    ig.HiSparseMLAIndexGroup.convert_logical_to_physical_topk = convert

    # --- phases -------------------------------------------------------------
    for method, phase in (("determine_available_memory", "memory_profile"),
                          ("compile_or_warm_up_model", "compile_warmup")):
        _wrap_worker_phase(log, gpu_worker.Worker, method, phase)

    orig_ifc = gpu_worker.Worker.initialize_from_config

    @functools.wraps(orig_ifc)
    def initialize_from_config(self, *a, **k):
        try:
            return orig_ifc(self, *a, **k)
        finally:
            _snapshot_kv_cache(log, self)
            if on_kv_cache_ready is not None:
                on_kv_cache_ready()

    gpu_worker.Worker.initialize_from_config = initialize_from_config
    gpu_worker.kernel_warmup = _phase_wrapper(log, "kernel_warmup", gpu_worker.kernel_warmup)
    gpu_worker.warmup_kernels = _phase_wrapper(log, "jit_warmup", gpu_worker.warmup_kernels)
    mr.GPUModelRunner.capture_model = _phase_wrapper(
        log, "capture", mr.GPUModelRunner.capture_model
    )
    mr.GPUModelRunner.profile_cudagraph_memory = _phase_wrapper(
        log, "cudagraph_memory_profile", mr.GPUModelRunner.profile_cudagraph_memory
    )

    if narrow_router_warmup:
        # vLLM JIT-compiles the CuTe-DSL ll_bf16 router GEMM for M = 1..16 at start
        # (model_executor/warmup/kernel_warmup.py); 6.8 s on a cold H200, so only on
        # request (HISPARSE_LL_BF16_WARMUP=narrow) is it narrowed to M = 1, the other
        # sizes compiling on first use.  Routing is not involved.
        from vllm.model_executor.warmup import kernel_warmup as kw_mod

        if hasattr(kw_mod, "_LL_BF16_WARMUP_M_RANGE"):
            kw_mod._LL_BF16_WARMUP_M_RANGE = range(1, 2)
            log.patches.append("kernel_warmup._LL_BF16_WARMUP_M_RANGE=range(1, 2)")


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
