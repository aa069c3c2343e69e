"""Drive vLLM's own start-up code on CPU and list every batch that reaches the HiSparse routing.

Run in a subprocess against one vLLM tree installed by ``scripts/install_vllm_cpu.sh``::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.startup_driver < knobs.json

stdin: a JSON list of knob dicts (``max_num_seqs``, ``max_model_len``,
``max_num_batched_tokens`` (None: vLLM's default), ``num_speculative_tokens``,
``attention_backend``, ``enforce_eager``, ``cudagraph_mode`` (None: default),
``routing`` ("stock"/"fix"), optional ``num_gpu_blocks`` (the KV blocks the
engine holds during the JIT warmup; default 10**6, i.e. never binding) and
``kv_cache_groups`` (default 1)), or ``{"device": {...}, "knobs": [...]}``.

stdout: ``{"vllm_version", "vllm_file", "cpu_seconds", "results": [...]}``; one
result per knob set.  A knob set vLLM refuses (``vllm_driver.check_rejection``,
run first) is ``{"knobs", "rejected": true, "stage", "reason", "batches": []}``;
otherwise ``{"knobs", "rejected": false, "sizes", "split", "cudagraph_mode",
"capture_sizes", "drafter_fused_decode", "batches": [...], "error"}`` where each
batch is ``{phase, runner, query_lens, num_tokens, num_reqs, num_decode_tokens,
cudagraph_mode, forwards, routed, route, error}`` (draft-decode batches also carry
``label: "draft decode"``; a start-up failure outside the routing is one batch
with no tokens, ``forwards: 0``, the exception text and ``where`` (file:line)).
The list stops at the first error: the engine is dead after it.  A knob set that
fails inside the driver carries ``driver_error`` and ``traceback``.

Batches: one per captured graph (``forwards`` = its forwards: 2 passes, times
K-1 for a fused draft-decode graph; 1 if the first pass raised), one per warmup
step and runner (the target forward and the drafter's prefill over the same
batch are one batch with ``runner: "both"``; the drafter's K-1 draft-decode
forwards of that step are the next batch, ``runner: "drafter"``).  Phases:
``cudagraph_memory_profile``, ``jit_warmup``, ``capture``.

What runs for real (paths under ``vllm/``; line numbers 0.31.0 / 0.32.0 / 0.33.0):

* scheduler defaults, q, C, W, capture sizes, the HiSparse index group and the
  routing (``prepare_for_batch``, ``convert_logical_to_physical_topk``,
  ``_step_rows``): ``hisparse_model.crosscheck.vllm_driver`` (imported).
* the cudagraph mode: ``enforce_eager`` -> NONE (config/vllm.py:1694 / :1691 /
  :1766), else the user's mode or the -O2 default FULL_AND_PIECEWISE (breakable
  CUDA graphs keep the piecewise half), then the runner's real
  ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` with the sparse-MLA
  builder's own ``_cudagraph_support`` (UNIFORM_BATCH for both backends; the
  DSA indexer builder answers UNIFORM_BATCH or ALWAYS, so the minimum is the
  sparse one's), ``splitting_ops=[]`` (compilation mode NONE under breakable
  CUDA graphs) and ``piecewise_capture_available=True``.
* the memory-profiling captures: the real ``profile_cudagraph_memory``
  (v1/worker/gpu/cudagraph_utils.py:854 / :873 / :922), which calls the real
  ``GPUModelRunner.capture_model(profile_only=True)`` (model_runner.py:1019 /
  :1053 / :1086) with the target's FULL descriptors cut to
  ``_FULL_GRAPH_PROFILING_SAMPLES`` = 2 (:848 / :867 / :916).
* the captures: the real ``capture_model``, the real ``ModelCudaGraphManager``
  (``_init_candidates`` :249 / :251 / :256, ``capture`` :399 / :419 / :424,
  ``create_forward_fn`` :650 / :669 / :676), ``prepare_inputs_to_capture``
  (:767 / ...) and ``InputBatch.make_dummy`` (input_batch.py:127 / :127 / :135).
* the MTP drafter: the real ``MTPSpeculator`` methods ``init_cudagraph_manager``,
  ``capture`` and ``propose`` (spec_decode/autoregressive/speculator.py:123,
  :143, :197 in 0.31.0; spec_decode/target_dependent_ar/speculator.py:89, :109,
  :165 in 0.32.0 / 0.33.0), its ``SpeculatorCudaGraphManager``, the real
  fused/unfused choice (``_configure_fused_multi_step_decode`` /
  ``_configure_decode_metadata_update``) from the builders'
  ``supports_draft_decode_metadata_update``, the real ``_multi_step_decode`` /
  ``_fused_multi_step_decode`` / ``_generate_fused_drafts`` loops and the real
  ``_build_uniform_attn_metadata``.
* the JIT warmup: the real ``warmup_kernels`` (v1/worker/gpu/warmup.py:213 /
  :218 / :218; 0.33.0 runs ``_warmup_kernels`` a second time, greedy, under
  speculative decoding, :241-247) with a fake worker whose ``execute_model``
  orders each step's requests with the real ``sort_batch_req_ids``
  (model_runner.py:2398 / :2435 / :2507), skips steps of no tokens as
  ``execute_model`` does (:1701 / :1744 / :1793), dispatches with the real
  ``CudaGraphManager.dispatch`` (NONE: nothing is captured yet), and whose
  ``sample_tokens`` calls the real ``propose`` (model_runner.py:2204 / :2239 /
  :2308).
* per forward: the real ``split_decodes_and_prefills`` (v1/attention/backends/
  utils.py:799 / :803 / :837) with the threshold of the builder's real
  ``_init_reorder_batch_threshold`` chain (sparse_mla_attention.py:253-265 ->
  v1/attention/backend.py:666-691) and its ``require_uniform_decodes``
  (FLASHMLA_SPARSE: True, flashmla_sparse.py:319 / :351 / :351); the backend
  hand-off is the real ``FlashAttnMLASparseImpl.forward_mqa`` (0.31.0 /
  0.32.0), ``SparseMLACommonImpl.forward_mqa`` (0.33.0) or
  ``FlashMLASparseImpl._forward_bf16_kv`` (kv_cache_dtype "auto" -> the bf16
  path, flashmla_sparse.py:1378-1389 in 0.31.0); ``routing="fix"`` (0.31.0)
  wraps the conversion as the engine's recorder does (engine/instrument.py
  ``fixed_convert``): C < n <= W goes all-resident.

Stand-ins (what a CPU-only torch cannot run, or what does not matter here): CUDA
graph objects, graph pools, streams, ``graph_capture``, the offloader,
``torch.accelerator`` memory calls, ``gc.collect`` (1 s per call with vLLM
loaded), random request ids, ``set_forward_context`` (records the attention
metadata), ``get_pp_group`` (single rank), the breakable-CUDA-graph wrapper
(calls the model: attention runs eagerly inside breakable graphs), the model (a
recorder returning zeros), ``model_state.prepare_attn`` (hands the dummy
batch's query lengths on), ``build_attn_metadata`` of the drafter (the same),
block tables / slot mappings, the drafter's Triton input kernels
(``prepare_prefill_inputs``, ``prepare_decode_inputs``), the attention kernels,
``physical_kv_cache`` / ``stage_prefill_rows``, the CUDA-only
``vllm.vllm_flash_attn`` module (imported by the FLASH_ATTN_MLA_SPARSE module,
never called), and the runner / speculator / worker objects (``object.__new__``
carrying the attributes the driven methods read).  ``make_dummy`` runs once
per (num_reqs, num_tokens, max_query_len): its result is a function of those.
The minimal profiling KV cache (``_init_minimal_kv_cache_for_profiling``) and
its teardown are replaced by creating the runner's and the speculator's graph
managers as ``initialize_kv_cache`` does (model_runner.py:703-746 in 0.31.0);
the JIT warmup's KV cache is ``num_gpu_blocks`` blocks in ``kv_cache_groups``
groups of 64-token blocks.  Not driven: ``profile_run`` (``skip_attn=True``:
no routing), ``kernel_warmup`` (no sparse-MLA forward with HiSparse on SM90),
compile-warmup ``_dummy_run`` sizes (none: DeepSeek-V3.2 is not
torch-compiled), the speculator's ``_prefill`` / ``_generate_draft`` bodies
(recorded instead: one forward each over the metadata they are given).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import traceback
import types
from types import SimpleNamespace

DEFAULT_NUM_GPU_BLOCKS = 10**6  # "plenty": the H200 at 30 % holds far more than any S needs
ALL_RESIDENT = "all_resident"
SWAP_IN = "swap_in"

_V = {}  # vLLM modules and stand-in state, filled once per process by _setup()


# --------------------------------------------------------------------------
# one-time process setup
# --------------------------------------------------------------------------


def _setup() -> dict:
    """Import vLLM's modules and install the process-wide CPU stand-ins (once)."""
    if _V:
        return _V
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import warnings

    warnings.filterwarnings("ignore")
    import importlib

    import torch

    # vllm.vllm_flash_attn refuses to import without its CUDA extension; the
    # FLASH_ATTN_MLA_SPARSE backend module only imports a kernel from it, which
    # the driver never calls (the MQA kernel is stubbed).
    try:
        importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface")
    except ImportError:
        fa = types.ModuleType("vllm.vllm_flash_attn")
        fai = types.ModuleType("vllm.vllm_flash_attn.flash_attn_interface")
        fai.flash_attn_varlen_func = None
        fa.flash_attn_interface = fai
        sys.modules["vllm.vllm_flash_attn"] = fa
        sys.modules["vllm.vllm_flash_attn.flash_attn_interface"] = fai

    import vllm
    from vllm.config import CUDAGraphMode
    from vllm.config.compilation import CompilationMode
    from vllm.model_executor.layers.attention import sparse_mla_attention as sma
    from vllm.v1.attention import backend as attn_backend
    from vllm.v1.attention.backends import utils as attn_utils
    from vllm.v1.attention.backends.mla import flashattn_mla_sparse as fas
    from vllm.v1.attention.backends.mla import flashmla_sparse as fms
    from vllm.v1.attention.backends.mla import index_group as ig
    from vllm.v1.worker.gpu import cudagraph_utils as cgu
    from vllm.v1.worker.gpu import dp_utils
    from vllm.v1.worker.gpu import input_batch as ib
    from vllm.v1.worker.gpu import model_runner as mr
    from vllm.v1.worker.gpu import warmup as wu
    from vllm.v1.worker.gpu.spec_decode import speculator as spec_base
    from vllm.v1.worker.gpu.spec_decode.mtp import speculator as mtp

    ar_name = ("vllm.v1.worker.gpu.spec_decode.autoregressive"
               if importlib.util.find_spec("vllm.v1.worker.gpu.spec_decode.autoregressive")
               else "vllm.v1.worker.gpu.spec_decode.target_dependent_ar")
    ar = importlib.import_module(ar_name + ".speculator")
    ar_cg = importlib.import_module(ar_name + ".cudagraph_utils")

    from hisparse_model.crosscheck import vllm_driver as vd

    rec = _Recorder()

    # --- CUDA graph machinery --------------------------------------------
    class _Graph:  # torch.cuda.CUDAGraph
        def replay(self):  # FULL replays are not part of start-up
            raise AssertionError("replay during start-up")

    torch.cuda.CUDAGraph = _Graph
    torch.cuda.graph = lambda *a, **k: contextlib.nullcontext()
    for name in ("synchronize", "empty_cache"):
        setattr(torch.accelerator, name, lambda *a, **k: None)
    torch.accelerator.get_memory_info = lambda *a, **k: (0, 0)
    cgu.graph_capture = lambda *a, **k: contextlib.nullcontext()
    cgu.is_global_first_rank = lambda: False
    cgu.get_offloader = lambda: SimpleNamespace(
        sync_prev_onload=lambda: None, join_after_forward=lambda: None)
    cgu.current_stream = lambda: None
    if hasattr(cgu, "set_graph_pool_id"):
        cgu.set_graph_pool_id = lambda *a, **k: None
    if hasattr(cgu, "capture_pool"):
        cgu.capture_pool = lambda pool, *a, **k: contextlib.nullcontext(pool)
    if hasattr(cgu, "capture_outside_cumem_pool"):
        cgu.capture_outside_cumem_pool = lambda *a, **k: contextlib.nullcontext()
    cgu.get_pp_group = lambda: SimpleNamespace(is_first_rank=True, is_last_rank=True)
    cgu.is_breakable_cudagraph_enabled = lambda: True  # auto-on for DeepseekV32 on CUDA

    class _Breakable:  # BreakableCUDAGraphWrapper: runs the model (attention eager)
        _all_instances: list = []

        def __init__(self, model, vllm_config, key_fn=None):
            self.model = model

        def __call__(self, **kw):
            return self.model(**kw)

        @classmethod
        def clear_all_graphs(cls):
            pass

    cgu.BreakableCUDAGraphWrapper = _Breakable
    cgu.CUDAGraphWrapper = _Breakable
    cgu.set_forward_context = rec.forward_context
    cgu.build_slot_mappings_by_layer = lambda *a, **k: {}
    cgu.release_hisparse_profiling_cache = lambda *a, **k: None
    plat = type(cgu.current_platform)
    plat.get_global_graph_pool = classmethod(lambda cls: None)
    plat.graph_pool_handle = classmethod(lambda cls: None)
    if not hasattr(plat, "_global_graph_pool"):
        plat._global_graph_pool = None
    mr.lock_workspace = lambda: None

    # --- speed: nothing here needs the collector or random request ids ----
    import gc
    import itertools

    gc.collect = lambda *a, **k: 0  # capture/profiling call it per graph (1 s each here)
    _ids = itertools.count()
    ib.random_uuid = lambda: f"{next(_ids):x}"
    # make_dummy is a pure function of its arguments for what is read here
    # (num_scheduled_tokens, num_tokens): run it once per shape.
    real_make_dummy = ib.InputBatch.make_dummy.__func__
    dummy_cache: dict = {}

    def make_dummy(cls, num_reqs, num_tokens, input_buffers, max_query_len=None,
                   is_padding=True):
        key = (num_reqs, num_tokens, max_query_len)
        hit = dummy_cache.get(key)
        if hit is None:
            hit = dummy_cache[key] = real_make_dummy(
                cls, num_reqs, num_tokens, input_buffers, max_query_len=max_query_len,
                is_padding=is_padding)
        return hit

    ib.InputBatch.make_dummy = classmethod(make_dummy)

    # --- drafter: its Triton input-preparation kernels ----------------------
    ar.prepare_prefill_inputs = lambda *a, **k: None
    ar.prepare_decode_inputs = lambda *a, **k: None
    ar.build_slot_mappings_by_layer = lambda *a, **k: {}
    spec_base.build_attn_metadata = rec.build_attn_metadata

    # --- hand-off kernels: none is reached before the routing decides ------
    fas.triton_convert_req_index_to_global_index = lambda *a, **k: (None, None)
    fms.triton_convert_req_index_to_global_index = lambda *a, **k: (None, None)
    fms.flat_kv_row_view = lambda *a, **k: (None, None)
    if hasattr(sma, "triton_convert_req_index_to_global_index"):
        sma.triton_convert_req_index_to_global_index = lambda *a, **k: (None, None)

    _V.update(
        torch=torch, vllm=vllm, CUDAGraphMode=CUDAGraphMode,
        CompilationMode=CompilationMode, sma=sma, attn_backend=attn_backend,
        attn_utils=attn_utils, fas=fas, fms=fms, ig=ig, cgu=cgu, dp_utils=dp_utils,
        ib=ib, mr=mr, wu=wu, spec_base=spec_base, mtp=mtp, ar=ar, ar_cg=ar_cg, vd=vd,
        rec=rec, version=vllm.__version__,
    )
    return _V


