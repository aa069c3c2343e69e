"""The calibration's step timer (engine/step_timer.py) on stand-ins for vLLM's scheduler.

Invariant: a batch's row says what it computed (a request is in its prompt while what it had
computed before the batch is below its prompt length; its context is that plus the batch's
tokens) and the time from the previous batch's output to its own; the first batch, and the
first after the engine ran out of requests, are marked after_idle.
"""

from types import SimpleNamespace as NS

from hisparse_model.engine.step_timer import StepTimer, install


# A stand-in for vLLM's Scheduler with what the timer reads: ``requests[rid]``
# (num_computed_tokens advanced by schedule(), as vLLM's _update_after_schedule does,
# num_prompt_tokens) and ``has_requests()`` (``left`` when a test sets it, else whether its plan
# has batches left). One source: run here, and written into a stand-in vLLM package below.
FAKE_SCHEDULER = """
from types import SimpleNamespace as NS


class Scheduler:
    left = None

    def __init__(self, plan, requests=None):
        self.plan, self.requests = list(plan), requests or {}

    def schedule(self):
        tokens = self.plan.pop(0)
        for rid, n in tokens.items():
            self.requests[rid].num_computed_tokens += n
        return NS(num_scheduled_tokens=tokens)

    def update_from_output(self, out, model_output=None):
        return {}

    def has_requests(self):
        return bool(self.plan) if self.left is None else self.left > 0
"""
_ns: dict = {}
exec(FAKE_SCHEDULER, _ns)
FakeScheduler = _ns["Scheduler"]


def test_rows_say_what_each_batch_computed_and_took():
    """Request a: a 100-token prompt in two chunks (60, 40), then a decode; request b: one
    decode at context 500 in batches 1, 2 and 4. Clock reads (s): 1.0, 1.010, 1.025, 1.030 (an
    output of no batch: it ends a period but makes no row), 2.0.
    batch 1: a prefill 60 (context 0 + 60), b decode 1 (500 + 1): context 561, after_idle
             (first), ms None;
    batch 2: a prefill 40 (60 + 40 = 100), b decode (501 + 1): context 602, 1.010 - 1.0 = 10 ms;
    batch 3: a decode (100 + 1 = 101; before 100 = its prompt: decode), 15 ms;
    batch 4 after the engine ran dry: b decode (502 + 1), after_idle, 2.0 - 1.030 = 970 ms."""
    reads = iter([1.0, 1.010, 1.025, 1.030, 2.0])
    timer = StepTimer(clock=lambda: next(reads))
    cls = type("Sched", (FakeScheduler,), {})
    install(timer, cls)
    s = cls([{"a": 60, "b": 1}, {"a": 40, "b": 1}, {"a": 1}, {"b": 1}])
    s.requests = {"a": NS(num_computed_tokens=0, num_prompt_tokens=100),
                  "b": NS(num_computed_tokens=500, num_prompt_tokens=10)}
    s.left = 2
    outs = [s.schedule() for _ in range(3)]
    for o in outs:
        s.update_from_output(o)
    s.left = 0
    s.update_from_output(NS(num_scheduled_tokens={}))  # a batch of nothing: no row
    s.left = 1
    last = s.schedule()
    s.update_from_output(last)
    got = [(r["prefill"], r["decode"], r["context"], r["requests"], r["ms"], r["after_idle"])
           for r in timer.rows]
    assert got[0] == (60, 1, 561, 2, None, True)
    assert got[1][:4] == (40, 1, 602, 2) and abs(got[1][4] - 10) < 1e-6 and not got[1][5]
    assert got[2][:4] == (0, 1, 101, 1) and abs(got[2][4] - 15) < 1e-6 and not got[2][5]
    assert got[3][:4] == (0, 1, 503, 1) and abs(got[3][4] - 970) < 1e-6 and got[3][5] is True
    assert [r["phase"] for r in timer.rows] == ["start"] * 4
    assert [r["admits"] for r in timer.rows] == [2, 0, 0, 0]  # a and b first in batch 1
    assert [(r["launch_ms"], r["modes"]) for r in timer.rows] == [(None, [])] * 4  # unwrapped


class FakeGraphs:
    """A stand-in for Model Runner V2's CudaGraphManager: the mode it is told to give."""

    mode = "FULL"

    def dispatch(self, num_reqs, num_tokens, uniform_token_count, num_active_loras):
        return NS(cg_mode=NS(name=self.mode))


