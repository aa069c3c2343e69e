"""The live runner's GPU tests, in CI: committed recordings played back through ``run_one`` and ``live``.

The CPU twin of ``tests/test_live_gpu.py`` and ``tests/test_live_gpu_two.py``: with
``HISPARSE_LIVE_REPLAY`` naming a committed recording, ``check_available`` answers its vLLM
version and ``run_one`` (and so ``hisparse live``) writes the recording,
marked as played back (``provenance["replay"]``), instead of starting vLLM
(:mod:`hisparse_model.engine.replay`).  The GPU tests' own checks (``tests/live_checks.py``)
then run on it, and must fail on an altered copy.  No two-GPU recording exists yet: the
two-GPU checks run on the hand-made DP recording of ``tests/test_rank_recordings.py``
(written from vLLM's DP semantics and a one-GPU recording), given the provenance the DP
runner writes (``engine/dp_live.py``: every rank's environment with NVLink multicast off).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

from hisparse_model.engine import parallel
from hisparse_model.engine.live import LiveUnavailable, check_available, run_one
from hisparse_model.engine.replay import REPLAY_ENV, ReplayMismatch
from hisparse_model.model.knobs import Knobs
from hisparse_model.recorded.recordings import recorded_dir

from live_checks import (assert_engine_ran, check_live_recording, check_two_gpu_recording,
                         real_engine_version)
from test_live_gpu import RECORDED_AS, SAMPLE
from test_live_gpu_two import ENTRIES
from test_rank_recordings import _dp_recording

NOT_RECORDED = {"v0.31.0-stock-s7"}  # samples no committed recording holds yet
REPLAYED = sorted(set(SAMPLE) - NOT_RECORDED)
DP_ENTRY = "dp2-v0.31.0-stock-s3-idle-rank"  # the hand-made DP recording's sweep entry


def _committed(name: str) -> str:
    return os.path.join(recorded_dir(), f"{name}.json")


def _write(rec: dict, path) -> str:
    path.write_text(json.dumps(rec))
    return str(path)


def _read(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def test_every_sample_without_a_recording_is_named():
    """The samples the twin cannot replay are exactly NOT_RECORDED (a new sample needs its recording)."""
    assert {n for n in SAMPLE if not os.path.exists(_committed(n))} == NOT_RECORDED


@pytest.mark.parametrize("name", REPLAYED)
def test_replayed_sample_passes_the_gpu_tests_check(name, monkeypatch, tmp_path):
    """run_one on the sample's request, its committed recording played back: check_live_recording passes."""
    knobs_kw, prompts = SAMPLE[name]
    monkeypatch.setenv(REPLAY_ENV, _committed(name))
    assert check_available() == knobs_kw["vllm_version"]
    out = str(tmp_path / "rec.json")
    rec = run_one(Knobs(**RECORDED_AS, **knobs_kw), prompts, out, timeout=1, command="twin")
    check_live_recording(rec)
    assert _read(out) == rec and rec["provenance"]["replay"]["of"] == f"{name}.json"
    assert {k: v for k, v in rec["provenance"].items() if k != "replay"} == \
        _read(_committed(name))["provenance"]  # the recorded provenance, untouched


def test_an_altered_recording_fails_the_gpu_tests_check(monkeypatch, tmp_path):
    """v0.31.0-stock-s2 with the 3-token prompt served (the model crashes it): check_live_recording fails."""
    rec = _read(_committed("v0.31.0-stock-s2"))
    rec["prompts"][1] = {"n": 3, "ran": True, "ok": True, "error": None}
    monkeypatch.setenv(REPLAY_ENV, _write(rec, tmp_path / "altered.json"))
    knobs_kw, prompts = SAMPLE["v0.31.0-stock-s2"]
    got = run_one(Knobs(**RECORDED_AS, **knobs_kw), prompts, str(tmp_path / "o.json"),
                  timeout=1, command="twin")
    with pytest.raises(AssertionError):
        check_live_recording(got)


