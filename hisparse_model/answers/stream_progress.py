"""A long replay's progress line on standard error: rows read, trace time, engine steps,
rewritten in place after a few seconds and cleared when the replay ends
(``stream_replay.open_traffic`` gives one to a terminal's ``simulate --traffic``)."""

from __future__ import annotations

import sys
import time


def span(seconds: float) -> str:
    """Trace time in the unit that reads best: seconds, minutes, then hours."""
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min" \
        if seconds < 7200 else f"{seconds / 3600:.1f} h"


class Ticks:
    """Calls ``progress`` (a :func:`progress_line`, or None: nothing) every 1,024 engine
    steps of a replay, and once with None when it ends."""

    def __init__(self, progress):
        self.progress, self.n = progress, 0

    def tick(self, step: int) -> None:
        self.n += 1
        if self.progress is not None and not self.n & 1023:
            self.progress(step)

    def done(self) -> None:
        if self.progress is not None:
            self.progress(None)


def progress_line(traffic, out=None, after_s: float = 2.0, every_s: float = 0.5):
    """A callable the replay calls with each engine step (None: done): after ``after_s``
    seconds, at most every ``every_s``, one line rewritten in place on ``out`` (standard
    error): rows read, trace time, engine steps; cleared when done."""
    start, last, shown = time.monotonic(), [0.0], [False]

    def show(step):
        w = out or sys.stderr
        if step is None:
            if shown[0]:
                w.write("\r\033[K")
                w.flush()
            return
        now = time.monotonic()
        if now - start < after_s or now - last[0] < every_s:
            return
        last[0], shown[0], s = now, True, traffic.stream
        w.write(f"\r{traffic.source}: {s.rows:,} rows read, trace time {span(s.trace_s)}, "
                f"engine step {step:,}\033[K")
        w.flush()
    return show
