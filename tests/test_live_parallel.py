"""Two-GPU live runs, offline: spec, environment, per-rank logs, the DP split and hung ranks.

Fake engine children stand in for vLLM (as in ``test_live_runner.py``): a TP
child writes back the spec and environment it was given; DP rank children write
their stream (:mod:`hisparse_model.engine.rank_log`) step by step, and one of them
crashes, hangs or finishes as the test's plan says.  What these tests cannot
reach without two GPUs (vLLM's worker processes importing the extension, NCCL,
the DP collectives themselves) is listed in docs/gpu.md.
"""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from hisparse_model.engine import live, parallel, processes, rank_log
from hisparse_model.engine.dp_live import run_dp
from hisparse_model.model.knobs import Knobs
from test_traffic_offline import FakeScheduler  # the same one-token-per-step fake

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1", "VLLM_ALLREDUCE_USE_SYMM_MEM": "0",
                 "VLLM_USE_NCCL_SYMM_MEM": "0"}  # the list, written out here
TP2 = Knobs(max_num_seqs=2, tensor_parallel_size=2)
DP2 = Knobs(max_num_seqs=2, data_parallel_size=2)
RECORDED_ENV = ("VLLM_", "NCCL_", "TORCH_SYMM_MEM_", "NVSHMEM_")

FAKE_TP_CHILD = r'''
import json, os, sys
from hisparse_model.engine.child import GpuGate
spec_path, out_path = sys.argv[1:3]
spec = json.load(open(spec_path))
gate = GpuGate.from_env()
gate.acquire()
gate.release()
env = {k: v for k, v in os.environ.items() if k.startswith(%r)}
rec = {"knobs": spec["knobs"], "prompt_lens": spec["prompt_lens"], "spec": spec,
       "provenance": {"env": env}, "startup": {"ok": True, "error": None}, "prompts": []}
json.dump(rec, open(out_path + ".tmp", "w"))
os.replace(out_path + ".tmp", out_path)
gate.exit(0)
''' % (RECORDED_ENV,)

FAKE_TP_WORKERS = r'''
import json, os, subprocess, sys
from hisparse_model.engine.child import GpuGate
spec_path, out_path = sys.argv[1:3]
gate = GpuGate.from_env()
gate.acquire()
workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
           for _ in range(2)]  # like vLLM's worker processes, left running at exit
open(os.environ["FAKE_WORKER_PIDS"], "w").write(json.dumps([w.pid for w in workers]))
gate.release()
rec = {"knobs": json.load(open(spec_path))["knobs"], "prompt_lens": [], "provenance": {},
       "startup": {"ok": True, "error": None}, "prompts": []}
json.dump(rec, open(out_path + ".tmp", "w"))
os.replace(out_path + ".tmp", out_path)
gate.exit(0)
'''

FAKE_DP_CHILD = r'''
import json, os, sys, time
from hisparse_model.engine import parallel, rank_log
spec_path, out_path = sys.argv[1:3]
spec = json.load(open(spec_path))
r = spec["dp_rank"]
plan = json.load(open(os.environ["FAKE_PLAN"]))[str(r)]
print(f"fake rank {r} starting", flush=True)
log = rank_log.for_process()
mine = parallel.rank_requests(spec["workload"], r, spec["knobs"]["data_parallel_size"])
env = {k: v for k, v in os.environ.items() if k.startswith(%r)}
log.write("startup", ok=True, error=None, seconds=0.0)
crash = None
for k in range(plan["steps"]):
    log.write("step", step=k, dummy=False)
    with log.in_phase(f"step:{k}"):
        if plan.get("crash_at") == k:
            error = "ValueError: HiSparse swap rows exceed ... stop=3, capacity=2."
            log.add({"num_tokens": 3, "route": "swap_in", "error": error})
            crash = {"step": k, "error": error}
            break
        log.add({"num_tokens": 1, "route": "swap_in", "error": None})
    if plan.get("hang_at") == k:
        print(f"fake rank {r} waits in a collective", flush=True)
        time.sleep(3600)
log.write("served")
rec = {"knobs": spec["knobs"], "workload": spec["workload"],
       "provenance": {"env": env}, "startup": {"ok": True, "error": None, "seconds": 0.0},
       "requests": mine, "steps": [], "crash": crash, "finished": [] if crash else mine,
       "routing_log": log.rows}
json.dump(rec, open(out_path + ".tmp", "w"))
os.replace(out_path + ".tmp", out_path)
os._exit(0)
''' % (RECORDED_ENV,)

WORKLOAD = [{"prompt_len": 3}, {"prompt_len": 2, "arrival_step": 2}, {"prompt_len": 5}]


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """Fake TP / DP children; ``plan(per_rank)`` sets what each DP rank does."""
    (tmp_path / "tp_child.py").write_text(FAKE_TP_CHILD)
    (tmp_path / "dp_child.py").write_text(FAKE_DP_CHILD)
    plan_file = tmp_path / "plan.json"
    monkeypatch.setenv("FAKE_PLAN", str(plan_file))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    for name in MULTICAST_OFF:  # whatever a child has, it got from the runner
        monkeypatch.delenv(name, raising=False)

    class Fakes:
        tp_argv = [sys.executable, str(tmp_path / "tp_child.py")]
        dp_argv = [sys.executable, str(tmp_path / "dp_child.py")]
        lock = str(tmp_path / "gpu.lock")
        out = tmp_path / "out"
        workload = WORKLOAD

        def plan(self, per_rank: dict) -> None:
            plan_file.write_text(json.dumps(per_rank))

        def dp(self, name: str, hang_grace: float = 1.0, timeout: float = 60.0) -> dict:
            return run_dp(DP2, self.workload, str(self.out / f"{name}.json"),
                          timeout=timeout, command="test", lock_path=self.lock,
                          child_argv=self.dp_argv, hang_grace=hang_grace)

    return Fakes()