# --------------------------------------------------------------------------
# the recorder: attention metadata in, one row per forward out
# --------------------------------------------------------------------------


class _Meta:
    """What the stand-in ``prepare_attn`` / ``build_attn_metadata`` hand to a forward."""

    __slots__ = ("query_lens", "num_tokens")

    def __init__(self, query_lens, num_tokens):
        tolist = getattr(query_lens, "tolist", None)
        self.query_lens = tuple(tolist() if tolist else query_lens)
        self.num_tokens = int(num_tokens)


class _Recorder:
    def __init__(self):
        self.rows: list[dict] = []
        self.phase = "?"
        self.attn = None  # _Attention of the current knob set
        self._meta = None  # metadata of the forward context being entered
        self.cg_mode = None  # the graph mode of the capture pass running now
        self.unit = 0  # one engine step or one captured graph: forwards grouped within it

    # set_forward_context stand-in (the target's capture forwards)
    @contextlib.contextmanager
    def forward_context(self, attn_metadata, vllm_config, **kw):
        prev = self._meta
        self._meta = attn_metadata
        try:
            yield
        finally:
            self._meta = prev

    # build_attn_metadata stand-in (the drafter's uniform decode metadata)
    def build_attn_metadata(self, *, num_reqs, num_tokens, query_start_loc_cpu, **kw):
        qsl = [int(x) for x in query_start_loc_cpu[: num_reqs + 1]]
        return _Meta([b - a for a, b in zip(qsl, qsl[1:])], num_tokens)

    def forward(self, runner: str, meta, cg_mode) -> None:
        """One forward of ``runner`` over ``meta``: split, hand off, route (raises like vLLM)."""
        name = getattr(cg_mode, "name", str(cg_mode))
        row = self.attn.run(meta)
        self.rows.append({"phase": self.phase, "runner": runner, "cudagraph_mode": name,
                          "_unit": self.unit, **row})
        if row["error"] is not None:
            raise _EngineError(row["error"])


