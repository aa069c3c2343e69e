"""The engine children's processes: the GPU-memory lock, spawning, watching, killing.

The parent side of the lock protocol described in :mod:`.live` (one child per
configuration) and used by :mod:`.dp_live` (one child per DP rank): the shared
lock file (:class:`Lock`, :data:`LOCK_ENV`), the per-child control folder
(:data:`CONTROL_ENV`), the children's environment (:data:`ENGINE_ENV`), and
their process groups, killed with the runner.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time

LOCK_ENV = "HISPARSE_LIVE_LOCK"  # path of the GPU-memory lock shared by all children
CONTROL_ENV = "HISPARSE_LIVE_CONTROL"  # per-child folder for the lock / exit handshake
DEFAULT_LOCK = os.path.join(tempfile.gettempdir(), "hisparse-live-gpu.lock")

# Environment of every engine child.  VLLM_DEEP_GEMM_WARMUP=skip: vLLM's DeepGEMM
# warmup JIT-compiles FP8 GEMM kernels for every M it might meet up to
# max_num_batched_tokens (model_executor/warmup/deep_gemm_warmup.py) and took over
# 440 s cold for max_num_seqs 5 and 7; it calls the GEMM kernels on weight tensors
# only, never a forward through attention, so it cannot reach the HiSparse routing
# (kernel_warmup.py:227-233 / :238-244 / :242-248 in 0.31.0 / 0.32.0 / 0.33.0;
# docs/gpu.md has the citations).
# Kernels then compile on first use, in the eager warmup pass before each capture.
ENGINE_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_DEEP_GEMM_WARMUP": "skip"}

CHILD_ARGV = [sys.executable, "-m", "hisparse_model.engine.child"]


class LiveUnavailable(RuntimeError):
    """No GPU or no vLLM here: the live engine cannot run."""


LOG_TAIL_CHARS = 8000
POLL_S = 0.1


# --------------------------------------------------------------------------
# the GPU-memory lock, parent side
# --------------------------------------------------------------------------


class Lock:
    """One holder's handle on the shared lock file (flock: one per open file description)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None

    def try_acquire(self) -> bool:
        if self.fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        return True

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


RUNNING: set = set()  # engine children alive now (killed with the runner)


def kill_children_on_termination() -> None:
    """On SIGTERM / SIGHUP kill every engine child (own sessions) before exiting 128 + signal."""
    def stop(signum, _frame):
        for proc in list(RUNNING):
            kill_group(proc)
        os._exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # pragma: no cover - already gone
        pass
    proc.wait()


def reap_group(proc: subprocess.Popen, limit_s: float = 30.0) -> None:
    """Kill what an exited child left in its process group (a TP engine's worker processes,
    compile workers) and wait until the group is empty, so their GPU memory is gone too."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(POLL_S)


def spawn_and_watch(argv: list[str], env: dict, log_path: str, control: str, *,
                     timeout: float, lock_path: str, lock_wait_limit: float) -> tuple[str, dict]:
    """Run one child to its end under the lock protocol; return (status, timings)."""
    lock = Lock(lock_path)
    t0 = time.monotonic()
    t_waiting = t_locked = t_exit = None
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        RUNNING.add(proc)
        status = None
        try:
            while True:
                rc = proc.poll()
                if rc is not None:
                    status = f"exit {rc}"
                    break
                now = time.monotonic()
                if t_waiting is None and os.path.exists(os.path.join(control, "waiting")):
                    t_waiting = now
                if t_locked is None and os.path.exists(os.path.join(control, "locked")):
                    t_locked = now
                if os.path.exists(os.path.join(control, "exit-request")):
                    if t_exit is None:
                        t_exit = now
                    if lock.try_acquire() and not os.path.exists(
                            os.path.join(control, "exit-granted")):
                        open(os.path.join(control, "exit-granted"), "w").close()
                if t_exit is not None:
                    deadline = t_exit + lock_wait_limit  # its recording is on disk: let it go
                elif t_locked is not None:
                    deadline = t_locked + timeout  # its own start-up and prompts
                elif t_waiting is not None:
                    deadline = t_waiting + lock_wait_limit  # neighbours' start-ups
                else:
                    deadline = t0 + timeout  # still importing
                if now > deadline:
                    status = f"timeout after {timeout:.0f} s"
                    holds = (os.path.exists(os.path.join(control, "locked"))
                             and not os.path.exists(os.path.join(control, "released")))
                    # Kill under the lock unless the child itself holds it (then nobody
                    # else is profiling); give a neighbour's profiling 60 s to end.
                    t_wait = time.monotonic()
                    while (not holds and not lock.try_acquire()
                           and time.monotonic() - t_wait < 60):
                        time.sleep(POLL_S)
                    kill_group(proc)
                    break
                time.sleep(POLL_S)
            proc.wait()  # reaped: its files, GPU memory included, are released
            reap_group(proc)  # and whatever it started (TP workers) is gone too
        finally:
            if proc.poll() is None:  # pragma: no cover - interrupted
                kill_group(proc)
            RUNNING.discard(proc)
            lock.release()
    timings = {"wall_seconds": round(time.monotonic() - t0, 1)}
    if t_locked is not None:
        timings["lock_wait_seconds"] = round(t_locked - (t_waiting or t_locked), 1)
    return status, timings


def log_tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_CHARS))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def side_path(out: str, suffix: str) -> str:
    """``out`` (a recording's path) with ``.json`` replaced by ``suffix``: its log, its stub."""
    base = out[:-5] if out.endswith(".json") else out
    return base + suffix
