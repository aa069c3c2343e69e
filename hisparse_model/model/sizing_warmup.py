"""vLLM 0.34.0's start-up steps that 0.33.0 does not run: the KV-cache sizing warmup and the
sampler warmup.

0.34.0 turns the **extensible KV cache** on wherever it is supported and not overridden
(vllm/config/vllm.py:3208@0.34.0 `num_gpu_blocks_override is not None`: a fixed pool turns it
off; this model's engine is one H200, where it is supported).  With it on:

* the CUDA-graph memory profile captures nothing
  (vllm/v1/worker/gpu/model_runner.py:1123-1125@0.34.0 `if self.cache_config.enable_extensible_kv_cache:`);
* the JIT warmup runs even under ``enforce_eager``
  (vllm/v1/worker/gpu_worker.py:1074-1079@0.34.0 `or self.cache_config.enable_extensible_kv_cache`);
* then the cache is sized on steps of its own
  (vllm/v1/worker/gpu/warmup.py:483@0.34.0 `def run_kv_cache_sizing_warmup`), before the captures:
  a mixed prefill + decode step of min(B, max_model_len) tokens when that is less than B
  and S > 1 (the prompt-logprobs step: ``max_logprobs`` is 20 by default), one of B tokens,
  and an MLA step over cached context.

A mixed step (vllm/v1/worker/gpu/warmup.py:168@0.34.0 `def run_mixed_prefill_decode_warmup`)
of N tokens: one decode request of q tokens (1 without MTP) when S >= 2 and the prefills
needing ceil((N - q) / (max_model_len - 1)) requests leave it a slot, and prefills of at
most max_model_len - 1 tokens each, full ones first, on the other slots; the decode request
first runs its own 2-token prompt as a step of its own.  The context step
(vllm/v1/worker/gpu/warmup.py:378@0.34.0 `def run_context_prefill_warmup`) schedules
q + 1 tokens for each of min(ceil(w / context), S, B // (q + 1)) requests over
context = min(max_model_len - q - 2, w) cached tokens, w being MLA's chunked-context
workspace (vllm/model_executor/layers/attention/mla_attention.py:2534-2554@0.34.0
`def determine_chunked_prefill_workspace_size`: min(max(8 max_model_len, 4 S x 64), 65,536)).
The MTP slots these steps keep free are none for DeepSeek's MTP.  The KV blocks they need are
assumed committable (an H200's cache holds them many times over).

After the captures, on every 0.34.0 engine, the V2 runner warms up its sampler with a dummy
run of min(S, B) one-token requests
(vllm/v1/worker/gpu_worker.py:1179-1193@0.34.0 `_dummy_sampler_run`): dispatched as any
step (a FULL decode graph when q = 1, so nothing is routed; else a PIECEWISE graph, which
routes its padded size, or eagerly), with the MTP drafter after it.
"""

from __future__ import annotations

from .batches import Batch, new_batch, routed_batch, spread_decode_tokens
from .dispatch import graph
from .draft_steps import draft_steps
from .plan import Plan
from .routing import UNIFORM_DECODE_BACKENDS, decode_tokens

BLOCK_SIZE = 64  # DeepSeek-V3.2's KV block (tokens)
MAX_CONTEXT_WORKSPACE = 64 * 1024  # tokens: MLA's chunked-context workspace at most
DECODE_PROMPT = 2  # tokens of the decode request's own prompt step
# max_model_len 1 leaves a prefill no token (max_model_len - 1 = 0), and the mixed step's
# ceiling division divides by it, so the sizing warmup raises before any forward:
# vllm/v1/worker/gpu/warmup.py:191@0.34.0 `max_prefill_len = model_runner.max_model_len - 1`,
# vllm/utils/math_utils.py:12-14@0.34.0 `return -(a // -b)`
SIZING_ZERO_DIVISION = "ZeroDivisionError: integer division or modulo by zero"


def extensible_kv_cache(plan: Plan) -> bool:
    """Whether the engine runs the extensible KV cache (0.34.0, no fixed pool)."""
    return plan.rules.extensible_kv_cache and plan.knobs.num_gpu_blocks_override is None


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def mixed_step_lens(plan: Plan, num_tokens: int) -> tuple[tuple[int, ...], ...]:
    """The query lengths of each step of one mixed prefill + decode warmup of
    ``num_tokens`` tokens: (the decode request's prompt step,) the mixed step; () when vLLM
    skips it (fewer than 3 tokens)."""
    s, L = plan.knobs.max_num_seqs, plan.knobs.max_model_len
    q = plan.max_decode_query_len  # the decode request verifies K drafts: 1 + K tokens
    max_prefill = L - 1
    with_decode = s >= 2 and _cdiv(num_tokens - q, max_prefill) < s
    decode = q if with_decode else 0
    prefills = min(_cdiv(num_tokens - decode, max_prefill), s - int(with_decode))
    num_tokens = min(num_tokens, decode + prefills * max_prefill)
    if num_tokens < 3:
        return ()
    rest = num_tokens - decode
    lens = tuple(min(max_prefill, rest - i) for i in range(0, rest, max_prefill))
    mixed = ((decode,) if with_decode else ()) + lens
    return ((DECODE_PROMPT,), mixed) if with_decode else (mixed,)


