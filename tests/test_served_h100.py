"""Six `vllm serve` replays on an H100 (2026-12-06), made with the project's own runner: the
crash over HTTP, on time, and why the other replays stalled.

Invariant: what each run's files say (vLLM's own error, the runner's run.json, the stacks it
dumped) is what the tables below state, and the model's crash time for the two runs that
crashed is within 1 % of the server's (``recorded/serve_recordings.py``, as
``scripts/serve_compare.py`` sets them side by side).  Every stall's dumped engine stacks
were in DeepGEMM's compiler (``VLLM_DEEP_GEMM_WARMUP=skip`` moves its compilation into
serving), read by the same code the runner now writes into run.json
(``inputs/stall_stacks.py``).
"""

import json
import pathlib

import pytest

from hisparse_model.inputs.stall_stacks import (COMPILATION, compiled_while_serving,
                                                stall_cause, stall_causes)
from hisparse_model.recorded.serve_recordings import compare, read_run

HERE = pathlib.Path(__file__).parent
RUNS = HERE / "recorded" / "serve" / "h100-2026-12-06"
TRACES = str(HERE / "traces")

# run -> (server ready after s, crash logged at s, stalled at s, requests sent, host pool GiB):
# the runner's run.json, in the order the runs were made on one machine
TABLE = {
    "s143x6": (289.2, None, 38.512, 200, 6),        # the first start: compilation at start-up
    "s143x6-warm": (104.1, None, 17.184, 200, 6),
    "lone144": (67.1, 5.067, None, 2, 2),            # 100, 144, 50 tokens at 0, 5, 10 s
    "s143x6-1gib": (71.1, None, 15.438, 200, 1.0),
    "s143x6-long": (84.1, 31.253, 24.767, 100, 6),   # stalled, then crashed on request 72
    "s143x6-long2": (73.1, 31.209, None, 112, 6),    # no stall: crashed on request 72
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_run_is_what_the_table_says(name):
    """Ready, crash, stall, requests sent and pool, from the runner's own run.json."""
    run = json.loads((RUNS / name / "run.json").read_text())
    got = (run["server_ready_after_s"], run["crash_logged_s"], run["stalled_at_s"],
           run["requests_sent"], run["provenance"]["host_pool_gib"])
    assert got == TABLE[name]
    assert "H100" in run["provenance"]["gpu"] and run["provenance"]["vllm"].startswith("0.31.0")


@pytest.mark.parametrize("name", ["lone144", "s143x6-long", "s143x6-long2"])
def test_the_crashes_are_hisparses_off_by_one(name):
    """C = min(8192, 143) = 143: a step of 144 tokens raises stop=144, capacity=143."""
    log = (RUNS / name / "server.log").read_text(errors="replace")
    assert ("HiSparse swap rows exceed the configured speculative decode capacity: "
            "stop=144, capacity=143.") in log


@pytest.mark.parametrize("name", ["s143x6-long", "s143x6-long2"])
def test_the_model_crashes_within_one_percent_of_the_server(name):
    """The model's crash (simulate --traffic at the step time the warm server's /metrics
    measured) is request 72 alone, 144 tokens, within 1 % of the time the server died."""
    got = compare(read_run(str(RUNS / name), TRACES))
    assert got["estimate"]["scheduled"] == got["observed"]["scheduled"] == {72: 144}
    assert got["observed"]["stop_capacity"] == (144, 143)
    assert abs(got["estimate"]["crash_s"] - got["observed"]["crash_s"]) <= \
        0.01 * got["observed"]["crash_s"]


# run -> the stall's cause read from its dumped stacks (None: no stall, no stacks)
CAUSES = {"s143x6": COMPILATION, "s143x6-warm": COMPILATION, "s143x6-1gib": COMPILATION,
          "s143x6-long": COMPILATION, "s143x6-long2": None, "lone144": None}


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_every_stall_sat_in_deepgemms_compiler(name):
    """Each stall's engine thread was in vllm/utils/deep_gemm.py:547 fp8_gemm_nt (DeepGEMM
    compiling a GEMM for a new token count); a run with no stall dumped nothing."""
    log = (RUNS / name / "server.log").read_text(errors="replace")
    assert stall_cause(log) == CAUSES[name]
    assert compiled_while_serving(log) == (CAUSES[name] == COMPILATION)
    if CAUSES[name]:
        innermost = [c["innermost"] for c in stall_causes(log) if c["kind"] == COMPILATION]
        assert innermost and all('deep_gemm.py", line 547 in fp8_gemm_nt' in f
                                 for f in innermost)


def test_the_0340_server_never_finished_deepgemms_start_up_warmup():
    """vLLM 0.34.0 with its default DeepGEMM warm-up on a fresh H100 was still compiling (nvcc
    on a DeepGEMM kernel, inside deep_gemm_warmup) when the runner gave up at 420 s: a warm
    runner needs DeepGEMM's cache filled before the call that measures."""
    folder = RUNS.parent / "v0.34.0-s143-azure-x6-deepgemm-startup-h100"
    run = json.loads((folder / "run.json").read_text())
    log = (folder / "server.log").read_text(errors="replace")
    assert run["server_ready_after_s"] is None
    assert run["stopped_because"] == "the server never answered /health"
    assert run["provenance"]["deep_gemm_warmup"].startswith("vLLM's default")
    assert "deep_gemm_warmup.py" in log and "command failed with exit code 143" in log
