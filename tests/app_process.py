"""``hisparse app`` (or any command) started as a user starts it, in a process group of its own,
for the tests that signal it or attack its server; and the processes it leaves, read by psutil.

Everything it started is stopped when the test ends, whatever the test found: first as a user
stops it (Ctrl-C, the app stopping its Voila, whose measured code then writes its coverage:
``PageSocket`` runs only there), then SIGKILL to whatever is left, so no Voila is left serving
after a failed test.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil

ROOT = pathlib.Path(__file__).resolve().parents[1]
START_S = 90  # Voila's start on a loaded machine: seconds at most
PAGE_S = 60  # one page load (its kernel starts and runs the page's cell)
STOP_S = 30  # the app's own stop on Ctrl-C (SIGTERM to Voila, SIGKILL after its wait)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def default_signals() -> None:
    """In the child, before exec: SIGINT, SIGTERM and SIGHUP at their default disposition,
    whatever the test run was started from (``nohup`` ignores SIGHUP; a background shell
    SIGINT), so the command sees each signal as a user's would."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie waiting for init to reap it is not)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(procs: list[psutil.Process], limit_s: float) -> list[psutil.Process]:
    """Wait up to ``limit_s`` for every one of ``procs`` to end; those still running."""
    deadline = time.monotonic() + limit_s
    while (left := alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def left_folders(tmpdir: pathlib.Path) -> list[str]:
    """The app's folders (``hisparse-app-*``) and Voila's (``voila_*``) under ``tmpdir``."""
    return sorted(str(p) for p in tmpdir.rglob("*")
                  if p.is_dir() and re.match(r"hisparse-app-|voila_", p.name))


def kill_all(proc: subprocess.Popen, procs: list[psutil.Process]) -> None:
    """SIGKILL to ``proc``'s group and to every process in ``procs`` (the test's own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for p in alive(procs):
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


class App:
    """A started ``hisparse app``: its process, port, log, temporary folder and descendants."""

    def __init__(self, tmp_path: pathlib.Path, *flags: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmpdir = tmp_path / "tmp"  # TMPDIR: the app's folders go here, not /tmp
        self.tmpdir.mkdir()
        self.log = tmp_path / "app.log"
        env = dict(os.environ, TMPDIR=str(self.tmpdir))
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hisparse_model", "app", "--port", str(self.port),
                 "--no-browser", *flags], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                env=env, start_new_session=True, preexec_fn=default_signals)
        self.seen: list[psutil.Process] = []  # every descendant ever seen, to kill at the end
        deadline = time.monotonic() + START_S
        while "serving the HiSparse dashboards" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            assert time.monotonic() < deadline, self.log.read_text()[-2000:]
            time.sleep(0.2)

    def descendants(self) -> list[psutil.Process]:
        """The app's processes below it now (the janitor, Voila, Voila's kernels)."""
        found = psutil.Process(self.proc.pid).children(recursive=True)
        self.seen += [p for p in found if p not in self.seen]
        return found

    def voila(self) -> psutil.Process:
        return next(p for p in self.descendants() if "voila" in p.cmdline()[1:3])

    def page(self) -> str:
        """``GET /``: the page (its kernel started), within :data:`PAGE_S`."""
        with urllib.request.urlopen(self.url + "/", timeout=PAGE_S) as r:
            assert r.status == 200
            return r.read().decode()

    def kernel_of(self, page: str) -> str:
        return re.search(r'"kernelId": *"([0-9a-f-]+)"', page).group(1)

    def close(self) -> None:
        """Ctrl-C to the app (it stops Voila as a user's Ctrl-C does), then SIGKILL to all left."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, psutil.NoSuchProcess):
                self.descendants()
                self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=STOP_S)
        kill_all(self.proc, self.seen)
