"""Drive vLLM's own sizing, capture-size and routing code on CPU, one knob set at a time.

Run in a subprocess against one vLLM tree that ``scripts/install_vllm_cpu.sh``
installed ``--no-deps`` together with the pinned packages it imports (torch comes
from the environment; nothing of vLLM's is installed there)::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.vllm_driver < knobs.json

stdin: a JSON list of knob dicts ``{"max_num_seqs": int, "max_model_len": int,
"max_num_batched_tokens": int | None, "num_speculative_tokens": int,
"parallel_drafting": bool (optional)}``, optionally with ``"route_ns"`` (token
counts to route; default: 1, 2, 3 and C-3 .. C+3).  Optional top-level
dict form ``{"device": {...}, "knobs": [...]}`` overrides the H200 facts below.

stdout: one JSON object ``{"vllm_version", "vllm_file", "torch_version",
"device", "results": [...]}`` with one result per knob set, in order.  vLLM's
own log output is sent to stderr so that stdout carries only the JSON.

Every number comes from vLLM's code; this file only builds inputs and stand-ins
for what a CPU-only torch cannot provide.  Paths are under ``vllm/``; line
numbers are 0.31.0 / 0.32.0 / 0.33.0.

(d) scheduler defaults, ``EngineArgs`` (engine/arg_utils.py):
    ``_set_default_chunked_prefill_and_prefix_caching_args`` (:2922 / :2987 /
    :3041) then ``_set_default_max_num_seqs_and_batched_tokens_args`` (:3032 /
    :3097 / :3151), the order ``create_engine_config`` calls them in (:2189 then
    :2534 in 0.31.0), with ``UsageContext.LLM_CLASS`` (offline ``vllm.LLM``).
    Stand-ins: a model config holding only what these two methods read
    (``max_model_len``; ``is_chunked_prefill_supported=True`` and
    ``is_prefix_caching_supported=True``, as ``ModelConfig`` reports for a
    generate-runner decoder-only model such as DeepSeek-V3.2;
    ``runner_type="generate"``; not multimodal), a parallel config with
    ``use_batched_dp_moe=False`` (DP=1), and for ``get_batch_defaults``
    (:2829 / :2894 / :2940) the platform's ``get_device_total_memory``,
    ``get_device_name`` and ``get_device_capability`` answer as an H200
    (143771 MiB, "NVIDIA H200", SM 9.0) while the two methods run.

(a) sizes: a real ``VllmConfig(device_config=DeviceConfig("cpu"),
    scheduler_config=SchedulerConfig(...the (d) values...))``; then, as the
    notes on driving vLLM on CPU say, ``attention_config.hisparse_config =
    HiSparseConfig()`` is attached after construction (construction refuses it
    off CUDA, config/vllm.py:1821-1822 / :1808-1809 / :1884-1885).  Attached,
    it makes ``use_v2_model_runner`` True (config/vllm.py:701-710 / :703-710 /
    :731-738), as on the H200.  (The CPU construction itself logs "Model Runner
    V2 requires Triton": without HiSparse attached yet, ``__post_init__``
    evaluates the property as V1; nothing it sets there feeds these sizes.)
    Speculative decoding uses a stand-in speculative config (a real
    ``SpeculativeConfig`` needs the target and draft HF configs):
    ``method="mtp"``, ``num_speculative_tokens=k``, ``parallel_drafting``,
    ``num_speculative_tokens_per_batch_size=None`` (no dynamic schedule), with
    the real ``SpeculativeConfig`` predicate methods bound to it.  Then:
    ``max_decode_query_len`` (v1/attention/backend.py:579 / :569 / :572),
    ``_get_max_swap_rows`` (v1/hisparse/runtime.py:51 / :53 / :56),
    ``get_sparse_mla_index_group_max_rows`` and the workspace
    ``SparseMLAIndexGroupBuilder.register_layer`` allocates
    (v1/attention/backends/mla/index_group.py:393 / :399 / :406 and :365-376 /
    :371-382 / :378-389), built exactly as DeepSeek-V3.2 builds it
    (models/deepseek_v32/nvidia/model.py:192-201 in 0.31.0: a
    ``[max_num_batched_tokens, index_topk]`` int32 buffer and
    ``get_sparse_mla_index_group_max_rows``).  The builder runs twice: without
    HiSparse (plain ``SparseMLAIndexGroup``) and with it (the real
    ``HiSparseMLAIndexGroup.register_layer`` -> real
    ``create_hisparse_cache_handle``, runtime.py:1277 / :1298 / :1306).
    CPU torch supplies ``torch.Stream`` / ``torch.Event`` itself (CPU no-op
    objects), so ``_create_side_stream`` / ``_create_event`` run unchanged.

    Stand-ins for the HiSparse cache handle creation: ``create_hisparse_cache_
    handle`` is called with ``device="cpu"`` (vLLM would ask
    ``torch.accelerator``, which a CPU-only torch refuses), and the
    ``HiSparseRuntime`` it constructs is replaced by ``object.__new__(
    HiSparseRuntime)`` carrying the attributes ``__init__`` sets that the
    routing reads (``__init__`` needs the compiled ``_C_cache_ops`` kernels and
    pinned memory): ``_swap_step=0``, ``is_group_leader``, ``max_num_reqs``,
    ``eager_host_mirror``, ``request_state_indices`` and an index group whose
    ``shared_topk`` is the real ``_create_shared_topk_state(cpu,
    max_swap_rows, top_k)`` with the ``max_swap_rows`` the real
    ``create_hisparse_cache_handle`` passed (runtime.py:1292, :1306 / :1313,
    :1327 / :1321, :1335).  The handle itself is the real
    ``HiSparseCacheHandle``.

(b) capture sizes: a second real ``VllmConfig`` as in (a), then what a CUDA
    start-up has and this CPU one has not, set explicitly before calling the
    real ``_set_cudagraph_sizes()`` (config/vllm.py:2388 / :2292 / :2398):

    * ``model_config``: a stand-in with ``enforce_eager=False`` (the only field
      the function reads, :2437-2439 in 0.31.0).  Without a model,
      ``__post_init__`` leaves cudagraphs off.
    * ``compilation_config.cudagraph_mode = FULL_AND_PIECEWISE``: the CPU
      platform's ``support_static_graph_mode()`` is False, so ``__post_init__``
      never calls ``_set_cudagraph_sizes`` (:1976 / :1937 / :2013) and sets
      NONE (:1979 / :1940 / :2016); on the H200 the -O2 default is
      FULL_AND_PIECEWISE (OPTIMIZATION_LEVEL_02, :316 / :303 / :311), kept
      because breakable CUDA graphs are auto-enabled for
      DeepseekV32ForCausalLM on CUDA (``_maybe_enable_breakable_cudagraph``,
      :837-865, arch list :82).  Only "not NONE" matters to the sizes.
    * ``compilation_config.cudagraph_capture_sizes = None`` and
      ``max_cudagraph_capture_size = None``: the user set neither (these are
      the CompilationConfig defaults; set again so a CPU-side default can never
      leak in, e.g. the [] / 0 of the no-cudagraph branch, :2650-2653).
    * ``current_platform.get_device_capability()`` answers SM 9.0 while the
      function runs, so ``is_device_capability_family(100)`` (:2454) evaluates
      the H200's answer (False -> 512-token ceiling).
    * the speculative stand-in of (a): ``uniform_decode_query_len`` = 1 + k
      (:680-698), ``uses_dynamic_speculative_decoding()`` False (:2496-2499).
    * not set: ``compilation_config.mode`` (VLLM_COMPILE on CPU, NONE on the
      H200 once breakable CUDA graphs are on) -- ``_set_cudagraph_sizes`` and
      ``post_init_cudagraph_sizes`` do not read it.
    * unchanged defaults that already match the H200 run: TP=1 (so the 0.31.0
      sequence-parallel filter, :2597-2605, cannot apply),
      ``performance_mode="balanced"``.

(c) routing: the real ``HiSparseMLAIndexGroup`` from (a)'s builder, its real
    ``HiSparseCacheHandle`` and stand-in runtime.  Per token count n and batch
    kind (decode-only: ``num_decode_tokens == n``; pure prefill:
    ``num_decode_tokens == 0``), the real ``prepare_for_batch(0, metadata)``
    (-> ``begin_forward``, which resets ``_swap_step``, and the handle's
    ``num_actual_tokens`` / ``num_decode_tokens`` that 0.33.0's predicate
    reads), then the real ``convert_logical_to_physical_topk(0, [n, top_k]
    indices, metadata, block_stride_rows=None, return_valid_counts=True)``.
    All context pages are resident (the handle's own default, as in every dummy
    and warmup run).  The two exits are stubbed at their first kernel: the
    group's ``_convert_once`` (Triton conversion) returns an "all_resident"
    marker; the runtime's ``swap_in`` calls the real ``HiSparseRuntime.
    _step_rows`` (runtime.py:897 / :909 / :930) and then returns a "swap_in"
    marker.  The route is the exit reached; any exception is recorded as
    ``f"{type(e).__name__}: {e}"``.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import traceback

# H200 facts for the platform stand-ins (same as hisparse_model.scheduler_defaults).
H200_DEVICE = {
    "total_memory_bytes": 143_771 * (1 << 20),  # bytes, nvidia-smi "143771 MiB"
    "name": "NVIDIA H200",
    "capability": [9, 0],
}
TOP_K = 128  # index_topk of the fix PR's tiny DeepSeek-V3.2 (hf_overrides)
HEAD_SIZE = 576  # DeepSeek MLA head (kv_lora_rank 512 + rope 64); fp8_ds_mla rows
BLOCK_SIZE = 64  # the fix PR's block_size

ALL_RESIDENT = "all_resident"
SWAP_IN = "swap_in"


def _format_exc(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def _patched(obj, name: str, value):
    """Set ``obj.name = value`` for the block, then restore it."""
    missing = object()
    old = obj.__dict__.get(name, missing) if isinstance(obj, type) else getattr(
        obj, name, missing
    )
    setattr(obj, name, value)
    try:
        yield
    finally:
        if old is missing:
            delattr(obj, name)
        else:
            setattr(obj, name, old)


@contextlib.contextmanager
def _as_h200(device: dict, *, memory_and_name: bool):
    """The current platform answers device queries as the H200 would."""
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    cls = type(current_platform)
    cap = DeviceCapability(*device["capability"])
    with contextlib.ExitStack() as stack:
        stack.enter_context(_patched(
            cls, "get_device_capability",
            classmethod(lambda c, device_id=0: cap)))
        if memory_and_name:
            stack.enter_context(_patched(
                cls, "get_device_total_memory",
                classmethod(lambda c, device_id=0: device["total_memory_bytes"])))
            stack.enter_context(_patched(
                cls, "get_device_name",
                classmethod(lambda c, device_id=0: device["name"])))
        yield


def _spec_standin(num_speculative_tokens: int, parallel_drafting: bool):
    """A speculative config for MTP with k tokens; real predicate methods bound to it."""
    from vllm.config.speculative import SpeculativeConfig

    attrs = {
        "method": "mtp",
        "num_speculative_tokens": num_speculative_tokens,
        "parallel_drafting": parallel_drafting,
        "num_speculative_tokens_per_batch_size": None,
    }
    for name in (
        "uses_dynamic_speculative_decoding",
        "use_eagle",
        "use_dflash",
        "use_dspark",
        "uses_draft_model",
        "uses_extract_hidden_states",
        "uses_draft_kv_cache",
    ):
        fn = getattr(SpeculativeConfig, name, None)
        if fn is not None:
            attrs[name] = fn
    return type("SpeculativeConfigStandIn", (), attrs)()


def _scheduler_defaults(knobs: dict, device: dict) -> dict:
    """(d): EngineArgs' own defaulting of max_num_seqs / max_num_batched_tokens."""
    from types import SimpleNamespace

    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    ea = EngineArgs(
        max_model_len=knobs["max_model_len"],
        max_num_seqs=knobs.get("max_num_seqs"),
        max_num_batched_tokens=knobs.get("max_num_batched_tokens"),
    )
    model_config = SimpleNamespace(  # what the two methods read of ModelConfig
        max_model_len=knobs["max_model_len"],
        is_chunked_prefill_supported=True,
        is_prefix_caching_supported=True,
        runner_type="generate",
        is_multimodal_model=False,
        is_mm_prefix_lm=False,
    )
    parallel_config = SimpleNamespace(use_batched_dp_moe=False)
    with _as_h200(device, memory_and_name=True):
        ea._set_default_chunked_prefill_and_prefix_caching_args(model_config)
        ea._set_default_max_num_seqs_and_batched_tokens_args(
            UsageContext.LLM_CLASS, model_config, parallel_config
        )
    return {
        "max_num_seqs": ea.max_num_seqs,
        "max_num_batched_tokens": ea.max_num_batched_tokens,
        "enable_chunked_prefill": ea.enable_chunked_prefill,
    }


