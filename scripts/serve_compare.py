"""Compare served replays (tests/recorded/serve/<run>/) with the model's estimate for them.

    python scripts/serve_compare.py tests/recorded/serve/<run> [...] [--json]

For each run: the step time its own /metrics reported before the replay ended, the model's
first crash for the replay at that step time (time, requests, kind, error), and what the
server did (hisparse_model/recorded/serve_recordings.py).  Prints a Markdown table (the
README's), or one JSON object per run.  A folder that is no run, or whose files cannot be
read (no run.json, a field missing or out of range, a trace named outside tests/traces/,
/metrics that is not Prometheus text), is one line on stderr and exit status 2.
"""

import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hisparse_model.recorded.serve_recordings import compare, read_run  # noqa: E402


def cell(value, unit: str = "") -> str:
    return "-" if value in (None, {}, ()) else f"{value}{unit}"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own status), no usage
        self.exit(2, f"serve_compare.py: error: {message}\n")


def main(argv=None) -> int:
    p = _Parser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:  # a folder that is no run, or whose files cannot be read: one line, exit 2
        rows = [compare(read_run(r, str(ROOT / "tests" / "traces"))) for r in args.runs]
    except ValueError as exc:
        said = str(exc).splitlines() or [type(exc).__name__]
        print(f"serve_compare.py: error: {said[0]}", file=sys.stderr)
        return 2
    if args.json:
        for row in rows:
            print(json.dumps(row, default=str))
        return 0
    print("| run | measured step | model: crash at | its step | kind | server: error at | "
          "its step | stop, capacity |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        e, o = r["estimate"], r["observed"]
        when = "before the replay" if r["step_ms_before"] is not None else "during the replay"
        crash = cell(None if e["crash_s"] is None else round(e["crash_s"], 2), " s")
        if e["declined"]:  # the model does not answer: its host pool may run short first
            crash = f"declines: the host pool may run short by {e['declined_s']:.1f} s"
        print(f"| {r['run']} | {r['step_ms']} ms ({when}) | {crash} | "
              f"{cell(e['scheduled'])} | {cell(e['kind'])} | {cell(o['crash_s'], ' s')} | "
              f"{cell(o['scheduled'])} | {cell(o['stop_capacity'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
