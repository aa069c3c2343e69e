"""A step's cost fitted to what an engine measured: the clock's calibration
(``schedule/clock.py`` :class:`StepCost`), from three measurements.

* ``simulate --step-cost-from-log``: a server log's busy seconds (``inputs/iteration_log.py``
  :func:`busy_seconds`): in each, ``steps`` batches computing ``prefill`` prompt tokens and
  ``decode`` output tokens took 1,000 ms together, one equation
  ``base x steps + p x prefill + d x decode = 1000``. No context term: vLLM's step lines do
  not say how long each request's context is.
* ``simulate --step-cost-from-calibration`` of a calibration sweep (``engine/calibrate.py``,
  each batch's period and composition measured in the engine): one equation a batch
  ``base + p x prefill + d x decode + c x context = ms``, from the second pass of each phase
  (the first compiled kernels) and no batch after an idle engine.
* ``simulate --step-cost-from-calibration`` of a served replay's timed batches
  (``engine/step_timer.py``, :func:`fit_served`): the same terms plus launching the batch
  after each (``launch_eager_ms``, ``launch_piecewise_ms``, ``launch_prefill_ms``), each
  batch's CUDA-graph mode read from its counts and the server's capture sizes (the knobs
  ``simulate`` is given: fit to a run of the same server).

All are fitted by least squares with every coefficient at least 0 (every subset of the terms
is tried, the largest that fits with none negative is kept). No vLLM import, no numpy: at most
seven unknowns, solved in closed form.
"""

from __future__ import annotations

import os
from itertools import combinations

from ..schedule.clock import StepCost

MIN_SECONDS = 3  # busy seconds a fit needs (three unknowns); a calibration: one batch more


class ClockFitError(ValueError):
    """Too few busy seconds to fit a step's cost (one line naming the source)."""


def fit(seconds, source: str) -> StepCost:
    """The :class:`StepCost` that best explains busy ``seconds`` (module docstring); ``source``
    names where they were read (the log), kept in the cost's ``source``."""
    rows = [(float(s.steps), float(s.prefill_tokens), float(s.decode_tokens), 0.0, 1000.0)
            for s in seconds]
    if len(rows) < MIN_SECONDS:
        raise ClockFitError(f"{source}: busy seconds of logged steps: {len(rows)}, a fit "
                            f"needs {MIN_SECONDS} (a log of vllm serve "
                            "--enable-logging-iteration-details under load)")
    return _fit(rows, source, f"fitted to {len(rows)} busy seconds of {source}")


def fit_batches(batches, source: str) -> StepCost:
    """The :class:`StepCost` that best explains measured batches, each a dict with
    ``prefill``, ``decode``, ``context`` and ``ms`` (a calibration's rows, already chosen)."""
    rows = [(1.0, float(b["prefill"]), float(b["decode"]), float(b["context"]), float(b["ms"]))
            for b in batches]
    if len(rows) < MIN_SECONDS + 1:
        raise ClockFitError(f"{source}: measured batches: {len(rows)}, a fit needs "
                            f"{MIN_SECONDS + 1}")
    return _fit(rows, source, f"fitted to {len(rows)} batches measured in the engine, {source}")


def _fit(rows, source: str, said: str) -> StepCost:
    """Least squares over rows ``(count, prefill, decode, context, target)`` with no negative
    coefficient (module docstring)."""
    base, p, d, c = _nonnegative(rows, source)
    return StepCost(base, p, d, c, said, measured=True)


def _nonnegative(rows, source: str) -> list[float]:
    """The coefficients of the terms ``row[:-1]`` that best give ``row[-1]``, none negative:
    every subset of the terms is tried, the largest that fits with none negative kept.  The
    sums of products are taken once; each subset is solved from them (a few thousand batches
    and seven terms: 127 subsets)."""
    n = len(rows[0]) - 1
    gram = [[sum(r[i] * r[j] for r in rows) for j in range(n + 1)] for i in range(n + 1)]
    best = None
    for k in range(n, 0, -1):  # every subset of the terms, largest first
        for used in combinations(range(n), k):
            coef = _solve([[gram[i][j] for j in used] + [gram[i][n]] for i in used])
            if coef is None or min(coef) < 0:
                continue
            # the squared residuals' sum: y.y - 2 c.(X.y) + c.(X.X) c
            err = gram[n][n] - 2 * sum(c * gram[i][n] for c, i in zip(coef, used)) + sum(
                ci * cj * gram[i][j] for ci, i in zip(coef, used) for cj, j in zip(coef, used))
            if best is None or err < best[0] - 1e-9 * max(1.0, abs(best[0])):
                full = [0.0] * n
                for j, c in zip(used, coef):
                    full[j] = c
                best = (err, full)
        if best is not None:
            break
    if best is None:
        raise ClockFitError(f"{source}: the measurements fit no step cost of positive terms")
    return best[1]


