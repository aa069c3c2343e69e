"""Start engine children with timeouts and collect their recordings.

``python -m hisparse_model live ...`` lands here.  Each configuration runs in a
fresh child process (:mod:`.child`) with its own timeout, so a crash or a hang
in one configuration loses nothing else; the recording file appears only when
the child finished writing it (atomic rename).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

from ..knobs import Knobs
from ..recordings import write_json_atomic


class LiveUnavailable(RuntimeError):
    """No GPU or no vLLM here: the live engine cannot run."""


def check_available() -> str:
    """Return the vLLM version, or raise :class:`LiveUnavailable` with the reason."""
    probe = (
        "import torch, vllm, sys;"
        "ok = torch.cuda.is_available();"
        "print(vllm.__version__ if ok else 'NO_GPU')"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as exc:  # pragma: no cover
        raise LiveUnavailable("probing torch/vllm timed out") from exc
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        raise LiveUnavailable(f"vLLM is not importable here ({last})")
    version = out.stdout.strip().splitlines()[-1]
    if version == "NO_GPU":
        raise LiveUnavailable("no CUDA GPU is visible (torch.cuda.is_available() is False)")
    return version


def run_one(
    knobs: Knobs, prompt_lens: list[int], out: str, *, timeout: float, command: str
) -> dict:
    """Run one configuration in a child process; always leaves a recording or a failure stub."""
    spec = {"knobs": knobs.as_dict(), "prompt_lens": prompt_lens, "command": command}
    with tempfile.TemporaryDirectory(prefix="hisparse-live-") as tmp:
        spec_path = os.path.join(tmp, "spec.json")
        child_out = os.path.join(tmp, "recording.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "hisparse_model.engine.child", spec_path, child_out],
                timeout=timeout,
                env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
            )
            status = f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timeout after {timeout:.0f} s"
        elapsed = round(time.monotonic() - t0, 1)
        if os.path.exists(child_out):
            with open(child_out) as f:
                rec = json.load(f)
            rec.setdefault("provenance", {})["wall_seconds"] = elapsed
            write_json_atomic(out, rec)
            return rec
    failure = {"knobs": knobs.as_dict(), "prompt_lens": prompt_lens, "child": status,
               "wall_seconds": elapsed}
    print(f"no recording for {out}: child {status}", file=sys.stderr)
    return failure


def _retryable(rec: dict) -> bool:
    """Start-up failures caused by a neighbour process, not by the configuration."""
    err = (rec.get("startup") or {}).get("error") or rec.get("child", "")
    return "Error in memory profiling" in err or "less than desired GPU memory" in err


def run_sweep(
    path: str, out_dir: str, *, timeout: float, command: str, jobs: int = 1
) -> list[dict]:
    """``--sweep FILE``: a JSON list of ``{"name", "knobs", "prompt_lens"}``; one child each.

    With ``jobs > 1`` children share the GPU (each takes gpu_memory_utilization
    0.3 of it); a child whose start failed only because a neighbour changed the
    free memory during profiling is run again alone at the end.
    """
    from concurrent.futures import ThreadPoolExecutor

    with open(path) as f:
        entries = json.load(f)

    def one(entry: dict) -> dict:
        knobs = Knobs(**entry["knobs"])
        out = os.path.join(out_dir, f"{entry['name']}.json")
        return run_one(knobs, list(entry["prompt_lens"]), out,
                       timeout=entry.get("timeout", timeout), command=command)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(one, entries))
    for i, (entry, rec) in enumerate(zip(entries, results)):
        if jobs > 1 and _retryable(rec):
            results[i] = one(entry)
    return results
