"""``check`` and ``predict --exposure``: the verdict for all traffic first, then the prompts.

Exit status with ``--check``: 1 when some traffic kills the server (exposed), when the
model cannot decide (undecided: it does not vouch for the server), or when a given
prompt crashes; ``--check-prompts-only`` keeps the older meaning (1 only when a given
prompt crashes, with advice for those prompts).  Each exposed step's example is
replayed through ``simulate`` before it is shown (``verified``).
"""

from __future__ import annotations

import json

from ..answers.deployment_advice import deployment_advice, deployment_advice_lines
from ..answers.exposure import Exposure, exposure, exposure_lines, verify
from ..answers.server_verdict import server_verdict

EXIT_OK, EXIT_EXPOSED = 0, 1


def exposure_json(exp: Exposure) -> dict:
    """``{"exposed", "steps": [{"what", "tokens", "example", "error", "verified"}],
    "never_because", "undecided"}``; each example replayed through ``simulate``."""
    out = exp.as_json()
    for st, row in zip(exp.steps, out["steps"]):
        row["verified"] = verify(exp.knobs, st)
    return out


def prompts_heading(knobs) -> str:
    """What the given prompts' answer assumes: one engine, or one DP rank of N (``check``)."""
    n = knobs.data_parallel_size
    if n == 1:
        return "The given prompts, served one after another:"
    if knobs.num_speculative_tokens:
        return (f"The given prompts, served one after another on one of the {n} DP ranks, for "
                "that rank alone: MTP under data parallelism is not modelled, so the other "
                "ranks' dummy batches are not in this answer:")
    return (f"The given prompts, served one after another on rank 0 of {n} DP ranks while the "
            "others idle (each rank resolves the same plan, so this is predict's walk; with "
            "q = 1 an idle rank's dummy batch, padded to rank 0's step, has C + 1 tokens only "
            "where that step has C + 1 tokens itself):")


def answer_with_exposure(args, knobs, result, crashed: bool, crashes, to_json, to_text,
                         longest_prompt: int, name_change=None) -> int:
    """Print the verdict for all traffic, then the prediction; the exit status."""
    from ..answers.advice import SEQS_MAP, advise

    exp = exposure(knobs)
    prompts_only = getattr(args, "check_prompts_only", False)
    if prompts_only:  # the prompts' own advice, as before
        advice = (advise(knobs, crashes, longest_prompt=longest_prompt, seqs_map=SEQS_MAP)
                  if crashed else [])
        failed = crashed
    else:
        advice = deployment_advice(knobs, longest_prompt)
        failed = crashed or exp.exposed is not False
    if args.json:
        served = ({"prompts_served": prompts_heading(knobs).rstrip(":")}
                  if knobs.data_parallel_size > 1 else {})
        print(json.dumps({"exposure": exposure_json(exp), "verdict":
                          server_verdict(knobs).as_json(), **to_json(result, advice),
                          **served}))
    else:
        lines = exposure_lines(exp)[:-1]
        for st in exp.steps:
            if not verify(knobs, st):  # never expected: the tests replay every example
                lines.append(f"  (the example of '{st.what}' did not crash simulate)")
        if exp.never_starts and not prompts_only:  # the one verdict's advice (server_verdict)
            start = server_verdict(knobs).advice
            lines.append(f"  To make it start: {start}" if start else
                         "  (the model has no advice for this start-up error)")
        elif exp.exposed is not False and not prompts_only:
            lines += deployment_advice_lines(advice, name_change)
        lines += ["", prompts_heading(knobs), ""]
        print("\n".join(lines) + "\n" + to_text(result, full=args.full,
                                                advice=advice if prompts_only else []))
    return EXIT_EXPOSED if args.check and failed else EXIT_OK
