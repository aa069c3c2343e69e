"""Per-module coverage of the model after ``coverage run -m pytest``: print it, fail under the bar.

    coverage run -m pytest; python scripts/coverage_check.py   (scripts/run_tests.py runs both)

``coverage run`` (``[tool.coverage.run]`` in pyproject.toml) measures the pytest
process and, through ``patch = ["subprocess"]``, every Python process it starts:
the pytest-xdist workers, the command line, the notebook kernels, the app (the
cross-check servers of vLLM's code are left unmeasured: ``crosscheck/client.py``).  This
script combines their data files, prints the report of the whole package, then
the modules held to the bar -- the model core (``hisparse_model/*.py``) and the
dashboards (``hisparse_model/views/``) -- and exits 1 if one is under
:data:`BAR` percent.  ``engine/`` (the live engine, on a GPU) and ``crosscheck/``
(the drivers of vLLM's code on CPU; what of them the tests' own process runs) are
reported, not held to it.

When a module is under the bar it says, for each function with lines no test reached, the
lines missed and the tests expected to reach them (the test files that name the function),
so a gate that moved between runs shows where to look.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
BAR = 90.0  # percent of statements, per module
HELD_JSON = REPO / "test-artifacts" / "coverage-held.json"  # what each held module reached
NOT_HELD = ("hisparse_model/engine/", "hisparse_model/crosscheck/")


def held(path: str) -> bool:
    """Whether a measured file is held to the bar (the model core and views/)."""
    return path.startswith("hisparse_model/") and not path.startswith(NOT_HELD)


def enclosing(source: str, lines: list[int]) -> dict[str, list[int]]:
    """The missed ``lines`` grouped by the innermost function (or class) holding each;
    ``<module>`` for lines outside any."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            spans.append((node.lineno, node.end_lineno, node.name))
    out: dict[str, list[int]] = {}
    for line in lines:
        holding = [s for s in spans if s[0] <= line <= s[1]]
        name = max(holding)[2] if holding else "<module>"  # the innermost starts last
        out.setdefault(name, []).append(line)
    return out


def expected_tests(name: str, tests_dir: pathlib.Path = REPO / "tests") -> list[str]:
    """The test files that name ``name`` (the tests expected to reach its lines)."""
    pattern = re.compile(rf"\b{re.escape(name)}\b")
    return sorted(p.name for p in tests_dir.glob("test_*.py") if pattern.search(p.read_text()))


def explain(path: str, missing: list[int], say=print) -> None:
    """One line per function of ``path`` with missed lines: the lines, the tests naming it."""
    for name, lines in enclosing((REPO / path).read_text(), missing).items():
        tests = expected_tests(name) if name != "<module>" else []
        say(f"    {name}: lines {_ranges(lines)} not run; expected from: "
            f"{', '.join(tests) or 'no test names it'}")


def _ranges(lines: list[int]) -> str:
    out, start = [], None
    for i, line in enumerate(lines):
        if start is None:
            start = line
        if i + 1 == len(lines) or lines[i + 1] != line + 1:
            out.append(str(start) if start == line else f"{start}-{line}")
            start = None
    return ", ".join(out)


def main() -> int:
    coverage = [sys.executable, "-m", "coverage"]
    # data files of every process, one each: combine them (a re-run finds one file, fine)
    subprocess.run([*coverage, "combine", "-q"], cwd=REPO)
    if subprocess.run([*coverage, "report"], cwd=REPO).returncode != 0:
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "coverage.json"
        subprocess.run([*coverage, "json", "-q", "-o", str(out)], cwd=REPO, check=True)
        files = json.loads(out.read_text())["files"]
    # every module of the model, measured or not (a module no test imports is 0 %)
    paths = sorted(str(p.relative_to(REPO)) for p in (REPO / "hisparse_model").rglob("*.py"))
    short, reached = [], {}
    print(f"\nmodel core and views/, held to {BAR:.0f} %:")
    for path in filter(held, paths):
        summary = files.get(path, {}).get("summary")
        if summary is None:
            pct, what = 0.0, "not measured"
        elif summary["num_statements"] == 0:
            continue  # nothing to run (e.g. an empty __init__)
        else:
            pct = summary["percent_covered"]
            what = f"{summary['covered_lines']}/{summary['num_statements']}"
            reached[path] = [summary["covered_lines"], summary["num_statements"]]
        mark = "" if pct >= BAR else f"   UNDER by {BAR - pct:.1f}"
        print(f"  {path:<45} {pct:6.1f} %  {what}{mark}")
        if pct < BAR:
            short.append(f"{path} {pct:.1f} %")
            explain(path, files.get(path, {}).get("missing_lines", []))
    HELD_JSON.parent.mkdir(exist_ok=True)  # read by scripts/full_check_series.py
    HELD_JSON.write_text(json.dumps(reached, indent=1, sort_keys=True) + "\n")
    if short:
        print(f"under {BAR:.0f} %: " + "; ".join(short), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
