"""Write docs/measurements.md from the committed test-run logs, so no measured time is typed by hand.

    python scripts/measurements.py          # rewrite docs/measurements.md
    python scripts/measurements.py --check  # exit 1 if the committed page is not what the logs say

Each log of ``tests/recorded/logs/`` (and its folders) that a test run wrote is one section,
dated by its name (``...-YYYY-MM-DD...``): the lines of it that state a measurement, verbatim
-- pytest's summary (``N passed ... in S s``), ``run_tests: S s in all`` with each step's time
under it, and a series' ``run i/N: exit E  S s`` lines.  Nothing else is read or computed.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
LOGS = ROOT / "tests" / "recorded" / "logs"
PAGE = ROOT / "docs" / "measurements.md"
DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")
MEASURED = re.compile(
    r"^=+ .*\b(passed|failed)\b.* in [\d.]+s.*=+$"  # pytest's summary line
    r"|^\s*run_tests: \d+ s in all"                   # the test command's total
    r"|^\s+\d+ s  \S"                                 # one of its steps, under the total
    r"|^\s*run\s+\d+/\d+: exit \d+"                   # a series' run
    r"|^# (all \d+ runs passed|.*failed.*)$")         # a series' end

HEAD = """# Measurements

Times measured by test runs, each read from a log committed in `tests/recorded/logs/`
(`python scripts/measurements.py` writes this page from them; a test fails when it is not
what the logs say). Nothing here is typed by hand. The machines: 2-core CPU machines like
CI's unless the log says otherwise.
"""


def measured_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if MEASURED.search(line)]


def page() -> str:
    parts = [HEAD]
    dated = []  # (date, the log's path in the repository), a log without a date left out
    for path in LOGS.rglob("*.log"):
        rel = path.relative_to(ROOT).as_posix()
        date = DATE.search(rel)
        if date:
            dated.append((date.group(1), rel))
    for date, rel in sorted(dated):
        lines = measured_lines((ROOT / rel).read_text(errors="replace"))
        if lines:  # else an engine's console log, or a log that measured nothing
            parts.append(f"\n## {date}: `{rel}`\n\n```text\n" + "\n".join(lines) + "\n```\n")
    return "".join(parts)


def main(argv: list[str]) -> int:
    text = page()
    if argv[1:] == ["--check"]:
        if PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)}: not what the logs say; run python "
                  "scripts/measurements.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