# --------------------------------------------------------------------------
# sizes, engine arguments, environment
# --------------------------------------------------------------------------


@pytest.mark.parametrize("n, size, shares", [
    (5, 2, [[0, 1, 2], [3, 4]]),     # floor 2, remainder 1: rank 0 takes 2 + 1
    (4, 2, [[0, 1], [2, 3]]),        # floor 2, remainder 0
    (1, 2, [[0], [1]]),              # floor 0, remainder 1: rank 1 empty, its placeholder is 1
    (7, 3, [[0, 1, 2], [3, 4], [5, 6]]),  # floor 2, remainder 1
    (2, 3, [[0], [1], [2]]),         # floor 0, remainder 2: rank 2's placeholder is request 2
])
def test_runner_shares_are_the_examples_contiguous_split(n, size, shares):
    """Rank r serves [r*floor + min(r, rem), (r+1)*floor + min(r+1, rem)) of n requests, and
    a rank left empty serves the placeholder appended for it, as the runner hands them out."""
    from hisparse_model.schedule.data_parallel import with_placeholders
    from hisparse_model.schedule.workload import Workload

    work = with_placeholders(Workload.from_json([{"prompt_len": 2}] * n), size)
    raw = work.as_json()["requests"]
    assert [parallel.rank_requests(raw, r, size) for r in range(size)] == shares
    assert [q["prompt_len"] for q in raw[n:]] == [1] * (len(raw) - n)  # one-token placeholders


def test_a_requests_own_dp_rank_overrides_the_split():
    """Requests naming their rank go there; the rest follow the contiguous split of all n."""
    work = [{"prompt_len": 2, "dp_rank": 1}, {"prompt_len": 2}, {"prompt_len": 2, "dp_rank": 0},
            {"prompt_len": 2}]  # split of 4 over 2: 0, 0, 1, 1
    assert parallel.rank_requests(work, 0, 2) == [1, 2]
    assert parallel.rank_requests(work, 1, 2) == [0, 3]


def test_tp_engine_arguments_and_dp_environment():
    """TP adds tensor_parallel_size, the worker extension and no custom all-reduce; DP the env."""
    assert parallel.llm_kwargs(Knobs(max_num_seqs=2)) == {}
    assert parallel.llm_kwargs(TP2) == {
        "tensor_parallel_size": 2, "disable_custom_all_reduce": True,
        "worker_extension_cls": "hisparse_model.engine.tp_worker.RankRecorder"}
    # DP ranks get no data_parallel_size argument: vLLM's LLM refuses it in one process
    assert parallel.llm_kwargs(DP2) == {"disable_custom_all_reduce": True}
    assert parallel.dp_env(1, 2, 12345) == {
        "VLLM_DP_RANK": "1", "VLLM_DP_RANK_LOCAL": "1", "VLLM_DP_SIZE": "2",
        "VLLM_DP_MASTER_IP": "127.0.0.1", "VLLM_DP_MASTER_PORT": "12345"}
    for name, value in MULTICAST_OFF.items():
        assert parallel.MULTICAST_OFF_ENV[name] == value


def test_worker_extension_resolves_without_installing_anything(monkeypatch):
    """The name vLLM resolves is the extension class; importing it off a worker installs nothing."""
    import importlib

    monkeypatch.delenv(rank_log.STREAM_ENV, raising=False)
    module, _, name = parallel.WORKER_EXTENSION.rpartition(".")
    mod = importlib.import_module(module)
    assert getattr(mod, name) is mod.RankRecorder
    assert "log" not in mod._installed
    # its only method cannot collide with a vLLM worker attribute (worker_base.py asserts so)
    assert [a for a in dir(mod.RankRecorder) if not a.startswith("__")] == [
        "hisparse_stream_path"]


@pytest.mark.parametrize("knobs, message", [
    # Knobs' own checks, its one line naming the knob
    ({"max_num_seqs": 2, "tensor_parallel_size": 0}, "tensor_parallel_size must be >= 1, got 0"),
    ({"max_num_seqs": 2, "data_parallel_size": 9}, "data_parallel_size must be <= 8 (the GPUs of one H200 host, the largest "
                                                   "deployment the model covers), got 9"),
    ({"max_num_seqs": 2, "tensor_parallel_size": "2"},
     "tensor_parallel_size must be an integer, got '2'"),
    # the runner's own rules
    ({"max_num_seqs": 2, "tensor_parallel_size": 2, "data_parallel_size": 2},
     "live runs tensor_parallel_size or data_parallel_size above 1, not both"),
    ({"max_num_seqs": 2, "data_parallel_size": 2}, "data_parallel_size > 1 serves a workload"),
    ({"max_num_seqs": 2, "pipeline_parallel_size": 2}, "pipeline_parallel_size: live runs"),
])
def test_sweep_entries_with_bad_parallel_sizes_are_refused(tmp_path, knobs, message):
    """A bad size (Knobs' line), TP with DP, DP on prompts or PP: refused naming the entry
    before any child runs; on the command line that is one line and exit status 2."""
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps([{"name": "e", "knobs": knobs, "prompt_lens": [2]}]))
    with pytest.raises(ValueError, match=rf"^sweep entry 'e': {re.escape(message)}"):
        live.validate_sweep(str(p))
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "live", "--sweep", str(p),
                          "--out-dir", str(tmp_path / "out")],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr
    assert not (tmp_path / "out").exists()


