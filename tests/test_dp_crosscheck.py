"""The DP sync against vLLM's own ``sync_cudagraph_and_dp_padding``, two CPU processes over gloo.

Per vLLM version one call of the test run's driver server (``PYTHONPATH=.vllm/<version>:
<repo>``) runs ``hisparse_model/crosscheck/dp_sync_driver.py``, which forks two ranks joined by a gloo
group; each runs vLLM's dispatch and DP sync (and, when it scheduled nothing,
vLLM's dummy-batch construction) over >= 1,000 random pairs of per-rank batches.
The model (``data_parallel.sync_step``) must agree on every rank's mode, padded
token count and dummy shape, and route the dummy vLLM built as it routes its own.
"""

from __future__ import annotations

import random

import pytest

from hisparse_model.model.versions import cross_checked

from hisparse_model.schedule import data_parallel
from hisparse_model.schedule.data_parallel import RankBatch, sync_step
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.plan import plan
from hisparse_model.model.routing import decode_tokens, routed_path

pytestmark = pytest.mark.vllm_cpu

VERSIONS = cross_checked("dp_sync")  # the versions its driver runs for (versions.cross_checked)
NUM_PAIRS = 1200
MODES = ("FULL_AND_PIECEWISE", "PIECEWISE", "FULL_DECODE_ONLY", None)  # None: enforce_eager


def _knobs(version: str, rng: random.Random) -> Knobs:
    s = rng.choice((1, 2, 3, 4, 7, 8, 15, 16, 31, 64))
    mode = rng.choice(MODES)
    b = rng.choice((None, None, s, 2 * s + 1, 100))
    return Knobs(vllm_version=version, max_num_seqs=s, max_num_batched_tokens=b,
                 cudagraph_mode=mode, enforce_eager=mode is None)


def _batch(p, rng: random.Random) -> RankBatch | None:
    """A rank's batch in the runner's order: idle, decodes only, or decodes then prefills."""
    s, b = p.knobs.max_num_seqs, p.max_num_batched_tokens
    kind = rng.choice(("idle", "decode", "prefill", "prefill"))
    if kind == "idle":
        return None
    if kind == "decode":
        n = rng.randint(1, min(s, b))
        return RankBatch((1,) * n, True, True)
    reqs = rng.randint(1, s)
    decodes = rng.randint(0, reqs - 1)
    budget = b - decodes  # tokens left for the prefills
    if budget < reqs - decodes:
        return RankBatch((1,) * max(decodes, 1), True, True)
    lens = [rng.randint(2, max(2, min(budget // (reqs - decodes), 600)))
            for _ in range(reqs - decodes)]
    if sum(lens) > budget:
        lens = [2] * len(lens) if 2 * len(lens) <= budget else [budget]
    return RankBatch((1,) * decodes + tuple(sorted(lens)), False, True)


def workload(version: str, seed: int = 20261201) -> tuple[list, list]:
    """(plans, pairs): 24 configurations, NUM_PAIRS random pairs of per-rank batches."""
    rng = random.Random(f"{seed}:{version}")
    plans = []
    while len(plans) < 24:
        try:
            plans.append(plan(_knobs(version, rng)))
        except ValueError:
            continue  # a configuration vLLM refuses has no batches
    pairs = []
    while len(pairs) < NUM_PAIRS:
        i = rng.randrange(len(plans))
        pair = [_batch(plans[i], rng), _batch(plans[i], rng)]
        if pair != [None, None]:  # all ranks idle: the busy loop pauses, no forward
            pairs.append((i, pair))
    return plans, pairs


def _payload(plans, pairs) -> dict:
    return {"configs": [{"max_num_seqs": p.knobs.max_num_seqs,
                         "max_num_batched_tokens": p.max_num_batched_tokens,
                         "max_model_len": p.knobs.max_model_len, "cudagraph_mode": p.cudagraph_mode,
                         "capture_sizes": list(p.capture_sizes)} for p in plans],
            "pairs": [[i, *[None if b is None else
                            {"query_lens": list(b.query_lens),
                             "decode_graph_eligible": b.decode_graph_eligible}
                            for b in pair]] for i, pair in pairs]}


@pytest.fixture(scope="module")
def driver_runs(vllm_servers):
    """One driver call per version, submitted together; (plans, pairs, output) each."""
    calls = {}
    for version in VERSIONS:
        plans, pairs = workload(version)
        calls[version] = (plans, pairs, vllm_servers.submit(
            version, "hisparse_model.crosscheck.dp_sync_driver:run", _payload(plans, pairs)))
    return {version: (plans, pairs, pending.result(timeout=900))
            for version, (plans, pairs, pending) in calls.items()}


def disagreements(plans, pairs, results) -> list[str]:
    """Readable differences between vLLM's sync (per pair, per rank) and the model's."""
    bad = []
    for (i, pair), got in zip(pairs, results):
        p = plans[i]
        _, model = sync_step(p, pair, [True, True])
        for rank, (vllm, (mode, padded, shape, routed, *_)) in enumerate(zip(got, model)):
            want = {"mode": mode, "padded": padded, "dummy": None if shape is None else list(shape)}
            if vllm != want:
                bad.append(f"S={p.knobs.max_num_seqs} B={p.max_num_batched_tokens} "
                           f"{p.cudagraph_mode} {pair} rank {rank}: vLLM {vllm} != model {want}")
                continue
            if shape is not None and mode != "FULL":  # route vLLM's dummy as the model does
                dec = decode_tokens(vllm["dummy"], p.max_decode_query_len)
                if routed_path(p, sum(vllm["dummy"]), dec)[0] != routed:
                    bad.append(f"{pair} rank {rank}: routed {routed} differs")
    return bad


@pytest.mark.parametrize("version", VERSIONS)
def test_dp_sync_matches_vllm(driver_runs, version):
    """Every rank's mode, padded count, dummy shape and routed tokens agree with vLLM's sync."""
    plans, pairs, out = driver_runs[version]
    assert out["vllm_version"] == version and len(out["results"]) == len(pairs) >= 1000
    # the pairs exercise every branch: eager, PIECEWISE padding of a dummy, FULL replays
    modes = {(r["mode"], r["dummy"] is not None) for pair in out["results"] for r in pair}
    assert {("NONE", True), ("PIECEWISE", True), ("FULL", True), ("PIECEWISE", False)} <= modes
    bad = disagreements(plans, pairs, out["results"])
    assert not bad, f"{len(bad)} disagreements, first: " + "\n".join(bad[:10])
    print(f"\nDP sync {version}: {len(pairs)} pairs agree ({out['seconds']:.1f} s in vLLM)")


def test_a_model_padding_to_the_smallest_count_fails(driver_runs, monkeypatch):
    """Mutation: pad every rank to the smallest count instead of the largest; vLLM disagrees."""
    plans, pairs, out = driver_runs["0.31.0"]
    monkeypatch.setattr(data_parallel, "max", min, raising=False)
    assert disagreements(plans, pairs, out["results"])


def test_a_model_taking_the_highest_mode_fails(driver_runs, monkeypatch):
    """Mutation: agree on the highest CUDA-graph mode instead of the lowest; vLLM disagrees."""
    plans, pairs, out = driver_runs["0.32.0"]
    monkeypatch.setattr(data_parallel, "MODE_ORDER", {"NONE": 2, "PIECEWISE": 1, "FULL": 0})
    assert disagreements(plans, pairs, out["results"])