def fit_served(rows, source: str, plan, graphs: str | None = None) -> StepCost:
    """The :class:`StepCost` of the served engine's batches (``engine/step_timer.py`` rows, in
    the engine's order; ``schedule/clock.py`` says what the terms mean), each period measured
    after a busy batch and followed by one: its own terms plus launching the batch after it,
    by how that batch runs on ``plan``'s CUDA graphs (:func:`_mode`), all fitted together.
    ``graphs``: whose knobs ``plan`` is (said in the cost's source)."""
    eqs = []
    for r, n in zip(rows, rows[1:]):
        if r.get("ms") is None or r["after_idle"] or n["after_idle"]:
            continue
        mode = _mode(plan, n)
        eqs.append((1.0, float(r["prefill"]), float(r["decode"]), float(r["context"]),
                    float(mode == "NONE"), float(mode == "PIECEWISE"),
                    0.0 if mode == "FULL" else float(n["prefill"]), float(r["ms"])))
    if len(eqs) < MIN_SECONDS + 4:
        raise ClockFitError(f"{source}: measured batches: {len(eqs)}, a fit needs "
                            f"{MIN_SECONDS + 4} (a period is measured between two busy "
                            "batches: not the first, nor one next to an idle engine)")
    base, p, d, c, eager, piecewise, per = _nonnegative(eqs, source)
    said = [_launches_said(sum(1 for e in eqs if e[4 + i]), what)
            for i, what in enumerate(("an eager batch", "a PIECEWISE one"))]
    return StepCost(base, p, d, c, f"fitted to {len(eqs)} of {len(rows)} batches measured in "
                    f"the served engine, the others bordering an idle engine; {'; '.join(said)}; "
                    "each batch's mode read with " + (graphs or (
                        f"the knobs given: {_graphs_said(plan)} (a run's folder with its run.json "
                        "reads its own)")) + f"), {source}", eager, piecewise, per, measured=True)


def _launches_said(n: int, what: str) -> str:
    """How many periods priced launching ``what``, and what a few of them mean."""
    if n == 0:
        return f"none before {what}: launching one is charged nothing"
    return f"{n:,} before {what}" + (" (a price from so few)" if n < 3 else "")


def _graphs_said(plan) -> str:
    """A server's knobs as the CUDA graphs they capture: ``S 143, graphs of up to 272
    tokens``."""
    sizes = plan.capture_sizes if plan.cudagraph_mode != "NONE" else ()
    graphs = f"graphs of up to {sizes[-1]:,} tokens" if sizes else "no CUDA graph"
    return f"S {plan.knobs.max_num_seqs:,}, {graphs}"


def _run_plan(folder: str, given):
    """The plan of the server that made a run (its ``run.json`` ``provenance.knobs``, in the
    run's folder or beside its steps folder) and the words for it, else ``(given, None)``."""
    from ..boundary.files import InputError
    from ..boundary.json_file import load
    from ..model.knobs import Knobs
    from ..model.plan import plan as plan_of

    folder = os.path.abspath(folder)
    found = [p for p in (os.path.join(folder, "run.json"),
                         os.path.join(os.path.dirname(folder), "run.json")) if os.path.isfile(p)]
    if not found:
        return given, None
    what = f"--step-cost-from-calibration {found[0]}"
    try:
        data = load(found[0], what)
    except InputError as exc:
        raise ClockFitError(str(exc)) from None
    knobs = data.get("provenance", {}).get("knobs") if isinstance(data, dict) and isinstance(
        data.get("provenance"), dict) else None
    if not isinstance(knobs, dict):
        raise ClockFitError(f"{what}: no provenance.knobs (a run.json of serve_run); give the "
                            "steps file alone to read its batches with the knobs given")
    try:
        own = plan_of(Knobs.from_dict(knobs))
    except (TypeError, ValueError) as exc:
        raise ClockFitError(f"{what}: provenance.knobs: {exc}") from None
    said = f"the run's own knobs, from its run.json: {_graphs_said(own)}"
    if (own.cudagraph_mode, own.capture_sizes) != (given.cudagraph_mode, given.capture_sizes):
        said += f" (the knobs given differ: {_graphs_said(given)})"

    def value(p, k):  # B as the plan derives it where not given
        return p.max_num_batched_tokens if k == "max_num_batched_tokens" else getattr(p.knobs, k)

    differ = [f"{k} {value(given, k)}"
              + (" (derived)" if k == "max_num_batched_tokens"
                 and given.knobs.max_num_batched_tokens is None else "")
              + f" (the run's {value(own, k)})"
              for k in Knobs.__dataclass_fields__ if value(own, k) != value(given, k)]
    if differ:
        said += ("; this replay's knobs are not the run's server's: " + ", ".join(differ)
                 + ": give the run's to compare with it")
    return own, said


