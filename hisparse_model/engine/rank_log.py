"""Routing logs written by each engine process as it goes, and merged per rank.

In a parallel run the routing happens in processes the engine child does not own
(TP workers) or that may be killed (a hung DP rank).  So each such process appends
what :class:`.instrument.RouteLog` collects to its own stream, one JSON object per
line, flushed at once: a killed process loses at most the line it was writing.

Lines (``kind``):

* ``rank``: ``{"tp_rank", "dp_rank", "pid"}``, once the worker knows its ranks;
* ``row``: one routing call, unfolded, with its phase;
* ``engine``: the sizes the engine reports (:func:`.instrument.snapshot_engine`), when
  they change; ``patch``: a run-time patch; ``startup``: a DP rank's engine is built (or
  failed); ``step``: a DP rank starts engine step k; ``served``: a DP rank's loop ended
  (its recording follows).

:func:`read_stream` reads one file back (rows folded exactly as a single-process
:class:`RouteLog` folds them); :func:`merge_rows` labels and concatenates the ranks'
rows in rank order: a recording's ``routing_log`` row of a parallel run carries
``tp_rank`` and ``dp_rank``.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

from .instrument import RouteLog

STREAM_ENV = "HISPARSE_RANK_LOG"  # a file (DP rank) or a folder (TP workers: one file each)
# The phase a TP worker labels a forward with, set on the SchedulerOutput the engine
# child's scheduler hands to the executor (tp_worker.py).
PHASE_ATTR = "hisparse_phase"


class StreamedRouteLog(RouteLog):
    """A :class:`RouteLog` that also appends every row, report and patch to ``path``."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._engine_written: dict = {}
        self._patches_written = 0

    def write(self, kind: str, **fields) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"kind": kind, **fields}) + "\n")
            f.flush()

    def sync(self) -> None:
        """Write what changed in the engine report and the patches since the last call."""
        if self.engine_report != self._engine_written:
            self._engine_written = json.loads(json.dumps(self.engine_report))
            self.write("engine", report=self._engine_written)
        for text in self.patches[self._patches_written:]:
            self.write("patch", text=text)
        self._patches_written = len(self.patches)

    def add(self, row: dict) -> None:
        self.sync()
        self.write("row", row={"phase": self.phase, **row})
        super().add(row)

    @contextmanager
    def in_phase(self, name: str):
        """A phase; what the engine reported during it is written when it ends."""
        try:
            with super().in_phase(name):
                yield
        finally:
            self.sync()


def for_process() -> RouteLog:
    """The log this engine process keeps: streamed when :data:`STREAM_ENV` names a file."""
    path = os.environ.get(STREAM_ENV)
    if path and not os.path.isdir(path):
        return StreamedRouteLog(path)
    return RouteLog()


def read_stream(path: str) -> dict:
    """One process's stream: ``{"rank", "rows" (folded), "engine", "patches", "startup",
    "last_step", "served", "steps", "dummy_steps"}`` (a DP rank's scheduled steps and
    dummy batches, :mod:`.dp_serve`).  A last line cut short by a kill is ignored."""
    log = RouteLog()
    out: dict = {"rank": {}, "engine": {}, "patches": [], "startup": None, "last_step": None,
                 "served": False, "steps": [], "dummy_steps": []}
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # the line a kill interrupted
        kind = rec.get("kind")
        if kind == "row":
            row = dict(rec["row"])
            with log.in_phase(row.pop("phase")):
                log.add(row)
        elif kind == "rank":
            out["rank"] = {k: rec[k] for k in ("tp_rank", "dp_rank") if k in rec}
        elif kind == "engine":
            out["engine"] = rec["report"]
        elif kind == "patch":
            out["patches"].append(rec["text"])
        elif kind == "step":
            out["last_step"] = rec["step"]
        elif kind == "startup":
            out["startup"] = {k: v for k, v in rec.items() if k != "kind"}
        elif kind == "served":
            out["served"] = True
        elif kind == "scheduled":
            out["steps"].append({"step": rec["step"], "scheduled": rec["scheduled"]})
        elif kind == "dummy":
            out["dummy_steps"].append(rec["step"])
    out["rows"] = log.rows
    return out


def read_folder(folder: str) -> list[dict]:
    """Every stream in ``folder`` (one per TP worker), ordered by (dp_rank, tp_rank)."""
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".jsonl"))
    except OSError:
        names = []
    streams = [read_stream(os.path.join(folder, n)) for n in names]
    return sorted(streams, key=lambda s: (s["rank"].get("dp_rank", 0),
                                          s["rank"].get("tp_rank", 0)))


def merge_rows(streams: list[dict]) -> list[dict]:
    """The ranks' rows, each labelled with its ranks, rank by rank (each in its own order)."""
    rows = []
    for s in streams:
        label = {"tp_rank": s["rank"].get("tp_rank", 0), "dp_rank": s["rank"].get("dp_rank", 0)}
        rows += [{**label, **row} for row in s["rows"]]
    return rows


class MergedRouteLog(RouteLog):
    """The TP engine child's view: rows, sizes and patches read from its workers' streams.

    :mod:`.child` uses it as it uses a :class:`RouteLog` (``first_error``, ``rows``,
    ``engine_report``); its own ``in_phase`` labels what the scheduler hands to the
    workers (:mod:`.tp_worker`).  ``patches`` stays this process's own list: the
    workers install the same patches from the same settings."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder = folder

    def _streams(self) -> list[dict]:
        return read_folder(self.folder)

    @property
    def rows(self) -> list[dict]:  # type: ignore[override]
        return merge_rows(self._streams())

    @rows.setter
    def rows(self, value) -> None:  # RouteLog.__init__ sets []; rows live in the streams
        pass

    @property
    def engine_report(self) -> dict:  # type: ignore[override]
        """Rank 0's sizes, and every rank's under ``ranks`` (each worker reports its own)."""
        streams = self._streams()
        if not streams:
            return {}
        return {**streams[0]["engine"],
                "ranks": [{**s["rank"], **s["engine"]} for s in streams]}

    @engine_report.setter
    def engine_report(self, value) -> None:
        pass
