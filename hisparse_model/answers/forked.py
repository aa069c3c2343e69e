"""A function mapped over items in forked worker processes that stop at once on any exit.

``simulate --traffic --jobs N`` serves its seeds this way.  concurrent.futures' executor
waits, on an interrupt, for the calls its workers are running (a seed of ten hours of
traffic: seconds to minutes), and ``multiprocessing.Pool.terminate`` can hang on the locks
of the queues its workers share.  Here each worker has a pipe of its own: the parent sends
it an item, the worker sends back the result, and the parent is the only reader of each
pipe, so a killed worker holds no lock that anyone waits on.  A worker ignores SIGINT (the
terminal sends Ctrl-C to every process of the command): the parent alone decides, and on
any way out but the answer (an error, Ctrl-C, SIGTERM or SIGHUP turned into an exception by
:mod:`hisparse_model.exits`) it kills every worker and reaps it before it returns.  After the
answer the workers are told to stop and exit normally (so that a measured run keeps their
coverage data).

A parent that dies without running any of that (SIGKILL, a crash) takes its workers with it:
each worker asks Linux for SIGKILL when its parent dies (:func:`die_with_parent`,
``prctl(PR_SET_PDEATHSIG)``), so none is left computing and holding the caller's pipes.  A
worker takes SIGTERM and SIGHUP by their default (it dies), whatever handler the parent had.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from multiprocessing.connection import wait

STOP = None  # what the parent sends a worker when no item is left
PR_SET_PDEATHSIG = 1  # linux/prctl.h: the signal this process gets when its parent dies


def _prctl():
    """libc's ``prctl``, or None where there is none (not Linux).  Looked up in the parent,
    before any fork: a child must not load libraries between fork and exec."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return None


PRCTL = _prctl()


def die_with_parent(parent: int, sig: int = signal.SIGKILL) -> None:
    """In a child: ``sig`` when the parent (pid ``parent``, the process that forked it) dies,
    by any signal or none; if it has died already (before this call), ``sig`` now.  Safe
    between fork and exec (``Popen(preexec_fn=...)``): it calls only ``prctl``, looked up
    before the fork, and ``getppid``/``kill``."""
    if PRCTL is not None:
        PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:  # the parent died between the fork and the prctl
        os.kill(os.getpid(), sig)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity: a container's or ``taskset``'s
    share, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity call on this platform
        return os.cpu_count() or 1


def workers_for(jobs: int | None) -> tuple[int, str | None]:
    """The workers ``--jobs jobs`` gets here (default: one per usable core; never more than the
    cores, as each worker computes all the time), and a note when fewer than asked."""
    cores = usable_cores()
    if jobs is None:
        return cores, None
    if jobs <= cores:
        return jobs, None
    return cores, (f"--jobs {jobs}: {cores} CPU core{'s' * (cores != 1)} here, so {cores} "
                   f"seed{'s are' if cores != 1 else ' is'} served at once (more processes "
                   "than cores only share them)")


def map_forked(fn, items, jobs: int) -> list:
    """``[fn(item) for item in items]``, computed by ``jobs`` forked workers, each taking the
    next item when it is done with one; a worker's exception is raised here."""
    items = list(items)
    context = multiprocessing.get_context("fork")
    workers, results = [], [None] * len(items)
    answered = False
    parent = os.getpid()
    try:
        for _ in range(min(jobs, len(items))):
            mine, theirs = context.Pipe()
            proc = context.Process(target=_work, args=(fn, theirs, parent),
                                   daemon=True)
            proc.start()
            theirs.close()
            workers.append((proc, mine))
        todo = iter(enumerate(items))
        busy = {}  # pipe -> its worker, for the workers holding an item
        for proc, pipe in workers:
            pipe.send(next(todo))
            busy[pipe] = proc
        while busy:
            for pipe in wait(list(busy)):
                try:
                    ok, index, value = pipe.recv()
                except EOFError:
                    proc = busy[pipe]
                    proc.join()
                    raise RuntimeError(f"a worker process ended without an answer "
                                       f"(exit status {proc.exitcode})") from None
                if not ok:
                    raise value
                results[index] = value
                item = next(todo, STOP)
                pipe.send(item)
                if item is STOP:
                    del busy[pipe]
        answered = True
        return results
    finally:
        for proc, _ in workers:
            if not answered:
                proc.kill()
        for proc, pipe in workers:
            proc.join()
            pipe.close()


def _work(fn, pipe, parent: int) -> None:
    """A worker: items from ``pipe`` until :data:`STOP`, each answered on ``pipe``; killed
    when ``parent`` dies."""
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # not the parent's handler: they end it
        signal.signal(sig, signal.SIG_DFL)
    while (item := pipe.recv()) is not STOP:
        index, value = item
        try:
            answer = (True, index, fn(value))
        except Exception as exc:  # noqa: BLE001 -- raised again in the parent
            answer = (False, index, exc)
        pipe.send(answer)