def _mode(plan, row: dict) -> str:
    """How the batch of timer row ``row`` ran: the first mode the runner dispatched for it
    where the timer noted it (``modes``), else ``model/dispatch.py dispatch`` of its counts: one
    with no prompt token whose decode tokens split evenly over its requests is taken for a
    uniform decode batch (a prompt extended by one token over its context, which may replay a
    FULL graph too, is counted as a prompt batch)."""
    from ..model.dispatch import dispatch

    if row.get("modes"):
        return row["modes"][0]
    n = row["requests"]
    longest = -(-row["decode"] // n) if n else 0  # even decodes: each of this many tokens
    return dispatch(plan, row["prefill"] + row["decode"], n, longest, not row["prefill"]).mode


def _solve(a: list[list[float]]) -> list[float] | None:
    """The solution of the augmented system ``a`` (n rows of n coefficients and the right-hand
    side), or None when it is singular (a term that is 0 in every row)."""
    n = len(a)
    a = [list(r) for r in a]
    for i in range(n):  # Gauss-Jordan with partial pivoting
        piv = max(range(i, n), key=lambda k: abs(a[k][i]))
        if abs(a[piv][i]) < 1e-12 * max(1.0, max(abs(v) for v in a[piv][:n])):
            return None
        a[i], a[piv] = a[piv], a[i]
        p = a[i][i]
        a[i] = [v / p for v in a[i]]
        for k in range(n):
            if k != i and a[k][i]:
                f = a[k][i]
                a[k] = [v - f * w for v, w in zip(a[k], a[i])]
    return [a[i][n] for i in range(n)]


def from_log(path: str) -> StepCost:
    """The step cost fitted to the busy seconds of the vllm serve log at ``path`` (read as
    ``check --from-log`` reads a log: bounded, gzipped, coloured or standard input)."""
    from ..boundary.files import InputError
    from ..inputs.iteration_log import busy_seconds
    from ..inputs.log_text import read_log

    try:
        text = read_log(path)
    except InputError as exc:
        raise ClockFitError(f"--step-cost-from-log: {exc}") from None
    return fit(busy_seconds(text), f"--step-cost-from-log {path}")


def from_calibration(path: str, plan) -> StepCost:
    """The step cost fitted to batches measured in the engine, told apart by their content: a
    served replay's timed batches (JSON Lines, ``engine/step_timer.py``: :func:`fit_served`;
    ``path`` may be the run's folder or its ``steps`` folder) or a calibration sweep's JSON
    (``engine/calibrate.py``: the batches of each phase's second pass with a period measured
    after a busy one).  Read once through the input boundary (``limits.STEPS``: standard
    input, a FIFO, gzip).  ``plan``: the server's (its CUDA graphs tell how each served batch
    ran)."""
    import json

    from ..boundary.files import InputError, read_bytes, within
    from ..boundary.limits import STEPS

    graphs = None
    if os.path.isdir(path):
        plan, graphs = _run_plan(path, plan)
        path = _steps_file(path)
    what = f"--step-cost-from-calibration {path}"
    try:
        text = read_bytes(path, STEPS, what).decode("utf-8")
    except InputError as exc:
        raise ClockFitError(str(exc)) from None
    except UnicodeDecodeError:
        raise ClockFitError(f"{what}: not UTF-8 text") from None
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None  # JSON Lines: a served replay's batches
    if isinstance(whole, dict) and "rows" in whole:
        return _sweep(whole, what, plan)
    lines = text.splitlines()
    try:
        within(STEPS, what, len(lines))
    except InputError as exc:
        raise ClockFitError(str(exc)) from None
    rows = []
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            raise ClockFitError(f"{what}: line {k}: not JSON (a served replay's steps-<pid>.jsonl "
                                "or a calibration sweep's JSON with a \"rows\" list)") from None
        bad = _not_a_timed_batch(r)
        if bad:
            raise ClockFitError(f"{what}: line {k}: {bad}")
        rows.append(r)
    return fit_served(rows, what, plan, graphs)


def _sweep(whole: dict, what: str, plan) -> StepCost:
    """:func:`fit_batches` of a calibration sweep's rows (``from_calibration``), its source
    saying what such a fit lacks and the vLLM the sweep ran, where not the server's."""
    import dataclasses

    rows = whole["rows"]
    if not isinstance(rows, list):
        raise ClockFitError(f"{what}: no \"rows\" list (a file written by python -m "
                            "hisparse_model.engine.calibrate)")
    chosen = []
    for k, r in enumerate(rows):
        ok = isinstance(r, dict) and all(
            isinstance(r.get(f), (int, float)) and not isinstance(r.get(f), bool)
            and 0 <= r[f] < 1e12 for f in ("prefill", "decode", "context"))
        if not ok or not isinstance(r.get("phase"), str):
            raise ClockFitError(f"{what}: row {k}: not a measured batch (phase, prefill, "
                                "decode, context, ms)")
        ms = r.get("ms")
        if r["phase"].endswith(":2") and r.get("after_idle") is False and \
                isinstance(ms, (int, float)) and 0 < ms < 1e7:
            chosen.append(r)
    cost = fit_batches(chosen, what)
    prov = whole.get("provenance")
    ran = prov.get("vllm") if isinstance(prov, dict) else None
    other = f"; measured on vLLM {ran:.20}, this server is {plan.knobs.vllm_version}" if (
        isinstance(ran, str) and ran != plan.knobs.vllm_version) else ""
    return dataclasses.replace(cost, source=f"{cost.source} (an offline engine in process: no "
                               f"launch of the next batch, its periods hold the output "
                               f"processing a server does beside it{other})")


def _steps_file(folder: str) -> str:
    """The one ``steps-<pid>.jsonl`` of a served run's folder or of its ``steps`` folder."""
    inner = os.path.join(folder, "steps")
    if os.path.isdir(inner):
        folder = inner
    try:
        names = os.listdir(folder)
    except OSError as exc:
        raise ClockFitError(f"--step-cost-from-calibration {folder}: "
                            f"{exc.strerror or exc}") from None
    files = sorted(os.path.join(folder, f) for f in names
                   if f.startswith("steps-") and f.endswith((".jsonl", ".jsonl.gz", ".jsonl.zst")))
    if len(files) != 1:
        raise ClockFitError(f"--step-cost-from-calibration {folder}: {len(files)} "
                            "steps-<pid>.jsonl files (or .jsonl.gz, .jsonl.zst), one wanted (one "
                            "engine's batches, in its order)")
    return files[0]


def _not_a_timed_batch(r) -> str | None:
    """Why ``r`` is not one row of ``engine/step_timer.py`` (the fields the fit reads), or
    None."""
    if not isinstance(r, dict):
        return "not a timed batch (a JSON object of prefill, decode, context, requests, ms, " \
               "after_idle)"
    for f in ("prefill", "decode", "context", "requests"):
        if type(r.get(f)) is not int or not 0 <= r[f] < 10**12:
            return f"{f} {r.get(f)!r:.40}: not a count (a whole number, 0 or more)"
    if not isinstance(r.get("after_idle"), bool):
        return f"after_idle {r.get('after_idle')!r:.40}: not true or false"
    ms = r.get("ms")
    if ms is not None and not (type(ms) in (int, float) and 0 < ms < 1e9):
        return f"ms {ms!r:.40}: not a period (milliseconds over 0, or null)"
    modes = r.get("modes", [])
    if not isinstance(modes, list) or not all(m in MODES for m in modes):
        return f"modes {modes!r:.40}: not a list of {', '.join(MODES)}"
    return None


MODES = ("FULL", "PIECEWISE", "NONE")  # a CUDA-graph mode the step timer may note
