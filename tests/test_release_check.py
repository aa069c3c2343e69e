"""scripts/vllm_release_check.py: each citation of the newest covered version is found in a new
release's file at the same lines, moved, changed or gone; the candidate version takes the
newest covered version's rules.

Invariant: a citation is "same" or "moved" only where the new file holds its text; every
other case is shown to a reader (changed: both texts) and fails the check.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

from hisparse_model.model.versions import COVERED

ROOT = pathlib.Path(__file__).resolve().parents[1]
OLD = "def f():\n    a = 1\n    return a\n\ndef g():\n    return 2\n"
# the new release: g moved down two lines, f's body changed, h.py gone
NEW = "import x\n\ndef f():\n    a = 3\n    return a\n\ndef g():\n    return 2\n"


def _check():
    spec = importlib.util.spec_from_file_location(
        "vllm_release_check", ROOT / "scripts" / "vllm_release_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _tree(root: pathlib.Path, files: dict) -> pathlib.Path:
    for name, text in files.items():
        (root / "vllm" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "vllm" / name).write_text(text)
    return root


def test_each_citation_is_same_moved_changed_or_gone(tmp_path):
    """(cited lines, text) -> status and new lines, in a two-file tree and its successor."""
    rc = _check()
    old = _tree(tmp_path / "old", {"m.py": OLD, "h.py": "x = 1\n"})
    new = _tree(tmp_path / "new", {"m.py": NEW})
    rows = [  # (start, end, name, file) -> (status, new start, new end)
        (5, 5, "def g():", "m.py", "moved", 7, 7),  # old line 5 -> new line 7 (2 added above)
        (1, 3, "return a", "m.py", "moved", 3, 5),  # f's three lines now start at line 3
        (1, 6, "return a", "m.py", "same", 1, 6),  # the new lines 1-6 still hold it
        (2, 2, "a = 1", "m.py", "changed", 0, 0),  # the new file has a = 3
        (1, 1, "x = 1", "h.py", "gone", 0, 0),
    ]
    for start, end, name, path, status, s, e in rows:
        found = rc.locate(rc.Cited("here", path, start, end, name), old, new)
        assert (found.status, found.start, found.end) == (status, s, e), (name, found)
    changed = rc.locate(rc.Cited("here", "m.py", 2, 2, "a = 1"), old, new)
    assert (changed.old_text, changed.new_text) == ("    a = 1", "")  # new line 2 is blank
    report = rc.report("9.9.9", "9.9.8", [changed], None)
    assert "| changed | `here` | `m.py` | 2-2 | — | `a = 1` |" in report
    assert "old:\n```python\n    a = 1\n```\nnew, same lines:\n```python\n\n```" in report


def test_the_newest_versions_citations_are_all_collected():
    """Every VersionRules citation of the newest covered version, and the textual ones."""
    from hisparse_model.model.versions import COVERED, RULES

    cites = _check().citations(COVERED[-1])
    table = [c for c in cites if c.where.startswith("hisparse_model/model/versions.py: ")]
    assert len(table) == len(RULES[COVERED[-1]].cites)
    assert any(c.where.startswith("hisparse_model/schedule/scheduler.py:") for c in cites)


def test_a_candidate_takes_the_newest_rules_and_nothing_else_changes():
    """HISPARSE_EXTRA_VLLM=9.9.9: the model offers 9.9.9 with the newest covered version's
    rules (no citations); a covered version or a non-release is no candidate."""
    code = ("from hisparse_model import VLLM_VERSIONS; from hisparse_model.model.versions import "
            "RULES, COVERED; import dataclasses as d; n = RULES[COVERED[-1]]; c = RULES.get("
            "'9.9.9'); print(VLLM_VERSIONS[-1], c is not None and d.replace(c, key=n.key, "
            "vllm_version=n.vllm_version) == n, c is not None and c.cites == {})")
    newest = COVERED[-1]
    rows = [("9.9.9", "9.9.9 True True"), ("0.31.0", f"{newest} False False"),
            ("latest", f"{newest} False False")]
    for value, printed in rows:
        env = {**os.environ, "HISPARSE_EXTRA_VLLM": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, cwd=ROOT, check=True).stdout.strip()
        assert out == printed, (value, out)


def test_bad_versions_are_one_line_and_exit_2(capsys):
    """Not X.Y.Z, or --from a version the model does not cover: exit 2 before installing."""
    rc = _check()
    assert rc.main(["latest"]) == 2
    assert rc.main(["0.35.0", "--from", "0.30.0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["vllm_release_check: error: 'latest' is not a release (X.Y.Z)",
                   "vllm_release_check: error: --from 0.30.0: the model covers "
                   + ", ".join(COVERED)]


JUNIT = """<?xml version="1.0"?><testsuites><testsuite name="pytest" tests="2">
<testcase classname="tests.test_x" name="test_a[9.9.9]"/>
<testcase classname="tests.test_x" name="test_b[9.9.9]"><failure message="m">def f():
&gt;   assert x
E   AssertionError: vLLM 9.9.9: 3 of 3 knob sets disagree
E     more</failure></testcase></testsuite></testsuites>"""


def test_a_failing_crosscheck_is_named_with_its_first_reason(tmp_path):
    """One line per failing test: its id and the first line pytest gave for the failure."""
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    assert _check().failures(path) == [
        "tests/test_x.py::test_b[9.9.9]: AssertionError: vLLM 9.9.9: 3 of 3 knob sets disagree"]


def test_each_driver_runs_for_every_covered_version_but_its_pending_ones():
    """versions.cross_checked(driver): every covered release, less those whose driver is not
    ported yet (DRIVERS_PENDING, said in the README); nothing pending is left unnamed."""
    from hisparse_model.model.versions import DRIVERS_PENDING, cross_checked

    assert cross_checked() == COVERED  # the scheduler, rejection, config-path and TP drivers
    for driver in ("startup", "dp_sync"):
        assert cross_checked(driver) == tuple(
            v for v in COVERED if driver not in DRIVERS_PENDING.get(v, ()))
    assert set(DRIVERS_PENDING) <= set(COVERED)
    readme = (ROOT / "docs" / "releases.md").read_text()
    for version, drivers in DRIVERS_PENDING.items():
        assert f"`versions.DRIVERS_PENDING`" in readme and version in readme
