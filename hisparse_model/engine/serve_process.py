"""The ``vllm serve`` process of a served replay: start it, wait for it, dump its stacks, stop it.

Standard library and the live runner's process helpers; vLLM runs in the child (``python -m vllm.entrypoints.cli.main serve``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from http.client import HTTPException
from importlib import metadata

from .processes import reap_group


def http(url: str, body: dict | None = None, headers=None, timeout: float = 600.0):
    """``(status, text)`` of one request; status 0 when nothing answered."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={
        **({"Content-Type": "application/json"} if data else {}), **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (OSError, ValueError, HTTPException) as exc:  # a cut answer too
        return 0, f"{type(exc).__name__}: {exc}"


def versions() -> dict:
    """vLLM's and torch's versions and the GPU's name, read without importing torch (a CUDA
    context in this process would take GPU memory the server's profiling counts)."""
    out = {}
    for name in ("vllm", "torch"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        gpu = ""
    out["gpu"] = gpu.splitlines()[0] if gpu else None
    return out


def host() -> dict:
    """Which machine a run was made on, so that runs can be told to share one: its name, this
    boot's id (Linux: /proc/sys/kernel/random/boot_id), its CPU model and count, and each GPU's
    UUID (nvidia-smi); a field that cannot be read is None."""
    import platform

    def read(path: str, pick=lambda text: text.strip()):
        try:
            with open(path) as f:
                return pick(f.read()) or None
        except OSError:
            return None

    def cpu_model(text: str):
        return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                     if line.startswith("model name")), None)

    try:
        got = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        uuids = [u for u in got.stdout.split() if u.startswith("GPU-")] if got.returncode == 0 \
            else []  # a failing nvidia-smi prints its complaint on stdout
    except (OSError, subprocess.SubprocessError):
        uuids = []
    return {"name": platform.node() or None,
            "boot_id": read("/proc/sys/kernel/random/boot_id"),
            "cpu": read("/proc/cpuinfo", cpu_model), "cpus": os.cpu_count(),
            "gpu_uuids": uuids or None}


def start_server(argv: list[str], log_path: str, env: dict) -> subprocess.Popen:
    log = open(log_path, "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM the server (vLLM shuts its engine down, dumping a step it was in), then empty
    its process group as the live runner does (:func:`.processes.reap_group`), so the next
    run's engine finds the GPU's memory free."""
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            pass
    reap_group(server)
    server.wait()


STACK_DUMP_DIR = os.path.join(os.path.dirname(__file__), "stack_dump")


def stack_dump_env(env: dict) -> dict:
    """``env`` with :data:`STACK_DUMP_DIR` first on PYTHONPATH: each of the server's Python
    processes then prints its threads' stacks on SIGUSR2 and goes on (its sitecustomize)."""
    path = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": STACK_DUMP_DIR + (os.pathsep + path if path else "")}


def server_pids(server: subprocess.Popen) -> list[int]:
    """The server's processes: the engine core first (where a hung step waits), then the
    rest of its session, the server itself last."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if int(fields[3]) == server.pid and int(entry) != server.pid:  # session id
                pids.append((b"EngineCore" not in cmd, int(entry)))
    return [pid for _, pid in sorted(pids)] + [server.pid]


def dump_stacks(server: subprocess.Popen, gap: float = 1.0) -> None:
    """Make every process of the server print its threads' Python stacks into the log and go
    on (SIGUSR2, registered by :func:`stack_dump_env`'s sitecustomize), one process every
    ``gap`` seconds so that the dumps do not interleave."""
    for pid in server_pids(server):
        if not catches(pid, signal.SIGUSR2):  # its default action would kill it (a compiler
            continue                          # the engine waits on, a non-Python helper)
        try:
            os.kill(pid, signal.SIGUSR2)
        except OSError:
            pass
        time.sleep(gap)


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its ``SigCgt`` mask in
    /proc/PID/status); False when it is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(line.split()[1] for line in f if line.startswith("SigCgt:"))
    except (OSError, StopIteration, IndexError):
        return False
    return bool(int(mask, 16) >> (sig - 1) & 1)


def wait_healthy(base: str, server: subprocess.Popen, timeout: float, http) -> float | None:
    """Seconds until ``GET /health`` answered 200, or None (timeout, or the server died)."""
    t = time.monotonic()
    while time.monotonic() - t < timeout and server.poll() is None:
        if http(f"{base}/health", timeout=2)[0] == 200:
            return time.monotonic() - t
        time.sleep(1.0)
    return None
