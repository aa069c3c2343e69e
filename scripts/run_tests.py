"""The project's test command: the tests, measured, then the coverage and mutation checks.

    python scripts/run_tests.py [PYTEST_ARGS ...]

1. ``coverage run -m pytest [PYTEST_ARGS]``: every test (plain ``pytest`` runs the same
   tests, unmeasured); ``patch = ["subprocess", ...]`` in pyproject.toml measures the
   processes the tests start too (the command line, notebook kernels, the app, the
   cross-check drivers);
2. ``scripts/coverage_check.py``: the coverage of every module, and a failure when one of
   the model core (``hisparse_model/*.py``) or ``views/`` is under 90 %;
3. ``scripts/mutation_check.py``: each named small bug in the model must fail a test.

Each step runs only if the one before passed; the exit status is the first failing
step's (0: all passed).  With PYTEST_ARGS (a selection of the tests) only step 1 runs:
the coverage and mutation checks are about the whole suite.
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def steps(pytest_args: list[str]) -> list[list[str]]:
    measured = [sys.executable, "-m", "coverage", "run", "-m", "pytest", *pytest_args]
    if pytest_args:
        return [measured]
    return [measured,
            [sys.executable, os.path.join("scripts", "coverage_check.py")],
            [sys.executable, os.path.join("scripts", "mutation_check.py")]]


def main(argv: list[str] | None = None) -> int:
    for cmd in steps(sys.argv[1:] if argv is None else argv):
        print("+ " + " ".join(cmd[1:] if cmd[0] == sys.executable else cmd), flush=True)
        status = subprocess.run(cmd, cwd=ROOT).returncode
        if status:
            return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
