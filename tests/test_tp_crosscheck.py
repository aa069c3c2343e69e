"""TP = 2, 4, 8 through vLLM's own config path: q, C, W, capture sizes and routing as at TP = 1.

One ``vllm_driver`` call per version (the test run's driver server) builds a CPU ``VllmConfig`` with
``ParallelConfig(tensor_parallel_size=N)`` for each knob set and runs vLLM's own
``_get_max_swap_rows``, index-group builder, ``_set_cudagraph_sizes`` and routing; the
model's plan (which does not read the TP size) must give every one of them.
"""

from __future__ import annotations

import random

import pytest

from hisparse_model.model.versions import cross_checked

from hisparse_model.model.knobs import Knobs
from hisparse_model.model.plan import plan
from hisparse_model.model.routing import router

pytestmark = pytest.mark.vllm_cpu

VERSIONS = cross_checked()  # the versions its driver runs for (versions.cross_checked)


def knob_sets(seed: int = 20261201, count: int = 90) -> list[dict]:
    """TP 2, 4, 8 over S, K, B and max_model_len where the sizing rules switch."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        s = rng.choice((1, 2, 3, 4, 7, 8, 15, 16, 31, 64, 128, 255, 256, 257, 512))
        k = rng.randint(0, 3)
        b = None if rng.random() < 0.4 else rng.choice(
            [x for x in (s, s + 1, s * (1 + k), 2 * s * (1 + k) + 1, 512, 16384)
             if x >= s and x > k])
        out.append({"max_num_seqs": s, "max_model_len": rng.choice((320, 2048)),
                    "max_num_batched_tokens": b, "num_speculative_tokens": k,
                    "parallel_drafting": False, "tensor_parallel_size": (2, 4, 8)[i % 3]})
    return out


@pytest.fixture(scope="module", params=VERSIONS)
def tp_run(request, vllm_servers):
    version = request.param
    return version, vllm_servers.call(version, "hisparse_model.crosscheck.vllm_driver:run",
                                      knob_sets(), timeout=600)


def test_tp_sizes_captures_and_routing_match_vllm(tp_run):
    """Under TP = N vLLM's q, C, W, capture sizes and routing are the model's (TP-blind) plan's."""
    version, out = tp_run
    assert out["vllm_version"] == version
    bad = []
    for r in out["results"]:
        kn = r["knobs"]
        assert "driver_error" not in r, r.get("traceback")
        m = plan(Knobs(vllm_version=version, **kn))
        v = r["sizes"]
        got = (v["max_decode_query_len"], v["max_swap_rows"], v["index_group_max_rows"],
               v["workspace_rows"], r["capture"]["cudagraph_capture_sizes"])
        want = (m.max_decode_query_len, m.swap_capacity, m.swap_capacity, m.workspace_rows,
                list(m.capture_sizes))
        if got != want:
            bad.append(f"{kn}: vLLM {got} model {want}")
        route = router(m)  # the model's one routing declaration, all pages resident
        for row in r["routing"]:
            # the driver's batch: one pure prefill of n tokens, or n decode tokens
            n = row["n"]
            _, path, error = route(n, 0 if row["has_prefill"] else n)
            if (row["path"], row["error"]) != (path, error):
                bad.append(f"{kn} n={n}: vLLM {row['path']} model {path}")
    assert not bad, f"{len(bad)} disagreements:\n" + "\n".join(bad[:20])
