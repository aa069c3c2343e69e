"""The host pool's cached prefix blocks and their eviction (schedule/host_cache.py, wired through
host_pool.HostUse into every serving loop: simulate, simulate --traffic, the stream, the clock).

Invariant: a published prefix block stays findable until the blocks in use leave no room for
it, and then the least recently freed cached block goes first (a request's tail page before
its head); a block a live request holds is never evicted.
"""

import pytest

from hisparse_model.answers.seed_run import SeedRun
from hisparse_model.answers.simulate import simulate
from hisparse_model.answers.traffic_risk import first_crash
from hisparse_model.model.host_pool import host_blocks
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.kv_layout import layout
from hisparse_model.schedule.host_cache import HostCache
from hisparse_model.schedule.workload import Workload

# (operations, room) -> (keys still cached, oldest first; keys evicted)
# "h": a request holds keys, "r": frees them (tail first), then evict to `room`.
# a: one request publishes 1, 2, 3 and frees them: queued 3, 2, 1 (tail first); room 2
#    evicts 3, the tail page, first.
# b: two requests hold 1; one frees it: still held, not queued; room 0 evicts nothing held.
# c: 1, 2 freed (queued 2, 1), a hit takes 2 out of the queue (touch), frees it again: it is
#    now the most recent: 1, 2; room 1 evicts 1.
# d: room at or below 0 (the requests fill the pool) evicts every cached block.
TABLE = [
    ([("h", (1, 2, 3)), ("r", (1, 2, 3))], 2, ((2, 1), (3,))),
    ([("h", (1,)), ("h", (1,)), ("r", (1,))], 0, ((), ())),
    ([("h", (1, 2)), ("r", (1, 2)), ("h", (2,)), ("r", (2,))], 1, ((2,), (1,))),
    ([("h", (1, 2)), ("r", (1, 2))], -3, ((), (2, 1))),
]


@pytest.mark.parametrize("ops, room, expect", TABLE)
def test_cached_blocks_go_least_recently_freed_first(ops, room, expect):
    """Freed blocks queue tail first; a hit takes a block out until it is freed again;
    eviction pops the front, never a held block, and forgets the key."""
    published = {key: True for key in range(1, 4)}
    cache = HostCache(published)
    for op, keys in ops:
        (cache.hold if op == "h" else cache.release)(keys)
    cache.evict(room, step=7)
    kept, gone = expect
    assert tuple(cache.free) == kept
    assert all(key not in published for key in gone)
    assert cache.evicted == len(gone)
    assert cache.first_step == (7 if gone else None)


def _workload(fillers: int, holder: bool = False) -> Workload:
    """Prompt X (69 tokens: one full block, 8 outputs) at step 0; ``fillers`` prompts of their
    own (200 tokens, 1 output) 10 steps apart; prompt X again 10 steps after the last.
    ``holder``: at step 10 a request Z sharing X's block (64 + 100 tokens, 60 outputs) that
    runs while the fillers do, the fillers from step 20 and X again at step 100."""
    x = list(range(1000, 1069))
    reqs = [{"prompt_token_ids": x, "max_tokens": 8, "arrival_step": 0}]
    if holder:
        reqs.append({"prompt_token_ids": x[:64] + list(range(3000, 3100)), "max_tokens": 60,
                     "arrival_step": 10})
    first = 20 if holder else 10
    reqs += [{"prompt_token_ids": list(range(5000 + 1000 * k, 5200 + 1000 * k)),
              "max_tokens": 1, "arrival_step": first + 10 * k} for k in range(fillers)]
    again = 100 if holder else 10 * (fillers + 1)
    reqs.append({"prompt_token_ids": x, "max_tokens": 1, "arrival_step": again})
    return Workload.from_json(reqs)


