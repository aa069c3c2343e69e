"""Drive vLLM's decode/prefill split, backend hand-off and HiSparse routing per start-up forward.

``_Attention`` (one per knob set, memoised per batch shape): the threshold of
the sparse-MLA builder's real ``_init_reorder_batch_threshold``, the real
``split_decodes_and_prefills``, then the real backend hand-off
(``forward_mqa`` / ``_forward_bf16_kv``) into the real
``convert_logical_to_physical_topk`` of ``routing_standin._Routing``'s group
(``routing="fix"``: the engine recorder's ``fixed_convert``).  See
``startup_driver``'s docstring for the stand-ins.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

from hisparse_model.crosscheck.driver_io import _format_exc
from hisparse_model.crosscheck.startup_recorder import _Meta
from hisparse_model.crosscheck.startup_setup import _V, _setup


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
            # 0.34.0: the token's first top-k row, 0 unless a TP ShardQ step narrowed it
            # (vllm/model_executor/layers/attention/sparse_mla_attention.py:170-171@0.34.0 `topk_start`)
            topk_start=0,
            shardq=None,
        )
        self.routing._exit = None
        self.calls.clear()
        error = None
        try:
            self.group.prepare_for_batch(0, md)
            self._handoff(n, md)
        except Exception as exc:  # noqa: BLE001 - the error text is the result
            error = _format_exc(exc)
        assert len(self.calls) <= 1, self.calls
        return {"routed": self.calls[0] if self.calls else 0,
                "route": self.routing._exit if self.calls else None, "error": error}

    routing_block_size = 64
