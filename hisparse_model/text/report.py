"""The text layer: what ``predict`` and ``simulate`` return, as the CLI's JSON and tables.

:func:`to_cli_json` / :func:`format_table` render a
:class:`~hisparse_model.answers.predict.Prediction`; :func:`schedule_json` /
:func:`format_schedule` render a :class:`~hisparse_model.answers.simulate.Schedule` of
one rank or N; :func:`surface_lines` is the one printer of what the caller
and the log show for an error.  Nothing here computes the model.
"""

from __future__ import annotations

from .plural import count
from ..model.host_pool import host_blocks
from ..model.kv_layout import layout
from ..model.kv_pool import pool_line
from ..model.parallel import error_surface
from ..answers.lost import lost_line
from ..answers.predict import Prediction
from ..model.reproduction import ASSUMPTIONS


def to_cli_json(pred: Prediction, advice: list[dict] | None = None) -> dict:
    """The JSON object ``hisparse predict --json`` prints."""
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
        "model_config": model_config_json(pred.knobs),
    }


def model_config_json(knobs) -> dict:
    """The config every block count and byte size was computed from (``kv_layout.py``)."""
    lay = layout(knobs)
    m = lay.model
    return {"model": m.label, "num_hidden_layers": m.num_hidden_layers,
            "mtp_layers": m.num_nextn_predict_layers if lay.k else 0,
            "index_topk": m.index_topk, "row_format": lay.cache_format,
            "row_bytes": lay.row_bytes, "host_block_bytes": lay.host_block_bytes,
            "host_blocks": host_blocks(knobs.host_pool_gib, lay),
            "hot_groups": lay.hot_groups, "hot_blocks_per_request": lay.hot_blocks,
            "kv_cache_groups": lay.worker_groups}


def first_error(pred: Prediction) -> str | None:
    """The first error the engine raises: at start-up, else serving the first prompt that fails."""
    return pred.startup_error or next((p.error for p in pred.prompts if p.error), None)


def surface_lines(knobs, error: str | None, startup: bool,
                  dp_rank: int | None = None) -> list[str]:
    """What the caller and the log show for ``error`` (parallel.error_surface) where that is
    more than the error itself: under TP > 1 (the workers' wrap), and for a serving crash
    on DP rank ``dp_rank`` (None: one rank) under vLLM's default multiprocessing."""
    surface = error_surface(knobs, error, startup=startup, dp_rank=dp_rank or 0)
    if surface is None:
        return []
    in_process = ("  (in process, VLLM_ENABLE_V1_MULTIPROCESSING=0: "
                  f"{surface['in_process_caller']})")
    if dp_rank is not None:
        return [] if startup else [f"  the caller sees: {surface['caller']}", in_process,
                                   *(f"  the log holds:   {line}" for line in surface["log"])]
    if knobs.tensor_parallel_size == 1:
        return []
    error_line, wrapped = surface["log"]
    return [f"TP={knobs.tensor_parallel_size}: the same on every rank; the caller sees "
            f"{surface['caller']}", in_process,
            f"  the log holds, in each of the {surface['workers']} workers' tracebacks:",
            f"    {error_line}", "  and from the engine core:", f"    {wrapped}"]


def _batch_line(b, count: int = 1) -> str:
    routed = f"{b.routed:>5} routed -> {b.route}" if b.routed else "    - not routed"
    tail = f"  !! {b.error}" if b.error else ""
    times = f" x{count}" if count > 1 else ""
    mode = f"[{b.cudagraph_mode}]"
    return f"  {b.phase:<26} {b.label:<34} {mode:<11} {b.num_tokens:>6} tok  {routed}{tail}{times}"