class _EngineError(Exception):
    """The routing raised: vLLM's start-up dies here."""


# --------------------------------------------------------------------------
# attention: split, hand-off, routing -- per knob set, memoised per batch shape
# --------------------------------------------------------------------------


class _Attention:
    def __init__(self, cfg, knobs: dict, routing, version: str):
        V = _setup()
        torch = V["torch"]
        self.torch = torch
        self.routing = routing
        self.group = routing.group
        self.backend = knobs.get("attention_backend") or "FLASH_ATTN_MLA_SPARSE"
        flashmla = self.backend == "FLASHMLA_SPARSE"
        builder_cls = (V["fms"].FlashMLASparseMetadataBuilder if flashmla
                       else V["fas"].FlashAttnMLASparseMetadataBuilder)
        # The threshold the real builder sets: its own default (256 for 8 heads on
        # SM90) -> 1 under HiSparse -> max(1, max_decode_query_len) for spec-as-decode.
        b = object.__new__(builder_cls)
        b.vllm_config = cfg
        b._init_reorder_batch_threshold(256, supports_spec_as_decode=True)
        self.threshold = b.reorder_batch_threshold or 1
        self.require_uniform = bool(builder_cls.require_uniform_decodes)
        self.cg_support = builder_cls._cudagraph_support
        self.builder_cls = builder_cls
        self._memo: dict = {}
        self._split_memo: dict = {}
        self.fix = knobs.get("routing") == "fix"
        self.capacity = routing.shared_swap_rows  # the rows _step_rows checks (C)

        # the group's kernels and buffers the hand-off touches
        group = self.group
        group.physical_kv_cache = lambda layer_index: torch.zeros(1)
        group.stage_prefill_rows = lambda *a, **k: (torch.zeros(1), None, None)
        self.calls: list[int] = []
        real_convert = type(group).convert_logical_to_physical_topk

        def convert(layer_index, logical_topk_indices, attn_metadata, **kw):
            n = int(logical_topk_indices.shape[0])
            self.calls.append(n)
            if self.fix and self.capacity < n <= group.physical_topk_indices.shape[0]:
                # engine/instrument.py fixed_convert (the upstream fix on 0.31.0)
                assert group.cache(layer_index).all_context_pages_resident
                group._convert_once(layer_index, logical_topk_indices)
            else:
                real_convert(group, layer_index, logical_topk_indices, attn_metadata, **kw)
            # the stubbed exits return a route marker; hand the backend tensors
            out = torch.zeros(n, 1, dtype=torch.int32)
            if kw.get("return_valid_counts"):
                return out, torch.zeros(n, dtype=torch.int32)
            return out

        group.convert_logical_to_physical_topk = convert

        # a stand-in backend impl carrying what the hand-off reads
        impl_cls = V["fms"].FlashMLASparseImpl if flashmla else V["fas"].FlashAttnMLASparseImpl
        impl = object.__new__(impl_cls)
        impl.index_group = group
        impl.index_group_index = 0
        impl.dcp_world_size = 1
        max_n = max(cfg.scheduler_config.max_num_batched_tokens, 1)
        impl.topk_indices_buffer = torch.zeros(1, 8, dtype=torch.int32).expand(max_n, 8)
        zero_out = lambda *a, **k: (torch.zeros(1), None)
        impl._run_mqa_kernel = lambda *a, **k: torch.zeros(1)
        impl._forward_mqa_kernel = zero_out
        impl._bf16_flash_mla_kernel = zero_out
        self.impl = impl
        if flashmla:
            self._handoff = functools.partial(self._flashmla, impl_cls._forward_bf16_kv)
        else:
            self._handoff = functools.partial(self._fa, impl_cls.forward_mqa)

    # -- the two hand-offs -------------------------------------------------
    def _fa(self, forward_mqa, n, md):
        q = self.torch.zeros(n, 1, 1)
        forward_mqa(self.impl, (q, q), self.torch.zeros(1), md, None)

    def _flashmla(self, forward_bf16_kv, n, md):
        q = self.torch.zeros(n, 1, 1)
        forward_bf16_kv(self.impl, q, self.torch.zeros(1), self.impl.topk_indices_buffer[:n], md, 1)

    # -- split ---------------------------------------------------------------
    def split(self, query_lens: tuple[int, ...]) -> tuple[int, int, int]:
        hit = self._split_memo.get(query_lens)
        if hit is None:
            torch = self.torch
            qsl = [0]
            for x in query_lens:
                qsl.append(qsl[-1] + x)
            cam = SimpleNamespace(
                max_query_len=max(query_lens),
                num_reqs=len(query_lens),
                num_actual_tokens=qsl[-1],
                query_start_loc_cpu=torch.tensor(qsl, dtype=torch.int32),
                is_prefilling=None,
            )
            num_decodes, _, num_decode_tokens, _ = _V["attn_utils"].split_decodes_and_prefills(
                cam,
                decode_threshold=self.threshold,
                require_uniform=self.require_uniform,
                treat_short_extends_as_decodes=True,
            )
            hit = self._split_memo[query_lens] = (num_decodes, num_decode_tokens)
        return hit

    # -- one forward -----------------------------------------------------------
    def run(self, meta: _Meta) -> dict:
        lens = meta.query_lens
        n = sum(lens)
        assert n == meta.num_tokens, (lens, meta.num_tokens)
        num_decodes, dec = self.split(lens)
        key = (n, dec, num_decodes)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._route(n, dec, num_decodes, lens)
        return {"query_lens": list(lens), "num_tokens": n, "num_reqs": len(lens),
                "num_decode_tokens": dec, **hit}

    def _route(self, n, dec, num_decodes, lens) -> dict:
        torch = self.torch
        qsl = [0]
        for x in lens:
            qsl.append(qsl[-1] + x)
        md = SimpleNamespace(
            num_actual_tokens=n,
            num_decode_tokens=dec,
            num_decodes=num_decodes,
            num_reqs=len(lens),
            max_query_len=max(lens),
            block_size=self.routing_block_size,
            req_id_per_token=torch.zeros(n, dtype=torch.int32),
            query_start_loc=torch.tensor(qsl, dtype=torch.int32),
            block_table=None,
            prefill=None,
        )
        self.routing._exit = None
        self.calls.clear()
        error = None
        try:
            self.group.prepare_for_batch(0, md)
            self._handoff(n, md)
        except Exception as exc:  # noqa: BLE001 - the error text is the result
            error = f"{type(exc).__name__}: {exc}"
        assert len(self.calls) <= 1, self.calls
        return {"routed": self.calls[0] if self.calls else 0,
                "route": self.routing._exit if self.calls else None, "error": error}

    routing_block_size = 64


