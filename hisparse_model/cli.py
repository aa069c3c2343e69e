"""Command line: ``predict``, ``simulate``, ``check``, ``explain`` (CPU) and ``live`` (GPU).

The knob flags are generated from the :class:`~hisparse_model.model.knobs.Knobs`
declaration, so ``--help`` shows every knob's default and meaning.  Exit
status: 0 ok; 1 ``--check`` (predict, simulate, check) found a crash (check, predict
--exposure: or the server is exposed to some traffic, or undecided), or a live run failed;
2 bad input (one line naming the knob, never a traceback); 3 ``live`` cannot
run here (no GPU or no vLLM); 4 ``explain``: the text is not a crash this
model covers, or does not say which (no fix advice); 130 Ctrl-C, and closed
streams (``exits.py``, which ``hisparse`` runs this through).
"""

from __future__ import annotations

import json
import os
import sys

from .cli_args import (EXIT_BAD_INPUT, EXIT_CRASH, EXIT_NOT_THIS_BUG, EXIT_OK,  # noqa: F401
                       EXIT_UNAVAILABLE, build_parser, knobs_from_args, model_inputs)
from .cli_live import live as _live
from .model.knobs import VLLM_VERSIONS, Knobs

def _one_rank(knobs, per_rank: bool = False):
    """``predict`` serves prompts one after another on one engine: DP is a workload question
    (``simulate -dp N``).  ``check`` (``per_rank``) answers a DP server's prompts on one
    rank, each served alone on rank 0 while the other ranks idle (every rank resolves the
    same plan; ``exposure_report.prompts_heading`` says so), and its verdict for all
    traffic covers the idle ranks' dummy batches."""
    if knobs.data_parallel_size > 1 and not per_rank:
        raise ValueError("data_parallel_size: each DP rank serves its own requests; give "
                         "them as a workload: simulate -dp N --workload FILE.json")
    return knobs


def _predict(args) -> int:
    from .answers.advice import prediction_crashes
    from .answers.predict import predict
    from .text.report import format_table, to_cli_json

    knobs = _one_rank(knobs_from_args(args))
    pred = predict(knobs, args.prompt_lens)
    return _answer(args, knobs, pred, pred.crashes, prediction_crashes(args.prompt_lens),
                   to_cli_json, format_table, max(args.prompt_lens), args.exposure)


def _check(args) -> int:
    from .answers.advice import prediction_crashes
    from .inputs.launch import change_as_flags, from_command, from_engine_args, launch_lines
    from .answers.predict import predict
    from .text.report import format_table, to_cli_json
    from .inputs.startup_log import from_log

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if [bool(command), bool(args.engine_args), args.from_log is not None].count(True) != 1:
        raise ValueError("give one of a command after -- (vllm serve MODEL ...), "
                         "--engine-args FILE.json and --from-log FILE")
    version = args.vllm_version or VLLM_VERSIONS[0]  # --from-log: the log's
    launch = (from_log(args.from_log, args.vllm_version) if args.from_log is not None
              else from_engine_args(args.engine_args, version) if args.engine_args
              else from_command(command, version))
    pred = predict(_one_rank(launch.knobs, per_rank=True), args.prompt_lens)

    def to_json(result, advice):
        return {**to_cli_json(result, advice), "launch": launch.as_json()}

    def to_text(result, full, advice):
        return "\n".join(launch_lines(launch) + [format_table(
            result, full=full, advice=advice,
            name_change=change_as_flags)])

    return _answer(args, launch.knobs, pred, pred.crashes, prediction_crashes(args.prompt_lens),
                   to_json, to_text, max(args.prompt_lens), True, change_as_flags)


