"""The caller's side of ``crosscheck/server.py``: one server per vLLM version, many calls.

    servers = Servers(vllm_root, log_dir)          # starts nothing yet
    pending = servers.submit("0.31.0", "hisparse_model.crosscheck.startup_driver:run", knobs)
    ...                                            # the call runs meanwhile
    out = pending.result(timeout=600)              # the driver's JSON answer
    out = servers.call("0.32.0", "hisparse_model.crosscheck.vllm_driver:run", knobs)
    servers.close()

A version's server starts at its first call and serves every later one: vLLM's code is
imported once per version for all of them.  Calls to one version run one after
another in submission order; calls to different versions run at the same time.  A
call that fails inside the driver raises :class:`DriverError` with the driver's
traceback and the end of its log; a call that outlives its timeout stops that server
(the next call starts a new one) and raises :class:`DriverError`.

The servers run unmeasured under ``coverage run`` (its variables are not passed on):
they run vLLM's code and the drivers of ``crosscheck/``, which the coverage check does
not hold to its bar, and tracing them cost a third more CPU than the calls themselves.

Standard library only: this runs in the caller's Python, where vLLM is not installed.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import select
import signal
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 600  # vLLM's import, on a loaded 2-core machine
# the server's path is its own; coverage's variables would measure it (see above)
UNPASSED = {"PYTHONPATH", "COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"}


class DriverError(RuntimeError):
    """A driver call failed: its traceback, or why no answer came."""


def _tail(path: pathlib.Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


class Pending:
    """A submitted call; :meth:`result` waits for it."""

    def __init__(self, server: "Server", ident: int, out: pathlib.Path, log: pathlib.Path,
                 call: str):
        self.server, self.ident, self.out, self.log, self.call = server, ident, out, log, call
        self.seconds: float | None = None
        self._t0 = time.perf_counter()
        self._value = None

    def result(self, timeout: float = 900):
        if self._value is None:
            rc = self.server._wait(self.ident, timeout, self.call)
            self.seconds = time.perf_counter() - self._t0
            try:
                value = json.loads(self.out.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise DriverError(f"{self.call} on vLLM {self.server.version} wrote no answer "
                                  f"(rc={rc}, {exc}):\n{_tail(self.log)}") from None
            if rc != 0:
                raise DriverError(f"{self.call} on vLLM {self.server.version} failed "
                                  f"(rc={rc}):\n{value.get('error', '')[-4000:]}\n"
                                  f"log:\n{_tail(self.log, 2000)}")
            self._value = value
        return self._value


class Server:
    """One ``crosscheck.server`` process over ``<root>/<version>``."""

    def __init__(self, version: str, root: pathlib.Path, work: pathlib.Path,
                 extra_path: tuple = ()):
        self.version, self.work = version, work
        self.work.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in UNPASSED}
        env["PYTHONPATH"] = os.pathsep.join([str(root / version), str(REPO),
                                             *map(str, extra_path)])
        self.stderr_path = work / "server.log"
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hisparse_model.crosscheck.server"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env,
                text=True, start_new_session=True)
        self.ready: dict | None = None
        self.answers: dict[int, int] = {}
        self._buf = b""

    def _line(self, deadline: float, what: str) -> dict:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.stop()
                raise DriverError(f"vLLM {self.version}: no answer to {what} in time; the "
                                  f"server was stopped:\n{_tail(self.stderr_path)}")
            if select.select([fd], [], [], min(left, 5.0))[0]:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    raise DriverError(f"vLLM {self.version}: the server ended (rc="
                                      f"{self.proc.poll()}) before answering {what}:\n"
                                      f"{_tail(self.stderr_path)}")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> dict:
        if self.ready is None:
            self.ready = self._line(time.monotonic() + timeout, "its start")
        return self.ready

    def submit(self, ident: int, call: str, payload, env: dict | None = None) -> Pending:
        self.wait_ready()
        base = self.work / f"call{ident}"
        inp, out, log = (base.with_suffix(s) for s in (".in.json", ".out.json", ".log"))
        inp.write_text(json.dumps(payload))
        self.proc.stdin.write(json.dumps({"id": ident, "call": call, "payload_file": str(inp),
                                          "out": str(out), "log": str(log),
                                          "env": env or {}}) + "\n")
        self.proc.stdin.flush()
        return Pending(self, ident, out, log, call)

    def _wait(self, ident: int, timeout: float, call: str) -> int:
        deadline = time.monotonic() + timeout
        while ident not in self.answers:
            answer = self._line(deadline, call)
            self.answers[answer["id"]] = answer["rc"]
        return self.answers[ident]

    def end_input(self) -> None:
        """Tell the server no call follows (it ends once the current one has)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.end_input()
            try:
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc.stdout.close()


class Servers:
    """Lazily started servers, one per vLLM version under ``root`` (``.vllm``)."""

    def __init__(self, root: pathlib.Path, work: pathlib.Path, extra_path: tuple = ()):
        self.root, self.work, self.extra_path = pathlib.Path(root), pathlib.Path(work), extra_path
        self._servers: dict[str, Server] = {}
        self._ids = itertools.count()
        self.starts: dict[str, int] = {}  # version -> servers started (1 unless one timed out)

    def server(self, version: str) -> Server:
        srv = self._servers.get(version)
        if srv is None or srv.proc.poll() is not None:
            self.starts[version] = self.starts.get(version, 0) + 1
            srv = Server(version, self.root, self.work / f"{version}-{self.starts[version]}",
                         self.extra_path)
            self._servers[version] = srv
        return srv

    def start(self, *versions: str) -> None:
        """Start these versions' servers now (they import side by side)."""
        for version in versions:
            self.server(version)

    def submit(self, version: str, call: str, payload, env: dict | None = None) -> Pending:
        """Send a call (``env``: variables set, or unset by None, for this call only)."""
        return self.server(version).submit(next(self._ids), call, payload, env)

    def call(self, version: str, call: str, payload, timeout: float = 900,
             env: dict | None = None):
        return self.submit(version, call, payload, env).result(timeout)

    def close(self) -> None:
        """End every server: all are told at once (end of input), then each is awaited."""
        for srv in self._servers.values():
            srv.end_input()
        for srv in self._servers.values():
            srv.stop()
        self._servers.clear()
