"""Render a :class:`~hisparse_model.predict.Prediction`: the CLI's JSON and its readable table."""

from __future__ import annotations

from .parallel import error_surface
from .predict import Prediction
from .reproduction import ASSUMPTIONS
from .simulate import SIMULATE_ASSUMPTIONS


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
        "error_surface": error_surface(pred.knobs, first_error(pred),
                                       startup=pred.startup_error is not None),
    }


def first_error(pred: Prediction) -> str | None:
    """The first error the engine raises: at start-up, else serving the first prompt that fails."""
    return pred.startup_error or next((p.error for p in pred.prompts if p.error), None)


def surface_lines(knobs, error: str | None, startup: bool) -> list[str]:
    """Under TP > 1, what the caller and the log show for ``error`` (parallel.error_surface)."""
    surface = error_surface(knobs, error, startup=startup)
    if surface is None or knobs.tensor_parallel_size == 1:
        return []
    error_line, wrapped = surface["log"]
    return [f"TP={knobs.tensor_parallel_size}: the same on every rank; the caller sees "
            f"{surface['caller']}",
            "  (in process, VLLM_ENABLE_V1_MULTIPROCESSING=0: "
            f"{surface['in_process_caller']})",
            f"  the log holds, in each of the {surface['workers']} workers' tracebacks:",
            f"    {error_line}", "  and from the engine core:", f"    {wrapped}"]


def _batch_line(b, count: int = 1) -> str:
    routed = f"{b.routed:>5} routed -> {b.route}" if b.routed else "    - not routed"
    tail = f"  !! {b.error}" if b.error else ""
    times = f" x{count}" if count > 1 else ""
    mode = f"[{b.cudagraph_mode}]"
    return f"  {b.phase:<26} {b.label:<34} {mode:<11} {b.num_tokens:>6} tok  {routed}{tail}{times}"


def closing_lines(advice: list[dict] | None, assumptions) -> list[str]:
    """The "To avoid it:" block (when there is advice) and the assumptions."""
    lines = []
    if advice:
        lines += ["", "To avoid it:"]
        lines += [f"  - {', '.join(f'{n}={v}' for n, v in a['change'].items())}: {a['why']}"
                  for a in advice]
    return lines + ["", "Assumptions:"] + [f"  - {a}" for a in assumptions]


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
    lines += surface_lines(k, first_error(pred), pred.startup_error is not None)
    return "\n".join(lines + closing_lines(advice, ASSUMPTIONS))


def sizes_json(sched) -> dict:
    """What ``simulate --json`` prints first, on one GPU or DP: the inputs, then the sizes."""
    p = sched.plan
    return {
        "inputs": {**sched.knobs.as_dict(), "workload": sched.workload.as_json()["requests"],
                   "accepted": sched.accepted},
        "max_num_batched_tokens": p.max_num_batched_tokens,
        "max_decode_query_len": p.max_decode_query_len,
        "swap_capacity": p.swap_capacity,
        "workspace_rows": p.workspace_rows,
        "cudagraph_mode": p.cudagraph_mode,
        "capture_sizes": list(p.capture_sizes),
    }


def schedule_json(sched, advice: list[dict] | None = None) -> dict:
    """The JSON object ``python -m hisparse_model simulate --json`` prints."""
    return {
        **sizes_json(sched),
        "startup": {"ok": sched.startup_error is None, "error": sched.startup_error},
        "steps": [{"step": s.step, "scheduled": {str(r): n for r, n in s.scheduled.items()},
                   "num_tokens": s.num_tokens, "num_decode_tokens": s.num_decode_tokens,
                   "dispatch": s.dispatch, "padded": s.padded, "resident": s.resident,
                   "routed_tokens": s.routed_tokens, "route": s.route, "error": s.error}
                  for s in sched.steps],
        "crash": sched.crash,
        "finished": sorted(sched.finished),
        "advice": advice or [],
        "assumptions": list(SIMULATE_ASSUMPTIONS),
        "error_surface": error_surface(sched.knobs, sched.crash and sched.crash["error"],
                                       startup=sched.startup_error is not None),
    }


def _step_key(s) -> tuple:
    """What makes two steps look the same in the folded table (not the step number)."""
    return (tuple(sorted(s.scheduled.values())), s.dispatch, s.routed_tokens, s.route, s.error)


def format_schedule(sched, *, full: bool = False, advice: list[dict] | None = None) -> str:
    k, p = sched.knobs, sched.plan
    lines = [
        f"vLLM {k.vllm_version}{' + upstream fix' if k.routing == 'fix' else ''}  "
        f"S={k.max_num_seqs} B={p.max_num_batched_tokens} q={p.max_decode_query_len}  "
        f"C={p.swap_capacity} W={p.workspace_rows}  prefix caching "
        f"{'on' if k.enable_prefix_caching else 'off'}  {len(sched.workload)} requests",
        f"start-up: {'ok' if sched.startup_error is None else sched.startup_error}",
    ]
    groups: list[list] = []
    for s in sched.steps:
        if not full and groups and _step_key(groups[-1][0]) == _step_key(s) and not s.error:
            groups[-1][1] = s
            groups[-1][2] += 1
        else:
            groups.append([s, s, 1])
    for first, last, count in groups:
        steps = f"step {first.step}" if count == 1 else f"steps {first.step}-{last.step}"
        reqs = " ".join(f"r{r}:{n}" for r, n in first.scheduled.items())
        routed = (f"{first.routed_tokens} routed -> {first.route}" if first.routed_tokens
                  else ("replayed (FULL graph)" if first.dispatch == "FULL" else "not routed"))
        tail = f"  !! {first.error}" if first.error else ""
        more = f" (x{count}, requests vary)" if count > 1 else ""
        lines.append(f"  {steps:<16} {first.num_tokens:>5} tok [{first.dispatch:<9}] "
                     f"{routed}{tail}   {reqs[:60]}{more}")
    crash = sched.crash
    lines.append("crash: none" if crash is None else
                 f"crash at {'start-up' if crash['step'] is None else 'step ' + str(crash['step'])}: "
                 f"{crash['error']}")
    lines += surface_lines(k, crash and crash["error"], sched.startup_error is not None)
    lines.append(f"finished: {len(sched.finished)} of {len(sched.workload)} requests")
    return "\n".join(lines + closing_lines(advice, SIMULATE_ASSUMPTIONS))
