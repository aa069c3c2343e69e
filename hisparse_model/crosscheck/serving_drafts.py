"""The start-up driver's serving steps: vLLM's real MTP speculator once the graphs are captured.

After a start-up that succeeded (captures done, so the graph managers dispatch
to the graphs they hold), each knob set with MTP serves, for the ``n`` of
:func:`serving_requests`, a verify step of ``n`` requests of ``q`` = 1 + K
tokens each (a uniform decode batch) and a mixed step (``n - 1`` verifies, then
a first prefill chunk of q + 1 tokens, in the runner's order):

* the target forward: the runner's real ``CudaGraphManager.dispatch``
  (model_runner.py's ``get_uniform_decode_token_count`` with
  ``decode_graph_eligible``); a FULL replay runs no Python, so it logs nothing,
  otherwise it is one forward through the split, hand-off and routing;
* then the worker's ``sample_tokens`` calls the real ``propose``: the drafter's
  prefill over the same batch (its own real dispatch; FULL: a replay), then the
  K - 1 draft steps through the real decode manager's dispatch and the real
  ``_multi_step_decode`` / ``_fused_multi_step_decode`` loops, each uncaptured
  draft step one recorded forward of ``n`` one-token requests.

A FULL replay here is a no-op (``CUDAGraph.replay``); during start-up a replay
raises.  A step whose routing raises ends the list (the engine is dead).  The residency is all-resident (no HiSparse connector is driven).

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

from types import SimpleNamespace

from hisparse_model.crosscheck.startup_recorder import _EngineError, _Meta, _group_rows

MAX_STEPS = 12  # request counts tried per knob set


def serving_requests(max_num_seqs: int, max_num_batched_tokens: int, q: int,
                     capture_sizes: list[int]) -> list[int]:
    """Request counts to serve: 1..4, S - 1, S and each capture size <= S with the next
    (where the draft graphs end), those of at most B tokens, at most MAX_STEPS of them."""
    s = max_num_seqs
    want = {1, 2, 3, 4, s - 1, s}
    for t in capture_sizes:
        if t <= s:
            want.update((t, t + 1))
    ok = sorted(n for n in want if 1 <= n <= s and n * q <= max_num_batched_tokens)
    if len(ok) > MAX_STEPS:  # keep the small ones and the largest (where graphs run out)
        ok = ok[:MAX_STEPS // 2] + ok[-(MAX_STEPS - MAX_STEPS // 2):]
    return ok


def serve_steps(V, eng, knobs: dict, q: int) -> list[dict]:
    """Serve each step; one ``{"num_reqs", "kind", "batches"}`` per step (the recorder's rows)."""
    rec, torch = V["rec"], V["torch"]
    k = knobs.get("num_speculative_tokens", 0)
    if not k or eng.runner.speculator is None:
        return []
    cfg = eng.cfg.scheduler_config
    sizes = list(eng.cfg.compilation_config.cudagraph_capture_sizes or [])
    graph_cls = torch.cuda.CUDAGraph
    replay = graph_cls.replay
    graph_cls.replay = lambda self: None  # a replay runs no Python: nothing is routed
    out = []
    try:
        rec.phase = "serving"
        for n in serving_requests(cfg.max_num_seqs, cfg.max_num_batched_tokens, q, sizes):
            steps = [("verify", [q] * n, True)]
            if (n - 1) * q + q + 1 <= cfg.max_num_batched_tokens:
                steps.append(("mixed", [q] * (n - 1) + [q + 1], False))
            for kind, lens, eligible in steps:
                start = len(rec.rows)
                rec.unit += 1
                num_toks, max_q = sum(lens), max(lens)
                uniform = eng._uniform(n, num_toks, max_q, eligible)
                desc = eng.cudagraph_manager.dispatch(n, num_toks, uniform, 0,
                                                      max_query_len=max_q if eligible else None)
                meta = _Meta(lens, num_toks)
                dead = False
                try:
                    if desc.cg_mode.name != "FULL":
                        rec.forward("target", meta, desc.cg_mode)
                    eng._state = (meta, lens, eligible,
                                  SimpleNamespace(num_spec_tokens_to_schedule=k))
                    eng.sample_tokens(None)
                except _EngineError:  # the routing raised: the engine is dead
                    dead = True
                out.append({"num_reqs": n, "kind": kind,
                            "batches": _group_rows(rec.rows[start:])})
                del rec.rows[start:]
                if dead:
                    return out
    finally:
        graph_cls.replay = replay
    return out
