"""``hisparse live``: the real engine on a GPU, every refusal made before the GPU probe."""

from __future__ import annotations

import os
import shlex
import sys

from .cli_args import EXIT_CRASH, EXIT_OK, EXIT_UNAVAILABLE, knobs_from_args, model_inputs


def live(args) -> int:
    from .engine import parallel
    from .engine.live import (LiveUnavailable, check_available, kill_children_on_termination,
                              run_one, run_sweep, validate_sweep)

    command = "hisparse " + shlex.join(sys.argv[1:])
    entries = validate_sweep(args.sweep) if args.sweep else None  # before any GPU probe
    if entries is not None:
        _check_sweep_outputs(args, entries)
    workload = None
    if entries is None:
        if not args.out:
            raise ValueError("--out FILE.json is required (or --sweep FILE)")
        from .boundary.outputs import check_output

        from .engine.processes import side_path

        inputs = {"--workload": args.workload, **model_inputs(args)}
        for suffix, flag in (("", "--out"), (".log", "--out's log"),  # before any GPU probe
                             (".failed.json", "--out's failure record")):
            check_output(flag, side_path(args.out, suffix) if suffix else args.out, inputs,
                         makes_folder=True)
        knobs = knobs_from_args(args)
        if args.workload:
            from .schedule.workload import load_workload

            workload = load_workload(args.workload)
            workload.validate(args.max_model_len)
        parallel.check_live(knobs, workload is not None)  # exit 2 before any GPU probe
    every = [e["knobs"] for e in entries] if entries is not None else [knobs]
    from .model.plan import plan

    for k in every:  # what vLLM refuses at start-up (e.g. -tp 3 for 8 heads): exit 2 first
        plan(k)
    try:
        version = check_available(max(map(parallel.gpus_needed, every)))
    except LiveUnavailable as exc:
        print(f"live: cannot run the engine here: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    kill_children_on_termination()
    if entries is not None:
        wrong = [e["name"] for e in entries if e["knobs"].vllm_version != version]
        if wrong:
            raise ValueError(f"sweep entry {wrong[0]!r}: asks for vllm_version other than the "
                             f"installed vLLM {version}")
        results = run_sweep(entries, args.out_dir or "recordings", timeout=args.timeout,
                            command=command, jobs=args.jobs)
        return EXIT_CRASH if [r for r in results if "startup" not in r] else EXIT_OK
    knobs = knobs_from_args(args, vllm_version=version)
    rec = run_one(knobs, args.prompt_lens, args.out, timeout=args.timeout, command=command,
                  workload=None if workload is None else workload.as_json()["requests"])
    return EXIT_OK if "startup" in rec else EXIT_CRASH


def _check_sweep_outputs(args, entries) -> None:
    """Every recording a sweep writes, and the files beside it, through the output writer's
    checks before any GPU probe (none may be the sweep file or a model's config)."""
    from .boundary.outputs import check_output
    from .engine.processes import side_path

    inputs = {"--sweep": args.sweep, **model_inputs(args)}
    written: dict[str, str] = {}  # each file the sweep writes -> the entry writing it
    for e in entries:
        out = os.path.join(args.out_dir or "recordings", f"{e['name']}.json")
        for path in (out, side_path(out, ".log"), side_path(out, ".failed.json")):
            check_output(f"--out-dir (sweep entry {e['name']!r})", path, inputs,
                         makes_folder=True)
            other = written.setdefault(os.path.realpath(path), e["name"])
            if other != e["name"]:  # e.g. 'a' fails into a.failed.json, entry 'a.failed's
                raise ValueError(f"sweep entries {other!r} and {e['name']!r} both write "
                                 f"{path}; rename one")
