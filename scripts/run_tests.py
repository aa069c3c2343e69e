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
Before the first step the full check provisions what its tiers need (:func:`provision`): the
browser tests drive Debian's Chromium at ``/usr/bin/chromium``; where it is missing and
this runs as root with ``apt-get``, it is installed (one line says so); else one line names
the command to run and the exit status is 2 before any tier starts.  Under ``CI=true``
nothing is installed (``.ci/run`` does it) and a missing browser fails the browser tests.
A tier that selects no test (pytest's exit status 5) is reported as such, not as a failure.
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
CHROMIUM = "/usr/bin/chromium"  # the browser tests' executable (tests/test_browser.py)
APT_CHROMIUM = ["apt-get", "install", "-y", "-qq", "chromium"]
EXIT_NOT_PROVISIONED = 2
NO_TESTS = 5  # pytest: nothing was selected
QUICK = "not gpu and not browser and not vllm_cpu"  # --quick: the model, CLI and views
COVERAGE_DIR = "HISPARSE_COVERAGE_DIR"  # [tool.coverage.run] data_file's folder, made absolute


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


def provision(env: dict | None = None, exists=os.path.exists, is_root: bool | None = None,
              which=shutil.which, call=subprocess.call, say=print) -> int:
    """Install what the full check's tiers need and is missing (Chromium, for the browser
    tests): 0 when all is in place, else :data:`EXIT_NOT_PROVISIONED` after one line
    naming the command to run.  Under ``CI=true`` it installs nothing (CI's own set-up
    does, and a missing browser must fail there)."""
    env = os.environ if env is None else env
    if exists(CHROMIUM) or env.get("CI") == "true":
        return 0
    is_root = (os.geteuid() == 0) if is_root is None else is_root
    command = " ".join(APT_CHROMIUM[:3] + ["chromium"])
    if not is_root or not which("apt-get"):
        say(f"run_tests: the browser tests need {CHROMIUM}: run `"
            f"{'' if is_root else 'sudo '}{command}` (Debian's package), then run this again")
        return EXIT_NOT_PROVISIONED
    say(f"run_tests: {CHROMIUM} is missing: installing Debian's chromium ({command})")
    # apt's own chatter (debconf, progress) would be more lines: a failure is said below
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL,
             "env": {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}}
    if call(["apt-get", "update", "-qq"], **quiet) or call(APT_CHROMIUM, **quiet) \
            or not exists(CHROMIUM):
        say(f"run_tests: `{command}` failed: install Chromium at {CHROMIUM}, then run "
            "this again")
        return EXIT_NOT_PROVISIONED
    return 0


def tier_status(cmd: list[str], status: int, say=print) -> int:
    """A step's status as the run counts it: a pytest tier that selected no test (5) passed."""
    if status == NO_TESTS and "pytest" in cmd and not any("junit-selection" in a for a in cmd):
        say(f"run_tests: {_shown(cmd)[:60]}... selected no test: counted as passed")
        return 0
    return status


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


def teller(log):
    """``say(text)``: print a line and, with an open ``log``, append it there too."""

    def say(text: str) -> None:
        print(text, flush=True)
        if log:
            log.write(text + "\n")
            log.flush()

    return say


def repeat_quick(times: int, log_path: str | None) -> int:
    """The quick tier ``times`` times in a row, stopping at the first failure; each run's
    pytest summary (and a failure's report) printed and, with ``log_path``, logged."""
    cmd = steps(["--quick"])[0]
    log = open(log_path, "a") if log_path else None
    say = teller(log)

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
    # every measured process writes its data here, whatever its working folder (pyproject.toml)
    os.environ.setdefault(COVERAGE_DIR, os.path.join(ROOT, ARTIFACTS, "coverage"))
    if not argv and provision():  # the full check: its browser tiers need Chromium
        return EXIT_NOT_PROVISIONED
    status, took = 0, []
    for cmd in steps(argv):
        print("+ " + _shown(cmd), flush=True)
        t0 = time.monotonic()
        status = tier_status(cmd, subprocess.run(cmd, cwd=ROOT).returncode)
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
