"""The live runner's process handling, offline: a fake engine child stands in for vLLM.

The fake child (written below) speaks the real child's side of the protocol
(:class:`hisparse_model.engine.child.GpuGate`): it takes the GPU-memory lock
before "building the engine", holds it through "memory profiling", releases
it, "serves", writes its recording and asks the runner to let it exit.  Every
step is logged with a timestamp, so the tests can check that no child's
start-up overlapped another's and no child exited while another profiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hisparse_model.engine import live
from hisparse_model.model.knobs import Knobs

FAKE_CHILD = r'''
import json, os, sys, time
from hisparse_model.engine.child import GpuGate

spec_path, out_path = sys.argv[1:3]
spec = json.load(open(spec_path))
plan = json.load(open(os.environ["FAKE_PLAN"]))
name = "s%d" % spec["knobs"]["max_num_seqs"]
behaviour = plan.get(name, {})
events = os.environ["FAKE_EVENTS"]

def event(what):
    with open(events, "a") as f:
        f.write(f"{time.time():.6f} {name} {what}\n")

open(os.path.join(os.path.dirname(events), name + ".pid"), "w").write(str(os.getpid()))
attempt_file = os.path.join(os.path.dirname(events), name + ".attempts")
attempt = 1 + (int(open(attempt_file).read()) if os.path.exists(attempt_file) else 0)
open(attempt_file, "w").write(str(attempt))

print(f"fake engine {name}: stdout line, attempt {attempt}", flush=True)
print(f"fake engine {name}: stderr line", file=sys.stderr, flush=True)
gate = GpuGate.from_env()
gate.acquire()
event("locked")
time.sleep(behaviour.get("profile_s", 0.3))  # memory profiling
if behaviour.get("hang"):
    time.sleep(3600)
error = None
fail = behaviour.get("fail_attempts", {}).get(str(attempt))
if fail == "profiling":
    error = ("AssertionError: Error in memory profiling. Initial free memory 97.1 GiB, "
             "current free memory 98.0 GiB.")
elif fail == "crash":
    print("RuntimeError: Error in memory profiling (raised before any recording)",
          file=sys.stderr, flush=True)
    event("released")
    gate.exit(1)
elif fail == "config":
    error = "ValueError: HiSparse swap rows exceed the configured speculative decode capacity"
event("released")
gate.release()
time.sleep(behaviour.get("serve_s", 0.2))
rec = {"knobs": spec["knobs"], "prompt_lens": spec["prompt_lens"],
       "provenance": {"env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}},
       "startup": {"ok": error is None, "error": error}, "prompts": [],
       "spec": {k: spec[k] for k in ("engine", "gpu_memory_utilization") if k in spec}}
tmp = out_path + ".tmp"
json.dump(rec, open(tmp, "w"))
os.replace(tmp, out_path)
real_exit = os._exit

def logged_exit(code):
    event("exit")
    real_exit(code)

os._exit = logged_exit
gate.exit(0)
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Returns run(plan) -> configure the fake child; events() reads its timeline."""
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    events = tmp_path / "events.log"
    plan_file = tmp_path / "plan.json"
    monkeypatch.setenv("FAKE_EVENTS", str(events))
    monkeypatch.setenv("FAKE_PLAN", str(plan_file))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [repo] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))

    class Fake:
        argv = [sys.executable, str(script)]
        lock = str(tmp_path / "gpu.lock")
        out = tmp_path / "out"

        def plan(self, plan: dict) -> None:
            plan_file.write_text(json.dumps(plan))

        def events(self) -> list[tuple[float, str, str]]:
            rows = [line.split() for line in events.read_text().splitlines()]
            return [(float(t), who, what) for t, who, what in rows]

        def run(self, knobs: Knobs, timeout: float = 30.0) -> dict:
            return live.run_one(knobs, [2, 3], str(self.out / f"s{knobs.max_num_seqs}.json"),
                                timeout=timeout, command="test", lock_path=self.lock,
                                child_argv=self.argv)

    return Fake()


def _windows(events):
    """{child: (locked, released, exit)} from the fake children's timeline."""
    out: dict[str, dict[str, float]] = {}
    for t, who, what in events:
        out.setdefault(who, {})[what] = t
    return out