# vLLM 0.31.0, S 4: C = 4, so a step that routes 5 tokens alone crashes.  The second X hits
# X's cached block (64 tokens, its GPU copy recorded while X ran) and computes 69 - 64 = 5
# tokens alone: the crash, if the block is still cached.
# A 0.01 GiB pool: int(0.01 x 2**30) // 589,824 = 18 blocks, 17 besides the null block.
# X holds cdiv(69, 64) + 1 (tail) = 3 blocks and publishes 1; a filler holds
# cdiv(200, 64) + 1 = 5 and publishes 3 once done.  Filler k runs beside 1 + 3 x (k - 1)
# cached blocks with room for 17 - 5 = 12: filler 5 (step 50) finds 13 and evicts one, X's,
# the least recently freed; at the second X's step (60, 3 held, room 14) the 12 left and
# filler 5's 3 make 15: one more evicted.  With 4 fillers nothing is evicted: crash at step
# 50.  A 1 GiB pool (1,820 blocks) never evicts: crash at step 60.
# With Z: X frees its block (step 8), Z hits it at step 10 and holds it until its end
# (~step 70), so it leaves the queue; fillers 1-3 (steps 20, 30, 40) each free 3 blocks
# two steps after their one step.  At step 42 Z holds cdiv(196, 64) + 1 = 5 and filler 3
# still 5: room 17 - 10 = 7 for 6 + 3 = 9 cached, 2 evicted (filler 1's, freed first).  X's
# block, freed by Z last, is the most recent: X again at step 100 hits it and crashes.
# (pool GiB, fillers, Z) -> (crash step or None, blocks evicted, step of the first eviction)
EVICTION = [
    (0.01, 4, False, (50, 0, None)),
    (0.01, 5, False, (None, 2, 50)),
    (1.0, 5, False, (60, 0, None)),
    (0.01, 3, True, (100, 2, 42)),
]


@pytest.mark.parametrize("gib, fillers, holder, expect", EVICTION)
def test_an_evicted_prefix_is_computed_again(gib, fillers, holder, expect):
    """The cached-prefix crash happens only while the prefix is still cached: once the
    fillers' blocks push it out of a small host pool, the prompt computes 69 tokens and
    takes the all-resident path; a block a running request holds is not pushed out;
    simulate and the traffic loop agree."""
    knobs = Knobs(max_num_seqs=4, host_pool_gib=gib)
    assert host_blocks(0.01, layout(knobs)) == 18
    run = SeedRun(0, (), 0)
    found = first_crash(knobs, _workload(fillers, holder), run=run)
    crash, evicted, first = expect
    assert (None if found is None else found[0], run.evicted, run.evicted_from) == expect
    served = simulate(knobs, _workload(fillers, holder))
    assert [s.step for s in served.steps if s.error] == ([] if crash is None else [crash])
    assert served.host_evicted == [(evicted, first)]  # up to the crash, as the traffic loop


# Forgotten keys (a prompt of its own, never named again) keep their places as counted runs.
# Request A frees 1, 2, 3 (places 0, 1, 2, tail first: 3, 2, 1), B frees 4, 5 (places 3, 4:
# 5, 4), C frees 6 (place 5).  Forget A and C: runs [0, 3] and [5, 1], keys 4, 5 named.
# room 3 (6 cached): evict 3 from the front: A's run (places 0-2); left 5, 4 and C's run.
# room 1: then 5, 4 go too (places 3, 4), C's run stays.  Forget B as well: its places 3, 4
# join A's run and C's: one run [0, 6]; room 4 evicts 2 of it: [2, 4].
def test_forgotten_blocks_keep_their_place_as_counted_runs():
    """A forgotten prompt's cached blocks still fill the pool and go in their turn; runs that
    touch merge, so a replay of prompts of their own holds a few runs, not a key a block."""
    cache = HostCache({key: True for key in range(1, 7)})
    for keys in ((1, 2, 3), (4, 5), (6,)):
        cache.hold(keys)
        cache.release(keys)
    cache.forget((1, 2, 3))
    cache.forget((6,))
    assert cache.runs == [[0, 3], [5, 1]] and list(cache.free) == [5, 4]
    cache.evict(3, step=1)
    assert cache.runs == [[5, 1]] and list(cache.free) == [5, 4] and cache.evicted == 3
    cache.evict(1, step=2)
    assert cache.runs == [[5, 1]] and list(cache.free) == [] and cache.cached == 1
    merged = HostCache({key: True for key in range(1, 7)})
    for keys in ((1, 2, 3), (4, 5), (6,)):
        merged.hold(keys)
        merged.release(keys)
    for keys in ((1, 2, 3), (6,), (4, 5)):
        merged.forget(keys)
    assert merged.runs == [[0, 6]] and not merged.published
    merged.evict(4, step=3)
    assert merged.runs == [[2, 4]] and merged.cached == 4 and merged.first_step == 3