# --------------------------------------------------------------------------
# stand-in runner, speculator and worker
# --------------------------------------------------------------------------


class _FakeModel:
    """The model forward: records the attention of this forward, returns zeros."""

    def __init__(self, runner: str):
        self.runner = runner

    def __call__(self, **kw):
        V = _V
        rec = V["rec"]
        cg = rec.cg_mode
        rec.forward(self.runner, rec._meta, cg)
        n = rec._meta.num_tokens
        return V["torch"].zeros(n, 1)

    def modules(self):
        return iter(())


def _model_state(V):
    def prepare_attn(input_batch, *a, **k):
        return _Meta(input_batch.num_scheduled_tokens, input_batch.num_tokens)

    return SimpleNamespace(
        prepare_dummy_inputs=lambda num_reqs, num_tokens: {},
        prepare_attn=prepare_attn,
        supports_mm_inputs=False,
        capture_inner_cudagraphs=lambda *a, **k: None,
        encoder_runner=None,
        max_model_len=0,
    )


def _block_tables(torch, max_reqs):
    return SimpleNamespace(
        get_dummy_block_tables=lambda num_reqs: [torch.zeros(num_reqs, 1, dtype=torch.int32)],
        get_dummy_slot_mappings=lambda num_tokens: torch.zeros(1, num_tokens, dtype=torch.int64),
        compute_slot_mappings=lambda *a, **k: torch.zeros(1, 1, dtype=torch.int64),
        input_block_tables=[torch.zeros(max_reqs, 1, dtype=torch.int32)],
        slot_mappings=torch.zeros(1, 1, dtype=torch.int64),
        cp_size=1, cp_rank=0, cp_interleave=1,
        gather_block_tables=lambda *a, **k: None,
        redirect_writes_to_null_block=False,
    )