def context_workspace(plan: Plan) -> int:
    """Tokens of MLA's chunked-context workspace, rounded up to whole blocks."""
    k = plan.knobs
    size = min(max(8 * k.max_model_len, 4 * k.max_num_seqs * BLOCK_SIZE), MAX_CONTEXT_WORKSPACE)
    return _cdiv(max(size, BLOCK_SIZE), BLOCK_SIZE) * BLOCK_SIZE


def context_step_lens(plan: Plan) -> tuple[int, ...]:
    """The query lengths of the context warmup step (empty: skipped)."""
    k, q = plan.knobs, plan.max_decode_query_len
    query = q + 1
    context = min(k.max_model_len - query - 1, context_workspace(plan))
    if context <= 0:
        return ()
    reqs = min(_cdiv(context_workspace(plan), context), k.max_num_seqs,
               plan.max_num_batched_tokens // query)
    return (query,) * reqs if reqs >= 1 else ()


def sizing_steps(plan: Plan) -> list[tuple[int, ...]]:
    """Every step of the sizing warmup, as its query lengths, in engine order."""
    b, L = plan.max_num_batched_tokens, plan.knobs.max_model_len
    steps: list[tuple[int, ...]] = []
    prompt = min(b, L)
    if prompt < b and plan.knobs.max_num_seqs > 1:  # the prompt-logprobs step
        steps += mixed_step_lens(plan, prompt)
    steps += mixed_step_lens(plan, b)
    context = context_step_lens(plan)
    return steps + ([context] if context else [])


def runner_order(lens: tuple[int, ...], q: int, decode_first: bool) -> tuple[int, ...]:
    """A step's query lengths in the order the runner puts its requests: a request with
    drafts first, then those of exactly q tokens, then the rest by length
    (vllm/v1/worker/gpu/model_runner.py:2579-2591@0.34.0 `def sort_batch_req_ids`), so a
    prefill remainder of at most q tokens leads the prefills and splits as a decode."""
    head, rest = (lens[:1], lens[1:]) if decode_first else ((), lens)
    return head + tuple(sorted(rest, key=lambda n: (n != q, n)))


def warmup_forward(plan: Plan, route, phase: str, label: str, lens: tuple[int, ...]) -> list[Batch]:
    """:func:`warmup_step` of a step of these query lengths (a mixed step's decode request,
    which carries K drafts under MTP, first)."""
    uniform = plan.knobs.attention_backend in UNIFORM_DECODE_BACKENDS
    q = plan.max_decode_query_len
    drafted = plan.knobs.num_speculative_tokens > 0 and len(lens) > 1 and lens[0] == q
    dec = decode_tokens(runner_order(lens, q, drafted), q, uniform)
    return warmup_step(plan, route, phase, label, sum(lens), len(lens), dec)


def warmup_step(plan: Plan, route, phase: str, label: str, n: int, reqs: int,
                dec: int) -> list[Batch]:
    """One eager warmup step of ``n`` tokens over ``reqs`` requests (``dec`` of the tokens
    decodes), then under MTP K >= 2 the drafter's K - 1 one-token draft steps over its
    requests (before the captures: eager); when the target raised, the drafter never ran,
    so only the target's layers routed.  The JIT warmup's steps too (startup.py)."""
    k = plan.knobs.num_speculative_tokens
    routed, path, error = route(n, dec)
    runner = "target" if error or not k else "both"
    out = [new_batch((phase, label, n, reqs, dec, "NONE", routed, path, error, 1, None, runner))]
    if k >= 2 and not error:
        out.append(routed_batch(route, phase, "MTP draft steps", reqs, reqs, reqs, "NONE", k - 1,
                                None, "drafter"))
    return out


def sizing_warmup(plan: Plan, route) -> list[Batch]:
    """The KV-cache sizing warmup's batches (the first that raises ends it)."""
    if plan.knobs.max_model_len <= 1:
        return [Batch("kv_cache_sizing_warmup", "KV-cache sizing step", 0, 0, 0, "NONE", 0, None,
                      SIZING_ZERO_DIVISION, 0)]
    out: list[Batch] = []
    for lens in sizing_steps(plan):
        out += warmup_forward(plan, route, "kv_cache_sizing_warmup", "KV-cache sizing step", lens)
        if out[-1].error:
            break
    return out


def sampler_warmup(plan: Plan, route) -> list[Batch]:
    """The sampler's dummy run after the captures (nothing routed when it replays a graph)."""
    k = plan.knobs
    n = reqs = min(k.max_num_seqs, plan.max_num_batched_tokens)
    mode, padded = graph(plan, n, reqs, 1)  # one token per request: uniform when q = 1
    if mode == "FULL":
        return []
    runner = "both" if k.num_speculative_tokens else "target"
    # the dummy batch spreads the padded tokens over the requests, the last ones a token
    # longer (vllm/v1/worker/gpu/model_runner.py:1950-1951@0.34.0 `input_batch = InputBatch.make_dummy(`)
    uniform = k.attention_backend in UNIFORM_DECODE_BACKENDS
    dec = spread_decode_tokens(padded, reqs, plan.max_decode_query_len, uniform)
    step = routed_batch(route, "sampler_warmup", "sampler warmup", padded, reqs, dec, mode,
                        1, None, runner)
    out = [step]
    drafts = None if step.error else draft_steps(plan, reqs)
    if drafts is not None and drafts.mode == "NONE":
        out.append(new_batch(("sampler_warmup", "MTP draft steps", reqs, reqs, reqs, "NONE",
                              drafts.routed, drafts.route, drafts.error, drafts.forwards, None,
                              "drafter")))
    return out
