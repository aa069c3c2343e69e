"""The start-up driver's worker for vLLM's real JIT warmup (``warmup_kernels``).

``_WarmupWorker`` (mixed into ``startup_engine._Engine``) is the
``execute_model`` / ``sample_tokens`` pair ``warmup_kernels`` calls: each step's
requests ordered by the real ``sort_batch_req_ids``, steps of no tokens skipped,
dispatch by the real ``CudaGraphManager.dispatch``, and the real MTP
``propose`` after each executed step.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

from types import SimpleNamespace

from hisparse_model.crosscheck.startup_recorder import _Meta


class _WarmupWorker:
    """The worker half of ``_Engine``: what ``warmup_kernels`` calls per step."""

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