def advice_lines(advice: list[dict], name_change=None) -> list[str]:
    """The "To avoid it" block: the fix first, then by cost, crippling changes apart.

    ``name_change`` renders a change (default ``knob=value``; ``check`` shows vLLM's flags).
    """
    name_change = name_change or (lambda change: ", ".join(f"{n}={v}"
                                                             for n, v in change.items()))
    usable = [a for a in advice if not a["cost"]["cripples"]]
    crippling = [a for a in advice if a["cost"]["cripples"]]

    def item(i: int, a: dict) -> list[str]:
        return [f"  {i}. {name_change(a['change'])}: {a['why']}",
                f"     cost: {a['cost']['text']}"]

    lines = ["", "To avoid it (in this order; each re-run through the model: no crash):"]
    for i, a in enumerate(usable, 1):
        lines += item(i, a)
    if not usable:
        lines.append("  (no change that keeps the engine usable was found)")
    if crippling:
        lines += ["Also avoid it, but cripple the engine (not advised):"]
        for i, a in enumerate(crippling, len(usable) + 1):
            lines += item(i, a)
    return lines


def closing_lines(advice: list[dict] | None, assumptions, name_change=None) -> list[str]:
    """The "To avoid it" block (when there is advice) and the assumptions."""
    lines = advice_lines(advice, name_change) if advice else []
    return lines + ["", "Assumptions:"] + [f"  - {a}" for a in assumptions]


def _count(n: int, noun: str) -> str:
    """``1 request``, ``2 requests``, ``3 later start-up batches``: a count with its noun."""
    plural = noun + ("es" if noun.endswith(("ch", "s")) else "s")
    return f"{n} {noun if n == 1 else plural}"


def _until_crash(batches) -> tuple[list, list]:
    """(the batches up to and with the first that raises, the ones after it: never run)."""
    bad = next((i for i, b in enumerate(batches) if b.error), None)
    return (list(batches), []) if bad is None else (list(batches[:bad + 1]),
                                                    list(batches[bad + 1:]))


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
                 advice: list[dict] | None = None, name_change=None) -> str:
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
        f"host pool                   {k.host_pool_gib:g} GiB = "
        f"{host_blocks(k.host_pool_gib, layout(k))} blocks of 64 tokens, "
        f"{layout(k).host_block_bytes:,} bytes each",
        f"model config                {layout(k).describe()}",
        f"GPU KV pool                 {pool_line(k, s.max_num_batched_tokens, k.num_gpu_blocks_override)}",
        f"hot buffer                  {layout(k).device_buffer_size} rows a request "
        f"({layout(k).hot_groups} hot groups of {layout(k).hot_blocks} blocks)",
        "",
        f"start-up: {'ok' if pred.startup_ok else pred.startup_error}",
    ]
    if show_batches:
        ran, not_run = _until_crash(pred.startup)
        lines += [_batch_line(b, n) for b, n in fold(
            [b for b in ran if b.routed or b.error], full)]
        if not_run:
            lines.append(f"  not run: {_count(len(not_run), 'later start-up batch')} "
                         "(the engine died)")
        if not pred.startup and k.enforce_eager:
            lines.append("  (enforce_eager: no CUDA-graph captures and no JIT warmup, "
                         "so nothing is routed at start-up)")
    for p in pred.prompts:
        if not p.ran:
            lines.append(f"prompt of {count(p.n, 'token')}: not run (the engine died at {p.died_at})")
            continue
        lines.append(f"prompt of {count(p.n, 'token')}: {'ok' if p.ok else p.error}")
        if show_batches:
            ran = p.ran_batches  # to its crash: the batches the notebooks list too
            lines += [_batch_line(b, n) for b, n in fold(ran, full)]
            if len(ran) < len(p.batches):
                lines.append(f"  not run: {_count(len(p.batches) - len(ran), 'later batch')} "
                             "(the engine died)")
    lines += surface_lines(k, first_error(pred), pred.startup_error is not None)
    return "\n".join(lines + closing_lines(advice, ASSUMPTIONS, name_change))


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


def step_json(s, one_rank: bool) -> dict:
    """One engine step: its mode and every rank's forward; a one-rank step also keeps its
    rank's keys at the top (as before data parallelism, so recordings still compare)."""
    ranks = [r.as_dict() for r in s.ranks]
    flat = ({k: v for k, v in ranks[0].items() if k not in ("rank", "dummy")}
            if one_rank else {})
    return {"step": s.step, **flat, "mode": s.mode, "ranks": ranks}


