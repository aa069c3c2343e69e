"""Distinct random knob sets for the CPU cross-checks (one sampling loop for all of them)."""

from __future__ import annotations

from typing import Callable


def distinct(draw: Callable[[], dict], count: int) -> list[dict]:
    """``count`` distinct dicts from ``draw()``, in the order first drawn (repeats skipped)."""
    seen: set[tuple] = set()
    out: list[dict] = []
    while len(out) < count:
        knobs = draw()
        key = tuple(sorted(knobs.items()))
        if key not in seen:
            seen.add(key)
            out.append(knobs)
    return out