def test_sweep_entry_carries_its_parallel_sizes(tmp_path):
    """Sizes in a sweep entry's knobs are knobs: the runner reads them from Knobs."""
    p = tmp_path / "sweep.json"
    p.write_text(json.dumps([
        {"name": "tp", "knobs": {"max_num_seqs": 2, "tensor_parallel_size": 2},
         "prompt_lens": [2]},
        {"name": "dp", "knobs": {"max_num_seqs": 2, "data_parallel_size": 2},
         "workload": [{"prompt_len": 3}]},
        {"name": "one", "knobs": {"max_num_seqs": 2}, "prompt_lens": [2]}]))
    entries = live.validate_sweep(str(p))
    assert [e["knobs"] for e in entries] == [TP2, DP2, Knobs(max_num_seqs=2)]


def test_cli_refuses_dp_without_a_workload_before_any_gpu_probe():
    """live -dp 2 on prompts: one line naming the knob, exit status 2."""
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "live", "--max-num-seqs", "2",
                          "-dp", "2", "--out", "x.json"],
                         capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "data_parallel_size" in out.stderr


def test_tp_child_gets_the_spec_and_multicast_off_environment(fakes):
    """A TP=2 child is told its sizes and runs with every NVLink-multicast switch off."""
    rec = live.run_one(TP2, [2, 3], str(fakes.out / "tp.json"), timeout=30,
                       command="test", lock_path=fakes.lock, child_argv=fakes.tp_argv)
    assert rec["spec"]["knobs"] == TP2.as_dict()
    env = rec["provenance"]["env"]
    assert {k: env.get(k) for k in MULTICAST_OFF} == MULTICAST_OFF
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"  # engine core in the child


