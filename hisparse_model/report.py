"""Render a :class:`~hisparse_model.predict.Prediction`: the CLI's JSON and its readable table."""

from __future__ import annotations

from .predict import Prediction
from .reproduction import ASSUMPTIONS


def to_cli_json(pred: Prediction, advice: list[dict] | None = None) -> dict:
    """The JSON object ``python -m hisparse_model predict --json`` prints."""
    s = pred.sizes
    return {
        "vllm_version": pred.knobs.vllm_version,
        "max_num_seqs": pred.knobs.max_num_seqs,
        "max_num_batched_tokens": s.max_num_batched_tokens,
        "max_decode_query_len": s.max_decode_query_len,
        "swap_capacity": s.swap_capacity,
        "workspace_rows": s.workspace_rows,
        "capture_sizes": list(pred.capture_sizes),
        "startup": {"ok": pred.startup_ok, "error": pred.startup_error},
        "prompts": [{"n": p.n, "ran": p.ran, "ok": p.ok if p.ran else None,
                     "error": p.error if p.ran else None} for p in pred.prompts],
        "inputs": {**pred.knobs.as_dict(), "prompt_lens": [p.n for p in pred.prompts]},
        "cudagraph_mode": pred.cudagraph_mode,
        "crash": pred.crashes,
        "advice": advice or [],
        "assumptions": list(ASSUMPTIONS),
    }


def _batch_line(b, count: int = 1) -> str:
    routed = f"{b.routed:>5} routed -> {b.route}" if b.routed else "    - not routed"
    tail = f"  !! {b.error}" if b.error else ""
    times = f" x{count}" if count > 1 else ""
    mode = f"[{b.cudagraph_mode}]"
    return f"  {b.phase:<26} {b.label:<34} {mode:<11} {b.num_tokens:>6} tok  {routed}{tail}{times}"


def fold(batches, full: bool = False) -> list[tuple[object, int]]:
    """Consecutive identical batches as (batch, count); ``full`` keeps every one."""
    out: list[list] = []
    for b in batches:
        if not full and out and out[-1][0] == b:
            out[-1][1] += 1
        else:
            out.append([b, 1])
    return [(b, n) for b, n in out]


def format_table(pred: Prediction, *, show_batches: bool = True, full: bool = False,
                 advice: list[dict] | None = None) -> str:
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
        lines += [_batch_line(b, n) for b, n in fold(
            [b for b in pred.startup if b.routed or b.error], full)]
        if not pred.startup and k.enforce_eager:
            lines.append("  (enforce_eager: no CUDA-graph captures and no JIT warmup, "
                         "so nothing is routed at start-up)")
    for p in pred.prompts:
        if not p.ran:
            lines.append(f"prompt of {p.n} tokens: not run (the engine died at start-up)")
            continue
        lines.append(f"prompt of {p.n} tokens: {'ok' if p.ok else p.error}")
        if show_batches:
            lines += [_batch_line(b, n) for b, n in fold(p.batches, full)]
    if advice:
        lines += ["", "To avoid it:"]
        lines += [f"  - {', '.join(f'{n}={v}' for n, v in a['change'].items())}: {a['why']}"
                  for a in advice]
    lines += ["", "Assumptions:"] + [f"  - {a}" for a in ASSUMPTIONS]
    return "\n".join(lines)
