"""Live engine runs on a CUDA GPU, compared with the model (``pytest -m gpu``; ``--record`` refreshes).

Each configuration runs in its own child process with a timeout
(:func:`hisparse_model.engine.live.run_one`).  Off a GPU, or without vLLM, every
test skips with the reason ``check_available`` gives.  Only configurations of
the installed vLLM version run; every version has some
(``tests/test_live_runner.py`` checks).  The check is ``tests/live_checks.py``'s
``check_live_recording``, which ``tests/test_live_replay.py`` runs in CI on the committed
recordings of this sample, played back.
"""

import os

import pytest

from hisparse_model.model.knobs import Knobs
from hisparse_model.recorded.recordings import recorded_dir

from live_checks import assert_engine_ran, check_live_recording, real_engine_version

pytestmark = pytest.mark.gpu

# name -> (knobs, prompts); a sample covering start-up crash, runtime crash and the fix.
SAMPLE = {
    "v0.31.0-stock-s7": (dict(vllm_version="0.31.0", max_num_seqs=7), [7, 200, 8]),
    "v0.31.0-stock-s1-flashmla": (
        dict(vllm_version="0.31.0", max_num_seqs=1, attention_backend="FLASHMLA_SPARSE"),
        [2, 3, 200],
    ),
    "v0.31.0-stock-s2": (dict(vllm_version="0.31.0", max_num_seqs=2), [2, 3, 200]),
    "v0.31.0-stock-s1": (dict(vllm_version="0.31.0", max_num_seqs=1), [2, 3, 200]),
    "v0.32.0-stock-s1": (dict(vllm_version="0.32.0", max_num_seqs=1), [2, 3, 200]),
    "v0.32.0-stock-s2": (dict(vllm_version="0.32.0", max_num_seqs=2), [2, 3, 200]),
    "v0.33.0-stock-s1": (dict(vllm_version="0.33.0", max_num_seqs=1), [2, 3, 200]),
    "v0.33.0-stock-s2": (dict(vllm_version="0.33.0", max_num_seqs=2), [2, 3, 200]),
    # prefills 0.32.0 sends to swap_in go to the all-resident path
    "v0.33.0-stock-s4-prefill": (
        dict(vllm_version="0.33.0", max_num_seqs=4, max_num_batched_tokens=256), [3, 4, 5]),
    # the extensible KV cache's start-up: JIT warmup, sizing warmup, then the captures
    "v0.34.0-stock-s1": (dict(vllm_version="0.34.0", max_num_seqs=1), [1, 2, 3, 200]),
    "v0.34.0-stock-s2": (dict(vllm_version="0.34.0", max_num_seqs=2), [2, 3, 200]),
    # MTP: the sampler warmup after the captures routes through a PIECEWISE graph
    "v0.34.0-stock-s2-mtp1": (dict(vllm_version="0.34.0", max_num_seqs=2,
                                   num_speculative_tokens=1), [4, 5, 200]),
}
# every sample runs with prefix caching off, as its committed recording (and the fix PR) did
RECORDED_AS = dict(enable_prefix_caching=False)
CHILD_TIMEOUT = float(os.environ.get("HISPARSE_LIVE_TIMEOUT", "420"))


@pytest.fixture(scope="session")
def live_version():
    return real_engine_version()


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_live_matches_model(name, live_version, tmp_path, request):
    """A real engine run and the model agree on every number, outcome and routing row."""
    from hisparse_model.engine.live import run_one

    knobs_kw, prompts = SAMPLE[name]
    if knobs_kw["vllm_version"] != live_version:
        pytest.skip(f"needs vLLM {knobs_kw['vllm_version']}, {live_version} is installed")
    record = request.config.getoption("--record")
    out = os.path.join(recorded_dir(), f"{name}.json") if record else str(tmp_path / "rec.json")
    rec = run_one(Knobs(**RECORDED_AS, **knobs_kw), prompts, out, timeout=CHILD_TIMEOUT,
                  command=f"pytest -m gpu tests/test_live_gpu.py -k {name}"
                  + (" --record" if record else ""))
    check_live_recording(rec)
    assert_engine_ran(rec)
