"""Each engine batch's wall time and composition, measured inside the engine (the clock's
calibration, ``engine/calibrate.py``).

Two run-time wrappers on vLLM's own scheduler (no vLLM file is edited), installed in a process
that runs the engine core in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``):

* after ``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py:562 `def schedule`): what the
  batch computes, read from the ``SchedulerOutput`` and the scheduler's requests. The
  scheduler has already advanced each request's ``num_computed_tokens`` by its scheduled tokens
  (vllm/v1/core/sched/scheduler.py:1583 `def _update_after_schedule`), so a request computed
  ``num_computed_tokens - n`` tokens before this batch, and the batch is a prompt chunk for it
  while that is below ``num_prompt_tokens``;
* at the entry of ``Scheduler.update_from_output`` (vllm/v1/core/sched/scheduler.py:1967
  `def update_from_output`): the batch's output is back. The time since the previous batch's
  output came back is this batch's period: with two batches in flight
  (vllm/v1/engine/core.py:670 `def step_with_batch_queue`) the engine hands back one batch per
  period, the scheduling of the next hidden behind the GPU's work, which is the cost the
  model's clock puts on a batch (``schedule/clock.py``). A batch after the engine ran out of
  requests is marked ``after_idle`` (its period holds the idle time): a fit leaves it out.

A third wrapper, on the one-GPU executor's ``execute_model`` and ``sample_tokens``
(vllm/v1/executor/uniproc_executor.py:119 `def execute_model`, :134 `def sample_tokens`),
times what the engine core spends handing each batch over: that executor runs the model
runner there and then, in the engine core's thread
(vllm/v1/executor/uniproc_executor.py:108-109 `run_method(self.driver_worker`), so this is
the batch's launch, which the clock charges to the period before its output
(``schedule/clock.py``; measured there from the periods, here directly).

A fourth, on Model Runner V2's ``CudaGraphManager.dispatch``
(vllm/v1/worker/gpu/cudagraph_utils.py:499 `def dispatch`), notes how each batch ran: the
mode of every descriptor dispatched while the executor handed it over (the target model's
forward first), which the model's classification from the counts (``answers/clock_fit.py``)
can then be checked against.

Every row: ``{"phase", "prefill", "decode", "context", "requests", "admits", "ms",
"after_idle", "t", "launch_ms", "modes"}`` (``admits``: requests scheduled for the first time;
``t``: the wall clock, seconds since the epoch, when the output came back; ``launch_ms``: the
time in the executor's two calls for this batch, None where that executor was not wrapped;
``modes``: the CUDA-graph modes dispatched for it, FULL, PIECEWISE or NONE, in order).

In a served replay (``serve_run.py --time-steps``) the engine core runs in its own process:
:func:`time_steps_to`, called by the server's ``sitecustomize`` in every one of its Python
processes, wraps the scheduler in whichever process imports it (the engine core) and appends
each row to ``steps-<pid>.jsonl`` in a folder as it comes (a server killed at the end keeps
every row written).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import time

SCHEDULER_MODULE = "vllm.v1.core.sched.scheduler"  # where vLLM's Scheduler class lives
EXECUTOR_MODULE = "vllm.v1.executor.uniproc_executor"  # and its one-GPU executor
GRAPHS_MODULE = "vllm.v1.worker.gpu.cudagraph_utils"  # and Model Runner V2's CUDA graphs
# what the wrappers change, in a run's provenance (run_time_patches)
PATCHES = ("Scheduler.schedule and Scheduler.update_from_output wrapped to time each batch, "
           "UniProcExecutor.execute_model and sample_tokens to time its launch, "
           "CudaGraphManager.dispatch to note its modes (engine/step_timer.py)")


class StepTimer:
    """Collects one row per batch whose output came back (module docstring)."""

    def __init__(self, clock=time.perf_counter, sink=None) -> None:
        self.clock = clock
        self.sink = sink  # a text file each row is appended to as a JSON line, or None
        self.rows: list[dict] = []
        self.phase = "start"
        self._pending: dict[int, dict] = {}  # id(SchedulerOutput) -> composition
        self._last: float | None = None  # when the previous output came back
        self._idle = True  # the engine had no request after the previous output
        self._seen: set = set()  # requests some batch scheduled (admits: the others)
        self._handed: dict | None = None  # the row of the batch last handed to the executor

    def scheduled(self, scheduler, output) -> None:
        """After ``schedule``: the batch's composition, kept until its output is back."""
        tokens = getattr(output, "num_scheduled_tokens", None) or {}
        prefill = decode = context = admits = 0
        for rid, n in tokens.items():
            if rid not in self._seen:
                self._seen.add(rid)
                admits += 1
            req = scheduler.requests[rid]
            before = req.num_computed_tokens - n
            if before < req.num_prompt_tokens:
                prefill += n
            else:
                decode += n
            context += before + n
        if tokens:
            self._pending[id(output)] = {"phase": self.phase, "prefill": prefill,
                                         "decode": decode, "context": context,
                                         "requests": len(tokens), "admits": admits,
                                         "launch_ms": None, "modes": []}

    def handing(self, output) -> None:
        """The executor starts handing over batch ``output``: what it dispatches is this
        batch's."""
        self._handed = self._pending.get(id(output))

    def dispatched(self, mode: str) -> None:
        """A CUDA-graph descriptor of ``mode`` was dispatched for the batch being handed over."""
        if self._handed is not None:
            self._handed["modes"].append(mode)

    def launched(self, output, ms: float) -> None:
        """The executor took ``ms`` to hand over batch ``output`` (None: its sampling, added to
        the batch last handed over)."""
        row = self._handed  # (handing: set as the executor took the batch)
        if row is None:
            return
        if output is not None:
            row["launch_ms"] = round(ms, 4)
        elif row["launch_ms"] is not None:
            row["launch_ms"] = round(row["launch_ms"] + ms, 4)

    def returned(self, output) -> None:
        """At the entry of ``update_from_output``: the batch's period ends now."""
        now = self.clock()
        row = self._pending.pop(id(output), None)
        if row is not None:
            last = self._last
            row["ms"] = None if last is None else round((now - last) * 1000, 4)
            row["after_idle"] = self._idle or last is None
            row["t"] = round(time.time(), 6)
            self.rows.append(row)
            if self.sink is not None:
                self.sink.write(json.dumps(row) + "\n")
                self.sink.flush()
        self._last = now

    def after_update(self, scheduler) -> None:
        """After ``update_from_output``: whether the engine is left with no request."""
        self._idle = not scheduler.has_requests()


