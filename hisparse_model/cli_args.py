"""The command line's arguments: one parser for every command, the knob flags generated.

Each knob's flag comes from its :class:`~hisparse_model.model.knobs.Knobs` declaration (its
default and meaning in ``--help``) and vLLM's own flag names (``vllm_flags.KNOB_FLAGS``);
:func:`knobs_from_args` reads them back into knobs.  A parse error exits with
:data:`EXIT_BAD_INPUT` in one line, as every bad input does (``cli.py``'s exit statuses).
"""

from __future__ import annotations

import argparse
import math
import os

from .boundary.numbers import Range, ascii_int, parse
from .model.knobs import VLLM_VERSIONS, Knobs, knob_specs, picked_backend
from .inputs.vllm_flags import KNOB_FLAGS

EXIT_OK, EXIT_CRASH, EXIT_BAD_INPUT, EXIT_UNAVAILABLE, EXIT_NOT_THIS_BUG = 0, 1, 2, 3, 4
# Knobs whose flag is not the knob's own name, per command.
_OWN_FLAGS = {"predict": {"vllm_version": "--vllm"},
              "live": {"vllm_version": None, "routing": "--vllm-mode"}}
# vLLM's own short flags (vllm serve -tp / -dp / -pp / -dcp), added next to the long ones:
# the one table of vLLM's flags per knob (vllm_flags.KNOB_FLAGS, which `check` reads).
_SHORT_FLAGS = {row.knob: flag for row in KNOB_FLAGS for flag in row.flags
                if not flag.startswith("--")}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own convention)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _typed(name: str, kind: type):
    """A knob's flag: the number it says (finite: the knob's declaration checks its range,
    naming the knob), or its text."""
    def convert(text: str):
        if kind not in (int, float):
            return text
        try:
            return parse(text, Range(kind, -math.inf, math.inf), name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def ranged(rng: Range):
    """An option's number, checked against its declared :class:`Range` as it is parsed
    (argparse names the option: "argument --minutes: must be > 0 and <= 10080 ...")."""
    def convert(text: str):
        try:
            return parse(text, rng)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = rng.kind.__name__  # argparse names the type in its own errors
    return convert


def option_ranges() -> dict[str, Range]:
    """Every numeric option's range, declared once (the knobs' flags are ranged by the knobs'
    own declarations); ``build_parser`` types each option with it."""
    from .answers.traffic_risk import MAX_MINUTES, MAX_SEEDS
    from .inputs.step_time import METRICS_RANGE
    from .inputs.traffic_file import MAX_RATE_PER_S, MAX_SPEED
    from .inputs.trace_stream import MAX_TRACE_S

    return {
        "--minutes": Range(float, 0, MAX_MINUTES, "a week of traffic per seed", low_open=True),
        "--rate": Range(float, 0, MAX_RATE_PER_S, "250 new requests in every 25-ms engine "
                        "step: no server sees more", low_open=True),
        "--speed": Range(float, 0, MAX_SPEED, "a day of a trace replayed in under a "
                         "second", low_open=True),
        "--from": Range(float, 0, MAX_TRACE_S, "a year of trace time"),
        "--to": Range(float, 0, MAX_TRACE_S, "a year of trace time", low_open=True),
        "--seeds": Range(int, 1, MAX_SEEDS, "the share of seeds crashed is then known to a "
                         "tenth of a percent"),
        "--seed": Range(int, 0, 2**32 - 1, "a 32-bit seed"),
        "--step-ms": Range(float, 0.01, 60_000, "10 us to a minute per engine step"),
        "--metrics-seconds": METRICS_RANGE,
        "--jobs": Range(int, 1, 1024, "processes on one machine"),
        # 0 .. num_speculative_tokens, which cli._check_accepted says with K
        "--accepted": Range(int, -math.inf, math.inf),
        "--timeout": Range(float, 0, 86_400, "a day per engine child", low_open=True),
        "--live-jobs": Range(int, 1, 64, "engines on one GPU"),
    }


def _int_list(text: str) -> list[int]:
    try:
        values = [ascii_int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"prompt_lens must be comma-separated integers, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"prompt_lens must be integers >= 1, got {text!r}")
    return values


# the knob whose default is vLLM's pick from another knob (the KV-cache dtype)
PICKED = "attention_backend"
PICKED_HELP = ("default: vLLM's pick on an H200, FLASH_ATTN_MLA_SPARSE, or FLASHMLA_SPARSE for "
               "a quantized --kv-cache-dtype")


def add_knob_args(p: argparse.ArgumentParser, command: str) -> None:
    """One flag per knob, from the declaration (name, default, help, choices)."""
    own = _OWN_FLAGS.get(command, {})
    for spec in knob_specs():
        flag = own.get(spec.name, "--" + spec.name.replace("_", "-"))
        if flag is None:
            continue
        default = None if spec.cli_required or spec.name == PICKED else spec.default
        shown = ("required" if spec.cli_required else PICKED_HELP if spec.name == PICKED
                 else f"default: {spec.default}")
        help_text = f"{spec.help} ({shown})"
        if spec.kind is bool and spec.default:  # on by default: --x / --no-x
            p.add_argument(flag, dest=spec.name, action=argparse.BooleanOptionalAction,
                           default=True, help=help_text)
        elif spec.kind is bool:
            p.add_argument(flag, dest=spec.name, action="store_true", help=help_text)
        else:
            flags = (flag, _SHORT_FLAGS[spec.name]) if spec.name in _SHORT_FLAGS else (flag,)
            p.add_argument(*flags, dest=spec.name, type=_typed(spec.name, spec.kind),
                           default=default, metavar=spec.name.upper() if not spec.choices
                           else "{" + ",".join(spec.choices) + "}", help=help_text)


def knobs_from_args(args, **fixed) -> Knobs:
    values = {s.name: getattr(args, s.name) for s in knob_specs() if hasattr(args, s.name)}
    values.update(fixed)
    if PICKED in values and values[PICKED] is None:  # not given: vLLM's pick on an H200
        values[PICKED] = picked_backend(values.get("kv_cache_dtype", "auto"))
    missing = [s.name for s in knob_specs() if s.cli_required and values.get(s.name) is None]
    if missing:
        flags = ", ".join(f"--{m.replace('_', '-')}" for m in missing)
        raise ValueError(f"{missing[0]} is required ({flags} N)")
    return Knobs(**values)


def _predict_options(p: argparse.ArgumentParser) -> None:
    """The options ``predict`` and ``check`` share: the prompts and how to answer."""
    p.add_argument("--prompt-lens", type=_int_list, default=[2, 3, 200],
                   help="prompt lengths in tokens, comma-separated, each served alone "
                   "(default: 2,3,200)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--check", action="store_true",
                   help="exit 1 when any crash is predicted (for CI pipelines)")
    p.add_argument("--full", action="store_true", help="do not fold identical batches")
    p.add_argument("--exposure", action="store_true",
                   help="lead with the verdict for all traffic (check always does); "
                   "--check then exits 1 when some traffic kills the server")
    p.add_argument("--check-prompts-only", action="store_true",
                   help="with --check: exit 1 only when the given prompts crash")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hisparse",
                     description="Exact model of vLLM HiSparse buffer sizing and routing.")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    ranges = option_ranges()

    p = sub.add_parser("predict", help="sizes, start-up and each prompt served alone")
    add_knob_args(p, "predict")
    _predict_options(p)

    p = sub.add_parser("simulate", help="serve a workload: every engine step, routed")
    add_knob_args(p, "predict")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--workload", metavar="FILE.json",
                       help='requests: [{"prompt_len": n, "max_tokens": 8, "arrival_step": 0}, '
                       '...]')
    given.add_argument("--traffic", metavar="FILE",
                       help='traffic to estimate the odds of a crash for: {"rate_per_s": 10, '
                       '"prompt_len": [{"min": 1, "max": 512, "weight": 3}, ...], "max_tokens": '
                       '8}, or JSON Lines of requests ({"prompt_len": n, "output_len": m} a '
                       'line) with --rate, or a trace with arrival times, replayed: Azure CSV '
                       '(TIMESTAMP,ContextTokens,GeneratedTokens), Mooncake JSONL (timestamp '
                       'ms, input_length, output_length), JSON Lines with arrival_s')
    p.add_argument("--accepted", type=ranged(ranges["--accepted"]), default=None, metavar="N",
                   help="MTP drafts accepted per verify step (default 0: dummy weights)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--check", action="store_true", help="exit 1 when the workload crashes "
                   "(--traffic: when any seed does)")
    p.add_argument("--full", action="store_true", help="do not fold similar steps")
    from .answers.traffic_risk import SEEDS, STEP_MS
    traffic = p.add_argument_group("with --traffic")
    traffic.add_argument("--minutes", type=ranged(ranges["--minutes"]), default=None,
                         help="minutes of traffic per seed (default: 60); a trace replayed "
                         "at its own times: its first N minutes (of its sped-up time), served "
                         "once, every row that arrives in them")
    traffic.add_argument("--rate", type=ranged(ranges["--rate"]), default=None, metavar="R",
                         help="requests per second (default: the file's rate_per_s); for a "
                         "trace with arrival times: Poisson arrivals at R, the trace's lengths")
    traffic.add_argument("--speed", type=ranged(ranges["--speed"]), default=None, metavar="X",
                         help="a trace with arrival times is replayed X times as fast "
                         "(default 1: its own times)")
    traffic.add_argument("--from", dest="from_s", type=ranged(ranges["--from"]), default=None,
                         metavar="SECONDS", help="replay a trace's window from this trace time "
                         "(seconds after its first row; the rows before are read and dropped, "
                         "never held); the window's first row arrives at 0")
    traffic.add_argument("--to", dest="to_s", type=ranged(ranges["--to"]), default=None,
                         metavar="SECONDS", help="... up to this trace time (reading stops at the "
                         "first row past it); --minutes still stops the replay")
    traffic.add_argument("--seeds", type=ranged(ranges["--seeds"]), default=None,
                         help=f"seeds to serve (default: {SEEDS})")
    traffic.add_argument("--seed", type=ranged(ranges["--seed"]), default=None,
                         help="the first seed (default: 0)")
    traffic.add_argument("--step-ms", type=ranged(ranges["--step-ms"]), default=None,
                         help=f"time of one engine step (default: read from the server with "
                         f"the next two options, else {STEP_MS:g} ms, assumed)")
    traffic.add_argument("--step-ms-from-metrics", metavar="URL", default=None,
                         help="read the step time from a running vLLM's /metrics (read twice, "
                         "--metrics-seconds apart: mean inter-token latency)")
    traffic.add_argument("--metrics-seconds", type=ranged(ranges["--metrics-seconds"]),
                         default=None, metavar="S",
                         help="seconds between the two reads of /metrics (default: 10)")
    traffic.add_argument("--step-ms-from-log", metavar="FILE", default=None,
                         help="read the step time from a vLLM log's periodic 'Avg prompt "
                         "throughput ... Running: N reqs' lines")
    traffic.add_argument("--step-cost-from-log", metavar="FILE", default=None,
                         help="a trace replayed at its own times on a clock fitted to a vllm "
                         "serve log with --enable-logging-iteration-details: each batch "
                         "costs base + per prefill token + per decode token; --json lists "
                         "each request's finish")
    traffic.add_argument("--step-cost-from-calibration", metavar="FILE", default=None,
                         help="the same, with the cost fitted to batches measured in the "
                         "engine: a served replay's timed batches (serve_run --time-steps: its "
                         "steps folder or steps-<pid>.jsonl; each batch's CUDA-graph mode read "
                         "with the knobs given, so fit to a run of this server) or a "
                         "calibration sweep's JSON (python -m hisparse_model.engine.calibrate)")
    traffic.add_argument("--jobs", type=ranged(ranges["--jobs"]), default=None,
                         help="seeds served at once (default and most: one per CPU core)")
    traffic.add_argument("--plot", metavar="FILE.svg", default=None,
                         help="write the crash probability against time as an SVG picture")
    traffic.add_argument("--crash-workload", metavar="FILE.json", default=None,
                         help="write the earliest crash's requests as a workload that "
                         "simulate --workload replays to the same crash")

    p = sub.add_parser("explain", help="explain a HiSparse error text from a log (exit 4: "
                       "not a crash this model covers)")
    p.add_argument("text", nargs="?", default=None,
                   help='e.g. "ValueError: ... stop=3, capacity=2." (a line or a '
                   "traceback; EngineCore and \"Worker failed with error '...'\" forms too); "
                   "- reads standard input (tail LOG | ... explain -)")
    p.add_argument("--file", metavar="LOG", default=None,
                   help="read the text from this log file (any size; - is standard input)")

    p = sub.add_parser("check", help="a pasted `vllm serve` command (after --), an "
                       "engine-args file or a start-up log, answered like predict")
    p.add_argument("--vllm", dest="vllm_version", default=None,
                   choices=VLLM_VERSIONS, help="vLLM release the command runs (default: 0.31.0; "
                   "--from-log: the log's, which --vllm must match)")
    p.add_argument("--engine-args", metavar="FILE.json", default=None,
                   help="vllm.LLM keyword arguments as JSON, instead of a command")
    p.add_argument("--from-log", metavar="FILE", default=None,
                   help="a vllm serve (or vllm.LLM) log: the engine its first start-up shows, "
                   "each knob from the line it names, instead of a command; - reads "
                   "standard input")
    _predict_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- vllm serve MODEL [vLLM's own flags]")

    p = sub.add_parser("live", help="run the real engine (GPU + vLLM) and record it")
    add_knob_args(p, "live")
    p.add_argument("--prompt-lens", type=_int_list, default=[2, 3, 200])
    p.add_argument("--workload", default=None, metavar="FILE.json",
                   help="serve this workload step by step instead of --prompt-lens")
    p.add_argument("--out", default=None)
    p.add_argument("--sweep", default=None, help="JSON list of configurations, one child each")
    p.add_argument("--out-dir", default=None, help="with --sweep: where recordings go")
    p.add_argument("--timeout", type=ranged(ranges["--timeout"]), default=600.0,
                   help="seconds per child, counted from when it holds the GPU start-up lock")
    p.add_argument("--jobs", type=ranged(ranges["--live-jobs"]), default=1,
                   help="with --sweep: children at once on one GPU")
    from .app import add_parser as _app_parser; _app_parser(sub)  # noqa: E702
    link_pages(parser, sub)
    return parser


# each command's page of the documentation site (docs/, built by mkdocs; tests/test_docs.py
# checks that every page named here exists and is in the site's navigation)
DOC_PAGES = {"hisparse": "docs/index.md", "predict": "docs/simulate.md",
             "simulate": "docs/simulate.md", "check": "docs/check.md",
             "explain": "docs/check.md", "live": "docs/live.md", "app": "docs/notebooks.md"}


def link_pages(parser: argparse.ArgumentParser, sub) -> None:
    """End ``--help`` of the command and of each subcommand with its page."""
    def epilog(page: str) -> str:
        return (f"Guide: {page} in the source tree, or that page of the documentation "
                "site (mkdocs serve).")
    parser.epilog = epilog(DOC_PAGES["hisparse"])
    for name, p in sub.choices.items():
        p.epilog = epilog(DOC_PAGES[name])


def model_inputs(args) -> dict:
    """``--model DIR``'s config.json, an input no output may replace (empty for a named
    model or none)."""
    model = getattr(args, "model", None)
    if isinstance(model, str) and os.path.isdir(model):
        return {"--model": os.path.join(model, "config.json")}
    return {}