def _vllm_config(sched: dict, knobs: dict):
    """A CPU VllmConfig with the scheduler values, HiSparse and speculative stand-in."""
    from vllm.config import DeviceConfig, SchedulerConfig, VllmConfig
    from vllm.config.attention import HiSparseConfig

    cfg = VllmConfig(
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=SchedulerConfig(
            max_num_seqs=sched["max_num_seqs"],
            max_num_batched_tokens=sched["max_num_batched_tokens"],
            max_model_len=knobs["max_model_len"],
            enable_chunked_prefill=sched["enable_chunked_prefill"],
            is_encoder_decoder=False,
        ),
    )
    cfg.attention_config.hisparse_config = HiSparseConfig()
    k = knobs.get("num_speculative_tokens", 0)
    if k:
        cfg.speculative_config = _spec_standin(k, bool(knobs.get("parallel_drafting")))
    return cfg


def _capture_sizes(sched: dict, knobs: dict, device: dict) -> dict:
    """(b): the real _set_cudagraph_sizes with the H200 start-up state."""
    from types import SimpleNamespace

    from vllm.config import CUDAGraphMode

    cfg = _vllm_config(sched, knobs)
    cfg.model_config = SimpleNamespace(enforce_eager=False)
    cc = cfg.compilation_config
    cc.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
    cc.cudagraph_capture_sizes = None
    cc.max_cudagraph_capture_size = None
    with _as_h200(device, memory_and_name=False):
        cfg._set_cudagraph_sizes()
    return {
        "cudagraph_capture_sizes": list(cc.cudagraph_capture_sizes),
        "max_cudagraph_capture_size": cc.max_cudagraph_capture_size,
    }


