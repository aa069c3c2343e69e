"""Cross-check every knob set vLLM *refuses* against the model, on CPU, per vLLM version.

Per version, one call of the test run's driver server runs ``vllm_driver.run_rejections``
(``PYTHONPATH=.vllm/<version>:<repo>``) over >= 3,000 random knob sets, many of them ones vLLM
refuses: it builds the ModelConfig length check, the scheduler defaults and
``SchedulerConfig``, then ``VllmConfig`` with HiSparse and the MTP speculative
config attached the way ``vllm.LLM(**llm_kwargs(knobs))`` attaches them, so the
V2-runner validation HiSparse forces runs (see ``vllm_driver.py`` section (e) for
the stand-ins).  The model must accept exactly what vLLM accepts, and refuse the
rest with vLLM's reason in its message (``Knobs(...)`` / ``predict`` raise
``ValueError``).  Disagreements are reported grouped by cause, with examples.
"""

from __future__ import annotations

import collections
import os
import random
import re

import pytest

from hisparse_model.model.versions import cross_checked
from hisparse_model.model.knobs import ATTENTION_BACKENDS, CUDAGRAPH_MODES
from knob_sampling import distinct
from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.predict import predict
from hisparse_model.crosscheck.client import DriverError

pytestmark = pytest.mark.vllm_cpu

VERSIONS = cross_checked()  # the versions its driver runs for (versions.cross_checked)
NUM_CONFIGS = int(os.environ.get("HISPARSE_REJECTION_CONFIGS", "3000"))
MIN_CONFIGS = 3000
DRIVER_TIMEOUT_S = 900
MAX_EXAMPLES = 3
BACKENDS = ATTENTION_BACKENDS
MODES = CUDAGRAPH_MODES
MODEL_MAX_LEN = 163_840  # max_position_embeddings of the shipped DeepSeek-V3.2 config


def rejection_knobs(version: str, count: int = NUM_CONFIGS, seed: int = 7) -> list[dict]:
    """Distinct random knob sets around every boundary vLLM checks (B vs S, B vs K, L)."""
    rng = random.Random(f"{seed}-{version}")

    def draw() -> dict:
        r = rng.random()
        s = (rng.randint(1, 4) if r < 0.2 else rng.randint(1, 16) if r < 0.6
             else rng.randint(17, 512) if r < 0.88 else rng.randint(16_000, 20_000))
        k = rng.choice((0, 0, 1, 1, 2, 3, 4, 5, 6))
        q = 1 + k
        b = None
        if rng.random() >= 0.3:
            cands = [1, 2, s - 1, s, s + 1, k - 1, k, k + 1, k + 2, q + 1, s * q, 16_384]
            b = rng.choice([c for c in cands if c >= 1])
        length = rng.choice((320, 320, 320, 2048, 64, 1, MODEL_MAX_LEN, MODEL_MAX_LEN + 1,
                             200_000))
        pd = rng.random() < (0.35 if k else 0.03)
        knobs = {
            "max_num_seqs": s,
            "max_model_len": length,
            "max_num_batched_tokens": b,
            "num_speculative_tokens": k,
            "parallel_drafting": pd,
            "attention_backend": rng.choice(BACKENDS),
            "enforce_eager": rng.random() < 0.15,
            "cudagraph_mode": None if rng.random() < 0.6 else rng.choice(MODES),
        }
        return knobs

    return distinct(draw, count)


def fmt(kn: dict) -> str:
    parts = [f"S={kn['max_num_seqs']}", f"B={kn['max_num_batched_tokens']}",
             f"K={kn['num_speculative_tokens']}", f"L={kn['max_model_len']}"]
    if kn.get("parallel_drafting"):
        parts.append("parallel_drafting")
    return " ".join(parts)


def template(msg: str | None) -> str:
    return re.sub(r"\d+(\.\d+)?", "N", msg or "")[:160]


# vllm_trees: the session fixture in tests/conftest.py installs (or confirms) the trees.


