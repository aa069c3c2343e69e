"""Render a :class:`~hisparse_model.predict.Prediction`: the CLI's JSON and its readable table."""

from __future__ import annotations

from .predict import Prediction


def to_cli_json(pred: Prediction) -> dict:
    """The exact JSON object ``python -m hisparse_model predict --json`` prints."""
    return {
        "vllm_version": pred.knobs.vllm_version,
        "max_num_seqs": pred.knobs.max_num_seqs,
        "max_num_batched_tokens": pred.sizes.max_num_batched_tokens,
        "max_decode_query_len": pred.sizes.max_decode_query_len,
        "swap_capacity": pred.sizes.swap_capacity,
        "workspace_rows": pred.sizes.workspace_rows,
        "capture_sizes": list(pred.capture_sizes),
        "startup": {"ok": pred.startup_ok, "error": pred.startup_error},
        "prompts": [{"n": p.n, "ok": p.ok, "error": p.error} for p in pred.prompts],
    }


def _batch_line(b) -> str:
    routed = f"{b.routed:>5} routed -> {b.route}" if b.routed else "    - not routed"
    tail = f"  !! {b.error}" if b.error else ""
    mode = f"[{b.cudagraph_mode}]"
    return f"  {b.phase:<26} {b.label:<34} {mode:<11} {b.num_tokens:>6} tok  {routed}{tail}"


def format_table(pred: Prediction, *, show_batches: bool = True) -> str:
    k, s = pred.knobs, pred.sizes
    routing = f"{k.vllm_version}" + (" + upstream fix" if k.routing == "fix" else "")
    lines = [
        f"vLLM {routing}  backend={k.attention_backend}  cudagraph_mode={pred.cudagraph_mode}",
        f"max_num_seqs (S)            {k.max_num_seqs}",
        f"max_num_batched_tokens (B)  {s.max_num_batched_tokens}",
        f"max_decode_query_len (q)    {s.max_decode_query_len}",
        f"swap capacity C = min(B, S*q) = min({s.max_num_batched_tokens}, "
        f"{k.max_num_seqs}*{s.max_decode_query_len}) = {s.swap_capacity}",
        f"workspace rows W = C + 1    {s.workspace_rows}",
        f"capture sizes               {pred.capture_sizes}",
        "",
        f"start-up: {'ok' if pred.startup_ok else pred.startup_error}",
    ]
    if show_batches:
        lines += [_batch_line(b) for b in pred.startup if b.routed or b.error]
    for p in pred.prompts:
        lines.append(f"prompt of {p.n} tokens: {'ok' if p.ok else p.error}")
        if show_batches:
            lines += [_batch_line(b) for b in p.batches]
    return "\n".join(lines)
