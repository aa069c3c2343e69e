"""scripts/coverage_check.py names, for a module under the bar, each function's missed lines
and the test files expected to reach them.

Invariant: a failing gate's report points at a function and the tests that name it, so a
number that moved between runs says where to look.
"""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = '''def a():
    x = 1
    return x


class B:
    def c(self):
        return 2
y = 3
'''


def _check():
    spec = importlib.util.spec_from_file_location(
        "coverage_check", os.path.join(ROOT, "scripts", "coverage_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missed_lines_grouped_by_their_innermost_function():
    """Lines 2-3 are a's, 8 is B.c's (inside B), 9 is the module's."""
    check = _check()
    assert check.enclosing(SOURCE, [2, 3, 8, 9]) == {"a": [2, 3], "c": [8], "<module>": [9]}
    # (lines) -> the ranges printed
    for lines, text in [([24, 25, 26, 95], "24-26, 95"), ([7], "7"), ([1, 3, 4], "1, 3-4")]:
        assert check._ranges(lines) == text


def test_a_failing_gate_names_the_tests_expected_to_reach_the_lines():
    """risk_chart's two notebook-7 functions (the lines issue 42's failed run missed) point at
    the direct tests that call them."""
    import ast
    path = "hisparse_model/views/risk_chart.py"
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read())
    # each function's lines after its docstring, as a run the gate would miss
    body = {n.name: (n.body[1].lineno, n.end_lineno) for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name in ("example_traffic_path", "risk_view")}
    (a0, a1), (b0, b1) = body["example_traffic_path"], body["risk_view"]
    said = []
    _check().explain(path, [*range(a0, a1 + 1), *range(b0, b1 + 1)], say=said.append)
    assert len(said) == 2
    assert said[0].startswith("    example_traffic_path: lines ")
    assert "not run; expected from: " in said[0]
    assert "test_notebook_calls.py" in said[0] and "test_notebook_calls.py" in said[1]
    assert said[1].startswith("    risk_view: lines ")