_RUNS: dict[str, tuple] = {}  # version -> (knobs, out, seconds): one driver call each


@pytest.fixture(scope="module", params=VERSIONS)
def rejection_run(request, vllm_servers):
    version = request.param
    if version not in _RUNS:
        knobs = rejection_knobs(version)
        pending = vllm_servers.submit(
            version, "hisparse_model.crosscheck.vllm_driver:run_rejections", knobs)
        try:
            out = pending.result(timeout=DRIVER_TIMEOUT_S)
        except DriverError as exc:
            pytest.fail(f"rejections driver failed: {exc}")
        _RUNS[version] = (knobs, out, pending.seconds)
    knobs, out, seconds = _RUNS[version]
    return version, knobs, out, seconds


def model_verdict(version: str, kn: dict) -> str | None:
    """None if the model accepts the knobs, else its ValueError message."""
    try:
        predict(Knobs(vllm_version=version, **kn))
    except ValueError as exc:
        return str(exc)
    return None


def compare(version: str, kn: dict, res: dict):
    if "driver_error" in res:
        return "driver error", res["driver_error"]
    model = model_verdict(version, kn)
    if not res["rejected"]:
        if model is None:
            return None
        if model.startswith("host_pool_gib: "):
            # the engine core's KV sizing refuses the host pool, after the config this
            # driver builds (model/host_pool.py; test_host_pool.py runs vLLM's planner on it)
            return None
        return f"model rejects, vLLM accepts: {template(model)}", model
    reason = res["reason"]
    if model is None:
        return (f"vLLM rejects ({res['stage']}), model accepts: {template(reason)}",
                f"vLLM: {res['error'].splitlines()[0][:120]}: {reason[:200]}")
    if reason not in model:
        return (f"both reject, model message lacks vLLM's reason: {template(reason)}",
                f"vLLM: {reason[:200]} | model: {model[:200]}")
    return None


def test_knob_sets_cover_every_rejection_boundary():
    for version in VERSIONS:
        knobs = rejection_knobs(version)
        assert len({tuple(sorted(k.items())) for k in knobs}) == len(knobs)
        if NUM_CONFIGS >= MIN_CONFIGS:
            assert len(knobs) >= MIN_CONFIGS
        assert any(k["max_num_batched_tokens"] is not None
                   and k["max_num_batched_tokens"] < k["max_num_seqs"] for k in knobs)
        assert any(k["parallel_drafting"] and k["num_speculative_tokens"] for k in knobs)
        assert any(k["max_model_len"] > MODEL_MAX_LEN for k in knobs)


def test_rejections_match_vllm(rejection_run):
    """vLLM and the model accept and refuse the same knob sets, for vLLM's reason."""
    version, knobs, out, seconds = rejection_run
    assert out["vllm_version"] == version
    results = out["results"]
    assert len(results) == len(knobs)
    by_cause: dict[str, list[str]] = collections.defaultdict(list)
    refused = collections.Counter()
    for kn, res in zip(knobs, results):
        assert res["knobs"] == kn
        if res.get("rejected"):
            refused[f"{res['stage']}: {template(res['reason'])}"] += 1
        bad = compare(version, kn, res)
        if bad is not None:
            by_cause[bad[0]].append(f"{fmt(kn)}: {bad[1]}")
    n = sum(len(v) for v in by_cause.values())
    lines = [f"vLLM {version}: {sum(refused.values())} of {len(knobs)} knob sets refused by "
             f"vLLM (driver {seconds:.0f} s):"]
    lines += [f"  {c:5d}  {why}" for why, c in refused.most_common()]
    lines.append(f"{n} disagree with the model, by cause:")
    for cause, items in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"  {len(items):5d}  {cause}")
        lines += [f"           e.g. {ex}" for ex in items[:MAX_EXAMPLES]]
    text = "\n".join(lines)
    print("\n" + text)
    assert not any("driver error" in c for c in by_cause), text
    assert not by_cause, text
