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
    """Each ``tests/<file>.py::<test>`` in the README or a docs/ page is a test function of
    that file."""
    pages = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(
        os.path.join(ROOT, "docs")) if f.endswith(".md"))
    named = {m for page in pages
             for m in re.findall(r"tests/(test_\w+\.py)::(test_\w+)", _read(page))}
    assert len(named) >= 20
    missing = [f"{f}::{t}" for f, t in sorted(named)
               if not re.search(rf"^def {t}\(", _read(os.path.join("tests", f)), re.M)]
    assert not missing, f"the README names tests that do not exist: {missing}"


def _run_tests():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "run_tests", os.path.join(ROOT, "scripts", "run_tests.py"))
    run_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_tests)
    return run_tests


def test_run_tests_runs_the_suite_measured_then_every_check():
    """scripts/run_tests.py: the parallel tier and the tests that run alone under coverage,
    then the coverage, mutation and light-path checks; --quick is the model, CLI and views
    unmeasured (no cross-check, no browser); a selection runs measured and stops there."""
    run_tests = _run_tests()
    xdist = ["-n", "auto", "--dist", "loadgroup"]
    junit = "--junitxml=test-artifacts/junit-{}.xml".format
    measured = ["-m", "coverage", "run", "-m", "pytest"]
    assert [cmd[1:] for cmd in run_tests.steps([])] == [
        [*measured, *xdist, "-m", "not gpu and not alone", junit("parallel")],
        [*measured, "-m", "alone", junit("alone")],
        [os.path.join("scripts", "coverage_check.py")],
        [os.path.join("scripts", "mutation_check.py"), "--passed-in",
         "test-artifacts/junit-parallel.xml", "test-artifacts/junit-alone.xml"],
        [os.path.join("scripts", "check_light_path.py")]]
    assert [cmd[1:] for cmd in run_tests.steps(["--quick"])] == [
        ["-m", "pytest", *xdist, "-m", "not gpu and not browser and not vllm_cpu",
         junit("quick")]]
    assert [cmd[1:] for cmd in run_tests.steps(["-k", "cli"])] == [
        [*measured, *xdist, "-k", "cli", junit("selection")]]


def test_run_tests_reports_the_slowest_tests(tmp_path):
    """The 10 slowest tests of the run's JUnit files, setup and teardown included, slowest
    first: 12 cases of 0.5 .. 6.0 s in two files -> the 10 from 6.0 s down to 1.5 s."""
    run_tests = _run_tests()
    paths = []
    for i, cases in enumerate([range(1, 7), range(7, 13)]):
        body = "".join(f'<testcase classname="tests.test_f{i}" name="test_{c}" '
                       f'time="{c / 2}"/>' for c in cases)
        path = tmp_path / f"junit-{i}.xml"
        path.write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')
        paths.append(str(path))
    got = run_tests.slowest(paths)
    assert [t for t, _ in got] == [c / 2 for c in range(12, 2, -1)]
    assert got[0] == (6.0, "tests/test_f1.py::test_12") and len(got) == 10


