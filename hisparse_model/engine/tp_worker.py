"""The routing log inside each tensor-parallel worker process.

``LLM(tensor_parallel_size=N, worker_extension_cls=WORKER_EXTENSION)``: vLLM's
multiprocessing executor starts N worker processes, and each resolves the
extension class by its qualified name before it builds its worker
(vllm/v1/worker/worker_base.py:289-313 `worker_extension_cls`; the same hook in
0.32.0 and 0.33.0).  Resolving it imports this module in the worker, and the
import installs this project's instrumentation there (:func:`install_in_worker`,
once per process, only when the engine child asked for it through
:data:`.rank_log.STREAM_ENV`): every routing row, engine report and patch is
appended to the worker's own stream (:mod:`.rank_log`), which the engine child
merges into the recording, labelled by rank.

Phases.  Start-up phases are labelled in the worker by :mod:`.instrument`'s own
wrappers.  Serving rows take their label from the scheduler output: the engine
child's scheduler (in the child's process) stamps each ``SchedulerOutput`` with
its current phase (:func:`stamp_scheduler_outputs`; a workload recording
overrides it with ``step:<k>``), the executor pickles it to every worker
(vllm/v1/executor/multiproc_executor.py:340-351 `collective_rpc`) and the
worker's ``execute_model`` runs under that label; ``sample_tokens`` (where the
MTP drafter runs) keeps the last one.

Not a plugin entry point (``vllm.general_plugins``): that needs an installed
distribution's metadata, which the offline GPU bundle (``PYTHONPATH`` only) has not.
"""

from __future__ import annotations

import functools
import os

from . import rank_log
from .llm_args import LL_BF16_ENV

PHASE_ATTR = rank_log.PHASE_ATTR
ROUTING_ENV = "HISPARSE_ROUTING"  # the knob ``routing``, for the workers' instrumentation
PHASE_FILE_ENV = "HISPARSE_PHASE_FILE"  # AsyncLLM: the child's current phase (serve_engine.py)
CHILD_PID_ENV = "HISPARSE_TP_CHILD_PID"  # the engine child itself never installs worker wrappers
_installed: dict = {}


class RankRecorder:
    """Mixed into vLLM's worker class (``worker_extension_cls``): the stream it writes."""

    def hisparse_stream_path(self) -> str | None:
        log = _installed.get("log")
        return getattr(log, "path", None)


def prepare_child(folder: str, routing: str) -> rank_log.MergedRouteLog:
    """In the engine child, before ``LLM(...)``: the environment its workers inherit,
    and the log that reads their streams back."""
    os.makedirs(folder, exist_ok=True)
    os.environ[rank_log.STREAM_ENV] = folder
    os.environ[ROUTING_ENV] = routing
    os.environ[CHILD_PID_ENV] = str(os.getpid())
    return rank_log.MergedRouteLog(folder)


def stamp_scheduler_outputs(log) -> None:
    """In the engine child: label every scheduler output with the child's current phase."""
    _stamp(lambda: log.phase)


def stamp_from_file(path: str) -> None:
    """In an AsyncLLM engine core (serve_engine.py): label every scheduler output with the
    phase the engine child last wrote to ``path``."""

    def phase() -> str | None:
        try:
            with open(path) as f:
                return f.read().strip() or None
        except OSError:
            return None

    _stamp(phase)


def _stamp(phase_now) -> None:
    """Wrap vLLM's ``Scheduler.schedule``: each output carries ``phase_now()`` (if any)."""
    from vllm.v1.core.sched.scheduler import Scheduler

    orig = Scheduler.schedule

    @functools.wraps(orig)
    def schedule(self, *a, **k):
        out = orig(self, *a, **k)
        phase = phase_now()
        if phase:
            setattr(out, PHASE_ATTR, phase)
        return out

    Scheduler.schedule = schedule


def install_in_worker(folder: str, routing: str, narrow_router_warmup: bool) -> rank_log.RouteLog:
    """Install :mod:`.instrument` in this worker process, streaming into ``folder``."""
    from vllm.v1.worker import gpu_worker

    from . import instrument

    log = rank_log.StreamedRouteLog(os.path.join(folder, f"pid-{os.getpid()}.jsonl"))
    instrument.install(log, routing=routing, narrow_router_warmup=narrow_router_warmup)
    worker_cls = gpu_worker.Worker

    orig_init = worker_cls.init_device

    @functools.wraps(orig_init)
    def init_device(self, *a, **k):
        pc = self.parallel_config
        log.write("rank", tp_rank=int(self.rank) % int(pc.tensor_parallel_size),
                  dp_rank=int(getattr(pc, "data_parallel_rank", 0) or 0), pid=os.getpid())
        return orig_init(self, *a, **k)

    last = {"phase": None}
    orig_execute = worker_cls.execute_model

    @functools.wraps(orig_execute)
    def execute_model(self, scheduler_output, *a, **k):
        phase = getattr(scheduler_output, PHASE_ATTR, None)
        if phase is None:
            return orig_execute(self, scheduler_output, *a, **k)
        last["phase"] = phase
        with log.in_phase(phase):
            return orig_execute(self, scheduler_output, *a, **k)

    orig_sample = worker_cls.sample_tokens

    @functools.wraps(orig_sample)
    def sample_tokens(self, *a, **k):
        if last["phase"] is None:
            return orig_sample(self, *a, **k)
        with log.in_phase(last["phase"]):
            return orig_sample(self, *a, **k)

    worker_cls.init_device = init_device
    worker_cls.execute_model = execute_model
    worker_cls.sample_tokens = sample_tokens
    log.sync()
    return log


def _install_from_env() -> None:
    """Called when vLLM imports this module in a worker (see the module docstring)."""
    folder = os.environ.get(rank_log.STREAM_ENV)
    if "log" in _installed or not folder or not os.path.isdir(folder):
        return
    if os.environ.get(CHILD_PID_ENV) == str(os.getpid()):
        return  # the engine child (it imports this module for stamp_scheduler_outputs)
    _installed["log"] = install_in_worker(
        folder, os.environ.get(ROUTING_ENV, "stock"),
        os.environ.get(LL_BF16_ENV, "full") == "narrow")
    phase_file = os.environ.get(PHASE_FILE_ENV)
    if phase_file:  # an AsyncLLM engine core: its scheduler is in this process
        stamp_from_file(phase_file)


_install_from_env()
