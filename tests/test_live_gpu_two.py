"""Two-GPU live runs (``pytest -m gpu`` on a machine with two CUDA GPUs; ``--record`` keeps them).

Runs every configuration of ``scripts/sweeps/two-gpu-v031.json`` (TP=2 serving and
start-up crashes, DP=2 with an idle rank crashing, a DP=2 control) through the
project's runner, each in its own child(ren) with a timeout, and compares the
recording with the model rank by rank (:mod:`hisparse_model.recorded.rank_recordings`).
With fewer than two GPUs, or without vLLM, every test skips with the reason
``check_available(2)`` gives.  ``--record`` writes ``tests/recorded/two_gpu/<name>.json``
(and each process's console log beside it), which the CPU suite then compares
(``tests/test_live_parallel.py``).  The checks are ``tests/live_checks.py``'s
``check_two_gpu_recording``, which ``tests/test_live_replay.py`` runs in CI on the committed
hand-made DP recording, played back.
"""

import os

import pytest

from hisparse_model.engine.live import validate_sweep
from hisparse_model.recorded.recordings import recorded_dir

from live_checks import assert_engine_ran, check_two_gpu_recording, real_engine_version

pytestmark = pytest.mark.gpu

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = os.path.join(REPO, "scripts", "sweeps", "two-gpu-v031.json")
ENTRIES = {e["name"]: e for e in validate_sweep(SWEEP)}
CHILD_TIMEOUT = float(os.environ.get("HISPARSE_LIVE_TIMEOUT", "540"))


@pytest.fixture(scope="session")
def two_gpus():
    return real_engine_version(2)


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_two_gpu_run_matches_model(name, two_gpus, tmp_path, request):
    """A TP=2 / DP=2 engine run, every process with NVLink multicast off, agrees with the model."""
    from hisparse_model.engine.live import run_one

    entry = ENTRIES[name]
    if entry["knobs"].vllm_version != two_gpus:
        pytest.skip(f"needs vLLM {entry['knobs'].vllm_version}, {two_gpus} is installed")
    record = request.config.getoption("--record")
    folder = os.path.join(recorded_dir(), "two_gpu") if record else str(tmp_path)
    rec = run_one(entry["knobs"], entry["prompt_lens"], os.path.join(folder, f"{name}.json"),
                  timeout=entry.get("timeout", CHILD_TIMEOUT), workload=entry.get("workload"),
                  command=f"pytest -m gpu tests/test_live_gpu_two.py -k {name}"
                  + (" --record" if record else ""))
    check_two_gpu_recording(rec, entry["knobs"])
    assert_engine_ran(rec)