class _ConfigView:
    """The real VllmConfig, with a stand-in for a field the CPU config lacks."""

    def __init__(self, cfg, **overrides):
        self.__dict__["_cfg"] = cfg
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._cfg, name)


class _AttnGroup:
    """A drafter attention group: only what the drafter reads of it."""

    def __init__(self, name: str, supports_update: bool):
        self._name = name
        self.supports_draft_decode_metadata_update = supports_update
        self.backend = SimpleNamespace(get_name=lambda: name)
        self.kv_cache_group_id = 0

    def update_draft_decode_metadata(self, attn_metadata):
        pass

    def map_to_kernel_block_table(self, *a, **k):
        pass


@functools.lru_cache(maxsize=None)
def _supports_update(cls_name: str, builder_cls) -> bool:
    """The builder's ``supports_draft_decode_metadata_update`` at DCP=1.

    A class attribute where the builder declares one; the FA-sparse (0.32.0+)
    and indexer builders set it in ``__init__`` to ``dcp_world_size == 1``
    (flashattn_mla_sparse.py:139 / :144, indexer.py:1145 / :1146), read here
    from the same source line.
    """
    import inspect

    try:
        src = inspect.getsource(builder_cls.__init__)
    except (OSError, TypeError):
        src = ""
    if "self.supports_draft_decode_metadata_update = self.dcp_world_size == 1" in src:
        return True
    return bool(getattr(builder_cls, "supports_draft_decode_metadata_update", False))


def _drafter_attn_groups(V, backend: str):
    from vllm.v1.attention.backends.mla import indexer

    sparse = (V["fms"].FlashMLASparseMetadataBuilder if backend == "FLASHMLA_SPARSE"
              else V["fas"].FlashAttnMLASparseMetadataBuilder)
    idx = indexer.DeepseekV32IndexerMetadataBuilder
    return [[_AttnGroup(backend, _supports_update(backend, sparse)),
             _AttnGroup("DEEPSEEK_V32_INDEXER", _supports_update("indexer", idx))]]


