"""Replay: a committed real recording played back in place of the live engine.

``HISPARSE_LIVE_REPLAY=REC.json`` (several: joined with ``os.pathsep``) makes the live
code path stand in for the engine without a GPU or vLLM: :func:`.live.check_available`
answers the recordings' vLLM version, and :func:`.live.run_one` (so
``hisparse live``, its ``--workload`` and ``--sweep`` runs, and notebooks 4
and 5's live cells) writes and returns the recording of the same request instead of
starting vLLM.  CI runs the GPU tests' checks this way (``tests/live_checks.py``).

A replay is never confusable with a new run: what it writes carries
``provenance["replay"]`` (the file played back, when, and the command that asked), next
to the recorded provenance left as the engine wrote it; a request no recording answers
(other knobs, other prompts or workload) is refused with one line naming what differs,
never answered with a near one.  Nothing here imports vllm or torch.
"""

from __future__ import annotations

import copy
import json
import os
import time

from ..model.knobs import Knobs
from ..recorded.recordings import recording_knobs, write_json_atomic
from ..schedule.workload import Workload
from . import parallel
from .processes import LiveUnavailable

REPLAY_ENV = "HISPARSE_LIVE_REPLAY"


class ReplayMismatch(ValueError):
    """The live run asks for something no replayed recording ran."""


def paths() -> list[str]:
    """The recordings ``HISPARSE_LIVE_REPLAY`` names (empty: the live engine runs)."""
    return [p for p in os.environ.get(REPLAY_ENV, "").split(os.pathsep) if p]


def _load(path: str) -> dict:
    try:
        with open(path) as f:
            rec = json.load(f)
    except (OSError, ValueError) as exc:
        raise ReplayMismatch(f"{REPLAY_ENV}: cannot read {path}: {exc}") from exc
    if "startup" not in rec or "vllm" not in rec.get("provenance", {}):
        raise ReplayMismatch(f"{REPLAY_ENV}: {path} is not an engine recording "
                             "(no start-up or no recorded vLLM version)")
    return rec


def version(gpus: int = 1) -> str:
    """What :func:`.live.check_available` answers under replay: the recordings' vLLM version
    (:class:`.live.LiveUnavailable` if they need fewer GPUs than ``gpus``)."""
    recs = [_load(p) for p in paths()]
    versions = sorted({r["provenance"]["vllm"] for r in recs})
    if len(versions) != 1:
        raise ReplayMismatch(f"{REPLAY_ENV}: recordings of several vLLM versions {versions}; "
                             "replay one version at a time")
    most = max(parallel.gpus_needed(recording_knobs(r)) for r in recs)
    if most < gpus:
        raise LiveUnavailable(f"{gpus} CUDA GPUs needed, the replayed recordings ran on {most}")
    return versions[0]


def _requests(workload) -> list[dict]:
    """A workload's requests with every field spelled out (defaults filled in)."""
    return Workload.from_json(list(workload)).as_json()["requests"]


def _differences(rec: dict, knobs: Knobs, prompt_lens: list[int], workload) -> list[str]:
    recorded = recording_knobs(rec).as_dict()
    diffs = [f"{k} (asked {v!r}, recorded {recorded.get(k)!r})"
             for k, v in knobs.as_dict().items() if recorded.get(k) != v]
    if workload is not None and _requests(rec.get("workload") or []) != _requests(workload):
        diffs.append(f"the workload (asked {_requests(workload)}, recorded "
                     f"{_requests(rec.get('workload') or [])})")
    if workload is None and rec.get("prompt_lens") != list(prompt_lens):
        diffs.append(f"prompt_lens (asked {list(prompt_lens)}, recorded {rec.get('prompt_lens')})")
    return diffs


def run(knobs: Knobs, prompt_lens: list[int], out: str, *, command: str, workload=None) -> dict:
    """What :func:`.live.run_one` does under replay: the recording of this request, marked as
    played back, written to ``out`` (atomically) and returned.  Raises :class:`ReplayMismatch`
    naming what differs from the nearest recording when none ran this request."""
    found = []
    for path in paths():
        rec = _load(path)
        found.append((_differences(rec, knobs, prompt_lens, workload), path, rec))
    diffs, path, rec = min(found, key=lambda f: len(f[0]))
    if diffs:
        raise ReplayMismatch(f"{REPLAY_ENV}: no replayed recording ran this request; the "
                             f"nearest, {os.path.basename(path)}, differs in {', '.join(diffs)}")
    rec = copy.deepcopy(rec)
    rec["provenance"]["replay"] = {
        "of": os.path.basename(path),
        "replayed": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "command": command,
        "note": "played back from a committed recording; no engine ran",
    }
    write_json_atomic(out, rec)
    return rec