class FakeExecutor:
    """A stand-in for vLLM's UniProcExecutor: hands a batch over (its forward dispatched on the
    runner's CUDA graphs), then samples it."""

    graphs = None

    def execute_model(self, scheduler_output, non_block=False):
        if self.graphs is not None:
            self.graphs.dispatch(1, 8, None, 0)
        return "future"

    def sample_tokens(self, grammar_output, non_block=False):
        return "sampled"


def test_a_batchs_launch_is_the_executors_two_calls():
    """Clock reads (s): schedule nothing; execute_model of batch 1 from 1.000 to 1.030, its
    sample_tokens 1.030 to 1.032 (launch 30 + 2 = 32 ms), batch 2's from 1.040 to 1.041 and
    1.041 to 1.0415 (1.5 ms); the outputs at 1.050 and 1.060 (periods: None, 10 ms).  The
    runner dispatches batch 1 eagerly (NONE), batch 2 on a FULL graph."""
    from hisparse_model.engine.step_timer import install_dispatch, install_launch

    reads = iter([1.000, 1.030, 1.030, 1.032, 1.040, 1.041, 1.041, 1.0415, 1.050, 1.060])
    timer = StepTimer(clock=lambda: next(reads))
    cls = type("Sched", (FakeScheduler,), {})
    ex = type("Executor", (FakeExecutor,), {})
    graphs = type("Graphs", (FakeGraphs,), {})
    install(timer, cls)
    install_launch(timer, ex)
    install_dispatch(timer, graphs)
    s, e = cls([{"a": 8}, {"a": 1}]), ex()
    e.graphs = graphs()
    s.requests = {"a": NS(num_computed_tokens=0, num_prompt_tokens=8)}
    s.left = 1
    outs = []
    for mode in ("NONE", "FULL"):
        e.graphs.mode = mode
        out = s.schedule()
        assert e.execute_model(out, non_block=True) == "future"
        assert e.sample_tokens(None, non_block=True) == "sampled"
        outs.append(out)
    for out in outs:
        s.update_from_output(out)
    assert [(r["launch_ms"], r["ms"], r["modes"]) for r in timer.rows] == [
        (32.0, None, ["NONE"]), (1.5, 10.0, ["FULL"])]



SERVER = '''
import sys
from types import SimpleNamespace as NS
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.executor.uniproc_executor import UniProcExecutor
s = Scheduler([{"a": 8}, {"a": 1}, {"a": 1}],
              {"a": NS(num_computed_tokens=0, num_prompt_tokens=8)})
e = UniProcExecutor()
for _ in range(3):
    out = s.schedule()
    e.execute_model(out, non_block=True)
    e.sample_tokens(None, non_block=True)
    s.update_from_output(out)
'''
FAKE_GRAPHS = """
from types import SimpleNamespace as NS


class CudaGraphManager:
    def dispatch(self, num_reqs, num_tokens, uniform_token_count, num_active_loras):
        return NS(cg_mode=NS(name="NONE" if num_tokens > 4 else "FULL"))
"""
FAKE_EXECUTOR = """
from vllm.v1.worker.gpu.cudagraph_utils import CudaGraphManager


class UniProcExecutor:
    def execute_model(self, scheduler_output, non_block=False):
        tokens = sum(scheduler_output.num_scheduled_tokens.values())
        CudaGraphManager().dispatch(1, tokens, None, 0)
        return None

    def sample_tokens(self, grammar_output, non_block=False):
        return None
"""


def _fake_vllm(tmp_path) -> str:
    """A stand-in vLLM package of the three modules the timer wraps; its folder."""
    pkg = tmp_path / "fake" / "vllm" / "v1" / "core" / "sched"
    pkg.mkdir(parents=True)
    for d in [pkg, *pkg.parents][:5]:
        (d / "__init__.py").write_text("")
    (pkg / "scheduler.py").write_text(FAKE_SCHEDULER)
    executor = tmp_path / "fake" / "vllm" / "v1" / "executor"
    executor.mkdir()
    (executor / "__init__.py").write_text("")
    (executor / "uniproc_executor.py").write_text(FAKE_EXECUTOR)
    gpu = tmp_path / "fake" / "vllm" / "v1" / "worker" / "gpu"
    gpu.mkdir(parents=True)
    for d in (gpu, gpu.parent):
        (d / "__init__.py").write_text("")
    (gpu / "cudagraph_utils.py").write_text(FAKE_GRAPHS)
    return str(tmp_path / "fake")


IN_PROCESS = """
import json
from hisparse_model.engine.step_timer import StepTimer, install_in_process
timer = StepTimer()
install_in_process(timer)
""" + SERVER + """
print(json.dumps(timer.rows))
"""