def test_parallel_children_never_profile_while_another_starts_or_exits(fake, tmp_path):
    """jobs=3: start-ups are serialised and no child exits while another holds the lock."""
    fake.plan({"s1": {"profile_s": 0.4, "serve_s": 0.0},
               "s2": {"profile_s": 0.4, "serve_s": 0.6},
               "s3": {"profile_s": 0.4, "serve_s": 0.1},
               "s4": {"profile_s": 0.4, "serve_s": 0.3}})
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps([{"name": f"s{s}", "knobs": {"max_num_seqs": s},
                                  "prompt_lens": [2, 3]} for s in (1, 2, 3, 4)]))
    entries = live.validate_sweep(str(sweep))
    recs = live.run_sweep(entries, str(fake.out), timeout=30, command="test", jobs=3,
                          lock_path=fake.lock, child_argv=fake.argv)
    assert all(r["startup"]["ok"] for r in recs)
    w = _windows(fake.events())
    assert set(w) == {"s1", "s2", "s3", "s4"}
    for a in w:
        for b in w:
            if a == b:
                continue
            # a's start-up window and b's do not overlap ...
            assert w[a]["released"] <= w[b]["locked"] or w[b]["released"] <= w[a]["locked"]
            # ... and a does not exit while b profiles
            assert not (w[b]["locked"] < w[a]["exit"] < w[b]["released"]), (a, b, w)
    for s in (1, 2, 3, 4):
        rec = json.loads((fake.out / f"s{s}.json").read_text())
        assert rec["provenance"]["log"] == f"s{s}.log"
        assert "lock_wait_seconds" in rec["provenance"]
        assert "retried" not in rec["provenance"]