def test_workers_a_child_leaves_behind_are_gone_when_its_run_returns(fakes, tmp_path,
                                                                      monkeypatch):
    """An engine child's own processes (a TP engine's workers) do not outlive its run."""
    script = tmp_path / "tp_workers.py"
    script.write_text(FAKE_TP_WORKERS)
    pids = tmp_path / "workers.json"
    monkeypatch.setenv("FAKE_WORKER_PIDS", str(pids))
    rec = live.run_one(TP2, [2], str(fakes.out / "w.json"), timeout=30,
                       command="test", lock_path=fakes.lock,
                       child_argv=[sys.executable, str(script)])
    assert rec["startup"]["ok"]
    for pid in json.loads(pids.read_text()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_single_gpu_child_environment_is_unchanged(fakes):
    """A TP=DP=1 run gets sizes 1 and none of the multicast switches."""
    rec = live.run_one(Knobs(max_num_seqs=2), [2], str(fakes.out / "one.json"), timeout=30,
                       command="test", lock_path=fakes.lock, child_argv=fakes.tp_argv)
    assert rec["spec"]["knobs"]["tensor_parallel_size"] == 1
    assert rec["spec"]["knobs"]["data_parallel_size"] == 1
    assert not set(MULTICAST_OFF) & set(rec["provenance"]["env"])


# --------------------------------------------------------------------------
# per-rank logs
# --------------------------------------------------------------------------


def _stream(path, rank, rows, engine=None, cut=False):
    log = rank_log.StreamedRouteLog(str(path))
    log.write("rank", tp_rank=rank, dp_rank=0, pid=100 + rank)
    for phase, row in rows:
        if engine:
            log.engine_report.update(engine)
        with log.in_phase(phase):
            log.add(row)
    if cut:
        with open(path, "a") as f:
            f.write('{"kind": "row", "row": {"pha')  # a kill in mid-line
    return log


def test_rank_streams_fold_and_merge_labelled_in_rank_order(tmp_path):
    """Each worker's rows fold as one RouteLog folds them and merge rank by rank, labelled."""
    ok = {"num_tokens": 2, "route": "swap_in", "error": None}
    err = {"num_tokens": 3, "route": "swap_in", "error": "ValueError: stop=3, capacity=2."}
    rows = [("capture", ok), ("capture", ok), ("prompt:0", ok), ("prompt:1", err)]
    logs = [_stream(tmp_path / "pid-9.jsonl", 1, rows, {"swap_capacity": 2}, cut=True),
            _stream(tmp_path / "pid-5.jsonl", 0, rows, {"swap_capacity": 2})]
    streams = rank_log.read_folder(str(tmp_path))
    assert [s["rank"]["tp_rank"] for s in streams] == [0, 1]  # ordered by rank, not file name
    for s, log in zip(streams, reversed(logs)):
        assert s["rows"] == log.rows  # the stream refolds exactly as the process folded
    merged = rank_log.merge_rows(streams)
    # 3 folded rows per rank: capture (calls 2), prompt:0, prompt:1
    assert [(r["tp_rank"], r["phase"], r["calls"]) for r in merged] == [
        (0, "capture", 2), (0, "prompt:0", 1), (0, "prompt:1", 1),
        (1, "capture", 2), (1, "prompt:0", 1), (1, "prompt:1", 1)]
    # sizes reported inside a phase that routed nothing reach the stream when it ends
    with logs[1].in_phase("memory_profile"):
        logs[1].engine_report["kv_cache_num_blocks"] = 100
    assert rank_log.read_stream(logs[1].path)["engine"]["kv_cache_num_blocks"] == 100
    view = rank_log.MergedRouteLog(str(tmp_path))
    assert view.first_error("prompt:1") == "ValueError: stop=3, capacity=2."
    assert view.first_error("prompt:0") is None
    assert view.engine_report["swap_capacity"] == 2
    assert [r["tp_rank"] for r in view.engine_report["ranks"]] == [0, 1]


# --------------------------------------------------------------------------
# DP runs: one child per rank, crash, hang, control
# --------------------------------------------------------------------------


def test_dp_control_both_ranks_finish_with_their_share(fakes):
    """DP=2, no crash: one recording, both ranks finished, each with the example's share."""
    fakes.plan({"0": {"steps": 3}, "1": {"steps": 3}})
    rec = fakes.dp("control")
    assert [r["status"] for r in rec["ranks"]] == ["finished", "finished"]
    assert [r["requests"] for r in rec["ranks"]] == [[0, 1], [2]]  # 3 requests: 2 + 1
    assert rec["crash"] is None and rec["startup"]["ok"]
    assert rec["knobs"]["data_parallel_size"] == 2
    assert rec["provenance"]["parallel"]["engine_core"] == parallel.ENGINE_CORE
    envs = [r["provenance"]["env"] for r in rec["ranks"]]
    assert [e["VLLM_DP_RANK"] for e in envs] == ["0", "1"]
    assert [e["VLLM_DP_RANK_LOCAL"] for e in envs] == ["0", "1"]
    assert {e["VLLM_DP_SIZE"] for e in envs} == {"2"}
    assert {e["VLLM_DP_MASTER_IP"] for e in envs} == {"127.0.0.1"}
    assert len({e["VLLM_DP_MASTER_PORT"] for e in envs}) == 1  # one master for both
    for e in envs:
        assert {k: e.get(k) for k in MULTICAST_OFF} == MULTICAST_OFF
    assert json.loads((fakes.out / "control.json").read_text()) == rec
    assert "fake rank 1 starting" in (fakes.out / "control.rank1.log").read_text()


def test_dp_crash_and_hung_survivor_are_recorded_as_what_they_are(fakes):
    """Rank 0 crashes at step 2; rank 1 waits forever: killed after the grace, recorded hung."""
    fakes.plan({"0": {"steps": 5, "crash_at": 2}, "1": {"steps": 5, "hang_at": 2}})
    rec = fakes.dp("crash", hang_grace=1.0)  # returns: the hung rank was killed (else no end)
    r0, r1 = rec["ranks"]
    assert r0["status"] == "crashed" and r0["crash"]["step"] == 2
    assert r1["status"] == "hung" and r1["last_step"] == 2 and r1["exit"] is None
    # the hung rank's rows come from its stream: steps 0, 1, 2 each routed 1 token
    assert [(r["phase"], r["num_tokens"]) for r in r1["routing_log"]] == [
        ("step:0", 1), ("step:1", 1), ("step:2", 1)]
    assert r1["startup"]["ok"] is True
    assert "waits in a collective" in r1["log_tail"]
    error = "ValueError: HiSparse swap rows exceed ... stop=3, capacity=2."
    assert rec["crash"] == {"dp_rank": 0, "step": 2, "error": error}
    assert rec["startup"]["ok"]  # both ranks had started: the hang is not a start-up failure
    assert not (fakes.out / "crash.failed.json").exists()


def test_dp_ranks_hung_from_the_start_are_timeouts(fakes):
    """No rank ends: both are killed at the timeout and recorded as such, with their last step."""
    fakes.plan({"0": {"steps": 3, "hang_at": 0}, "1": {"steps": 3, "hang_at": 1}})
    rec = fakes.dp("stuck", timeout=3.0)
    assert [r["status"] for r in rec["ranks"]] == ["timeout", "timeout"]
    assert [r["last_step"] for r in rec["ranks"]] == [0, 1]
    assert rec["crash"] is None


def test_dp_run_holds_the_gpu_lock_while_its_ranks_run(fakes):
    """Another child's start-up cannot take the GPU lock during a DP run (live.py's protocol)."""
    fakes.plan({"0": {"steps": 1, "hang_at": 0}, "1": {"steps": 1, "hang_at": 0}})
    import threading

    seen = {}

    def probe():
        time.sleep(1.0)
        other = processes.Lock(fakes.lock)
        seen["free_during_run"] = other.try_acquire()
        other.release()

    t = threading.Thread(target=probe)
    t.start()
    fakes.dp("locked", timeout=3.0)
    t.join()
    assert seen["free_during_run"] is False
    other = processes.Lock(fakes.lock)
    assert other.try_acquire()  # and released after it
    other.release()


# --------------------------------------------------------------------------
# the worker side, against vLLM's own classes (CPU, no engine)
# --------------------------------------------------------------------------

WORKER_SIDE = r'''
import json, os, pickle, sys, types
from vllm.utils.import_utils import resolve_obj_by_qualname
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.worker import gpu_worker
from hisparse_model.engine import parallel, rank_log

folder = sys.argv[1]
# Stand-ins for the worker's own methods (no GPU), wrapped by what the import installs.
seen = []
def phase():
    return sys.modules["hisparse_model.engine.tp_worker"]._installed["log"].phase
gpu_worker.Worker.init_device = lambda self: None
gpu_worker.Worker.execute_model = lambda self, so: seen.append(phase())
gpu_worker.Worker.sample_tokens = lambda self, grammar: seen.append(phase())
# 1. As a worker does: the engine child's environment, then vLLM resolves the name
#    (importing the module installs the instrumentation) and mixes the class in only
#    if no attribute collides (worker_base.py's own check, on the real Worker class).
os.environ[rank_log.STREAM_ENV] = folder
ext = resolve_obj_by_qualname(parallel.WORKER_EXTENSION)
clashes = [a for a in dir(ext) if not a.startswith("__") and hasattr(gpu_worker.Worker, a)]
gpu_worker.Worker.__bases__ = gpu_worker.Worker.__bases__ + (ext,)
# 2. The rank record, and execute_model labelled by the phase the engine child set on the
#    scheduler output, after the pickling the executor does.
worker = types.SimpleNamespace(rank=1, parallel_config=types.SimpleNamespace(
    tensor_parallel_size=2, data_parallel_rank=0))
gpu_worker.Worker.init_device(worker)
so = SchedulerOutput.__new__(SchedulerOutput)
so.__dict__.update({n: None for n in SchedulerOutput.__dataclass_fields__})
setattr(so, rank_log.PHASE_ATTR, "prompt:3")
so = pickle.loads(pickle.dumps(so))
gpu_worker.Worker.execute_model(worker, so)
gpu_worker.Worker.sample_tokens(worker, None)
path = gpu_worker.Worker.hisparse_stream_path(worker)
print(json.dumps({"clashes": clashes, "ext": ext.__name__, "seen": seen,
                  "in_folder": os.path.dirname(path) == folder,
                  "stream": rank_log.read_stream(path)["rank"]}))
'''


@pytest.mark.vllm_cpu
@pytest.mark.parametrize("version", ["0.31.0", "0.32.0", "0.33.0"])
def test_worker_extension_mixes_in_and_labels_forwards(version, vllm_servers, tmp_path):
    """Resolved as vLLM resolves it, the extension installs itself, mixes into vLLM's Worker
    without a clash, streams the rank, and labels forwards with the child's phase."""
    got = vllm_servers.call(version, "vllm_calls:run_script",
                            {"code": WORKER_SIDE, "argv": [str(tmp_path)]}, timeout=600,
                            env={rank_log.STREAM_ENV: None})
    assert got["clashes"] == [] and got["ext"] == "RankRecorder" and got["in_folder"]
    assert got["seen"] == ["prompt:3", "prompt:3"]  # execute_model, then sample_tokens
    assert got["stream"] == {"tp_rank": 1, "dp_rank": 0}


# --------------------------------------------------------------------------
# comparing two-GPU recordings with the model
# --------------------------------------------------------------------------

TWO_GPU_DIR = os.path.join(REPO, "tests", "recorded", "two_gpu")
TWO_GPU_RECORDINGS = sorted(
    os.path.join(TWO_GPU_DIR, n) for n in (os.listdir(TWO_GPU_DIR) if os.path.isdir(TWO_GPU_DIR)
                                           else []) if n.endswith(".json"))


def _as_tp2(path: str) -> dict:
    """A committed one-GPU recording as a TP=2 recording would hold it: every row and the
    sizes once per worker, labelled (what TP=2 logs if C, W and routing do not depend on it)."""
    with open(path) as f:
        rec = json.load(f)
    rows = [{"tp_rank": r, "dp_rank": 0, **row} for r in (0, 1) for row in rec["routing_log"]]
    ranks = [{"tp_rank": r, "dp_rank": 0, **rec["engine"]} for r in (0, 1)]
    # what LLM raised in the runner (engine core in-process): the multiproc executor's
    # RuntimeError around str(ValueError), i.e. the text without its "ValueError: "
    for place in [rec["startup"], *rec["prompts"]]:
        if place.get("error"):
            place["caller_error"] = (f"RuntimeError: Worker failed with error "
                                     f"'{place['error'][len('ValueError: '):]}', please check "
                                     "the stack trace above for the root cause")
    return {**rec, "knobs": {**rec["knobs"], "tensor_parallel_size": 2},
            "engine": {**rec["engine"], "ranks": ranks}, "routing_log": rows}


def test_tp_comparison_checks_every_rank_on_its_own():
    """Both workers logging the one-GPU rows agree; a difference in rank 1 alone is named."""
    from hisparse_model.recorded.rank_recordings import compare_tp_recording

    rec = _as_tp2(os.path.join(REPO, "tests", "recorded", "v0.31.0-stock-s2.json"))
    assert compare_tp_recording(rec) == []
    bad = json.loads(json.dumps(rec))
    rank1 = [i for i, r in enumerate(bad["routing_log"]) if r["tp_rank"] == 1]
    bad["routing_log"][rank1[-1]]["num_tokens"] += 1  # rank 1's last row: one token more
    diffs = compare_tp_recording(bad)
    assert len(diffs) == 1 and diffs[0].startswith("tp rank 1: routing row")
    bad = json.loads(json.dumps(rec))
    bad["routing_log"] = [r for r in bad["routing_log"] if r["tp_rank"] == 0]
    bad["engine"]["ranks"] = bad["engine"]["ranks"][:1]
    assert compare_tp_recording(bad) == ["ranks: recording holds [0], tensor_parallel_size is 2"]
    # what the caller saw must be the in-process wrap, not vLLM's default EngineDeadError
    bad = json.loads(json.dumps(rec))
    dead = ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
            "See stack trace (above) for the root cause.")
    bad["prompts"][1]["caller_error"] = dead  # the 3-token prompt (prompt 2): stop=3, capacity=2
    diffs = compare_tp_recording(bad)
    assert len(diffs) == 1 and diffs[0].startswith(f"prompt 2: caller saw {dead!r}, model ")


