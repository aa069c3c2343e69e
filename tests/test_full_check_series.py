"""scripts/full_check_series.py: the full check N times beside a CPU hog, and whether the coverage
of the held modules moved between the runs.

Invariant: a series passes only when every run passed and every held module reached the same
lines out of the same statements in every run; one module that moved is named with each run's
numbers.
"""

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
V = "hisparse_model/views/"


def _series():
    spec = importlib.util.spec_from_file_location(
        "full_check_series", os.path.join(ROOT, "scripts", "full_check_series.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("runs, want", [
    # the same numbers in every run: nothing moved
    ([{V + "a.py": [59, 67]}, {V + "a.py": [59, 67]}], {}),
    # the failing run: risk_chart 59/67 once, 67/67 twice
    ([{V + "risk_chart.py": [67, 67]}, {V + "risk_chart.py": [59, 67]},
      {V + "risk_chart.py": [67, 67]}],
     {V + "risk_chart.py": [[67, 67], [59, 67], [67, 67]]}),
    # a module measured in one run only (None where it is missing) moved too
    ([{V + "a.py": [1, 2]}, {}], {V + "a.py": [[1, 2], None]}),
    # one run: nothing to compare with
    ([{V + "a.py": [1, 2]}], {}),
    ([], {}),
])
def test_moved_names_each_module_whose_numbers_differ(runs, want):
    assert _series().moved(runs) == want


def test_views_line_lists_only_views_modules_in_order():
    reached = {V + "svg.py": [10, 11], "hisparse_model/model/plan.py": [5, 5], V + "charts.py": [3, 4]}
    assert _series().views_line(reached) == "charts 3/4  svg 10/11"


def test_summaries_keep_the_pytest_totals_and_the_checks_last_lines():
    out = "\n".join([
        "........ [100%]",
        "================ 1617 passed, 1 skipped in 789.01s ================",
        "48 of 48 mutations killed in 132 s (2 at a time, 2 CPUs, load average 3.6)",
        " 112.3 s  light path ok",
        "run_tests: 1194 s in all (2 CPUs)",
        "  some other line",
    ])
    assert _series().summaries(out) == [
        "1617 passed, 1 skipped in 789.01s",
        "48 of 48 mutations killed in 132 s (2 at a time, 2 CPUs, load average 3.6)",
        "112.3 s  light path ok",
        "run_tests: 1194 s in all (2 CPUs)",
    ]


@pytest.mark.parametrize("argv", [[], ["0"], ["x"], ["--hog"]])
def test_a_bad_count_is_refused_with_the_usage_and_2(argv, capsys):
    assert _series().main(argv) == 2
    assert capsys.readouterr().err.strip() == "usage: full_check_series.py N [--hog] [--log FILE]"