def test_engine_env_skips_deep_gemm_warmup(fake):
    """Every child runs in-process vLLM without the DeepGEMM warmup, and the recording says so."""
    fake.plan({})
    rec = fake.run(Knobs(max_num_seqs=1))
    assert rec["provenance"]["env"]["VLLM_DEEP_GEMM_WARMUP"] == "skip"
    assert rec["provenance"]["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"


def test_console_log_kept_next_to_recording(fake):
    """stdout and stderr of the child land in <name>.log beside <name>.json."""
    fake.plan({})
    fake.run(Knobs(max_num_seqs=2))
    log = (fake.out / "s2.log").read_text()
    assert "fake engine s2: stdout line" in log and "fake engine s2: stderr line" in log
    assert not (fake.out / "s2.failed.json").exists()


def test_memory_profiling_death_is_retried_once_and_marked(fake):
    """A start-up killed by a neighbour's memory change runs again; the recording says so."""
    fake.plan({"s3": {"fail_attempts": {"1": "profiling"}}})
    rec = fake.run(Knobs(max_num_seqs=3))
    assert rec["startup"]["ok"] is True
    assert rec["provenance"]["retried"] == "memory profiling"
    on_disk = json.loads((fake.out / "s3.json").read_text())
    assert on_disk["provenance"]["retried"] == "memory profiling"
    assert "attempt 1" in (fake.out / "s3.attempt1.log").read_text()
    assert "attempt 2" in (fake.out / "s3.log").read_text()


def test_crash_without_recording_is_retried_from_its_log(fake):
    """No recording, but the console log shows the profiling error: retried too."""
    fake.plan({"s4": {"fail_attempts": {"1": "crash"}}})
    rec = fake.run(Knobs(max_num_seqs=4))
    assert rec["startup"]["ok"] and rec["provenance"]["retried"] == "memory profiling"


def test_retried_only_once(fake):
    """Two profiling deaths in a row: the second recording stands, marked retried."""
    fake.plan({"s5": {"fail_attempts": {"1": "profiling", "2": "profiling"}}})
    rec = fake.run(Knobs(max_num_seqs=5))
    assert rec["startup"]["ok"] is False and "memory profiling" in rec["startup"]["error"]
    assert rec["provenance"]["retried"] == "memory profiling"
    assert int((fake.out.parent / "s5.attempts").read_text()) == 2


def test_configuration_errors_are_not_retried(fake):
    """A crash the configuration causes is a result, recorded once."""
    fake.plan({"s6": {"fail_attempts": {"1": "config"}}})
    rec = fake.run(Knobs(max_num_seqs=6))
    assert rec["startup"]["ok"] is False and "retried" not in rec["provenance"]
    assert int((fake.out.parent / "s6.attempts").read_text()) == 1


def test_timeout_leaves_failure_stub_with_log_and_frees_the_lock(fake):
    """A hung child is killed at its timeout; its stub keeps the log; the next run proceeds."""
    fake.plan({"s7": {"hang": True, "profile_s": 0.0}})
    rec = fake.run(Knobs(max_num_seqs=7), timeout=2.0)  # returns: the child was killed
    assert "startup" not in rec and rec["child"].startswith("timeout")
    stub = json.loads((fake.out / "s7.failed.json").read_text())
    assert "fake engine s7: stdout line" in stub["log_tail"] and stub["log"] == "s7.log"
    assert not (fake.out / "s7.json").exists()
    rec = fake.run(Knobs(max_num_seqs=8))  # the lock is free again
    assert rec["startup"]["ok"]


def test_validate_sweep_names_the_bad_entry(tmp_path):
    """Bad knobs in a sweep are refused before any child (or GPU probe) runs."""
    def write(entries):
        p = tmp_path / "sweep.json"
        p.write_text(json.dumps(entries))
        return str(p)

    good = {"name": "a", "knobs": {"max_num_seqs": 2}, "prompt_lens": [2, 3]}
    assert live.validate_sweep(write([good]))[0]["knobs"] == Knobs(max_num_seqs=2)
    with pytest.raises(ValueError, match=r"'b'.*max_num_seqs"):
        live.validate_sweep(write([good, {**good, "name": "b", "knobs": {"max_num_seqs": 0}}]))
    with pytest.raises(ValueError, match=r"'b'.*no_such_knob"):
        live.validate_sweep(write([good, {**good, "name": "b", "knobs": {"no_such_knob": 1}}]))
    with pytest.raises(ValueError, match="used twice"):
        live.validate_sweep(write([good, good]))
    with pytest.raises(ValueError, match="prompt_lens"):
        live.validate_sweep(write([{**good, "prompt_lens": [0]}]))
    with pytest.raises(ValueError, match="either prompt_lens or workload"):
        live.validate_sweep(write([{"name": "a", "knobs": {"max_num_seqs": 2}}]))
    with pytest.raises(ValueError, match=r"'w'.*workload"):
        live.validate_sweep(write([{"name": "w", "knobs": {"max_num_seqs": 2},
                                    "workload": []}]))
    ok = live.validate_sweep(write([{"name": "w", "knobs": {"max_num_seqs": 2},
                                     "workload": [{"prompt_len": 3}]}]))
    assert ok[0]["workload"] == [{"prompt_len": 3}] and ok[0]["prompt_lens"] == []
    with pytest.raises(ValueError, match=r"--sweep .*missing.json: No such file"):
        live.validate_sweep(str(tmp_path / "missing.json"))


def test_shipped_sweeps_validate():
    """Every sweep under scripts/sweeps is a valid input for live --sweep; those of a release
    the model does not cover yet (scripts/sweeps/candidates/) with that release the
    candidate (HISPARSE_EXTRA_VLLM, as the runner was given it on the GPU)."""
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "scripts", "sweeps")
    names = sorted(n for n in os.listdir(root) if n.endswith(".json"))
    assert len(names) >= 10
    for name in names:
        assert live.validate_sweep(os.path.join(root, name))
    candidates = sorted(os.listdir(os.path.join(root, "candidates")))
    assert candidates
    for name in candidates:
        version = json.load(open(os.path.join(root, "candidates", name)))[0]["knobs"][
            "vllm_version"]
        code = ("import sys; from hisparse_model.engine import live; "
                "print(len(live.validate_sweep(sys.argv[1])))")
        done = subprocess.run([sys.executable, "-c", code, os.path.join(root, "candidates", name)],
                              capture_output=True, text=True,
                              env={**os.environ, "HISPARSE_EXTRA_VLLM": version})
        assert done.returncode == 0 and int(done.stdout) > 0, done.stderr[-800:]


