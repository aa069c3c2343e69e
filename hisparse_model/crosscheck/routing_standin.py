"""Drive vLLM's real HiSparse index group, cache handle and routing on CPU (``_Routing``).

Sections (a) (the index-group builder and the HiSparse cache handle) and (c)
of ``vllm_driver``'s docstring, which lists every stand-in: the real
``SparseMLAIndexGroupBuilder`` run with and without HiSparse, a stand-in
``HiSparseRuntime`` carrying what the routing reads, and the real
``prepare_for_batch`` / ``convert_logical_to_physical_topk`` with the two
exits stubbed at their first kernel (all-resident conversion, ``swap_in``).

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import math

from hisparse_model.crosscheck.driver_io import _format_exc
from hisparse_model.crosscheck.standins import _patched

TOP_K = 128  # index_topk of the fix PR's tiny DeepSeek-V3.2 (hf_overrides)
HEAD_SIZE = 576  # DeepSeek MLA head (kv_lora_rank 512 + rope 64); fp8_ds_mla rows
# 0.34.0 passes a row's bytes instead: 656 for fp8_ds_mla
# (vllm/v1/attention/backend.py:1017-1018@0.34.0 `return 656`)
FP8_DS_MLA_ROW_BYTES = 656


def _row_kwarg(builder) -> dict:
    """The register_layer keyword of this vLLM: ``head_size`` (0.31.0 - 0.33.0) or
    ``row_width`` (0.34.0)."""
    import inspect

    if "row_width" in inspect.signature(builder.register_layer).parameters:
        return {"row_width": FP8_DS_MLA_ROW_BYTES}
    return {"head_size": HEAD_SIZE}
BLOCK_SIZE = 64  # the fix PR's block_size

ALL_RESIDENT = "all_resident"
SWAP_IN = "swap_in"


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
            group, layer_index = builder.register_layer(True, cfg, **_row_kwarg(builder),
                                                        kv_cache_dtype="fp8_ds_mla")
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
