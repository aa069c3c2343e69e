"""The project's test command: every test, measured, then the checks that judge the suite.

    python scripts/run_tests.py            the full check (what CI runs)
    python scripts/run_tests.py --quick    a change in progress: the model, CLI and views
    python scripts/run_tests.py --quick --repeat N [--log FILE]   it N times in a row
    python scripts/run_tests.py ARGS ...   a selection (e.g. -k cli), measured, and stop there

The full check runs these steps, each only if the one before passed:

1. ``coverage run -m pytest -n auto --dist loadgroup -m "not gpu and not alone"``: the
   parallel tier, on every core (pytest-xdist); every CPU cross-check runs on one worker
   (``tests/conftest.py``), which starts vLLM's code once per version for all of them,
   and the real-browser tests that share the machine on one worker too;
2. ``coverage run -m pytest -m alone``: the real-browser tests that time what a user
   waits for, alone on the machine (other work would distort what they measure);
3. ``scripts/coverage_check.py``: the coverage of every module, and a failure when one of
   the model core (``hisparse_model/*.py``) or ``views/`` is under 90 %;
4. ``scripts/mutation_check.py --passed-in <the JUnit files of 1 and 2>``: each named
   small bug in the model must fail a test (the rows' tests passed unmutated in 1);
5. ``scripts/check_light_path.py``: the README's notebooks-only install in a fresh venv,
   every notebook run.

``patch = ["subprocess", ...]`` in pyproject.toml measures the processes the tests start
too (the xdist workers, the command line, notebook kernels, the app; the cross-check
servers and the tests marked ``unmeasured`` are not measured: ``tests/conftest.py``).
``--quick`` is step 1 without coverage, the CPU cross-checks and the browser.  At the end
it prints each step's time and the 10 slowest tests of the run (from each pytest step's
JUnit XML under ``test-artifacts/``), so the next slowdown is seen.  The exit status is the first
failing step's (0: all passed).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = "test-artifacts"
PARALLEL = ["-n", "auto", "--dist", "loadgroup"]  # pytest-xdist, CPU cross-checks grouped
SLOWEST = 10
QUICK = "not gpu and not browser and not vllm_cpu"  # --quick: the model, CLI and views


def _pytest(name: str, args: list[str], measured: bool = True) -> list[str]:
    head = [sys.executable, "-m", "coverage", "run", "-m", "pytest"] if measured else \
        [sys.executable, "-m", "pytest"]
    return [*head, *args, f"--junitxml={ARTIFACTS}/junit-{name}.xml"]


def steps(argv: list[str]) -> list[list[str]]:
    """The commands of ``run_tests.py ARGV``, in order."""
    if argv == ["--quick"]:
        return [_pytest("quick", [*PARALLEL, "-m", QUICK], measured=False)]
    if argv:
        return [_pytest("selection", [*PARALLEL, *argv])]
    return [_pytest("parallel", [*PARALLEL, "-m", "not gpu and not alone"]),
            _pytest("alone", ["-m", "alone"]),
            [sys.executable, os.path.join("scripts", "coverage_check.py")],
            [sys.executable, os.path.join("scripts", "mutation_check.py"), "--passed-in",
             f"{ARTIFACTS}/junit-parallel.xml", f"{ARTIFACTS}/junit-alone.xml"],
            [sys.executable, os.path.join("scripts", "check_light_path.py")]]


def slowest(paths: list[str], n: int = SLOWEST) -> list[tuple[float, str]]:
    """The ``n`` slowest tests of these JUnit XML files (setup, call and teardown)."""
    times = []
    for path in paths:
        for case in ET.parse(path).iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            times.append((float(case.get("time") or 0), name))
    return sorted(times, reverse=True)[:n]


def _shown(cmd: list[str]) -> str:
    return " ".join(cmd[1:] if cmd[0] == sys.executable else cmd)


def repeat_quick(times: int, log_path: str | None) -> int:
    """The quick tier ``times`` times in a row, stopping at the first failure; each run's
    pytest summary (and a failure's report) printed and, with ``log_path``, logged."""
    cmd = steps(["--quick"])[0]
    log = open(log_path, "a") if log_path else None

    def say(text: str) -> None:
        print(text, flush=True)
        if log:
            log.write(text + "\n")
            log.flush()

    say(f"# {times} runs of: {_shown(cmd)}  ({time.strftime('%Y-%m-%d %H:%M:%S')}, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]})")
    try:
        for i in range(1, times + 1):
            t0 = time.monotonic()
            done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            lines = done.stdout.strip().splitlines()
            summary = lines[-1] if lines else f"no output (exit {done.returncode})"
            say(f"run {i:2d}/{times}: exit {done.returncode}  {time.monotonic() - t0:6.1f} s  "
                f"{summary.strip('= ')}")
            if done.returncode:
                failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
                say("\n".join(failed or lines[-40:]) + "\n" + done.stderr[-2000:])
                return done.returncode
        say(f"# all {times} runs passed")
        return 0
    finally:
        if log:
            log.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--quick"] and argv[1:2] == ["--repeat"]:
        # --quick --repeat N [--log FILE]: the steadiness check (CI runs it twice)
        rest = argv[3:]
        return repeat_quick(int(argv[2]), rest[1] if rest[:1] == ["--log"] else None)
    os.makedirs(os.path.join(ROOT, ARTIFACTS), exist_ok=True)
    for old in glob.glob(os.path.join(ROOT, ARTIFACTS, "junit-*.xml")):
        os.remove(old)
    if argv != ["--quick"]:  # a measured run starts from no coverage data
        shutil.rmtree(os.path.join(ROOT, ARTIFACTS, "coverage"), ignore_errors=True)
    status, took = 0, []
    for cmd in steps(argv):
        print("+ " + _shown(cmd), flush=True)
        t0 = time.monotonic()
        status = subprocess.run(cmd, cwd=ROOT).returncode
        took.append((time.monotonic() - t0, cmd))
        if status:
            break
    print(f"\nrun_tests: {sum(t for t, _ in took):.0f} s in all ({os.cpu_count()} CPUs)")
    for t, cmd in took:
        print(f"  {t:6.0f} s  {_shown(cmd)[:100]}")
    junit = sorted(glob.glob(os.path.join(ROOT, ARTIFACTS, "junit-*.xml")))
    if junit:
        print(f"the {SLOWEST} slowest tests:")
        for t, name in slowest(junit):
            print(f"  {t:6.1f} s  {name}")
    return status


if __name__ == "__main__":
    sys.exit(main())