def install(timer: StepTimer, scheduler_cls) -> None:
    """Wrap ``scheduler_cls.schedule`` and ``update_from_output`` (vLLM's ``Scheduler``, whose
    async subclass inherits both) to feed ``timer``."""
    schedule, update = scheduler_cls.schedule, scheduler_cls.update_from_output

    @functools.wraps(schedule)
    def timed_schedule(self, *a, **k):
        out = schedule(self, *a, **k)
        timer.scheduled(self, out)
        return out

    @functools.wraps(update)
    def timed_update(self, scheduler_output, *a, **k):
        timer.returned(scheduler_output)
        try:
            return update(self, scheduler_output, *a, **k)
        finally:
            timer.after_update(self)

    scheduler_cls.schedule = timed_schedule
    scheduler_cls.update_from_output = timed_update


def install_launch(timer: StepTimer, executor_cls) -> None:
    """Wrap ``executor_cls.execute_model`` and ``sample_tokens`` (vLLM's ``UniProcExecutor``)
    to time each batch's hand-over for ``timer`` (module docstring)."""
    execute, sample = executor_cls.execute_model, executor_cls.sample_tokens

    @functools.wraps(execute)
    def timed_execute(self, scheduler_output, *a, **k):
        timer.handing(scheduler_output)
        start = timer.clock()
        try:
            return execute(self, scheduler_output, *a, **k)
        finally:
            timer.launched(scheduler_output, (timer.clock() - start) * 1000)

    @functools.wraps(sample)
    def timed_sample(self, *a, **k):
        start = timer.clock()
        try:
            return sample(self, *a, **k)
        finally:
            timer.launched(None, (timer.clock() - start) * 1000)

    executor_cls.execute_model = timed_execute
    executor_cls.sample_tokens = timed_sample


def install_dispatch(timer: StepTimer, manager_cls) -> None:
    """Wrap ``manager_cls.dispatch`` (vLLM's ``CudaGraphManager``) to note each descriptor's
    mode for ``timer`` (module docstring)."""
    dispatch = manager_cls.dispatch

    @functools.wraps(dispatch)
    def noted_dispatch(self, *a, **k):
        desc = dispatch(self, *a, **k)
        mode = getattr(desc, "cg_mode", None)
        timer.dispatched(getattr(mode, "name", str(mode)))
        return desc

    manager_cls.dispatch = noted_dispatch


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` once the module named ``name`` has been executed."""

    def __init__(self, name: str, then) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # find the real spec, and only once
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            self.then(module)

        spec.loader.exec_module = exec_module
        return spec


def install_in_process(timer: StepTimer) -> None:
    """All three wrappers, in a process that runs the engine core itself
    (``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the calibration sweep): vLLM's modules imported now."""
    import importlib

    install(timer, importlib.import_module(SCHEDULER_MODULE).Scheduler)
    install_launch(timer, importlib.import_module(EXECUTOR_MODULE).UniProcExecutor)
    install_dispatch(timer, importlib.import_module(GRAPHS_MODULE).CudaGraphManager)


def time_steps_to(folder: str, module: str = SCHEDULER_MODULE,
                  executor: str = EXECUTOR_MODULE, graphs: str = GRAPHS_MODULE) -> None:
    """Wrap ``Scheduler`` when this process imports ``module`` (the served engine core does),
    its rows appended to ``folder/steps-<pid>.jsonl``, ``UniProcExecutor`` when it imports
    ``executor`` and ``CudaGraphManager`` when it imports ``graphs`` (module docstring)."""
    timer = StepTimer()
    timer.phase = "served"

    def then(mod):
        os.makedirs(folder, exist_ok=True)
        timer.sink = open(os.path.join(folder, f"steps-{os.getpid()}.jsonl"), "a")
        install(timer, mod.Scheduler)

    def then_executor(mod):
        install_launch(timer, mod.UniProcExecutor)

    def then_graphs(mod):
        install_dispatch(timer, mod.CudaGraphManager)

    for name, hook in ((module, then), (executor, then_executor), (graphs, then_graphs)):
        if name in sys.modules:
            hook(sys.modules[name])
        else:
            sys.meta_path.insert(0, _AfterImport(name, hook))


def timed_rows(folder: str) -> int:
    """How many batches the ``steps-*.jsonl`` files in ``folder`` hold (0: none)."""
    if not os.path.isdir(folder):
        return 0
    total = 0
    for name in sorted(os.listdir(folder)):
        if name.startswith("steps-") and name.endswith(".jsonl"):
            with open(os.path.join(folder, name)) as f:
                total += sum(1 for line in f if line.strip())
    return total