def schedule_json(sched, advice: list[dict] | None = None) -> dict:
    """The JSON object ``hisparse simulate --json`` prints (any -dp N)."""
    crash = sched.crash
    return {
        **sizes_json(sched),
        "dp_rank_of_request": list(sched.assignment),
        "placeholder_requests": list(sched.placeholders),
        "startup": {"ok": sched.startup_error is None, "error": sched.startup_error},
        "steps": [step_json(s, sched.num_ranks == 1) for s in sched.steps],
        "crash": crash,
        "finished": sorted(sched.finished),
        "lost": [x.as_dict() for x in sched.lost],
        "host_evicted": [{"blocks": n, "from_step": s} for n, s in sched.host_evicted],
        "advice": advice or [],
        "assumptions": list(sched.assumptions),
        "error_surface": error_surface(sched.knobs, crash and crash["error"],
                                       startup=sched.startup_error is not None,
                                       dp_rank=crash.get("rank") or 0 if crash else 0),
    }


def _step_key(s) -> tuple:
    """What makes two steps look the same in the folded table (not the step number)."""
    return (tuple(sorted(s.scheduled.values())), s.dispatch, s.routed_tokens, s.route, s.error,
            s.draft)


REQUESTS_WIDTH = 60  # characters of the per-request column before "… +N more" (not with --full)


def cli_request(r: int) -> str:
    """Request ``r`` (vLLM's index) as the command line numbers it: ``#1`` is request 0."""
    return f"#{r + 1}"


def requests_column(scheduled: dict, full: bool = False) -> str:
    """``#1:3 #2:2``: each request scheduled in a step (numbered from 1, as in the workload
    file) and its tokens; cut after the last whole entry that fits, saying how many are left."""
    parts = [f"{cli_request(r)}:{n}" for r, n in scheduled.items()]
    text = " ".join(parts)
    if full or len(text) <= REQUESTS_WIDTH:
        return text
    shown, width = [], 0
    for part in parts:
        if width + len(part) + 1 > REQUESTS_WIDTH - len(" … +999 more"):
            break
        shown.append(part)
        width += len(part) + 1
    return " ".join(shown) + f" … +{len(parts) - len(shown)} more"


def crash_where(crash: dict | None) -> str:
    """Where a run died, in words: ``none``, ``start-up``, ``step k``; with several ranks
    ``start-up (every rank)`` or the step and rank and whether it was the rank's own batch
    or a dummy batch (it scheduled nothing)."""
    if crash is None:
        return "none"
    if "rank" not in crash:  # one rank
        return "start-up" if crash["step"] is None else f"step {crash['step']}"
    if crash["step"] is None:
        return "start-up (every rank)"
    how = ("its own batch" if crash["scheduled"] else
           "a dummy batch: it scheduled nothing this step")
    return f"step {crash['step']} on DP rank {crash['rank']} ({how})"


def _step_rows(sched, full: bool) -> list[str]:
    """One rank: a line per engine step, identical neighbours folded into ``steps a-b``."""
    lines = ["  (each step: its tokens, dispatch, routing, then #i:t = the workload's request "
             "i, from 1, computes t tokens)"]
    groups: list[list] = []
    for s in sched.steps:
        if not full and groups and _step_key(groups[-1][0]) == _step_key(s) and not s.error:
            groups[-1][1] = s
            groups[-1][2] += 1
        else:
            groups.append([s, s, 1])
    for first, last, count in groups:
        steps = f"step {first.step}" if count == 1 else f"steps {first.step}-{last.step}"
        reqs = requests_column(first.scheduled, full)
        routed = (f"{first.routed_tokens} routed -> {first.route}" if first.routed_tokens
                  else ("replayed (FULL graph)" if first.dispatch == "FULL" else "not routed"))
        tail = f"  !! {first.error}" if first.error else ""
        d = first.draft
        if d and d.routed:  # the drafter's eager draft steps route too
            routed += f"; {d.forwards} draft step(s) x {d.routed} -> {d.route}"
        more = f" (x{count}, requests vary)" if count > 1 else ""
        lines.append(f"  {steps:<16} {first.num_tokens:>5} tok [{first.dispatch:<9}] "
                     f"{routed}{tail}   {reqs}{more}")
    return lines


