"""Two-GPU live runs (``pytest -m gpu`` on a machine with two CUDA GPUs; ``--record`` keeps them).

Runs every configuration of ``scripts/sweeps/two-gpu-v031.json`` (TP=2 serving and
start-up crashes, DP=2 with an idle rank crashing, a DP=2 control) through the
project's runner, each in its own child(ren) with a timeout, and compares the
recording with the model rank by rank (:mod:`hisparse_model.rank_recordings`).
With fewer than two GPUs, or without vLLM, every test skips with the reason
``check_available(2)`` gives.  ``--record`` writes ``tests/recorded/two_gpu/<name>.json``
(and each process's console log beside it), which the CPU suite then compares
(``tests/test_live_parallel.py``).
"""

import os

import pytest

from hisparse_model.engine import parallel
from hisparse_model.engine.live import validate_sweep
from hisparse_model.recordings import recorded_dir

pytestmark = pytest.mark.gpu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = os.path.join(REPO, "scripts", "sweeps", "two-gpu-v031.json")
ENTRIES = {e["name"]: e for e in validate_sweep(SWEEP)}
CHILD_TIMEOUT = float(os.environ.get("HISPARSE_LIVE_TIMEOUT", "540"))


@pytest.fixture(scope="session")
def two_gpus():
    from hisparse_model.engine.live import LiveUnavailable, check_available

    try:
        return check_available(2)
    except LiveUnavailable as exc:
        pytest.skip(f"two-GPU live engine unavailable: {exc}")


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_two_gpu_run_matches_model(name, two_gpus, tmp_path, request):
    """A TP=2 / DP=2 engine run, every process with NVLink multicast off, agrees with the model."""
    from hisparse_model.engine.live import run_one
    from hisparse_model.rank_recordings import compare_dp_recording, compare_tp_recording

    entry = ENTRIES[name]
    if entry["knobs"].vllm_version != two_gpus:
        pytest.skip(f"needs vLLM {entry['knobs'].vllm_version}, {two_gpus} is installed")
    record = request.config.getoption("--record")
    folder = os.path.join(recorded_dir(), "two_gpu") if record else str(tmp_path)
    rec = run_one(entry["knobs"], entry["prompt_lens"], os.path.join(folder, f"{name}.json"),
                  timeout=entry.get("timeout", CHILD_TIMEOUT), workload=entry.get("workload"),
                  command=f"pytest -m gpu tests/test_live_gpu_two.py -k {name}"
                  + (" --record" if record else ""))
    assert "startup" in rec, f"engine child produced no recording: {rec}"
    envs = [rec["provenance"]["env"]] + [r["provenance"]["env"] for r in rec.get("ranks", [])
                                         if "provenance" in r]
    for env in envs:
        assert {k: env.get(k) for k in parallel.MULTICAST_OFF_ENV} == parallel.MULTICAST_OFF_ENV
    if entry["knobs"].data_parallel_size > 1:
        diffs = compare_dp_recording(rec)
    else:
        assert rec["provenance"]["engine_args"]["disable_custom_all_reduce"] is True
        diffs = compare_tp_recording(rec)
    assert not diffs, "\n".join(diffs)