@pytest.mark.parametrize("path", TWO_GPU_RECORDINGS, ids=os.path.basename)
def test_two_gpu_recording_agrees_with_the_model(path):
    """Each committed TP / DP recording (tests/recorded/two_gpu/) agrees with the model per rank."""
    from hisparse_model.recorded.rank_recordings import compare_dp_recording, compare_tp_recording
    from hisparse_model.recorded.recordings import check_provenance

    with open(path) as f:
        rec = json.load(f)
    assert check_provenance(rec) == []
    env = rec["provenance"]["env"]
    assert {k: env.get(k) for k in MULTICAST_OFF} == MULTICAST_OFF
    knobs = Knobs.from_dict(rec["knobs"])
    assert parallel.is_parallel(knobs)
    compare = compare_dp_recording if knobs.data_parallel_size > 1 else compare_tp_recording
    assert compare(rec) == []


# --------------------------------------------------------------------------
# the DP rank's loop (dp_serve), two fake ranks in lockstep threads
# --------------------------------------------------------------------------


class _FakeDPGroup:
    """An all-reduce(MAX) of "unfinished" over two threads; a dead rank's peer fails in its
    next one (at once, or when the wait times out: gloo reports a closed connection)."""

    def __init__(self):
        import threading

        self.barrier = threading.Barrier(2, timeout=2)
        self.flags = [False, False]
        self.dead = False

    def any_unfinished(self, rank: int, mine: bool) -> bool:
        if self.dead:
            raise RuntimeError("Connection closed by peer")
        self.flags[rank] = mine
        self.barrier.wait()
        out = any(self.flags)
        self.barrier.wait()
        return out


