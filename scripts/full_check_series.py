"""The full check N times in a row, optionally beside a CPU hog: is the gate steady?

    python scripts/full_check_series.py N [--hog] [--log FILE]

Runs ``python scripts/run_tests.py`` (the full check, what CI runs) ``N`` times, stopping at
the first failure.  ``--hog`` keeps one busy process spinning beside every run (a loop of
arithmetic at normal priority, on a machine of 2 cores: half the machine), the load under
which the coverage gate once failed.  After each run it reads what the coverage check wrote
(``test-artifacts/coverage-held.json``: the lines reached and the statements of every module
held to the bar) and logs the run's exit status, its time, its pytest summaries and the
``views/`` coverage.  The series passes when every run passed **and** every held module's
coverage was the same in every run: a gate that moves between runs of one tree rests on
something other than the tests (a notebook kernel's data lost, a worker's share).

The exit status is the first failing run's, else 1 when the coverage moved, else 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from run_tests import teller  # noqa: E402 - one way to print and log a line
HELD_JSON = os.path.join(ROOT, "test-artifacts", "coverage-held.json")
HOG = "while True: sum(i * i for i in range(10_000))"  # one core, busy, never sleeping


def moved(runs: list[dict[str, list[int]]]) -> dict[str, list]:
    """The modules whose (reached, statements) differ between runs: {path: [each run's]}."""
    paths = sorted(set().union(*runs)) if runs else []
    return {p: [r.get(p) for r in runs] for p in paths
            if len({tuple(r.get(p) or ()) for r in runs}) > 1}


def views_line(reached: dict[str, list[int]]) -> str:
    """One line of the ``views/`` modules' coverage: ``name reached/statements`` each."""
    return "  ".join(f"{p.rsplit('/', 1)[-1][:-3]} {c}/{n}" for p, (c, n) in sorted(reached.items())
                     if "/views/" in p)


def summaries(output: str) -> list[str]:
    """pytest's summary lines (``== N passed ... ==``) and the check's own last lines."""
    keep = []
    for line in output.splitlines():
        s = line.strip()
        if s.startswith("=") and (" passed" in s or " failed" in s or " error" in s):
            keep.append(s.strip("= "))
        elif s.startswith(("run_tests:", "under 90", "FAILED", "ERROR")) or \
                "mutations killed" in s or s.endswith("light path ok"):
            keep.append(s)
    return keep


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: full_check_series.py N [--hog] [--log FILE]", file=sys.stderr)
        return 2
    times, hog = int(argv[0]), "--hog" in argv
    log_path = argv[argv.index("--log") + 1] if "--log" in argv else None
    log = open(log_path, "a") if log_path else None
    say = teller(log)

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()
    say(f"# {times} full checks (python scripts/run_tests.py) of {head}, "
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}, {os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}, {'beside a CPU hog (one busy process)' if hog else 'alone'}")
    hogger = subprocess.Popen([sys.executable, "-c", HOG]) if hog else None
    runs: list[dict[str, list[int]]] = []
    try:
        for i in range(1, times + 1):
            if os.path.exists(HELD_JSON):
                os.remove(HELD_JSON)
            t0 = time.monotonic()
            done = subprocess.run([sys.executable, os.path.join("scripts", "run_tests.py")],
                                  cwd=ROOT, capture_output=True, text=True)
            took = time.monotonic() - t0
            load = os.getloadavg()[1]
            say(f"run {i}/{times}: exit {done.returncode}  {took:6.0f} s  "
                f"(load average over 5 min: {load:.1f})")
            for line in summaries(done.stdout + done.stderr):
                say(f"    {line}")
            if os.path.exists(HELD_JSON):
                with open(HELD_JSON) as f:
                    runs.append(json.load(f))
                say(f"    views/: {views_line(runs[-1])}")
            if done.returncode:
                say(done.stdout[-4000:] + done.stderr[-2000:])
                return done.returncode
        shifted = moved(runs)
        for path, each in shifted.items():
            say(f"# coverage moved: {path}: {each}")
        say(f"# all {times} runs passed; held modules' coverage "
            f"{'MOVED' if shifted else 'the same in every run'}")
        return 1 if shifted else 0
    finally:
        if hogger:
            hogger.kill()
            hogger.wait()
        if log:
            log.close()


if __name__ == "__main__":
    sys.exit(main())
