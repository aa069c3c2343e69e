"""Where ``simulate``'s advice spends its time: wall seconds and a cProfile, from one run.

    python scripts/bench_advice.py [--sizes 20,200,2000] [--slow-upto 200] [--profile N]

For each size, both shapes of ``bench.advice_workload`` (the crash on the last step, and
on step 0), ``simulate --max-num-seqs 4`` plus its advice with the fast verdicts
(``verdict.py``) and, up to ``--slow-upto`` requests, with every candidate re-simulated
in full (the exhaustive search), and their ratio.  ``--profile N``: the cProfile of the
fast N-request late-crash run, top 15 by own time.  Reports; asserts nothing.
"""

import argparse
import cProfile
import pstats

from hisparse_model.bench import time_simulate_advice


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="20,200,2000")
    ap.add_argument("--slow-upto", type=int, default=200)
    ap.add_argument("--profile", type=int, default=0)
    args = ap.parse_args()
    for n in (int(x) for x in args.sizes.split(",")):
        for late in (True, False):
            fast = time_simulate_advice(n, late)
            line = f"{n:>6} requests, crash {'last' if late else 'first':<5}: fast {fast:8.2f} s"
            if n <= args.slow_upto:
                slow = time_simulate_advice(n, late, fast=False)
                line += f"   exhaustive {slow:8.2f} s   ratio {slow / fast:7.1f} x"
            print(line, flush=True)
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(time_simulate_advice, args.profile, True)
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