class _FakeDPEngine:
    """vLLM's in-process LLMEngine under DP, reduced to what dp_serve relies on: the
    collective in has_unfinished_requests and the dummy batch in the next step()."""

    def __init__(self, rank, group, sched, runner):
        self.rank, self.group, self.sched, self.runner = rank, group, sched, runner
        self.should_execute_dummy_batch = False
        self.engine_core = SimpleNamespace(execute_dummy_batch=self._dummy)

    def _dummy(self):
        try:
            self.runner.execute_dummy_batch()
        except Exception:
            self.group.dead = True
            raise

    def add_request(self, req_id, prompt, max_tokens):
        self.sched.waiting.append((req_id, len(prompt["prompt_token_ids"]), max_tokens))

    def has_unfinished_requests(self):
        mine = bool(self.sched.waiting or self.sched.running)
        out = self.group.any_unfinished(self.rank, mine)
        if out and not mine:
            self.should_execute_dummy_batch = True
        return out

    def step(self):
        try:
            if self.should_execute_dummy_batch:
                self.should_execute_dummy_batch = False
                self.runner.execute_dummy_batch()
                return []
            so = self.sched.schedule()
            if not so.num_scheduled_tokens:
                return []
            self.runner.execute_model(so)
            done = self.sched.update_from_output(so, None)
            return [SimpleNamespace(request_id=r, finished=True) for r in done]
        except Exception:
            self.group.dead = True  # this rank's engine is dead: the peer's next collective fails
            raise


class _FakeDPScheduler:
    """Whole prompts, then one token per step; a request in ``stall`` is skipped once after
    its prefill (waiting for its output, as under async scheduling)."""

    stall: set = set()

    def __init__(self):
        self.waiting, self.running, self.skip = [], {}, set()

    def schedule(self):
        tokens = {r: 1 for r in self.running if r not in self.skip}
        self.skip = set()
        for req_id, n, m in self.waiting:
            tokens[req_id] = n
            self.running[req_id] = m
            if req_id in self.stall:
                self.skip.add(req_id)
        self.waiting = []
        return SimpleNamespace(num_scheduled_tokens=tokens, finished_req_ids=set())

    update_from_output = FakeScheduler.update_from_output  # one token per step, then done


class _FakeDPRunner:
    def __init__(self, log, dummy_error=None):
        self.log, self.dummy_error = log, dummy_error

    def execute_model(self, so):
        self.log.add({"num_tokens": sum(so.num_scheduled_tokens.values()), "error": None})

    def execute_dummy_batch(self):
        self.log.add({"num_tokens": 4, "error": self.dummy_error})
        if self.dummy_error:
            raise ValueError(self.dummy_error.split(": ", 1)[1])


