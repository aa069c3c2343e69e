"""One process lifecycle (issue 61, item 6): every child a command starts dies with it, on any
signal or death, and its temporary folders go with it.

``simulate --traffic --jobs 2``'s forked workers (``hisparse_model/answers/forked.py``) and
``hisparse app``'s Voila, its page's kernel and its janitor (``hisparse_model/app.py``) are
started as a user starts them, signalled, and looked for afterwards (psutil).  Before: SIGTERM
or SIGHUP left both workers computing and holding the caller's pipes; SIGHUP or SIGKILL left
Voila and the kernel serving on the port, and /tmp/hisparse-app-* and /tmp/voila_* behind.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from app_process import ROOT, App, default_signals, kill_all, left_folders, wait_gone

GONE_S = 20  # every child gone within this (a kernel polls its parent once a second)
TRAFFIC = [sys.executable, "-m", "hisparse_model", "simulate", "--max-num-seqs", "1024",
           "--max-num-batched-tokens", "8192", "--max-model-len", "163840",
           "--host-pool-gib", "512", "--traffic", "hisparse_model/data/traffic-example.json",
           "--minutes", "600", "--seeds", "8", "--jobs", "2"]  # minutes of work on 2 workers


@pytest.mark.parametrize("sig, status, said", [
    # SIGTERM (kill): the workers are killed before the command exits, 128 + 15, one line
    (signal.SIGTERM, 143, "hisparse simulate: stopped by SIGTERM; nothing more is written"),
    # SIGHUP (the terminal closed): the same, 128 + 1
    (signal.SIGHUP, 129, "hisparse simulate: stopped by SIGHUP; nothing more is written"),
    # SIGKILL: the command runs nothing; each worker's parent-death signal kills it
    (signal.SIGKILL, -9, ""),
], ids=lambda v: v.name if isinstance(v, signal.Signals) else "")
def test_simulate_traffic_workers_die_with_the_command(sig, status, said):
    """Whatever signal ends ``simulate --traffic --jobs 2``, both forked workers end with it
    and release the caller's pipes (its stdout and stderr reach their end)."""
    proc = subprocess.Popen(TRAFFIC, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, start_new_session=True, preexec_fn=default_signals)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None:  # ready: both workers are serving their seeds
            workers = psutil.Process(proc.pid).children()
            if len(workers) == 2 and all(sum(w.cpu_times()[:2]) > 0.5 for w in workers):
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) == 2
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)  # times out while a worker holds a pipe
        assert proc.returncode == status, err
        assert err.strip() == said and out == ""
        assert wait_gone(workers, GONE_S) == []
    finally:
        kill_all(proc, workers)


@pytest.mark.parametrize("sig, status", [
    (signal.SIGINT, 0),   # Ctrl-C: Voila stopped, its kernels shut down, the folder removed
    (signal.SIGTERM, 0),  # the same
    (signal.SIGHUP, 0),   # was: the app died at once, Voila and the kernel served on
    (signal.SIGKILL, -9),  # was the same; now Voila's parent-death signal and the janitor
], ids=lambda v: v.name if isinstance(v, signal.Signals) else "")
def test_app_children_and_folders_die_with_it(tmp_path, sig, status):
    """Whatever signal ends ``hisparse app`` after a page load, Voila, the page's kernel and the
    janitor end too, the port is free, and no ``hisparse-app-*`` or ``voila_*`` folder is left."""
    app = App(tmp_path)
    try:
        app.page()  # a kernel for the page
        children = app.descendants()
        modules = {p.cmdline()[2] for p in children if p.cmdline()[1:2] == ["-m"]}
        assert {"voila", "ipykernel_launcher"} <= modules, modules  # the server, the kernel
        assert left_folders(app.tmpdir) != []  # they exist while it serves
        app.proc.send_signal(sig)
        assert app.proc.wait(timeout=60) == status, app.log.read_text()[-2000:]
        assert [p.cmdline()[:3] for p in wait_gone(children, GONE_S)] == []
        assert left_folders(app.tmpdir) == []
        with socket.socket() as s:  # nothing listens on the port any more
            assert s.connect_ex(("127.0.0.1", app.port)) != 0
    finally:
        app.close()


def test_a_child_whose_parent_is_gone_before_it_asks_dies_at_once():
    """die_with_parent in a child whose parent already died (the race between fork and
    prctl) kills the child at once rather than leaving it an orphan."""
    code = ("import os, signal, time\n"
            "from hisparse_model.answers.forked import die_with_parent\n"
            "die_with_parent(os.getppid() + 10**6)\n"  # not its parent: as if it had died
            "time.sleep(30)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60)
    assert done.returncode == -signal.SIGKILL


@pytest.mark.parametrize("sig, line", [
    (signal.SIGKILL, "app: the dashboard server (Voila) was killed by SIGKILL; nothing is "
                     "served any more"),  # was: exit 247 and no line
    # Voila takes a SIGTERM cleanly (exit 0), which ended the app with 0 as if all were well
    (signal.SIGTERM, "app: the dashboard server (Voila) stopped; nothing is served any more"),
], ids=lambda v: v.name if isinstance(v, signal.Signals) else "")
def test_a_voila_that_dies_by_itself_is_one_line_and_3(tmp_path, sig, line):
    """Voila ending under the app (not the app stopped) is said in one line, exit 3 (the
    dashboards cannot be served), and the app's folder goes with it."""
    app = App(tmp_path)
    try:
        app.page()
        app.voila().send_signal(sig)
        assert app.proc.wait(timeout=60) == 3, app.log.read_text()[-2000:]
        assert line in app.log.read_text()
        assert left_folders(app.tmpdir) == []
    finally:
        app.close()


@pytest.mark.parametrize("jobs, cores, want, note", [
    (None, 2, 2, None),  # the default: one worker per usable core
    (1, 2, 1, None),  # fewer than the cores: as asked
    (2, 2, 2, None),
    # 1,024 asked on 2 cores: 2 workers (each computes all the time; more only share them)
    (1024, 2, 2, "--jobs 1024: 2 CPU cores here, so 2 seeds are served at once"),
    (3, 1, 1, "--jobs 3: 1 CPU core here, so 1 seed is served at once"),
])
def test_jobs_past_the_cores_fork_one_worker_per_core(monkeypatch, jobs, cores, want, note):
    """--jobs never forks more workers than the cores this process may use (its affinity),
    and says so in one note when it asked for more."""
    from hisparse_model.answers import forked

    monkeypatch.setattr(forked, "usable_cores", lambda: cores)
    got, said = forked.workers_for(jobs)
    assert got == want
    assert (said is None) if note is None else said.startswith(note)


def test_jobs_past_the_cores_is_said_and_answered(tmp_path):
    """simulate --traffic --jobs 1000 answers as --jobs <cores> does, with the note on
    stderr (the answer is the same for any number of workers)."""
    from hisparse_model.answers.forked import usable_cores

    argv = [*TRAFFIC[:TRAFFIC.index("--minutes")], "--minutes", "2", "--seeds", "4", "--json"]
    runs = [subprocess.run([*argv, "--jobs", jobs], capture_output=True, text=True, cwd=ROOT,
                           timeout=300) for jobs in ("1000", str(usable_cores()))]
    assert runs[0].stdout == runs[1].stdout and runs[0].returncode == runs[1].returncode
    assert f"simulate: --jobs 1000: {usable_cores()} CPU core" in runs[0].stderr
    assert "--jobs" not in runs[1].stderr