def test_cross_checks_share_one_worker_under_xdist(tmp_path):
    """Under run_tests.py's ``-n 2 --dist loadgroup`` every test tagged the way conftest tags
    the CPU cross-checks runs on one worker (so vLLM's code starts once per version), the
    others spread: 6 tagged + 6 untagged tests, the 6 tagged on exactly one worker.
    (pytest 9.2 with pytest-xdist 3.8 drops the groups silently: pyproject pins pytest.)"""
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text(
        "import os, pytest\n"
        "def pytest_itemcollected(item):\n"  # the hook tests/conftest.py tags with
        "    if item.get_closest_marker('vllm_cpu'):\n"
        "        item.add_marker(pytest.mark.xdist_group('vllm'))\n"
        "@pytest.fixture(autouse=True)\n"
        "def _where(request):\n"
        "    tag = 'vllm' if request.node.get_closest_marker('vllm_cpu') else 'other'\n"
        "    with open(os.path.join(os.path.dirname(__file__), tag + '.log'), 'a') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
    (tmp_path / "test_toy.py").write_text(
        "import pytest, time\n"
        "@pytest.mark.vllm_cpu\n@pytest.mark.parametrize('i', range(6))\n"
        "def test_tagged(i): time.sleep(0.05)\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_free(i): time.sleep(0.05)\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", "--dist", "loadgroup",
                           "-W", "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    tagged = (tmp_path / "vllm.log").read_text().split()
    assert len(tagged) == 6 and len(set(tagged)) == 1, tagged
    assert len((tmp_path / "other.log").read_text().split()) == 6


def test_mutation_check_takes_the_suites_run_only_where_every_row_test_passed(tmp_path):
    """--passed-in: a row's test (a file or a node id) counts as passed unmutated only if it
    ran in the JUnit files and none of its cases failed (an xdist group's @name ignored)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "mutation_check", os.path.join(ROOT, "scripts", "mutation_check.py"))
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_a" name="test_x[1]"/>'
        '<testcase classname="tests.test_a" name="test_y@vllm"/>'
        '<testcase classname="tests.test_b" name="test_z"><failure message="no"/></testcase>'
        '<testcase classname="tests.test_c" name="test_s"><skipped message="s"/></testcase>'
        '</testsuite></testsuites>')
    rows = [  # (the row's tests, '' or what did not pass)
        (["tests/test_a.py"], ""),  # both cases of the file passed
        (["tests/test_a.py::test_x[1]", "tests/test_a.py::test_y"], ""),  # node ids, @vllm off
        (["tests/test_a.py::test_x"], ""),  # a parametrized test by its name
        (["tests/test_b.py"], "tests/test_b.py did not pass there"),  # failed
        (["tests/test_c.py"], "tests/test_c.py did not pass there"),  # only skipped
        (["tests/test_d.py"], "tests/test_d.py did not run there"),  # absent
    ]
    for tests, why in rows:
        assert mc._passed_in(tests, [str(junit)]) == why, tests



def test_every_mutation_rows_text_occurs_exactly_once():
    """A mutation row whose text a refactor moved or doubled fails here, in the quick tier,
    not after the full suite: each row's old text occurs exactly once in its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "mutation_check", os.path.join(ROOT, "scripts", "mutation_check.py"))
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    counts = {row.name: open(os.path.join(ROOT, row.path)).read().count(row.old)
              for row in mc.MUTATIONS}
    assert {name: n for name, n in counts.items() if n != 1} == {}

# (Chromium there?, CI?, root?, apt-get?, apt-get's exit) -> (status, installs run, line said)
PROVISION_ROWS = [
    (True, False, True, True, 0, 0, [], None),  # in place: nothing to do
    (False, True, True, True, 0, 0, [], None),  # CI=true: .ci/run installs it; a miss fails the tests
    (False, False, True, True, 0, 0, [["apt-get", "update", "-qq"],
                                      ["apt-get", "install", "-y", "-qq", "chromium"]],
     "is missing: installing Debian's chromium (apt-get install -y chromium)"),
    (False, False, True, True, 100, 2, [["apt-get", "update", "-qq"]],
     "`apt-get install -y chromium` failed"),  # apt-get update fails: the install is not tried
    (False, False, False, True, 0, 2, [], "run `sudo apt-get install -y chromium`"),  # not root
    (False, False, True, False, 0, 2, [], "run `apt-get install -y chromium`"),  # no apt-get
]


def test_provision_installs_chromium_or_names_the_command():
    """The full check installs a missing Chromium as root with apt-get, else says the one
    command to run and exits 2 before any tier; under CI=true it installs nothing."""
    run_tests = _run_tests()
    for there, ci, root, apt, apt_rc, status, calls, line in PROVISION_ROWS:
        installed, said, ran = [there], [], []

        def call(cmd, **kw):
            ran.append(cmd)
            if cmd[:2] == ["apt-get", "install"] and not apt_rc:
                installed[0] = True
            return apt_rc

        got = run_tests.provision(
            env={"CI": "true"} if ci else {}, exists=lambda p: installed[0], is_root=root,
            which=lambda name: "/usr/bin/apt-get" if apt else None, call=call, say=said.append)
        assert (got, ran) == (status, calls), (there, ci, root, apt, apt_rc)
        # one line, or two where the install was tried and failed; the last names the command
        assert len(said) == (0 if not line else 2 if calls and status else 1), said
        assert not line or line in said[-1], said


def test_an_empty_tier_is_not_a_failure():
    """pytest's 5 (no test selected) passes a tier (the browser module skips itself where
    Chromium is missing) but not a selection the user typed; any other status is kept."""
    run_tests = _run_tests()
    alone = run_tests.steps([])[1]
    selection = run_tests.steps(["-k", "nothing_matches"])[0]
    rows = [  # (command, pytest's status) -> counted status
        (alone, 5, 0), (alone, 1, 1), (alone, 0, 0),
        (selection, 5, 5),
        (run_tests.steps([])[2], 5, 5),  # not pytest (the coverage check): kept
    ]
    for cmd, status, want in rows:
        assert run_tests.tier_status(cmd, status, say=lambda line: None) == want, (cmd, status)