def _serve_two_ranks(workload, dummy_error_on=None, stall=(), streams=None):
    """Both ranks' dp_serve.serve results (and logs), each rank in its own thread
    (``streams``: a folder for each rank's stream, as a DP child writes it)."""
    import threading

    from hisparse_model.engine import dp_serve
    from hisparse_model.engine.instrument import RouteLog

    group, results = _FakeDPGroup(), [None, None]
    logs = ([RouteLog(), RouteLog()] if streams is None else
            [rank_log.StreamedRouteLog(str(streams / f"rank{r}.jsonl")) for r in (0, 1)])

    def run(rank):
        sched_cls = type(f"S{rank}", (_FakeDPScheduler,), {"stall": set(stall)})
        runner_cls = type(f"R{rank}", (_FakeDPRunner,), {})
        error = "ValueError: stop=4, capacity=3." if rank == dummy_error_on else None
        engine = _FakeDPEngine(rank, group, sched_cls(), runner_cls(logs[rank], error))
        llm = SimpleNamespace(llm_engine=engine, sampling_params=lambda max_tokens: max_tokens)
        results[rank] = dp_serve.serve(llm, logs[rank], workload, rank, 2,
                                       classes=(sched_cls, runner_cls))

    threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, logs


def _req(n, max_tokens, arrival=0):
    return {"prompt_token_ids": list(range(n)), "max_tokens": max_tokens, "arrival_step": arrival,
            "dp_rank": None}


def test_dp_ranks_step_together_and_an_idle_rank_runs_dummy_batches(tmp_path):
    """Rank 0 busy at steps 0-1, rank 1 at steps 3-4: each runs dummies exactly while the
    other works, nothing while both idle, and both stop after the same step; each rank's
    stream holds what it scheduled and its dummies (what a killed rank is recorded from)."""
    # split of 2 over 2: request 0 -> rank 0 (2 steps: prefill, one decode),
    # request 1 -> rank 1, arriving at step 3 (prefill at 3, decode at 4)
    work = [_req(3, 2), _req(2, 2, arrival=3)]
    (r0, r1), (log0, log1) = _serve_two_ranks(work, streams=tmp_path)
    for r, rank in ((r0, 0), (r1, 1)):
        stream = rank_log.read_stream(str(tmp_path / f"rank{rank}.jsonl"))
        assert stream["steps"] == [{"step": s["step"], "scheduled": s["scheduled"]}
                                   for s in r["steps"]]
        assert stream["dummy_steps"] == r["dummy_steps"]
    # rank 1 scheduled request 1's 2-token prefill at step 3, then its decode at step 4
    assert rank_log.read_stream(str(tmp_path / "rank1.jsonl"))["steps"] == [
        {"step": 3, "scheduled": {"1": 2}}, {"step": 4, "scheduled": {"1": 1}}]
    assert [s["step"] for s in r0["steps"]] == [0, 1] and r0["dummy_steps"] == [3, 4]
    assert [s["step"] for s in r1["steps"]] == [3, 4] and r1["dummy_steps"] == [0, 1]
    assert r0["engine_steps"] == r1["engine_steps"] == 5  # step 2: both idle, both step
    assert r0["finished"] == [0] and r1["finished"] == [1]
    assert r0["crash"] is None and r1["crash"] is None
    assert [(r["phase"], r["calls"]) for r in log1.rows] == [
        ("dummy:0", 1), ("dummy:1", 1), ("step:3", 1), ("step:4", 1)]


def test_a_rank_with_work_but_no_forward_runs_the_busy_loops_dummy():
    """Rank 0's request waits for its output at step 1 (nothing scheduled): rank 0 runs a
    dummy then, as the DP busy loop does, so both ranks run one forward every step."""
    # request 0 -> rank 0: prefill at 0, stalled at 1, decodes at 2 and 3 (4 tokens: 1 + 3)
    # request 1 -> rank 1: prefill at 0, decode at 1; then idle (dummies) while rank 0 works
    work = [_req(3, 3), _req(2, 2)]
    (r0, r1), (log0, log1) = _serve_two_ranks(work, stall={"req-0"})
    assert [s["step"] for s in r0["steps"]] == [0, 2, 3] and r0["dummy_steps"] == [1]
    assert [s["step"] for s in r1["steps"]] == [0, 1] and r1["dummy_steps"] == [2, 3]
    assert r0["engine_steps"] == r1["engine_steps"] == 4
    # every step k in 0..3 has exactly one forward per rank: a real batch or a dummy
    for r in (r0, r1):
        assert sorted([s["step"] for s in r["steps"]] + r["dummy_steps"]) == [0, 1, 2, 3]


def test_dp_crash_in_a_dummy_batch_names_the_step_and_the_peer_sees_the_break():
    """Rank 1 dies in its dummy at step 0: recorded as a dummy crash; rank 0's next
    collective fails and is recorded at step 1 with that collective's error."""
    work = [_req(3, 4), _req(2, 2, arrival=6)]
    (r0, r1), _ = _serve_two_ranks(work, dummy_error_on=1)
    assert r1["crash"] == {"step": 0, "error": "ValueError: stop=4, capacity=3.", "dummy": True}
    assert r1["dummy_steps"] == [0]
    assert r0["crash"]["step"] == 1 and r0["crash"]["error"]
    assert [s["step"] for s in r0["steps"]] == [0]  # its own step 0 ran


# --------------------------------------------------------------------------
# the engine child itself (child.run) on CPU, vLLM's modules real, the engine faked
# --------------------------------------------------------------------------