def _answer(args, knobs: Knobs, result, crashed: bool, crashes, to_json, to_text,
            longest_prompt: int, exposure: bool = False, name_change=None) -> int:
    """Print a prediction or schedule (with verified advice when it crashes); the exit status.

    ``exposure``: lead with the verdict for all traffic (``exposure_report.py``)."""
    from .answers.advice import SEQS_MAP, advise
    from .answers.verdict import ADVICE_LONG_STEPS

    if exposure:
        from .text.exposure_report import answer_with_exposure

        return answer_with_exposure(args, knobs, result, crashed, crashes, to_json, to_text,
                                    longest_prompt, name_change)
    advice = (advise(knobs, crashes, longest_prompt=longest_prompt, seqs_map=SEQS_MAP)
              if crashed else [])
    budget = getattr(crashes, "budget", None)  # simulate's, on a long workload
    early = (f"the advice search stopped early: its budget of {budget.steps:,} engine steps "
             "of re-simulation (twice the crash replay's, on a workload of over "
             f"{ADVICE_LONG_STEPS:,} steps) was spent; each change above was verified, and a "
             "nearer or cheaper one may exist") if budget is not None and budget.capped else None
    if args.json:
        print(json.dumps({**to_json(result, advice), **({"advice_stopped_early": early}
                                                        if early else {})}))
    else:
        print(to_text(result, full=args.full, advice=advice) + (f"\n{early}" if early else ""))
    return EXIT_CRASH if args.check and crashed else EXIT_OK


def _simulate(args) -> int:
    from .text.report import format_schedule, schedule_json
    from .answers.simulate import simulate
    from .answers.verdict import advice_budget, workload_crashes
    from .schedule.workload import load_workload

    knobs = knobs_from_args(args)
    _check_accepted(args.accepted, knobs.num_speculative_tokens)
    if args.traffic is not None:
        _traffic_defaults(args)
        return _simulate_traffic(args, knobs)
    _check_workload_options(args)
    work = load_workload(args.workload)
    work.check_ranks(knobs.data_parallel_size)
    sched = simulate(knobs, work, args.accepted)  # the crash first, whatever the advice costs
    crashes = workload_crashes(work, args.accepted,  # = simulate(k, ...).crash, fast
                               budget=advice_budget(len(sched.steps)))
    return _answer(args, knobs, sched, sched.crash is not None, crashes, schedule_json,
                   format_schedule, max(r.prompt_len for r in work.requests))


def _check_outputs(args) -> None:
    """``--crash-workload`` and ``--plot``, before anything runs (``boundary/outputs.py``):
    each a regular file or a new name that can be written, never one of the command's inputs
    (``--traffic``, ``--step-ms-from-log``) nor the other output."""
    from .boundary.outputs import check_output

    inputs = {"--traffic": args.traffic, "--step-ms-from-log": args.step_ms_from_log,
              "--step-cost-from-log": args.step_cost_from_log,
              "--step-cost-from-calibration": args.step_cost_from_calibration,
              **model_inputs(args)}
    for flag, path in (("--crash-workload", args.crash_workload), ("--plot", args.plot)):
        if path is None:
            continue
        check_output(flag, path, inputs)
        inputs[flag] = path  # the other output may not be this one either


STEP_TIMES = (("--step-ms", "step_ms"), ("--step-ms-from-metrics", "step_ms_from_metrics"),
              ("--step-ms-from-log", "step_ms_from_log"),
              ("--step-cost-from-log", "step_cost_from_log"),
              ("--step-cost-from-calibration", "step_cost_from_calibration"))
TRAFFIC_ONLY = (("--plot", "plot"), ("--crash-workload", "crash_workload"), ("--rate", "rate"),
                ("--speed", "speed"), ("--from", "from_s"), ("--to", "to_s"),
                ("--minutes", "minutes"), ("--seeds", "seeds"), ("--seed", "seed"),
                ("--jobs", "jobs"), *STEP_TIMES)


def _check_workload_options(args) -> None:
    """Options that only a traffic estimate uses, refused with ``--workload`` rather than
    ignored (a workload counts engine steps, not seconds)."""
    for flag, name in TRAFFIC_ONLY:
        if getattr(args, name) is not None:
            raise ValueError(f"{flag}: only with --traffic (a --workload is served as it is)")


def _traffic_defaults(args) -> None:
    """The traffic options' defaults, where not given (None until here, so that a
    ``--workload`` can tell a given one from a default)."""
    from .answers.traffic_risk import SEEDS

    for name, default in (("minutes", 60.0), ("seeds", SEEDS), ("seed", 0)):
        if getattr(args, name) is None:
            setattr(args, name, default)


