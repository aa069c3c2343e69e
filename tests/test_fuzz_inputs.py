"""Hypothesis fuzz of the two newest inputs: traffic files (``simulate --traffic``) and
edits of a real start-up log (``check --from-log``).

Invariant: whatever the file holds, the command answers (exit 0 or 1) or refuses it in one
line on stderr with exit 2 (bad input); never a traceback, never a second line.
"""

from __future__ import annotations

import json
import pathlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hisparse_model import cli

LOG = pathlib.Path(__file__).resolve().parent / "recorded" / "logs" / "v0.32.0-stock-s2.log"
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

numbers = st.one_of(st.integers(-3, 300_000), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.none(), st.text(max_size=4))
bins = st.lists(st.dictionaries(st.sampled_from(["min", "max", "weight", "x"]), numbers,
                                max_size=4), max_size=3)
lengths = st.one_of(numbers, bins)
descriptions = st.dictionaries(st.sampled_from(["rate_per_s", "prompt_len", "max_tokens",
                                                "output_len", "extra"]), lengths, max_size=4)
lines = st.dictionaries(st.sampled_from(["prompt_len", "output_len", "max_tokens", "id"]),
                        numbers, max_size=3)
traffic_files = st.one_of(
    descriptions.map(json.dumps),
    st.lists(lines, max_size=4).map(lambda ls: "\n".join(map(json.dumps, ls))),
    st.text(max_size=40))


def _one_answer_or_one_refusal(status: int, out: str, err: str, prog: str) -> None:
    assert status in (0, 1, 2), (status, err)
    if status == 2:
        assert err.count("\n") == 1 and err.startswith(f"hisparse {prog}: error: "), err
        assert out == ""
    else:
        assert "Traceback" not in err and out


@SETTINGS
@given(text=traffic_files, rate=st.one_of(st.none(), st.sampled_from(["1", "0", "-2", "1e9",
                                                                       "nan", "3.5"])))
def test_any_traffic_file_is_answered_or_refused_in_one_line(tmp_path, capsys, text, rate):
    path = tmp_path / "traffic.json"
    path.write_text(text)
    argv = ["simulate", "--max-num-seqs", "4", "--traffic", str(path), "--minutes", "0.05",
            "--seeds", "1", "--jobs", "1", *(["--rate", rate] if rate else [])]
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse refuses a flag's value itself: one line, exit 2
        status = exc.code
    out, err = capsys.readouterr()
    _one_answer_or_one_refusal(status, out, err, "simulate")


edits = st.lists(st.tuples(st.sampled_from(["drop", "cut", "dup", "swap", "ansi", "junk"]),
                           st.integers(0, 40), st.integers(0, 400), st.text(max_size=8)),
                 min_size=1, max_size=4)


def _edit(lines: list[str], kind: str, at: int, pos: int, junk: str) -> list[str]:
    if not lines:
        return lines
    i = at % len(lines)
    if kind == "drop":
        return lines[:i] + lines[i + 1:]
    if kind == "cut":
        return lines[:i] + [lines[i][:pos]] + lines[i + 1:]
    if kind == "dup":
        return lines[:i + 1] + [lines[i]] + lines[i + 1:]
    if kind == "swap":
        j = pos % len(lines)
        out = list(lines)
        out[i], out[j] = out[j], out[i]
        return out
    if kind == "ansi":
        return lines[:i] + [lines[i][:pos] + "\x1b[1m" + lines[i][pos:]] + lines[i + 1:]
    return lines[:i] + [lines[i][:pos] + junk + lines[i][pos:]] + lines[i + 1:]


@SETTINGS
@given(edit=edits)
def test_any_edit_of_a_real_log_is_answered_or_refused_in_one_line(tmp_path, capsys, edit):
    lines = LOG.read_text().split("\n")
    for step in edit:
        lines = _edit(lines, *step)
    path = tmp_path / "serve.log"
    path.write_text("\n".join(lines))
    status = cli.main(["check", "--from-log", str(path)])
    out, err = capsys.readouterr()
    _one_answer_or_one_refusal(status, out, err, "check")