CHILD_RUN = r'''
import json, os, sys, types
from hisparse_model.engine import child, llm_args, rank_log

ERR = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
       "stop=2, capacity=1.")
mode, where = sys.argv[1:3]

def tp_build(kw):
    """Two workers log the start-up crash into their streams; the executor wraps it."""
    folder = os.environ[rank_log.STREAM_ENV]
    for r in (0, 1):
        log = rank_log.StreamedRouteLog(os.path.join(folder, f"pid-{1000 + r}.jsonl"))
        log.write("rank", tp_rank=r, dp_rank=0, pid=1000 + r)
        log.engine_report.update({"swap_capacity": 1})
        with log.in_phase("cudagraph_memory_profile"):
            log.add({"num_tokens": 2, "route": "swap_in", "error": ERR})
    raise RuntimeError(f"Worker failed with error '{ERR.split(': ', 1)[1]}', please check "
                       "the stack trace above for the root cause")

class Engine:
    """One DP rank alone: its request runs one step; no peer has work.  It schedules outside
    vLLM's Scheduler (which the step recorder wraps), so each of its steps counts as one
    without a forward, and the loop adds its own dummy (counted here)."""
    def __init__(self):
        self.todo, self.should_execute_dummy_batch = [], False
        self.engine_core = types.SimpleNamespace(execute_dummy_batch=self.dummy)
        self.dummies = 0
    def dummy(self):
        self.dummies += 1
    def add_request(self, req_id, prompt, params):
        self.todo.append(req_id)
    def has_unfinished_requests(self):
        return bool(self.todo)
    def step(self):
        done, self.todo = self.todo, []
        return [types.SimpleNamespace(request_id=r, finished=True) for r in done]

if mode == "tp":
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    llm_args.build_llm = tp_build
    spec = {"knobs": {"max_num_seqs": 1, "tensor_parallel_size": 2}, "prompt_lens": [2],
            "command": "test"}
else:
    os.environ[rank_log.STREAM_ENV] = where
    llm_args.build_llm = lambda kw: types.SimpleNamespace(
        llm_engine=Engine(), sampling_params=lambda max_tokens: max_tokens)
    spec = {"knobs": {"max_num_seqs": 2, "data_parallel_size": 2}, "prompt_lens": [],
            "command": "test", "dp_rank": 1,
            "workload": [{"prompt_len": 2}, {"prompt_len": 3}, {"prompt_len": 4}]}
print(json.dumps(child.run(spec)))
'''


def _child_run(mode, vllm_servers, tmp_path):
    return vllm_servers.call("0.31.0", "vllm_calls:run_script",
                             {"code": CHILD_RUN, "argv": [mode, str(tmp_path / "rank1.jsonl")]},
                             timeout=600,
                             env={name: None for name in (rank_log.STREAM_ENV, *MULTICAST_OFF)})


@pytest.mark.vllm_cpu
def test_tp_child_records_the_workers_error_per_rank_and_what_the_caller_saw(vllm_servers,
                                                                              tmp_path):
    """child.run under TP=2: the worker's row error is the start-up error, the executor's
    wrap is caller_error, rows and sizes are per rank, the engine arguments and env say TP."""
    rec = _child_run("tp", vllm_servers, tmp_path)
    err = ("ValueError: HiSparse swap rows exceed the configured speculative decode capacity: "
           "stop=2, capacity=1.")
    assert rec["startup"]["ok"] is False and rec["startup"]["error"] == err
    assert rec["startup"]["caller_error"].startswith(
        "RuntimeError: Worker failed with error 'HiSparse swap rows exceed")
    assert [(r["tp_rank"], r["phase"], r["error"]) for r in rec["routing_log"]] == [
        (0, "cudagraph_memory_profile", err), (1, "cudagraph_memory_profile", err)]
    assert [e["tp_rank"] for e in rec["engine"]["ranks"]] == [0, 1]
    assert rec["knobs"]["tensor_parallel_size"] == 2
    args = rec["provenance"]["engine_args"]
    assert args["tensor_parallel_size"] == 2 and args["disable_custom_all_reduce"] is True
    assert args["worker_extension_cls"] == parallel.WORKER_EXTENSION
    assert rec["provenance"]["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert rec["provenance"]["parallel"]["tensor_parallel_size"] == 2
    assert [p["ran"] for p in rec["prompts"]] == [False]


@pytest.mark.vllm_cpu
def test_dp_child_serves_its_share_and_streams_its_progress(vllm_servers, tmp_path):
    """child.run as DP rank 1 of 2: it serves request 2 only (3 requests: 2 + 1) and its
    stream holds the start-up, each step's start and the end of serving."""
    rec = _child_run("dp", vllm_servers, tmp_path)
    assert rec["requests"] == [2] and rec["finished"] == [2] and rec["crash"] is None
    assert rec["dummy_steps"] == [0]  # the fake's step 0 ran no recorded forward
    assert rec["knobs"]["data_parallel_size"] == 2
    assert rec["provenance"]["parallel"]["engine_core"] == parallel.ENGINE_CORE
    assert "data_parallel_size" not in rec["provenance"]["engine_args"]
    stream = rank_log.read_stream(str(tmp_path / "rank1.jsonl"))
    assert stream["startup"]["ok"] is True and stream["last_step"] == 0 and stream["served"]
