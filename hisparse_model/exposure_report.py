"""``check`` and ``predict --exposure``: the verdict for all traffic first, then the prompts.

Exit status with ``--check``: 1 when some traffic kills the server (exposed), when the
model cannot decide (undecided: it does not vouch for the server), or when a given
prompt crashes; ``--check-prompts-only`` keeps the older meaning (1 only when a given
prompt crashes, with advice for those prompts).  Each exposed step's example is
replayed through ``simulate`` before it is shown (``verified``).
"""

from __future__ import annotations

import json

from .deployment_advice import deployment_advice, deployment_advice_lines
from .exposure import Exposure, exposure, exposure_lines, verify

EXIT_OK, EXIT_EXPOSED = 0, 1


def exposure_json(exp: Exposure) -> dict:
    """``{"exposed", "steps": [{"what", "tokens", "example", "error", "verified"}],
    "never_because", "undecided"}``; each example replayed through ``simulate``."""
    out = exp.as_json()
    for st, row in zip(exp.steps, out["steps"]):
        row["verified"] = verify(exp.knobs, st)
    return out


def answer_with_exposure(args, knobs, result, crashed: bool, crashes, to_json, to_text,
                         longest_prompt: int, name_change=None) -> int:
    """Print the verdict for all traffic, then the prediction; the exit status."""
    from .advice import SEQS_MAP, advise

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
        print(json.dumps({"exposure": exposure_json(exp), **to_json(result, advice)}))
    else:
        lines = exposure_lines(exp)[:-1]
        for st in exp.steps:
            if not verify(knobs, st):  # never expected: the tests replay every example
                lines.append(f"  (the example of '{st.what}' did not crash simulate)")
        if exp.exposed is not False and not prompts_only:
            lines += deployment_advice_lines(advice, name_change)
        lines += ["", "The given prompts, served one after another:", ""]
        print("\n".join(lines) + "\n" + to_text(result, full=args.full,
                                                advice=advice if prompts_only else []))
    return EXIT_EXPOSED if args.check and failed else EXIT_OK