class _Routing:
    """The real HiSparse index group + handle for one config, with kernel stubs."""

    def __init__(self, cfg) -> None:
        import functools
        from types import SimpleNamespace

        import torch

        from vllm.v1.attention.backends.mla import index_group as ig
        from vllm.v1.hisparse import runtime as rt

        self.torch = torch
        RealRuntime = rt.HiSparseRuntime
        made: list = []

        def runtime_standin(config, max_num_reqs, row_width, kv_dtype, device,
                            max_swap_rows=None, index_group=None, copy_stream=None,
                            logical_topk_ready=None):
            # HiSparseRuntime.__init__ (runtime.py:690-750 in 0.31.0) minus the
            # compiled-kernel check, the hot/host caches and pinned stats.
            r = object.__new__(RealRuntime)
            r.max_num_reqs = max_num_reqs
            r.row_width = row_width
            r.kv_dtype = kv_dtype
            r.device = torch.device(device)
            r.region_stride = config.device_buffer_size
            r.max_union_rows = config.max_union_rows
            r._layer_ready_event = None
            r._swap_staged = False
            r._swap_step = 0
            r.is_group_leader = index_group is None
            if index_group is None:
                index_group = SimpleNamespace(
                    shared_topk=rt._create_shared_topk_state(
                        r.device, max_swap_rows or max_num_reqs, config.top_k
                    ),
                    followers=[],
                    leader=r,
                )
            else:
                index_group.followers.append(r)
            r.index_group = index_group
            r.eager_host_mirror = config.eager_host_mirror
            r.resident_source_index = -1
            r.request_state_indices = torch.arange(
                max_num_reqs, dtype=torch.int32, device=r.device
            )
            r.swap_in = functools.partial(self._swap_in_stub, r)
            made.append({"max_swap_rows": max_swap_rows, "max_num_reqs": max_num_reqs})
            return r

        self.max_decode_rows = ig.get_sparse_mla_index_group_max_rows(cfg)
        topk_buffer = torch.empty(
            cfg.scheduler_config.max_num_batched_tokens, TOP_K, dtype=torch.int32
        )
        plain = ig.SparseMLAIndexGroupBuilder(topk_buffer, self.max_decode_rows)
        plain_group, _ = plain.register_layer(True)  # no vllm_config: plain group
        self.plain_workspace_rows = plain_group.physical_topk_indices.shape[0]
        self.plain_group_cls = type(plain_group).__name__

        builder = ig.SparseMLAIndexGroupBuilder(topk_buffer, self.max_decode_rows)
        with _patched(rt, "HiSparseRuntime", runtime_standin), _patched(
            ig, "create_hisparse_cache_handle",
            functools.partial(rt.create_hisparse_cache_handle, device="cpu"),
        ):
            group, layer_index = builder.register_layer(
                True, cfg, head_size=HEAD_SIZE, kv_cache_dtype="fp8_ds_mla"
            )
        assert layer_index == 0 and len(made) == 1, (layer_index, made)
        self.group = group
        self.group_cls = type(group).__name__
        self.workspace_rows = group.physical_topk_indices.shape[0]
        self.runtime_args = made[0]
        cache = group.cache(0)
        self.shared_swap_rows = (
            cache.runtime.index_group.shared_topk.physical_topk_indices.shape[0]
        )
        self.runtime_max_swap_rows = getattr(cache.runtime, "max_swap_rows", None)
        # What a bound KV cache would have set (HiSparseCacheHandle.bind_cache).
        max_num_reqs = cfg.scheduler_config.max_num_seqs
        cache.view = SimpleNamespace(block_size=BLOCK_SIZE, attention_block_stride=None)
        cache.block_table = torch.zeros((max_num_reqs, 8), dtype=torch.int32)
        cache.source_block_table = cache.block_table
        group._convert_once = self._convert_once_stub
        self.q = None
        self._exit = None

    # -- kernel stubs -------------------------------------------------------
    def _convert_once_stub(self, *args, **kwargs):
        self._exit = ALL_RESIDENT
        return ALL_RESIDENT

    def _swap_in_stub(self, runtime, *, logical_topk_indices, **kwargs):
        self._exit = SWAP_IN
        runtime._step_rows(logical_topk_indices.shape[0])  # the real method
        return SWAP_IN

    # -- one routing call --------------------------------------------------
    def route(self, n: int, has_prefill: bool, q: int) -> dict:
        from types import SimpleNamespace

        torch = self.torch
        if has_prefill:  # one pure-prefill request of n tokens
            num_reqs, num_decodes, num_decode_tokens, max_query_len = 1, 0, 0, n
        else:  # decode-only: requests of at most q tokens
            num_reqs = math.ceil(n / q)
            num_decodes, num_decode_tokens, max_query_len = num_reqs, n, min(n, q)
        metadata = SimpleNamespace(
            num_actual_tokens=n,
            num_decode_tokens=num_decode_tokens,
            num_decodes=num_decodes,
            num_reqs=num_reqs,
            max_query_len=max_query_len,
            block_size=BLOCK_SIZE,
            req_id_per_token=torch.zeros(n, dtype=torch.int32),
            query_start_loc=torch.tensor([0, n], dtype=torch.int32),
            block_table=None,
            prefill=None,
        )
        logical = torch.zeros((n, TOP_K), dtype=torch.int32)
        self._exit = None
        error = None
        try:
            self.group.prepare_for_batch(0, metadata)
            out = self.group.convert_logical_to_physical_topk(
                0, logical, metadata, block_stride_rows=None, return_valid_counts=True
            )
            assert out == self._exit, (out, self._exit)
        except Exception as exc:  # noqa: BLE001 - the error text is the result
            error = _format_exc(exc)
        return {"n": n, "has_prefill": has_prefill, "path": self._exit, "error": error}


