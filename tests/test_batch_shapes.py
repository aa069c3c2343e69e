"""The model's decode/prefill split and dummy-batch shape against vLLM's, exhaustively on small batches.

The reference is ``tests/vllm_shapes.py`` (vLLM's code restated step by step);
the model's ``routing.decode_tokens`` is a loop and ``batches.spread_decode_tokens``
a closed form, used by every start-up walk.
"""

import itertools

import pytest

from hisparse_model.model.batches import spread_decode_tokens
from hisparse_model.model.routing import decode_tokens
from vllm_shapes import split_decode_tokens, spread

THRESHOLDS = (1, 2, 3, 4, 5)  # q = 1 + K for K = 0..4


@pytest.mark.parametrize("uniform", [False, True])
def test_dummy_batch_decode_tokens_closed_form(uniform):
    """For every dummy batch of <= 80 tokens, the closed form equals vLLM's split of vLLM's shape."""
    wrong = [(t, r, q) for t in range(1, 81) for r in range(1, t + 1) for q in THRESHOLDS
             if spread_decode_tokens(t, r, q, uniform) != split_decode_tokens(spread(t, r), q,
                                                                              uniform)]
    assert not wrong, f"(tokens, requests, q) where the model differs: {wrong[:10]}"


@pytest.mark.parametrize("uniform", [False, True])
def test_decode_tokens_is_vllms_split(uniform):
    """For every batch of 1-4 requests of 0-6 tokens, decode_tokens equals vLLM's split."""
    wrong = [(lens, q) for n in range(1, 5) for lens in itertools.product(range(7), repeat=n)
             if max(lens) > 0 for q in THRESHOLDS
             if decode_tokens(list(lens), q, uniform) != split_decode_tokens(list(lens), q,
                                                                             uniform)]
    assert not wrong, f"(query lens, q) where the model differs: {wrong[:10]}"


def test_the_dummy_shape_puts_the_longer_requests_last():
    """7 tokens over 3 requests is (2, 2, 3): the remainder goes to the last request (hand-worked)."""
    assert spread(7, 3) == [2, 2, 3]  # 7 // 3 = 2 each, 7 % 3 = 1 extra, on the last
    # q = 2: the leading 2-token requests are decodes, the 3-token one is not: 2 + 2 = 4
    assert spread_decode_tokens(7, 3, 2) == 4
    assert spread_decode_tokens(7, 3, 3) == 7  # q = 3: every request is a decode
    assert spread_decode_tokens(7, 3, 1) == 0  # q = 1: the first request (2 tokens) is a prefill
