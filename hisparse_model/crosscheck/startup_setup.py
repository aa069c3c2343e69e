"""One-time process setup of the start-up driver: vLLM's modules and the CPU stand-ins.

``_setup()`` imports the vLLM modules ``startup_driver`` drives and installs,
once per process, the stand-ins its docstring lists for what a CPU-only torch
cannot run: CUDA graph objects, pools, streams, ``graph_capture``, the
offloader, ``torch.accelerator`` memory calls, ``gc.collect``, random request
ids, ``set_forward_context`` (the recorder), the breakable-CUDA-graph wrapper,
``make_dummy`` memoised per shape, the drafter's Triton input kernels and the
hand-off kernels.  ``_V`` holds the modules and the recorder afterwards.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import contextlib
import sys
import types
from types import SimpleNamespace

from hisparse_model.crosscheck.driver_io import quiet_vllm
from hisparse_model.crosscheck.startup_recorder import _Recorder

_V = {}  # vLLM modules and stand-in state, filled once per process by _setup()


def _setup() -> dict:
    """Import vLLM's modules and install the process-wide CPU stand-ins (once)."""
    if _V:
        return _V
    quiet_vllm()
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

    rec = _Recorder()

    # --- CUDA graph machinery --------------------------------------------
    class _Graph:  # torch.cuda.CUDAGraph
        def replay(self):  # a replay runs no Python: nothing routes
            # only 0.34.0's sampler warmup replays graphs at start-up (after the captures)
            if rec.phase != "sampler_warmup":
                raise AssertionError("replay during start-up")

    torch.cuda.CUDAGraph = _Graph
    torch.cuda.graph = lambda *a, **k: contextlib.nullcontext()
    for name in ("synchronize", "empty_cache"):
        setattr(torch.accelerator, name, lambda *a, **k: None)
    torch.accelerator.get_memory_info = lambda *a, **k: (0, 0)
    cgu.graph_capture = lambda *a, **k: contextlib.nullcontext(SimpleNamespace(stream=None))
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
    cgu.is_breakable_cudagraph_enabled = lambda *a, **k: True  # auto-on for DeepseekV32 on CUDA

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
    if importlib.util.find_spec("vllm.v1.worker.gpu.spec_decode.target_dependent_ar") and \
            ar_name.endswith("autoregressive"):  # 0.34.0: MTP's propose lives here
        tdar = importlib.import_module("vllm.v1.worker.gpu.spec_decode.target_dependent_ar"
                                       ".speculator")
        tdar.prepare_prefill_inputs = lambda *a, **k: None
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
        ib=ib, mr=mr, wu=wu, spec_base=spec_base, mtp=mtp, ar=ar, ar_cg=ar_cg,
        rec=rec, version=vllm.__version__,
    )
    return _V