def _one(knobs: dict, device: dict) -> dict:
    from vllm.v1.attention.backend import max_decode_query_len
    from vllm.v1.hisparse.runtime import _get_max_swap_rows

    res: dict = {"knobs": knobs}
    sched = _scheduler_defaults(knobs, device)
    res["scheduler"] = sched
    cfg = _vllm_config(sched, knobs)
    res["use_v2_model_runner"] = cfg.use_v2_model_runner
    res["scheduler_after_config"] = {
        "max_num_seqs": cfg.scheduler_config.max_num_seqs,
        "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
    }
    routing = _Routing(cfg)
    q = max_decode_query_len(cfg)
    c = _get_max_swap_rows(cfg)
    res["sizes"] = {
        "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
        "max_decode_query_len": q,
        "max_swap_rows": c,
        "index_group_max_rows": routing.max_decode_rows,
        "workspace_rows": routing.workspace_rows,
        "workspace_rows_plain": routing.plain_workspace_rows,
        "shared_swap_rows": routing.shared_swap_rows,
        "runtime_max_swap_rows": routing.runtime_max_swap_rows,
        "runtime_ctor_max_swap_rows": routing.runtime_args["max_swap_rows"],
        "group_cls": routing.group_cls,
        "plain_group_cls": routing.plain_group_cls,
    }
    res["capture"] = _capture_sizes(sched, knobs, device)
    ns = knobs.get("route_ns")
    if ns is None:
        ns = sorted({1, 2, 3} | set(range(max(1, c - 3), c + 4)))
    res["routing"] = [
        routing.route(n, has_prefill, q) for n in ns for has_prefill in (False, True)
    ]
    return res


