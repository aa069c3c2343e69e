"""Drive vLLM's own sizing, capture-size and routing code on CPU, one knob set at a time.

Run in a subprocess against one vLLM tree that ``scripts/install_vllm_cpu.sh``
installed ``--no-deps`` together with the pinned packages it imports (torch comes
from the environment; nothing of vLLM's is installed there)::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.vllm_driver < knobs.json

stdin: a JSON list of knob dicts ``{"max_num_seqs": int, "max_model_len": int,
"max_num_batched_tokens": int | None, "num_speculative_tokens": int,
"parallel_drafting": bool (optional)}``, optionally with ``"route_ns"`` (token
counts to route; default: 1, 2, 3 and C-3 .. C+3).  Optional top-level
dict form ``{"device": {...}, "knobs": [...]}`` overrides the H200 facts
(``standins.H200_DEVICE``).

stdout: one JSON object ``{"vllm_version", "vllm_file", "torch_version",
"device", "results": [...]}`` with one result per knob set, in order.  vLLM's
own log output is sent to stderr so that stdout carries only the JSON.

Every number comes from vLLM's code; this driver only builds inputs and stand-ins
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

(e) rejections (what ``vllm.LLM(**llm_kwargs(knobs))`` refuses, and why):
    ``rejections.py``, run through ``rejections_main`` (re-exported here).

The code lives in small modules next to this one: ``standins.py`` (the H200
platform answers, ``_patched``, the speculative stand-in), ``config_path.py``
((d), (a)'s config, (b)), ``routing_standin.py`` (``_Routing``: (a)'s index
group and cache handle, (c)), ``rejections.py`` ((e)) and ``driver_io.py``
(JSON in and out).  Their names used elsewhere are re-exported here.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import sys

from hisparse_model.crosscheck.config_path import (
    _capture_sizes,
    _scheduler_defaults,
    _vllm_config,
    time_config_path,
)
from hisparse_model.crosscheck.driver_io import (
    _format_exc,
    device_and_knobs,
    json_main,
    quiet_vllm,
    run_each,
)
from hisparse_model.crosscheck.rejections import (
    _model_max_len,
    _reason,
    _speculative_config,
    check_rejection,
    rejections_main,
    run_rejections,
)
from hisparse_model.crosscheck.routing_standin import (
    ALL_RESIDENT,
    BLOCK_SIZE,
    HEAD_SIZE,
    SWAP_IN,
    TOP_K,
    _Routing,
)
from hisparse_model.crosscheck.standins import (
    H200_DEVICE,
    _as_h200,
    _patched,
    _spec_standin,
    uses_v2_model_runner,
)

__all__ = [  # run, main, and the names re-exported from the modules above
    "ALL_RESIDENT", "BLOCK_SIZE", "H200_DEVICE", "HEAD_SIZE", "SWAP_IN", "TOP_K",
    "_Routing", "_as_h200", "_capture_sizes", "_format_exc", "_model_max_len", "_patched",
    "_reason", "_scheduler_defaults", "_spec_standin", "_speculative_config", "_vllm_config",
    "check_rejection", "device_and_knobs", "json_main", "main", "quiet_vllm",
    "rejections_main", "run", "run_each", "run_rejections", "time_config_path",
]

def _one(knobs: dict, device: dict) -> dict:
    from vllm.v1.attention.backend import max_decode_query_len
    from vllm.v1.hisparse.runtime import _get_max_swap_rows

    res: dict = {"knobs": knobs}
    sched = _scheduler_defaults(knobs, device)
    res["scheduler"] = sched
    cfg = _vllm_config(sched, knobs)
    res["use_v2_model_runner"] = uses_v2_model_runner(cfg)
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
    quiet_vllm()
    import torch
    import vllm

    device, knob_list = device_and_knobs(payload, H200_DEVICE)
    results = run_each(_one, knob_list, device)
    return {
        "vllm_version": vllm.__version__,
        "vllm_file": vllm.__file__,
        "torch_version": torch.__version__,
        "device": device,
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    return json_main(run)


if __name__ == "__main__":
    sys.exit(main())