class _Engine:
    """Runner, speculator and worker stand-ins for one knob set."""

    def __init__(self, cfg, knobs: dict, mode, q: int):
        V = _setup()
        torch = V["torch"]
        self.V, self.cfg, self.knobs, self.q = V, cfg, knobs, q
        S = cfg.scheduler_config.max_num_seqs
        B = cfg.scheduler_config.max_num_batched_tokens
        K = knobs.get("num_speculative_tokens", 0)
        self.K = K
        self.mode = mode
        device = torch.device("cpu")
        self.device = device
        self.input_buffers = V["ib"].InputBuffers(S, B, device)
        self.block_tables = _block_tables(torch, S)
        self.model_state = _model_state(V)

        r = object.__new__(V["mr"].GPUModelRunner)
        r.vllm_config = cfg
        r.compilation_config = cfg.compilation_config
        r.scheduler_config = cfg.scheduler_config
        r.cache_config = cfg.cache_config
        r.lora_config = None
        r.model = _FakeModel("target")
        r.model_state = self.model_state
        r.input_buffers = self.input_buffers
        r.intermediate_tensors = None
        r.block_tables = self.block_tables
        r.attn_groups = [[]]
        r.kv_cache_config = SimpleNamespace(
            num_blocks=int(knobs.get("num_gpu_blocks") or DEFAULT_NUM_GPU_BLOCKS),
            kv_cache_groups=[SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=64))
                             for _ in range(int(knobs.get("kv_cache_groups") or 1))],
        )
        r.pcp_manager = None
        r.use_aux_hidden_state_outputs = False
        r.adaptive_verification = None
        r.rejection_sampler = None
        r.kv_connector = SimpleNamespace(reset_capture_state=lambda: None,
                                         set_disabled=lambda flag: None)
        r.kv_block_zeroer = None
        r.max_num_reqs = S
        r.max_num_tokens = B
        r.max_model_len = knobs["max_model_len"]
        r.decode_query_len = q
        r.num_speculative_steps = K
        r.is_pooling_model = False
        r.is_encoder_decoder = False
        r.is_last_pp_rank = True
        r.speculative_config = cfg.speculative_config
        r.model_config = SimpleNamespace(get_vocab_size=lambda: 32)
        r._draft_workspace_lane = 1  # model_runner.py:195: its own workspace lane
        r.lora_capture_cases = None
        r.step_timing = SimpleNamespace(collect=contextlib.nullcontext)
        r.speculator = self._speculator() if K else None
        self.runner = r
        self.cudagraph_manager = None
        self._prefilled: set = set()  # warmup requests whose prompt has run
        self._state = None

    # -- the speculator ----------------------------------------------------
    def _speculator(self):
        V, torch, cfg = self.V, self.V["torch"], self.cfg
        S = cfg.scheduler_config.max_num_seqs
        B = cfg.scheduler_config.max_num_batched_tokens
        sp = object.__new__(V["mtp"].MTPSpeculator)
        sp.vllm_config = _ConfigView(cfg, model_config=SimpleNamespace(
            max_model_len=self.knobs["max_model_len"]))
        sp.device = self.device
        sp.speculative_config = cfg.speculative_config
        sp.method = "mtp"
        sp.num_speculative_steps = self.K
        sp.max_num_reqs = S
        sp.max_num_tokens = B
        if not isinstance(getattr(type(sp), "max_model_len", None), property):
            sp.max_model_len = self.knobs["max_model_len"]  # 0.33.0: a property over model_config
        sp.draft_max_seq_len = sp.max_model_len
        sp.dp_size, sp.dp_rank, sp.dcp_size = 1, 0, 1
        sp.eplb_state = None
        sp.pcp_manager = None
        sp.supports_mm_inputs = False
        sp.input_buffers = V["ib"].InputBuffers(S, B, self.device)
        sp.idx_mapping = torch.zeros(S, dtype=torch.int32)
        sp.temperature = torch.zeros(S)
        sp.seeds = torch.zeros(S, dtype=torch.int64)
        sp.draft_tokens = torch.zeros(S, self.K, dtype=torch.int64)
        sp.hidden_states = torch.zeros(B, 1)
        sp.current_draft_step = torch.tensor(0)
        sp.last_token_indices = torch.zeros(S, dtype=torch.int64)
        sp.sample_src_positions = torch.zeros(S, dtype=torch.int64)
        sp.draft_is_prefilling = torch.zeros(S, dtype=torch.bool)
        import numpy as np

        sp.arange_np = np.arange(S + 1, dtype=np.int32)
        sp.draft_watermarker = None
        sp.acceptance_estimator = None
        sp.model = _FakeModel("drafter")
        sp.model_state = self.model_state
        sp.kv_cache_config = SimpleNamespace(kv_cache_groups=[None])
        sp.block_tables = self.block_tables
        sp.target_input_buffers = self.input_buffers
        sp.target_attn_groups = [[]]
        sp.attn_groups = _drafter_attn_groups(V, self.knobs.get("attention_backend")
                                              or "FLASH_ATTN_MLA_SPARSE")
        # the real fused / unfused decision from the drafter's attention groups
        if hasattr(sp, "_configure_fused_multi_step_decode"):
            sp._configure_fused_multi_step_decode()
            self.fused = sp.use_fused_multi_step_decode
        else:
            sp._configure_decode_metadata_update()
            self.fused = sp.supports_decode_metadata_update
        rec = V["rec"]

        def _prefill(num_reqs, num_tokens, attn_metadata, slot_mappings,
                     num_tokens_across_dp=None, cudagraph_runtime_mode=None, **kw):
            rec.forward("drafter", attn_metadata, rec.cg_mode or cudagraph_runtime_mode)

        def _generate_draft(num_reqs, num_tokens_padded, attn_metadata, slot_mappings,
                            num_tokens_across_dp=None, cudagraph_runtime_mode=None, *a, **kw):
            rec.forward("drafter_decode", attn_metadata, rec.cg_mode or cudagraph_runtime_mode)

        sp._prefill = _prefill
        sp._generate_draft = _generate_draft
        return sp

    # -- what initialize_kv_cache does for the graphs (model_runner.py:703-746) --
    def init_managers(self, is_profiling: bool):
        V, cfg = self.V, self.cfg
        self.cudagraph_manager = V["cgu"].ModelCudaGraphManager(
            cfg, self.device, self.mode, decode_query_len=self.q,
            lora_capture_cases=None, varlen_decode=False, ubatch_runner=None,
        )
        self.runner.cudagraph_manager = self.cudagraph_manager
        if self.runner.speculator is not None:
            self.runner.speculator.init_cudagraph_manager(self.mode)

    # -- the worker's execute_model / sample_tokens for the JIT warmup --------
    def execute_model(self, so):
        V, r = self.V, self.runner
        self._state = None
        self._prefilled -= set(getattr(so, "finished_req_ids", ()) or ())
        if so.total_num_scheduled_tokens == 0:
            return None  # model_runner.execute_model: no forward
        V["rec"].unit += 1  # a new engine step
        order = V["mr"].sort_batch_req_ids(
            so.num_scheduled_tokens, so.scheduled_spec_decode_tokens, r.decode_query_len)
        lens = [so.num_scheduled_tokens[rid] for rid in order]
        num_reqs, num_toks, max_q = len(lens), sum(lens), max(lens)
        # warmup requests are fully prefilled before they decode: not prefilling
        prefilling = any(rid not in self._prefilled for rid in order)
        uniform = self._uniform(num_reqs, num_toks, max_q, not prefilling)
        desc = self.cudagraph_manager.dispatch(num_reqs, num_toks, uniform, 0,
                                               max_query_len=None if prefilling else max_q)
        meta = _Meta(lens, num_toks)
        V["rec"].forward("target", meta, desc.cg_mode)
        self._prefilled.update(order)
        self._state = (meta, lens, not prefilling, so)
        return None

    def _uniform(self, num_reqs, num_toks, max_q, eligible):
        from vllm.v1.worker.utils import get_uniform_decode_token_count

        return get_uniform_decode_token_count(num_reqs, num_toks, max_q, eligible)

    def sample_tokens(self, grammar_output):
        if self._state is None:
            return None  # model_runner.sample_tokens: the prior step ran nothing
        meta, lens, eligible, so = self._state
        self._state = None
        sp = self.runner.speculator
        if sp is None:
            return None
        torch, np = self.V["torch"], __import__("numpy")
        n, num_reqs = sum(lens), len(lens)
        input_batch = SimpleNamespace(
            num_tokens=n, num_tokens_after_padding=n, num_reqs=num_reqs,
            num_scheduled_tokens=np.array(lens, dtype=np.int32),
            seq_lens_cpu_upper_bound=torch.tensor(lens, dtype=torch.int32),
            seq_lens=torch.tensor(lens, dtype=torch.int32),
            idx_mapping=torch.arange(num_reqs, dtype=torch.int32),
            decode_graph_eligible=eligible,
        )
        S = self.runner.max_num_reqs
        kw = dict(
            input_batch=input_batch, attn_metadata=meta, slot_mappings={},
            last_hidden_states=torch.zeros(n, 1), aux_hidden_states=None,
            num_sampled=torch.ones(num_reqs, dtype=torch.int32),
            num_rejected=torch.zeros(num_reqs, dtype=torch.int32),
            last_sampled=torch.zeros(S, dtype=torch.int64),
            next_prefill_tokens=torch.zeros(S, dtype=torch.int32),
            temperature=torch.zeros(S), seeds=torch.zeros(S, dtype=torch.int64),
        )
        import inspect

        params = inspect.signature(sp.propose).parameters
        if "num_speculative_tokens" in params:
            kw["num_speculative_tokens"] = getattr(so, "num_spec_tokens_to_schedule", None)
        sp.propose(**kw)
        return None