def run(payload) -> dict:
    """Compute every knob set of ``payload`` with vLLM's code (see module docstring)."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    import vllm

    if isinstance(payload, dict):
        device = {**H200_DEVICE, **payload.get("device", {})}
        knob_list = payload["knobs"]
    else:
        device, knob_list = dict(H200_DEVICE), payload
    results = []
    for knobs in knob_list:
        try:
            results.append(_one(knobs, device))
        except Exception as exc:  # noqa: BLE001 - reported per knob set
            results.append({
                "knobs": knobs,
                "driver_error": _format_exc(exc),
                "traceback": traceback.format_exc(),
            })
    return {
        "vllm_version": vllm.__version__,
        "vllm_file": vllm.__file__,
        "torch_version": torch.__version__,
        "device": device,
        "results": results,
    }


def time_config_path(knobs_list: list[dict], device: dict | None = None) -> float:
    """Seconds vLLM's own config path takes for these knob sets: scheduler defaults, then
    ``VllmConfig`` and ``_set_cudagraph_sizes`` (what ``plan`` answers; for the benchmark)."""
    import time

    dev = dict(device or H200_DEVICE)
    t0 = time.perf_counter()
    for knobs in knobs_list:
        _capture_sizes(_scheduler_defaults(knobs, dev), knobs, dev)
    return time.perf_counter() - t0


# --------------------------------------------------------------------------
# (e) rejections: HiSparse attached the way the engine attaches it
# --------------------------------------------------------------------------
#
# ``vllm.LLM(**engine/llm_args.py:llm_kwargs(knobs))`` builds, in this order
# (engine/arg_utils.py ``create_engine_config``): the ModelConfig (its
# max_model_len check, config/model.py:2471-2625 ``_get_and_verify_max_len`` in
# 0.31.0), the scheduler defaults and the SchedulerConfig (config/scheduler.py:
# 315-343 ``verify_max_model_len``: B >= S), then ``VllmConfig(...)`` *with*
# ``attention_config.hisparse_config`` and the speculative config already in
# place, so ``__post_init__`` validates the V2 configuration HiSparse forces:
# ``_set_max_num_scheduled_tokens`` (config/vllm.py:2350-2386 / ... ) and
# ``_validate_v2_model_runner`` (:3315-3323 in 0.31.0, called from :2051), which
# lists ``_get_v2_model_runner_unsupported_features`` (:3051-3100: parallel
# drafting for MTP).  Each config is a pydantic dataclass, so what the user sees
# is ``pydantic_core.ValidationError: 1 validation error for <Config>`` around
# vLLM's ValueError; ``reason`` is that ValueError's text.
#
# Stand-ins, only while ``VllmConfig`` is built: the platform answers
# ``is_cuda()`` True (HiSparse refuses other platforms, vllm.py:1821-1822) and
# ``support_hybrid_kv_cache()`` True as CUDA does (HiSparse requires the hybrid
# KV cache manager, vllm.py:2290-2298), and
# ``vllm.config.vllm.HAS_TRITON`` is True (the H200 has Triton; V2 requires it).
# The ModelConfig itself cannot be built on CPU (its architecture inspection
# imports CUDA kernels), so the max_model_len check is the real
# ``_get_and_verify_max_len`` fed the shipped config.json through the real
# ``derive_max_model_len_and_key`` (max_position_embeddings 163840; YaRN rope
# scaling, which the check does not multiply in).  The
# speculative config is a real ``SpeculativeConfig`` instance made with
# ``object.__new__`` and its field defaults (a validated one needs the target and
# draft HF configs), with method "mtp", num_speculative_tokens and
# parallel_drafting set as llm_args passes them (no speculative config at K=0).
# The attention backend and cudagraph_mode are passed as llm_args passes them.
# enforce_eager lives on the ModelConfig, which is not built; its one effect on
# these checks -- cudagraph_mode becomes NONE before the HiSparse block reads it
# (0.32.0 / 0.33.0 refuse cudagraph_mode=FULL) -- is applied to the mode passed.


def _reason(exc: BaseException) -> str:
    """vLLM's own message: the ValueError inside a pydantic ValidationError, else str()."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
        except Exception:  # noqa: BLE001
            return str(exc)
        ctx = first.get("ctx") or {}
        inner = ctx.get("error")
        if inner is not None:
            return str(inner)
        msg = str(first.get("msg", ""))
        return msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
    return str(exc)


