"""Plain statements of two pieces of vLLM's batch handling, for tests to check the model against.

Written from vLLM's code for the tests (not imported from the model), each as
literally as Python allows; the model's own versions are closed forms or loops
that must agree with them.
"""


def spread(num_tokens: int, num_reqs: int) -> list[int]:
    """Query length of each request of a dummy batch.

    vllm/v1/worker/gpu/input_batch.py:127-153 `num_tokens // num_reqs` (0.31.0): every
    request gets ``num_tokens // num_reqs`` tokens, then the *last*
    ``num_tokens % num_reqs`` requests one more.
    """
    assert 0 < num_reqs <= num_tokens
    lens = [num_tokens // num_reqs] * num_reqs
    extra = num_tokens % num_reqs
    for i in range(num_reqs - extra, num_reqs):
        lens[i] += 1
    return lens


def split_decode_tokens(query_lens: list[int], threshold: int, uniform: bool) -> int:
    """Decode tokens of a reordered batch: vLLM's ``split_decodes_and_prefills``.

    vllm/v1/attention/backends/utils.py:799-870 `def split_decodes_and_prefills`
    (``treat_short_extends_as_decodes`` left at True), step by step.
    """
    if max(query_lens) <= threshold and (not uniform or threshold <= 1):
        return sum(query_lens)  # every request is a decode
    if query_lens[0] > threshold:
        return 0  # the first request is not a decode, so none is
    if uniform:
        if all(x == query_lens[0] or x == 0 for x in query_lens):
            return sum(query_lens)  # a padded uniform batch
        is_prefill = [x != query_lens[0] and x != 0 for x in query_lens]
    else:
        is_prefill = [x > threshold for x in query_lens]
    if not any(is_prefill):
        return sum(query_lens)
    return sum(query_lens[:is_prefill.index(True)])  # query_start_loc[first_prefill]