def test_the_calibration_sweep_times_launches_and_notes_modes_in_its_own_process(tmp_path):
    """The calibration sweep runs the engine core in its own process
    (engine/calibrate.py): ``install_in_process`` wraps the scheduler, the one-GPU executor
    and the CUDA-graph manager there, so its rows carry each batch's launch and modes too: an
    8-token prompt (eager: NONE), then two decodes (contexts 9 and 10, FULL)."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([_fake_vllm(tmp_path), str(root)])}
    got = subprocess.run([sys.executable, "-c", IN_PROCESS], env=env, capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    rows = json.loads(got.stdout)
    assert [(r["prefill"], r["decode"], r["context"], r["modes"]) for r in rows] == [
        (8, 0, 8, ["NONE"]), (0, 1, 9, ["FULL"]), (0, 1, 10, ["FULL"])]
    assert all(r["launch_ms"] is not None and r["launch_ms"] >= 0 for r in rows)


def test_a_served_engine_core_times_its_batches_through_sitecustomize(tmp_path):
    """A process started as serve_run starts the server (the stack_dump folder first on
    PYTHONPATH, HISPARSE_STEP_TIMES set) that imports vLLM's scheduler, one-GPU executor and
    CUDA-graph modules (here a stand-in package) writes one row per batch to
    steps-<pid>.jsonl, with its launch and modes: an 8-token prompt, then two decodes
    (contexts 8 + 1 = 9 and 9 + 1 = 10)."""
    import json
    import os
    import pathlib
    import subprocess
    import sys

    from hisparse_model.engine.serve_process import STACK_DUMP_DIR, stack_dump_env
    from hisparse_model.engine.step_timer import timed_rows

    root = pathlib.Path(__file__).parent.parent
    env = stack_dump_env({**os.environ, "HISPARSE_STEP_TIMES": str(tmp_path / "steps"),
                          "PYTHONPATH": os.pathsep.join([_fake_vllm(tmp_path), str(root)])})
    assert env["PYTHONPATH"].startswith(STACK_DUMP_DIR)
    got = subprocess.run([sys.executable, "-c", SERVER], env=env, capture_output=True,
                         text=True, timeout=60)
    assert got.returncode == 0 and "step timer not installed" not in got.stderr, got.stderr
    (name,) = os.listdir(tmp_path / "steps")
    assert name == "steps-%d.jsonl" % int(name[6:-6])
    rows = [json.loads(line) for line in (tmp_path / "steps" / name).open()]
    assert [(r["prefill"], r["decode"], r["context"], r["phase"]) for r in rows] == [
        (8, 0, 8, "served"), (0, 1, 9, "served"), (0, 1, 10, "served")]
    assert rows[0]["after_idle"] and rows[0]["ms"] is None and rows[1]["ms"] >= 0
    assert all(r["launch_ms"] is not None and r["launch_ms"] >= 0 for r in rows)  # wrapped
    assert [r["modes"] for r in rows] == [["NONE"], ["FULL"], ["FULL"]]  # 8 tokens, then 1
    assert timed_rows(str(tmp_path / "steps")) == 3


def test_what_the_timer_wraps_is_in_every_modelled_vllm(vllm_sources):
    """The classes and methods the served engine's wrappers replace exist, by these names and
    modules, in each vLLM the project models (read from its sources: a rename in a later vLLM
    would leave a run silently untimed)."""
    import ast

    from hisparse_model.engine.step_timer import EXECUTOR_MODULE, GRAPHS_MODULE, SCHEDULER_MODULE
    from hisparse_model.model.versions import COVERED

    wrapped = {SCHEDULER_MODULE: ("Scheduler", {"schedule", "update_from_output"}),
               EXECUTOR_MODULE: ("UniProcExecutor", {"execute_model", "sample_tokens"}),
               GRAPHS_MODULE: ("CudaGraphManager", {"dispatch"})}
    for version in COVERED:
        for module, (cls, methods) in wrapped.items():
            src = vllm_sources / version / (module.replace(".", "/") + ".py")
            tree = ast.parse(src.read_text())
            found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
            assert found, (version, module, cls)
            defined = {n.name for n in found[0].body if isinstance(n, ast.FunctionDef)}
            assert methods <= defined, (version, module, cls, methods - defined)
    # and a run's provenance names every one of them (run_time_patches)
    from hisparse_model.engine.step_timer import PATCHES

    for cls, methods in wrapped.values():
        assert cls in PATCHES and all(m in PATCHES for m in methods), (cls, PATCHES)