def _speculative_config(num_speculative_tokens: int, parallel_drafting: bool):
    """A real SpeculativeConfig instance for MTP, built without its validator."""
    import dataclasses

    from vllm.config.speculative import SpeculativeConfig

    sc = object.__new__(SpeculativeConfig)
    for f in dataclasses.fields(SpeculativeConfig):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
        else:
            value = None
        object.__setattr__(sc, f.name, value)
    object.__setattr__(sc, "method", "mtp")
    object.__setattr__(sc, "num_speculative_tokens", num_speculative_tokens)
    object.__setattr__(sc, "parallel_drafting", parallel_drafting)
    return sc


def _model_max_len(max_model_len: int) -> int:
    """config/model.py ``_get_and_verify_max_len`` on the shipped DeepSeek-V3.2 config."""
    from types import SimpleNamespace

    from vllm.config.model import _get_and_verify_max_len

    from hisparse_model.engine.llm_args import model_config_text

    hf = json.loads(model_config_text())
    rope = dict(hf.get("rope_scaling") or {})
    if rope:
        rope.setdefault("rope_type", rope.get("type"))
    hf_config = SimpleNamespace(
        **{k: v for k, v in hf.items() if k != "rope_scaling"},
        rope_parameters=rope or None,
    )
    from vllm.transformers_utils.model_arch_config_convertor import (
        ModelArchConfigConvertorBase,
    )

    convertor = object.__new__(ModelArchConfigConvertorBase)  # reads hf_text_config only
    convertor.hf_config = convertor.hf_text_config = hf_config
    arch = SimpleNamespace(
        derived_max_model_len_and_key=convertor.derive_max_model_len_and_key())
    return _get_and_verify_max_len(
        hf_config=hf_config, model_arch_config=arch, tokenizer_config=None,
        max_model_len=max_model_len, disable_sliding_window=False, sliding_window=None,
    )