def _forward_mode_tracker(V):
    """Remember the cudagraph mode each capture forward runs in (from forward_fn's argument)."""
    rec = V["rec"]
    orig = V["cgu"].CudaGraphManager.capture

    def capture(self, create_forward_fn, progress_bar_desc="Capturing CUDA graphs", **kw):
        def wrapped(desc, warmup):
            if warmup:  # cudagraph_utils.py capture(): a new graph starts
                rec.unit += 1
            fn = create_forward_fn(desc, warmup)

            def run(cg_mode):
                rec.cg_mode = desc.cg_mode  # the graph's mode (its eager warmup pass too)
                try:
                    return fn(cg_mode)
                finally:
                    rec.cg_mode = None

            return run

        return orig(self, wrapped, progress_bar_desc, **kw)

    return capture


# --------------------------------------------------------------------------
# one knob set
# --------------------------------------------------------------------------


def _resolve_mode(V, cfg, knobs: dict, q: int, attn: _Attention):
    """Config-time mode, then the runner's real resolve_cudagraph_mode_and_sizes."""
    CUDAGraphMode = V["CUDAGraphMode"]
    cc = cfg.compilation_config
    if knobs.get("enforce_eager"):
        return CUDAGraphMode.NONE
    cc.cudagraph_mode = CUDAGraphMode[knobs.get("cudagraph_mode") or "FULL_AND_PIECEWISE"]
    cc.mode = V["CompilationMode"].NONE  # breakable CUDA graphs switch torch.compile off
    cc.splitting_ops = []
    import inspect

    kw = dict(use_v2_model_runner=True, tensor_parallel_size=1, kv_cache_config=None,
              max_num_reqs=None, is_profiling=False, piecewise_capture_available=True)
    params = inspect.signature(cc.resolve_cudagraph_mode_and_sizes).parameters
    mode = cc.resolve_cudagraph_mode_and_sizes(
        attn.cg_support, attn.backend, q, **{k: v for k, v in kw.items() if k in params})
    cc.cudagraph_mode = mode
    return mode