def _small_trace(tmp_path):
    """40 Mooncake rows 0.5 s apart, 300-token prompts (4 full blocks), 8 outputs, each its own
    512-token hash id but for every fifth, which repeats id 0 (a shared prefix)."""
    import json

    path = tmp_path / "small.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 500 * i, "input_length": 300,
                                        "output_length": 8,
                                        "hash_ids": [0 if i % 5 == 0 else i]}) + "\n"
                            for i in range(40)))
    return str(path)


# (pool GiB, extra options) -> whether the text has a Host pool line; 0.05 GiB holds
# int(0.05 x 2**30) // 589,824 = 91 blocks: 40 prompts publish 4 blocks each, 160 > 91.
EVICTING_RUNS = [
    (0.05, [], True),
    (1.0, [], False),
    (0.05, ["--rate", "2", "--seeds", "3"], True),
]


@pytest.mark.parametrize("gib, extra, evicts", EVICTING_RUNS)
def test_the_answer_says_what_the_host_pool_evicted(tmp_path, gib, extra, evicts):
    """The text's Host pool line renders --json's host_evicted (one replay: its count and
    first step; seeds: the sum, the most in one, the earliest), and is absent without it."""
    import json
    import subprocess
    import sys

    base = [sys.executable, "-m", "hisparse_model", "simulate", "--max-num-seqs", "4",
            "--max-model-len", "320", "--host-pool-gib", str(gib), "--traffic",
            _small_trace(tmp_path), "--minutes", "1", *extra]
    text = subprocess.run(base, capture_output=True, text=True).stdout
    seeds = json.loads(subprocess.run(base + ["--json"], capture_output=True,
                                      text=True).stdout)["seeds"]
    line = [x for x in text.splitlines() if x.startswith("Host pool:")]
    blocks = [s["host_evicted"]["blocks"] for s in seeds]
    assert bool(line) == evicts == any(blocks)
    if not evicts:
        return
    first = min((s["host_evicted"]["from_step"], s["seed"]) for s in seeds
                if s["host_evicted"]["blocks"])
    if len(seeds) == 1:
        assert f"the replay evicted {blocks[0]:,} cached blocks from engine step {first[0]:,}," \
            in line[0]
    else:
        assert (f"evicted {sum(blocks):,} cached blocks in all (at most {max(blocks):,} in one), "
                f"the first at engine step {first[0]:,} (seed {first[1]})") in line[0]


def test_simulate_says_what_its_host_pool_evicted(tmp_path):
    """simulate --workload's text and --json say what the host pool evicted (EVICTION's second
    row: 2 blocks from step 50, no crash) and nothing where it evicted none (the first)."""
    import json
    import subprocess
    import sys

    for fillers, line, blocks in ((5, "host pool: full of cached prefixes, the host pool "
                                   "evicted 2 cached blocks from engine step 50,", 2),
                                  (4, None, 0)):
        path = tmp_path / f"w{fillers}.json"
        path.write_text(json.dumps(_workload(fillers).as_json()))
        base = [sys.executable, "-m", "hisparse_model", "simulate", "--max-num-seqs", "4",
                "--host-pool-gib", "0.01", "--workload", str(path)]
        text = subprocess.run(base, capture_output=True, text=True).stdout
        said = [x for x in text.splitlines() if x.startswith("host pool:")]
        assert said == ([] if line is None else [said[0]]) and (line is None or
                                                                said[0].startswith(line))
        got = json.loads(subprocess.run(base + ["--json"], capture_output=True,
                                        text=True).stdout)["host_evicted"]
        assert got == [{"blocks": blocks, "from_step": 50 if blocks else None}]