def check_rejection(knobs: dict, device: dict | None = None) -> dict:
    """Does ``vllm.LLM(**llm_kwargs(knobs))`` refuse these knobs?  Where, and why."""
    from vllm.config import (
        AttentionConfig,
        DeviceConfig,
        KVTransferConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.config import vllm as vllm_mod
    from vllm.config.attention import HiSparseConfig
    from vllm.platforms import current_platform

    device = {**H200_DEVICE, **(device or {})}
    res: dict = {"knobs": knobs, "rejected": False, "stage": None, "error": None,
                 "reason": None}

    def reject(stage: str, exc: BaseException) -> dict:
        res.update(rejected=True, stage=stage, error=_format_exc(exc), reason=_reason(exc))
        return res

    try:
        _model_max_len(knobs["max_model_len"])
    except Exception as exc:  # noqa: BLE001
        return reject("ModelConfig", exc)
    try:
        sched = _scheduler_defaults(knobs, device)
        scheduler_config = SchedulerConfig(
            max_num_seqs=sched["max_num_seqs"],
            max_num_batched_tokens=sched["max_num_batched_tokens"],
            max_model_len=knobs["max_model_len"],
            enable_chunked_prefill=sched["enable_chunked_prefill"],
            is_encoder_decoder=False,
        )
    except Exception as exc:  # noqa: BLE001
        return reject("SchedulerConfig", exc)
    res["max_num_batched_tokens"] = sched["max_num_batched_tokens"]
    k = knobs.get("num_speculative_tokens", 0)
    kwargs = dict(
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=scheduler_config,
        attention_config=AttentionConfig(
            hisparse_config=HiSparseConfig(),
            **({"backend": knobs["attention_backend"]}
               if knobs.get("attention_backend") not in (None, "FLASH_ATTN_MLA_SPARSE") else {})),
        kv_transfer_config=KVTransferConfig(
            kv_connector="HiSparseConnector", kv_role="kv_both",
            kv_connector_extra_config={"host_pool_gib": 1}),
    )
    if k:
        kwargs["speculative_config"] = _speculative_config(k, bool(knobs.get("parallel_drafting")))
    mode = knobs.get("cudagraph_mode")  # llm_args: compilation_config={"cudagraph_mode": ...}
    if knobs.get("enforce_eager") and mode is not None:
        # enforce_eager sets cudagraph_mode NONE (config/vllm.py:1694-1697 / :1691-1694
        # / :1766-1769) before the HiSparse checks (:1820 / :1807 / :1883) read it.
        mode = "NONE"
    if mode is not None:
        from vllm.config import CompilationConfig

        kwargs["compilation_config"] = CompilationConfig(cudagraph_mode=mode)
    # Import the connector class now, under the CPU platform: imported while the
    # platform claims CUDA, its attention imports would load the CUDA-only
    # flash-attention extension (v1/attention/backends/fa_utils.py:21-28).
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    KVConnectorFactory.get_connector_class(kwargs["kv_transfer_config"])
    plat = type(current_platform)
    try:
        with _patched(plat, "is_cuda", lambda self: True), \
                _patched(plat, "support_hybrid_kv_cache", classmethod(lambda cls: True)), \
                _patched(vllm_mod, "HAS_TRITON", True), \
                _as_h200(device, memory_and_name=True):
            cfg = VllmConfig(**kwargs)
            res["use_v2_model_runner"] = cfg.use_v2_model_runner
    except Exception as exc:  # noqa: BLE001
        return reject("VllmConfig", exc)
    return res


def run_rejections(payload) -> dict:
    """``check_rejection`` for every knob set of ``payload`` (a list, or {"knobs", "device"})."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import warnings

    warnings.filterwarnings("ignore")
    import vllm

    if isinstance(payload, dict):
        device, knob_list = payload.get("device"), payload["knobs"]
    else:
        device, knob_list = None, payload
    results = []
    for knobs in knob_list:
        try:
            results.append(check_rejection(knobs, device))
        except Exception as exc:  # noqa: BLE001 - reported per knob set
            results.append({"knobs": knobs, "driver_error": _format_exc(exc),
                            "traceback": traceback.format_exc()})
    return {"vllm_version": vllm.__version__, "vllm_file": vllm.__file__, "results": results}


def rejections_main() -> int:
    """stdin JSON knob sets -> stdout JSON ``run_rejections`` (vLLM's logs go to stderr)."""
    payload = json.load(sys.stdin)
    out = sys.stdout
    sys.stdout = sys.stderr
    try:
        result = run_rejections(payload)
    finally:
        sys.stdout = out
    json.dump(result, out)
    out.write("\n")
    out.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    payload = json.load(sys.stdin)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything vLLM prints must not corrupt the JSON
    try:
        result = run(payload)
    finally:
        sys.stdout = out
    json.dump(result, out)
    out.write("\n")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