RUNNER = r'''
import os, sys
from hisparse_model.engine import live
from hisparse_model.model.knobs import Knobs
live.kill_children_on_termination()
live.run_one(Knobs(max_num_seqs=9), [2], sys.argv[1], timeout=300.0, command="test",
             lock_path=sys.argv[2], child_argv=[sys.executable, sys.argv[3]])
'''


def test_a_stopped_runner_leaves_no_engine_behind(fake, tmp_path):
    """SIGTERM to the runner kills its engine children too (no GPU memory left held)."""
    import signal
    import subprocess

    fake.plan({"s9": {"hang": True, "profile_s": 0.0}})
    runner = tmp_path / "runner.py"
    runner.write_text(RUNNER)
    proc = subprocess.Popen([sys.executable, str(runner), str(tmp_path / "s9.json"), fake.lock,
                             fake.argv[1]], env=os.environ.copy())
    deadline = time.monotonic() + 60
    while not any(what == "locked" for _, _, what in
                  (fake.events() if os.path.exists(os.environ["FAKE_EVENTS"]) else [])):
        assert time.monotonic() < deadline, "the fake child never started"
        time.sleep(0.1)
    pid = int(open(tmp_path / "s9.pid").read())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # the hung child is gone
        os.kill(pid, 0)


def test_live_gpu_sample_covers_every_version():
    """tests/test_live_gpu.py runs only the installed version's cases: every version has some."""
    from hisparse_model import VLLM_VERSIONS
    from test_live_gpu import SAMPLE

    versions = {knobs["vllm_version"] for knobs, _ in SAMPLE.values()}
    assert versions == set(VLLM_VERSIONS)


def test_a_sweep_entrys_engine_and_memory_reach_the_child(fake, tmp_path):
    """"engine": "async" (AsyncLLM, serve_engine.py) and "gpu_memory_utilization" go into the
    child's spec; an entry without them sends neither (the LLM class at the runner's share)."""
    fake.plan({})
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps([
        {"name": "s1", "knobs": {"max_num_seqs": 1}, "prompt_lens": [2],
         "engine": "async", "gpu_memory_utilization": 0.9},
        {"name": "s2", "knobs": {"max_num_seqs": 2}, "prompt_lens": [2]}]))
    recs = live.run_sweep(live.validate_sweep(str(sweep)), str(fake.out), timeout=30,
                          command="test", lock_path=fake.lock, child_argv=fake.argv)
    assert [r["spec"] for r in recs] == [{"engine": "async", "gpu_memory_utilization": 0.9}, {}]


@pytest.mark.parametrize("extra, message", [
    ({"engine": "serve"}, "sweep entry 'e': engine must be one of llm, async"),
    ({"engine": None}, "sweep entry 'e': engine must be one of llm, async"),
    ({"gpu_memory_utilization": 1.5}, "sweep entry 'e': gpu_memory_utilization must be a "
                                      "fraction in (0, 1]"),
    ({"gpu_memory_utilization": 0.0}, "sweep entry 'e': gpu_memory_utilization must be a "
                                      "fraction in (0, 1]"),
    ({"gpu_memory_utilization": True}, "sweep entry 'e': gpu_memory_utilization must be a "
                                       "fraction in (0, 1]"),
])
def test_a_bad_engine_or_memory_share_is_refused_naming_the_entry(tmp_path, extra, message):
    """A sweep entry's engine is llm or async, its memory share a fraction in (0, 1]."""
    sweep = tmp_path / "sweep.json"
    sweep.write_text(json.dumps([{"name": "e", "knobs": {"max_num_seqs": 1},
                                  "prompt_lens": [2], **extra}]))
    with pytest.raises(ValueError) as err:
        live.validate_sweep(str(sweep))
    assert str(err.value) == message


def test_the_engine_cores_rows_lose_the_rank_labels_of_the_tp_reader():
    """AsyncLLM's engine core is one rank: its rows are the one-rank rows, unlabelled."""
    from hisparse_model.engine.serve_engine import one_rank

    rows = [{"tp_rank": 0, "dp_rank": 0, "phase": "capture", "num_tokens": 2}]
    assert one_rank(rows) == [{"phase": "capture", "num_tokens": 2}]
