"""The vectorised sweep equals the batch-by-batch model on every sampled configuration."""

import numpy as np
import pytest

from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.predict import predict
from hisparse_model.answers.sweep import sweep


def _sample(seed: int, n: int):
    rng = np.random.default_rng(seed)
    s = rng.integers(1, 300, n)
    k = rng.integers(0, 4, n)
    b = s * (1 + k) + rng.integers(-3, 40, n)  # around S*q, where B starts to limit C
    b = np.maximum(b, np.maximum(s, k + 1))  # vLLM needs B >= S and B > K
    eager = rng.random(n) < 0.2
    return s, b, k, eager


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sweep_equals_predict(seed):
    """C, W, start-up crash and the smallest crashing prompt agree with predict() (0.31.0)."""
    s, b, k, eager = _sample(seed, 150)
    got = sweep(s, b, k, eager)
    for i in range(len(s)):
        knobs = Knobs(max_num_seqs=int(s[i]), max_num_batched_tokens=int(b[i]),
                      num_speculative_tokens=int(k[i]), enforce_eager=bool(eager[i]),
                      max_model_len=4096)
        w = int(got["workspace_rows"][i])
        prompts = [w] if w < 4096 else []
        pred = predict(knobs, prompts)
        assert got["swap_capacity"][i] == pred.sizes.swap_capacity
        assert got["startup_crash"][i] == (not pred.startup_ok), knobs
        if prompts:
            assert (got["first_crashing_prompt"][i] == w) == (not pred.prompts[0].ok), knobs


def test_sweep_pr_cases():
    """S=1: start-up crash; S=2: starts, first crashing prompt has 3 tokens (B = 320, 640)."""
    got = sweep([1, 2], [320, 640])
    assert got["startup_crash"].tolist() == [True, False]
    assert got["first_crashing_prompt"].tolist() == [2, 3]