def _group_rows(rows: list[dict]) -> list[dict]:
    """Consecutive forwards of one step: one batch each.

    * the same (phase, runner, shape, mode) in a row -> one batch, ``forwards`` counted;
    * a target forward immediately followed by the drafter's prefill over the very
      same batch (warmup steps) -> one batch with runner ``both``.
    """
    out: list[dict] = []
    for row in rows:
        prev = out[-1] if out else None
        same = prev is not None and all(
            prev[k] == row[k] for k in ("_unit", "phase", "query_lens", "cudagraph_mode",
                                        "routed", "route", "error"))
        if same and prev["runner"] == row["runner"] and not prev.get("_closed"):
            prev["forwards"] += 1
            continue
        if (same and prev["runner"] == "target" and row["runner"] == "drafter"
                and row["phase"] == "jit_warmup"):
            prev["runner"] = "both"
            prev["_closed"] = True
            continue
        out.append({"forwards": 1, **row})
    for b in out:
        b.pop("_closed", None)
        b.pop("_unit", None)
        if b["runner"] == "drafter_decode":
            b["runner"] = "drafter"
            b["label"] = "draft decode"
    return out


def _where(exc: BaseException) -> str:
    """``vllm/<path>:<line>`` of the innermost frame (inside the installed tree)."""
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    path = frame.filename.replace(os.sep, "/")
    i = path.rfind("/vllm/")
    return f"{path[i + 1:] if i >= 0 else path}:{frame.lineno}"


def _one(knobs: dict, device: dict) -> dict:
    V = _setup()
    vd = V["vd"]
    CUDAGraphMode = V["CUDAGraphMode"]
    rec = V["rec"]
    res: dict = {"knobs": knobs}
    # vLLM refuses some knob sets before anything starts (vllm_driver section (e))
    verdict = vd.check_rejection(knobs, device)
    if verdict["rejected"]:
        res.update(rejected=True, stage=verdict["stage"], reason=verdict["reason"],
                   batches=[], error=None)
        return res
    res["rejected"] = False
    sched = vd._scheduler_defaults(knobs, device)
    cfg = vd._vllm_config(sched, knobs)
    from vllm.v1.attention.backend import max_decode_query_len

    q = max_decode_query_len(cfg)
    routing = vd._Routing(cfg)
    res["sizes"] = {
        "max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
        "max_decode_query_len": q,
        "swap_capacity": routing.shared_swap_rows,
        "workspace_rows": routing.workspace_rows,
    }
    attn = _Attention(cfg, knobs, routing, V["version"])
    res["split"] = {"threshold": attn.threshold, "require_uniform": attn.require_uniform}
    caps = vd._capture_sizes(sched, knobs, device)
    cc = cfg.compilation_config
    cc.cudagraph_capture_sizes = list(caps["cudagraph_capture_sizes"])
    cc.max_cudagraph_capture_size = caps["max_cudagraph_capture_size"]
    mode = _resolve_mode(V, cfg, knobs, q, attn)
    res["cudagraph_mode"] = mode.name
    graphs = mode != CUDAGraphMode.NONE
    res["capture_sizes"] = list(cc.cudagraph_capture_sizes or []) if graphs else []

    eng = _Engine(cfg, knobs, mode, q)
    res["drafter_fused_decode"] = getattr(eng, "fused", None)
    rec.rows = []
    rec.attn = attn
    error = None
    try:
        if mode != CUDAGraphMode.NONE:
            # 1. determine_available_memory -> profile_cudagraph_memory (gpu_worker.py:633-637)
            rec.phase = "cudagraph_memory_profile"
            cgu = V["cgu"]
            orig_init = cgu._init_minimal_kv_cache_for_profiling
            orig_tear = cgu._teardown_profiling_state
            cgu._init_minimal_kv_cache_for_profiling = lambda runner: eng.init_managers(True)
            cgu._teardown_profiling_state = lambda runner: setattr(
                runner, "cudagraph_manager", None)
            try:
                cgu.profile_cudagraph_memory(eng.runner)
            finally:
                cgu._init_minimal_kv_cache_for_profiling = orig_init
                cgu._teardown_profiling_state = orig_tear
        # 2. initialize_kv_cache (real KV cache): fresh managers
        eng.init_managers(False)
        # 3. compile_or_warm_up_model: warmup_kernels unless enforce_eager
        #    (enable_jit_warmup off, config/vllm.py:1711 in 0.31.0)
        if not knobs.get("enforce_eager"):
            rec.phase = "jit_warmup"
            V["wu"].warmup_kernels(eng.runner, eng.execute_model, eng.sample_tokens)
        # 4. capture_model unless enforce_eager (gpu_worker.py:881-883); with
        #    cudagraph_mode NONE it finds nothing to capture and returns
        if not knobs.get("enforce_eager"):
            rec.phase = "capture"
            eng.runner.capture_model()
    except _EngineError as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - vLLM's own start-up failure
        error = f"{type(exc).__name__}: {exc}"
        rec.unit += 1
        rec.rows.append({"phase": rec.phase, "runner": "target", "cudagraph_mode": "NONE",
                         "_unit": rec.unit,
                         "query_lens": [], "num_tokens": 0, "num_reqs": 0,
                         "num_decode_tokens": 0, "routed": 0, "route": None, "error": error,
                         "forwards": 0,
                         "where": _where(exc)})
    res["batches"] = _group_rows(rec.rows)
    res["error"] = error
    return res


def run(payload) -> dict:
    import time

    t0 = time.process_time()
    V = _setup()
    vd = V["vd"]
    if isinstance(payload, dict):
        device = {**vd.H200_DEVICE, **payload.get("device", {})}
        knob_list = payload["knobs"]
    else:
        device, knob_list = dict(vd.H200_DEVICE), payload
    V["cgu"].CudaGraphManager.capture = _forward_mode_tracker(V)
    results = []
    for knobs in knob_list:
        try:
            results.append(_one(knobs, device))
        except Exception as exc:  # noqa: BLE001 - reported per knob set
            results.append({"knobs": knobs, "driver_error": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc()})
    return {"vllm_version": V["version"], "vllm_file": V["vllm"].__file__,
            "cpu_seconds": round(time.process_time() - t0, 1), "results": results}


def main() -> int:
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