def _hand_dp(rank_env=None) -> dict:
    """The hand-made DP recording with the provenance the DP runner writes: every rank's
    environment carries ENGINE_ENV and MULTICAST_OFF_ENV (dp_live.py's child env)."""
    rec = _dp_recording()
    env = {**parallel.MULTICAST_OFF_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    rec["provenance"] = {"vllm": rec["knobs"]["vllm_version"], "env": env,
                         "written_by_hand": "tests/test_rank_recordings.py::_dp_recording"}
    rec["ranks"][1]["provenance"] = {"env": dict(env if rank_env is None else rank_env)}
    return rec


def _dp_request():
    """What tests/test_live_gpu_two.py asks run_one for, with the knobs the hand-made
    recording ran (its sweep entry leaves prefix caching to vLLM; the hand-made recording
    took the one-GPU recording's, off)."""
    entry = ENTRIES[DP_ENTRY]
    knobs = Knobs.from_dict({**entry["knobs"].as_dict(), "enable_prefix_caching": False})
    return knobs, entry["prompt_lens"], entry["workload"]


def _dp_run(monkeypatch, tmp_path, rec):
    monkeypatch.setenv(REPLAY_ENV, _write(rec, tmp_path / f"{DP_ENTRY}.json"))
    assert check_available(2) == "0.31.0"
    knobs, prompts, workload = _dp_request()
    return knobs, run_one(knobs, prompts, str(tmp_path / "out" / f"{DP_ENTRY}.json"),
                          timeout=1, workload=workload, command="twin")


def test_the_hand_made_dp_recording_passes_the_two_gpu_tests_checks(monkeypatch, tmp_path):
    """The DP sweep entry's request, the hand-made recording played back: check_two_gpu_recording passes."""
    knobs, got = _dp_run(monkeypatch, tmp_path, _hand_dp())
    assert got["provenance"]["replay"]["of"] == f"{DP_ENTRY}.json"
    check_two_gpu_recording(got, knobs)


@pytest.mark.parametrize("alter", [
    # a rank that ran with NVLink multicast on (NCCL's default)
    lambda rec: rec["ranks"][1]["provenance"]["env"].pop("NCCL_NVLS_ENABLE"),
    # rank 1 ran no dummy at step 0 (the model: it steps with the busy rank)
    lambda rec: rec["ranks"][1].update(dummy_steps=[1, 2]),
], ids=["multicast-on", "no-dummy-at-step-0"])
def test_an_altered_dp_recording_fails_the_two_gpu_tests_checks(alter, monkeypatch, tmp_path):
    """The hand-made DP recording altered (multicast on, or a dummy step missing): the checks fail."""
    rec = copy.deepcopy(_hand_dp())
    alter(rec)
    knobs, got = _dp_run(monkeypatch, tmp_path, rec)
    with pytest.raises(AssertionError):
        check_two_gpu_recording(got, knobs)


# --------------------------------------------------------------------------
# replay through the command line, and what it refuses
# --------------------------------------------------------------------------


def _live(args, replay: str, tmp_path):
    env = {**os.environ, REPLAY_ENV: replay}
    return subprocess.run([sys.executable, "-m", "hisparse_model", "live", *args], env=env,
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_live_command_replays_a_recording(tmp_path):
    """`live --max-num-seqs 2 --no-enable-prefix-caching` under replay: exit 0 (a recording was
    written; it holds the crash on prompt 3), and it is the recording, marked as a replay."""
    out = tmp_path / "rec.json"
    done = _live(["--max-num-seqs", "2", "--no-enable-prefix-caching", "--out", str(out)],
                 _committed("v0.31.0-stock-s2"), tmp_path)
    assert done.returncode == 0, done.stderr  # EXIT_OK: live wrote a recording
    rec = _read(str(out))
    assert rec["provenance"]["replay"]["command"].startswith("hisparse live ")
    assert rec["prompts"] == _read(_committed("v0.31.0-stock-s2"))["prompts"]
    check_live_recording(rec)


@pytest.mark.parametrize("args, status, line", [
    # the recording ran max_num_seqs 2: a request for 1 is not answered with it
    (["--max-num-seqs", "1", "--no-enable-prefix-caching"], 2,
     "differs in max_num_seqs (asked 1, recorded 2)"),
    (["--max-num-seqs", "2", "--no-enable-prefix-caching", "--prompt-lens", "2,3"], 2,
     "prompt_lens (asked [2, 3], recorded [2, 3, 200])"),
    # a DP = 2 request needs 2 GPUs; the replayed recording ran on 1
    (["--max-num-seqs", "2", "-dp", "2", "--workload", "W"], 3,
     "2 CUDA GPUs needed, the replayed recordings ran on 1"),
])
def test_live_command_refuses_what_the_replay_did_not_record(args, status, line, tmp_path):
    """A request the replayed recording did not run: one line naming what differs, exit 2 (3: too few GPUs)."""
    (tmp_path / "W").write_text(json.dumps([{"prompt_len": 2}]))
    done = _live([*args, "--out", str(tmp_path / "o.json")], _committed("v0.31.0-stock-s2"),
                 tmp_path)
    assert done.returncode == status, done.stderr
    assert line in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "o.json").exists()


def test_replay_of_a_file_that_is_not_a_recording_is_refused(tmp_path, monkeypatch):
    """HISPARSE_LIVE_REPLAY naming a file without a start-up or a vLLM version: ReplayMismatch (exit 2)."""
    monkeypatch.setenv(REPLAY_ENV, _write({"knobs": {}}, tmp_path / "x.json"))
    with pytest.raises(ReplayMismatch, match="x.json is not an engine recording"):
        check_available()
    monkeypatch.setenv(REPLAY_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(ReplayMismatch, match="cannot read"):
        check_available()


def test_replay_of_two_versions_at_once_is_refused(monkeypatch):
    """Recordings of 0.31.0 and 0.33.0 together: check_available cannot answer one version."""
    monkeypatch.setenv(REPLAY_ENV, os.pathsep.join(
        [_committed("v0.31.0-stock-s2"), _committed("v0.33.0-stock-s2")]))
    with pytest.raises(ReplayMismatch, match=r"several vLLM versions \['0.31.0', '0.33.0'\]"):
        check_available()


def test_replay_picks_the_recording_of_the_request(monkeypatch, tmp_path):
    """Two recordings of one version: run_one answers each request with its own recording."""
    monkeypatch.setenv(REPLAY_ENV, os.pathsep.join(
        [_committed("v0.31.0-stock-s1"), _committed("v0.31.0-stock-s2")]))
    for s in (1, 2):
        rec = run_one(Knobs(vllm_version="0.31.0", max_num_seqs=s, **RECORDED_AS), [2, 3, 200],
                      str(tmp_path / f"{s}.json"), timeout=1, command="twin")
        assert rec["provenance"]["replay"]["of"] == f"v0.31.0-stock-s{s}.json"
    with pytest.raises(LiveUnavailable, match="2 CUDA GPUs needed"):
        check_available(2)


def test_replay_refuses_another_workload(monkeypatch, tmp_path):
    """w-v0.31.0-stock-concurrent (prompts 3 and 2 together) asked for prompt 3 alone: refused, naming the workload."""
    path = os.path.join(recorded_dir(), "workloads", "w-v0.31.0-stock-concurrent.json")
    monkeypatch.setenv(REPLAY_ENV, path)
    knobs = Knobs.from_dict(_read(path)["knobs"])
    with pytest.raises(ReplayMismatch, match=r"differs in the workload \(asked \[\{'prompt_len': 3"):
        run_one(knobs, [], str(tmp_path / "o.json"), timeout=1, command="twin",
                workload=[{"prompt_len": 3}])
    rec = run_one(knobs, [], str(tmp_path / "o.json"), timeout=1, command="twin",
                  workload=[{"prompt_len": 3}, {"prompt_len": 2}])  # defaults: 8 tokens, step 0
    assert rec["provenance"]["replay"]["of"] == "w-v0.31.0-stock-concurrent.json"


def test_a_gpu_test_never_passes_on_a_replay(monkeypatch, tmp_path):
    """Under HISPARSE_LIVE_REPLAY the GPU tests' probe fails, and a replayed recording is told from an engine's."""
    monkeypatch.setenv(REPLAY_ENV, _committed("v0.31.0-stock-s2"))
    with pytest.raises(pytest.fail.Exception, match="a gpu test runs the real engine"):
        real_engine_version()
    rec = run_one(Knobs(vllm_version="0.31.0", max_num_seqs=2, **RECORDED_AS), [2, 3, 200],
                  str(tmp_path / "o.json"), timeout=1, command="twin")
    with pytest.raises(AssertionError):
        assert_engine_ran(rec)
    assert_engine_ran(_read(_committed("v0.31.0-stock-s2")))  # the committed one: the engine's
