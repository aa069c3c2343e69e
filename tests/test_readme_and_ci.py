"""CI runs the README's set-up-and-test commands verbatim (.ci/run); the tests the README names exist."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def test_ci_runs_the_readme_commands_in_order():
    """Every line of the README's first bash block is a line of .ci/run, in the same order, under set -e."""
    block = re.search(r"## Set up and test.*?```bash\n(.*?)```", _read("README.md"), re.S)
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert commands[0].startswith("pip install -e") and len(commands) >= 2
    ci = _read(".ci/run").splitlines()
    assert "set -euo pipefail" in ci
    at = [ci.index(c) for c in commands]  # ValueError: a README command CI does not run
    assert at == sorted(at)
    # `a && b` under set -e does not stop on a failing `a`: each command is a line of its own
    assert not any("&&" in c for c in commands)


def test_every_test_the_readme_names_exists():
    """Each ``tests/<file>.py::<test>`` in the README is a test function of that file."""
    named = set(re.findall(r"tests/(test_\w+\.py)::(test_\w+)", _read("README.md")))
    assert len(named) >= 20
    missing = [f"{f}::{t}" for f, t in sorted(named)
               if not re.search(rf"^def {t}\(", _read(os.path.join("tests", f)), re.M)]
    assert not missing, f"the README names tests that do not exist: {missing}"


def test_run_tests_runs_the_suite_measured_then_both_checks():
    """scripts/run_tests.py: the whole suite under coverage, then the coverage and mutation
    checks; a selection of tests runs measured and stops there."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "run_tests", os.path.join(ROOT, "scripts", "run_tests.py"))
    run_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_tests)
    full = [cmd[1:] for cmd in run_tests.steps([])]
    assert full == [["-m", "coverage", "run", "-m", "pytest"],
                    [os.path.join("scripts", "coverage_check.py")],
                    [os.path.join("scripts", "mutation_check.py")]]
    assert [cmd[1:] for cmd in run_tests.steps(["-k", "cli"])] == [
        ["-m", "coverage", "run", "-m", "pytest", "-k", "cli"]]