def _simulate_traffic(args, knobs: Knobs) -> int:
    """``simulate --traffic``: the odds of a crash over seeds (``traffic_risk.py``)."""
    import os

    from .text.traffic_report import estimate_json, estimate_lines
    from .answers.forked import workers_for
    from .answers.stream_replay import open_traffic
    from .answers.traffic_risk import estimate, workload_text
    from .boundary.outputs import write_all

    _check_outputs(args)
    traffic = open_traffic(args.traffic, args.rate, args.speed, args.from_s, args.to_s,
                           whole=bool(args.step_cost_from_log or args.step_cost_from_calibration),
                           keep=bool(args.crash_workload),
                           progress=not args.json and _terminal(sys.stderr))
    on_clock = _fitted_replay(args, knobs, traffic)
    step = _step_time(args, on_clock)
    jobs, note = workers_for(args.jobs)
    if note is not None:
        print(f"simulate: {note}", file=sys.stderr)
    est = estimate(knobs, traffic, args.minutes, seeds=args.seeds, first_seed=args.seed,
                   step_ms=step.ms, accepted=args.accepted, jobs=jobs, step_said=step.line())
    if any(r.startup for r in est.runs):
        on_clock = None  # no request is served by a server that never starts
    elif on_clock is None and args.json and traffic.replayed and \
            not getattr(traffic, "streamed", False):  # a stream holds no rows to serve again
        from .answers.finish_times import serve_on_clock
        from .schedule.clock import fixed

        on_clock = serve_on_clock(knobs, traffic, args.minutes, fixed(step.ms, step.line()),
                                  args.seed, args.accepted)
    serving = [r for r in est.crashed if not r.startup]
    replay, outputs = None, []  # written together once all are made (write_all)
    if args.crash_workload and serving:
        first = min(serving, key=lambda r: r.crash_step)
        outputs.append(("--crash-workload", args.crash_workload, workload_text(first)))
        replay = (f"seed {first.seed}'s requests up to its crash: {args.crash_workload} "
                  "(simulate --workload replays them to the same step)")
    elif args.crash_workload:  # asked for, but no request crashed a server: nothing to write
        replay = (f"--crash-workload {args.crash_workload}: not written: " + (
            "the server dies at start-up, before any request" if est.crashed else
            "no seed crashed the server"))
    elif serving:
        replay = "--crash-workload FILE.json writes the earliest crash's requests as a workload"
    if args.plot:
        from .views.risk_chart import risk_chart

        outputs.append(("--plot", args.plot, risk_chart(est) + "\n"))
    write_all(outputs)
    if args.json:
        out = estimate_json(est)
        if on_clock is not None:
            out["on_the_clock"] = on_clock.as_json()
        if args.crash_workload:
            out["crash_workload"] = {"path": args.crash_workload, "written": bool(serving)}
        print(json.dumps(out))
    else:
        print("\n".join(estimate_lines(est, replay, on_clock)))
    return EXIT_CRASH if args.check and est.crashed else EXIT_OK


