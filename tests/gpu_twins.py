"""Every test marked ``gpu`` -> its CPU twin in CI, the twin that shows the check can fail,
and the shared check (``tests/live_checks.py``) all three call.

A GPU test runs only where a GPU is; its twin plays a committed real recording back
(``HISPARSE_LIVE_REPLAY``, :mod:`hisparse_model.engine.replay`) and runs the same check, so
the check cannot rot unseen.  ``tests/test_gpu_twins.py`` reads the test files (``ast``)
and fails if a ``gpu`` test is missing here, or if a twin does not exist, is itself
``gpu``-marked, or does not call the check (the failing twin: inside
``pytest.raises(AssertionError)``).  Adding a GPU test means adding its row.
"""

from __future__ import annotations

import ast
from typing import NamedTuple


class Twin(NamedTuple):
    passes: str  # "file::test": the check passes on a played-back committed recording
    fails: str  # "file::test": the check raises AssertionError on an altered copy
    check: str  # the tests/live_checks.py function all three call


_NB = "tests/test_notebook_live_replay.py::"
_LIVE = "tests/test_live_replay.py::"

GPU_TWINS: dict[str, Twin] = {
    "tests/test_notebook_live_gpu.py::test_notebook_4_live_run_shows_the_models_prediction": Twin(
        _NB + "test_notebook_4_replayed_run_shows_the_models_prediction",
        _NB + "test_a_recording_that_disagrees_with_the_model_fails_notebook_4s_checks",
        "check_notebook_4"),
    "tests/test_notebook_live_gpu.py::test_notebook_5_live_run_shows_the_models_schedule": Twin(
        _NB + "test_notebook_5_replayed_run_shows_the_models_schedule",
        _NB + "test_a_recording_that_disagrees_with_the_model_fails_notebook_5s_checks",
        "check_notebook_5"),
    "tests/test_live_gpu.py::test_live_matches_model": Twin(
        _LIVE + "test_replayed_sample_passes_the_gpu_tests_check",
        _LIVE + "test_an_altered_recording_fails_the_gpu_tests_check",
        "check_live_recording"),
    "tests/test_live_gpu_two.py::test_two_gpu_run_matches_model": Twin(
        _LIVE + "test_the_hand_made_dp_recording_passes_the_two_gpu_tests_checks",
        _LIVE + "test_an_altered_dp_recording_fails_the_two_gpu_tests_checks",
        "check_two_gpu_recording"),
}


def _is_gpu_mark(node: ast.AST) -> bool:
    """``pytest.mark.gpu`` (or a list / tuple holding it)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(map(_is_gpu_mark, node.elts))
    return isinstance(node, ast.Attribute) and node.attr == "gpu" and ast.unparse(node) == \
        "pytest.mark.gpu"


def _module_is_gpu(tree: ast.Module) -> bool:
    return any(isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "pytestmark"
                                                 for t in s.targets) and _is_gpu_mark(s.value)
               for s in tree.body)


def tests_of(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """name -> definition of every module-level test function."""
    return {s.name: s for s in tree.body
            if isinstance(s, ast.FunctionDef) and s.name.startswith("test")}


def gpu_tests(trees: dict[str, ast.Module]) -> set[str]:
    """``file::test`` of every test marked gpu (by the module's pytestmark or a decorator)."""
    return {f"{path}::{name}" for path, tree in trees.items()
            for name, fn in tests_of(tree).items()
            if _module_is_gpu(tree) or any(map(_is_gpu_mark, fn.decorator_list))}


def _calls(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == name
               for n in ast.walk(node))


def _raises_around(fn: ast.FunctionDef, name: str) -> bool:
    """``with pytest.raises(AssertionError...)`` around a call of ``name`` in ``fn``."""
    return any(isinstance(n, ast.With) and any(ast.unparse(i.context_expr).startswith(
        "pytest.raises(AssertionError") for i in n.items) and _calls(n, name)
        for n in ast.walk(fn))


def problems(trees: dict[str, ast.Module], twins: dict[str, Twin]) -> list[str]:
    """Every way ``twins`` fails to pair the gpu tests of ``trees`` (path -> parsed test file)
    with CPU twins that call their check; empty when every gpu test has its twins."""
    gpu = gpu_tests(trees)
    out = [f"{t}: marked gpu, no CPU twin in tests/gpu_twins.py" for t in sorted(gpu - set(twins))]
    out += [f"{t}: listed in tests/gpu_twins.py, no such gpu test" for t in sorted(set(twins) - gpu)]

    def find(node_id: str):
        path, _, name = node_id.partition("::")
        return trees.get(path) and tests_of(trees[path]).get(name)

    for test, twin in sorted(twins.items()):
        if test in gpu:
            fn = find(test)
            if not _calls(fn, twin.check):
                out.append(f"{test}: does not call {twin.check}")
        for kind, node_id in (("passes", twin.passes), ("fails", twin.fails)):
            fn = find(node_id)
            if not fn:
                out.append(f"{test}: its twin {node_id} does not exist")
            elif node_id in gpu:
                out.append(f"{test}: its twin {node_id} is itself marked gpu")
            elif kind == "passes" and not _calls(fn, twin.check):
                out.append(f"{test}: its twin {node_id} does not call {twin.check}")
            elif kind == "fails" and not _raises_around(fn, twin.check):
                out.append(f"{test}: its twin {node_id} does not call {twin.check} inside "
                           "pytest.raises(AssertionError)")
    return out