def _rank_cell(r, full: bool = False) -> str:
    what = (f"dummy {list(r.dummy)}" if r.dummy is not None
            else requests_column(r.scheduled, full))
    routed = (f"{r.routed_tokens}->{r.route}" if r.routed_tokens
              else "replay" if r.dispatch == "FULL" else "-")
    tail = " !!" if r.error else ""
    return f"{what} pad {r.padded} {routed}{tail}"


def _rank_rows(sched, full: bool) -> list[str]:
    """Several ranks: a line per engine step, a cell per rank; ``... N more like it``."""
    lines = []
    prev = None
    folded = 0
    for s in sched.steps:
        key = (s.mode, tuple((r.dummy, r.padded, r.routed_tokens, r.route) for r in s.ranks))
        if not full and key == prev and not s.error:
            folded += 1
            continue
        if folded:
            lines.append(f"  ... {folded} more like it")
            folded = 0
        prev = key
        cells = " | ".join(f"rank {r.rank}: {_rank_cell(r, full)}" for r in s.ranks)
        lines.append(f"  step {s.step:<5} [{s.mode:<9}] {cells}")
    if folded:
        lines.append(f"  ... {folded} more like it")
    return lines


def format_schedule(sched, *, full: bool = False, advice: list[dict] | None = None) -> str:
    """The text ``simulate`` prints: the sizes, one line per engine step (a cell per rank when
    there are several), the crash and what the caller sees, what the callers received and
    lost, the advice and the assumptions."""
    k, p = sched.knobs, sched.plan
    many = sched.num_ranks > 1
    n = _count(len(sched.workload), "request")
    fix = " + upstream fix" if k.routing == "fix" else ""
    if many:
        head = (f"vLLM {k.vllm_version}{fix}  DP={k.data_parallel_size} "
                f"TP={k.tensor_parallel_size}  S={k.max_num_seqs} per rank "
                f"B={p.max_num_batched_tokens} q={p.max_decode_query_len}  C={p.swap_capacity} "
                f"W={p.workspace_rows}  {n}"
                + "".join(f" ({cli_request(i)}: rank {sched.assignment[i]}'s placeholder, it "
                          "was given none)" for i in sched.placeholders))
    else:
        head = (f"vLLM {k.vllm_version}{fix}  S={k.max_num_seqs} B={p.max_num_batched_tokens} "
                f"q={p.max_decode_query_len}  C={p.swap_capacity} W={p.workspace_rows}  "
                f"prefix caching {'on' if k.enable_prefix_caching else 'off'}  {n}")
    lines = [head, f"start-up: {'ok' if sched.startup_error is None else sched.startup_error}"]
    lines += _rank_rows(sched, full) if many else _step_rows(sched, full)
    crash = sched.crash
    lines.append("crash: none" if crash is None else
                 f"crash at {crash_where(crash)}: {crash['error']}")
    if crash is not None:
        lines += surface_lines(k, crash["error"], crash["step"] is None,
                               (crash["rank"] or 0) if many else None)
    lines.append(f"finished: {len(sched.finished)} of {n} "
                 f"(what the caller{'s' if many else ''} received)")
    lines.append(lost_line(sched.lost, crash, cli_request))
    lines += evicted_lines(sched.host_evicted)
    return "\n".join(lines + closing_lines(advice, sched.assumptions))


def evicted_lines(per_rank: list) -> list[str]:
    """What each rank's host pool evicted (``schedule/host_cache.py``), or nothing."""
    out = []
    for rank, (blocks, first) in enumerate(per_rank):
        if blocks:
            who = f"rank {rank}'s host pool" if len(per_rank) > 1 else "the host pool"
            out.append(f"host pool: full of cached prefixes, {who} evicted {blocks:,} cached "
                       f"blocks from engine step {first:,}, least recently freed first (the "
                       "model decides when from its bound on the blocks in use: a prefix hit "
                       "near that edge may be one vLLM still had)")
    return out
