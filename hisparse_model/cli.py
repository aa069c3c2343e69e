"""Command line: ``predict`` (the model, CPU) and ``live`` (the real engine, GPU).

Bad arguments exit with status 2 and one line naming the knob, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from .knobs import VLLM_VERSIONS, Knobs


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse's own convention)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"prompt_lens must be comma-separated integers, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"prompt_lens must be integers >= 1, got {text!r}")
    return values


def _add_knob_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=320)
    p.add_argument("--prompt-lens", type=_int_list, default=[2, 3, 200])
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--num-speculative-tokens", type=int, default=0)
    p.add_argument("--speculative-method", default=None)
    p.add_argument("--parallel-drafting", action="store_true")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--cudagraph-mode", default=None)
    p.add_argument("--attention-backend", default="FLASH_ATTN_MLA_SPARSE")


def _knobs(args, version: str, routing: str = "stock") -> Knobs:
    if args.max_num_seqs is None:
        raise ValueError("max_num_seqs is required (--max-num-seqs N)")
    return Knobs(
        vllm_version=version,
        max_num_seqs=args.max_num_seqs,
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
        speculative_method=args.speculative_method,
        parallel_drafting=args.parallel_drafting,
        enforce_eager=args.enforce_eager,
        cudagraph_mode=args.cudagraph_mode,
        attention_backend=args.attention_backend,
        routing=routing,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m hisparse_model")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    p = sub.add_parser("predict", help="predict sizes, start-up and per-prompt outcome")
    p.add_argument("--vllm", default="0.31.0", help=f"one of {', '.join(VLLM_VERSIONS)}")
    p.add_argument("--routing", default="stock", choices=["stock", "fix"])
    _add_knob_args(p)
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("live", help="run the real engine (GPU + vLLM) and record it")
    p.add_argument("--vllm-mode", default="stock", choices=["stock", "fix"])
    _add_knob_args(p)
    p.add_argument("--out", default=None)
    p.add_argument("--sweep", default=None, help="JSON list of configurations, one child each")
    p.add_argument("--out-dir", default=None, help="with --sweep: where recordings go")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per child")
    p.add_argument("--jobs", type=int, default=1, help="with --sweep: children at once on one GPU")
    return parser


def _predict(args) -> int:
    from .predict import predict
    from .report import format_table, to_cli_json

    knobs = _knobs(args, args.vllm, args.routing)
    pred = predict(knobs, args.prompt_lens)
    if args.json:
        print(json.dumps(to_cli_json(pred)))
    else:
        print(format_table(pred))
    return 0


def _live(args) -> int:
    from .engine.live import LiveUnavailable, check_available, run_one, run_sweep

    command = "python -m hisparse_model " + shlex.join(sys.argv[1:])
    try:
        version = check_available()
    except LiveUnavailable as exc:
        print(f"live: cannot run the engine here: {exc}", file=sys.stderr)
        return 3
    if args.sweep:
        out_dir = args.out_dir or "recordings"
        results = run_sweep(args.sweep, out_dir, timeout=args.timeout, command=command,
                            jobs=args.jobs)
        bad = [r for r in results if "startup" not in r]
        return 1 if bad else 0
    if not args.out:
        print("live: error: --out FILE.json is required (or --sweep FILE)", file=sys.stderr)
        return 2
    knobs = _knobs(args, version, args.vllm_mode)
    rec = run_one(knobs, args.prompt_lens, args.out, timeout=args.timeout, command=command)
    return 0 if "startup" in rec else 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.cmd == "predict":
            return _predict(args)
        return _live(args)
    except ValueError as exc:
        print(f"{parser.prog} {args.cmd}: error: {exc}", file=sys.stderr)
        return 2