def _terminal(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # replaced by an object without one, or closed
        return False


def _step_times_given(args) -> list[tuple[str, object]]:
    """The step-time options given, ``[(flag, value)]``; more than one is refused."""
    from .answers.traffic_risk import TrafficError

    given = [(flag, getattr(args, name)) for flag, name in STEP_TIMES
             if getattr(args, name) is not None]
    if len(given) > 1:
        raise TrafficError(f"{' and '.join(flag for flag, _ in given)}: give one step time")
    return given


def _fitted_replay(args, knobs: Knobs, traffic):
    """``--step-cost-from-log`` / ``--step-cost-from-calibration``: the trace's replay on the
    clock fitted to that measurement (``answers/clock_fit.py``), or None without either."""
    from .answers.clock_fit import from_calibration, from_log
    from .answers.finish_times import serve_on_clock
    from .answers.traffic_risk import TrafficError

    given = _step_times_given(args)
    if not given or given[0][0] not in ("--step-cost-from-log", "--step-cost-from-calibration"):
        return None
    flag, path = given[0]
    if not traffic.replayed:
        raise TrafficError(f"{flag}: only with a trace replayed at its own times "
                           "(--traffic FILE without --rate)")
    if flag == "--step-cost-from-log":
        cost = from_log(path)
    else:
        from .model.plan import plan

        cost = from_calibration(path, plan(knobs))
    return serve_on_clock(knobs, traffic, args.minutes, cost, args.seed, args.accepted)


def _step_time(args, on_clock=None):
    """The step time ``simulate --traffic`` uses: given, read from the server, the mean batch
    of the fitted clock's replay (``on_clock``), or assumed."""
    from .inputs.step_time import METRICS_SECONDS, StepTime, from_log, from_metrics
    from .answers.traffic_risk import STEP_MS, TrafficError

    given = [flag for flag, _ in _step_times_given(args)]
    if on_clock is not None:
        if not on_clock.batches:
            raise TrafficError(f"{given[0]}: the replay schedules no batch (every request "
                               "refused at the server's door)")
        return _read_step(StepTime(
            on_clock.mean_step_ms, given[0],
            f"the mean batch of this replay on the clock {on_clock.cost.source} "
            f"({on_clock.cost.terms()})"))
    if args.metrics_seconds is not None and args.step_ms_from_metrics is None:
        raise TrafficError("--metrics-seconds: only with --step-ms-from-metrics URL")
    if args.step_ms_from_metrics is not None:
        seconds = METRICS_SECONDS if args.metrics_seconds is None else args.metrics_seconds
        return _read_step(from_metrics(args.step_ms_from_metrics, seconds))
    if args.step_ms_from_log is not None:
        return _read_step(from_log(args.step_ms_from_log))
    if args.step_ms is not None:
        return StepTime(args.step_ms, "--step-ms", "given")
    return StepTime(STEP_MS, "the fallback", "assumed (no --step-ms, --step-ms-from-metrics "
                    "or --step-ms-from-log)")


def _read_step(step):
    """A step time read from a server held to --step-ms's own range, the refusal naming
    where it was read (a 5e+52 ms step, or inf or 0 from /metrics, is no server's)."""
    from .answers.traffic_risk import TrafficError
    from .cli_args import option_ranges

    try:
        option_ranges()["--step-ms"].check(step.ms, f"the step time in ms read from "
                                           f"{step.source}")
    except ValueError as exc:
        raise TrafficError(f"{exc} ({step.how[:200]})") from None
    return step


def _check_accepted(accepted: int | None, k: int) -> None:
    """``--accepted N`` is what vLLM's rejection sampler can report per verify step:
    0 .. K accepted drafts, and with K = 0 there is no draft to accept."""
    if accepted is None:
        return
    if not k:
        raise ValueError(f"--accepted {accepted}: num_speculative_tokens is 0 (MTP off), so "
                         "no draft is ever accepted; drop --accepted or give "
                         "--num-speculative-tokens K")
    if not 0 <= accepted <= k:
        raise ValueError(f"--accepted {accepted}: a verify step accepts 0 to "
                         f"num_speculative_tokens = {k} drafts")


def _explain(args) -> int:
    from .answers.diagnose import COVERED, diagnose
    from .inputs.log_text import read_log

    if (args.text is None) == (args.file is None):
        raise ValueError("give one of the error text, - (standard input) and --file LOG")
    source = args.file if args.file is not None else "-" if args.text == "-" else None
    found = diagnose(args.text if source is None else read_log(source))
    status = EXIT_OK if found.kind in COVERED else EXIT_NOT_THIS_BUG
    try:  # the status is the diagnosis's, even if the reader leaves early (| head -1)
        print("\n".join(found.lines), flush=True)
    except BrokenPipeError:
        from .exits import silence

        silence(sys.stdout)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {"predict": _predict, "simulate": _simulate, "explain": _explain, "live": _live,
                "check": _check}
    handlers["app"] = getattr(args, "run_app", None)  # set by app.add_parser
    try:
        return handlers[args.cmd](args)
    except BrokenPipeError:  # e.g. piped into head: the reader left, nothing to report
        sys.stderr.close()
        return EXIT_OK
    except ValueError as exc:  # written safely: a closed or broken stderr keeps status 2
        from .exits import say

        say(f"{parser.prog} {args.cmd}: error: {exc}")
        return EXIT_BAD_INPUT
