"""A step's cost fitted to what a server measured: the clock's calibration
(``schedule/clock.py`` :class:`StepCost`).  ``simulate --step-cost-from-log``.

The measurement is a list of busy seconds (``inputs/iteration_log.py`` :func:`busy_seconds`):
in each, ``steps`` batches computing ``prefill`` prompt tokens and ``decode`` output tokens
took 1,000 ms together. The cost ``base x steps + p x prefill + d x decode = 1000`` is fitted
to all of them by least squares with every coefficient at least 0 (a coefficient the
unconstrained fit makes negative is left out and the rest refitted). The context term of
:class:`StepCost` stays 0: vLLM's step lines do not say how long each request's context is.

No vLLM import, no numpy: three unknowns, solved in closed form.
"""

from __future__ import annotations

from itertools import combinations

from ..schedule.clock import StepCost

MIN_SECONDS = 3  # busy seconds a fit needs (three unknowns)
TERMS = ("base_ms", "prefill_ms", "decode_ms")


class ClockFitError(ValueError):
    """Too few busy seconds to fit a step's cost (one line naming the source)."""


def fit(seconds, source: str) -> StepCost:
    """The :class:`StepCost` that best explains ``seconds`` (module docstring); ``source``
    names where they were read (the log), kept in the cost's ``source``."""
    rows = [(float(s.steps), float(s.prefill_tokens), float(s.decode_tokens))
            for s in seconds]
    if len(rows) < MIN_SECONDS:
        raise ClockFitError(f"{source}: busy seconds of logged steps: {len(rows)}, a fit "
                            f"needs {MIN_SECONDS} (a log of vllm serve "
                            "--enable-logging-iteration-details under load)")
    best = None
    for k in (3, 2, 1):  # every subset of the terms, largest first
        for used in combinations(range(3), k):
            coef = _least_squares([[r[j] for j in used] for r in rows], 1000.0)
            if coef is None or min(coef) < 0:
                continue
            full = [0.0, 0.0, 0.0]
            for j, c in zip(used, coef):
                full[j] = c
            err = sum((sum(f * x for f, x in zip(full, r)) - 1000.0) ** 2 for r in rows)
            if best is None or err < best[0] - 1e-9:
                best = (err, full)
        if best is not None:
            break
    if best is None:
        raise ClockFitError(f"{source}: the busy seconds fit no step cost of positive terms")
    base, p, d = best[1]
    return StepCost(base, p, d, 0.0, f"fitted to {len(rows)} busy seconds of {source}")


def _least_squares(x: list[list[float]], y: float) -> list[float] | None:
    """The coefficients minimising sum((row . c - y)^2) over rows ``x``, or None when the
    normal equations are singular (a term that is 0 in every row)."""
    n = len(x[0])
    a = [[sum(r[i] * r[j] for r in x) for j in range(n)] + [sum(r[i] * y for r in x)]
         for i in range(n)]
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
