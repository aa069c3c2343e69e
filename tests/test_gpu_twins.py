"""Every test marked ``gpu`` has CPU twins in CI that run its check on a played-back recording.

``tests/gpu_twins.py`` lists them; here every ``tests/test_*.py`` is parsed (``ast``,
nothing imported or run) and the list checked against the gpu tests found, and the
checker itself is shown to name each way a list can be wrong.
"""

from __future__ import annotations

import ast
import glob
import os

import pytest

from gpu_twins import GPU_TWINS, Twin, gpu_tests, problems

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _trees() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "tests", "test_*.py"))):
        with open(path) as f:
            out[os.path.relpath(path, ROOT)] = ast.parse(f.read(), path)
    return out


def test_every_gpu_test_has_its_cpu_twins():
    """No gpu test without a twin that passes and a twin that fails on an altered copy, both calling its check."""
    trees = _trees()
    assert len(gpu_tests(trees)) == 4  # notebook 4, notebook 5, one-GPU sample, two-GPU sweep
    assert problems(trees, GPU_TWINS) == []


GPU_FILE = """
import pytest
pytestmark = pytest.mark.gpu
def test_a(): check_x(1)
def test_b(): check_y(1)
"""
TWIN_FILE = """
import pytest
def test_a_twin(): check_x(2)
def test_a_fails():
    with pytest.raises(AssertionError):
        check_x(3)
def test_b_twin(): check_x(2)
def test_b_fails(): check_y(3)
@pytest.mark.gpu
def test_c(): pass
"""
OK_A = Twin("t/twin.py::test_a_twin", "t/twin.py::test_a_fails", "check_x")


@pytest.mark.parametrize("twins, named", [
    # test_b and the decorated test_c listed nowhere
    ({"t/gpu.py::test_a": OK_A},
     ["t/gpu.py::test_b: marked gpu, no CPU twin", "t/twin.py::test_c: marked gpu, no CPU twin"]),
    # a twin that calls another check, a failing twin without pytest.raises, a twin
    # that does not exist, a twin that is gpu itself, a row for a test that is not gpu
    ({"t/gpu.py::test_a": OK_A,
      "t/gpu.py::test_b": Twin("t/twin.py::test_b_twin", "t/twin.py::test_b_fails", "check_y"),
      "t/twin.py::test_c": Twin("t/twin.py::test_nope", "t/twin.py::test_c", "check_x"),
      "t/twin.py::test_a_twin": OK_A},
     ["t/gpu.py::test_b: its twin t/twin.py::test_b_twin does not call check_y",
      "t/gpu.py::test_b: its twin t/twin.py::test_b_fails does not call check_y inside",
      "t/twin.py::test_c: does not call check_x",
      "t/twin.py::test_c: its twin t/twin.py::test_nope does not exist",
      "t/twin.py::test_c: its twin t/twin.py::test_c is itself marked gpu",
      "t/twin.py::test_a_twin: listed in tests/gpu_twins.py, no such gpu test"]),
])
def test_the_checker_names_every_missing_or_wrong_twin(twins, named):
    """Each way the list can be wrong is named, one line each."""
    trees = {"t/gpu.py": ast.parse(GPU_FILE), "t/twin.py": ast.parse(TWIN_FILE)}
    found = problems(trees, twins)
    assert len(found) == len(named), found
    for want in named:
        assert any(line.startswith(want) for line in found), (want, found)
