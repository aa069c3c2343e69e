"""Table-driven checks of the workload scheduler model (hisparse_model/schedule/scheduler.py).

Expected steps are worked out by hand from vLLM's rules (cited in the module),
arithmetic in the comments; "async" is vLLM's default for this setup, so a
step's output is processed only after the next step is scheduled.  Notation:
step k -> {request: tokens}; P = prompt length, M = max_tokens, L = max_model_len.
"""

import json

import pytest

from hisparse_model.model.routing import decode_tokens
from hisparse_model.schedule.scheduler import SchedulerConfig, acceptance, schedule
from hisparse_model.schedule.step import Step
from hisparse_model.schedule.workload import Workload, WorkloadError, load_workload, synthetic

BIG = 8192  # a token budget no prompt here reaches


def steps_of(cfg, requests, accepted=None):
    return schedule(cfg, Workload.from_json(requests), accepted)


def table(cfg, requests, accepted=None):
    return [(s.index, s.scheduled) for s in steps_of(cfg, requests, accepted)]


def decodes(first, last, reqs):
    return [(k, {r: 1 for r in reqs}) for k in range(first, last + 1)]


CASES = [
    # name, config, requests, accepted, expected [(step, {request: tokens})]
    ("issue 8: a 3- and a 2-token prompt together make one 5-token step",
     SchedulerConfig(4, BIG), [{"prompt_len": 3}, {"prompt_len": 2}], None,
     # step 0: 3 + 2 = 5 = C + 1 for C = min(B, S*1) = 4; each prefill samples
     # token 1 of M = 8, then 7 decode steps (1..7) of 1 token each
     [(0, {0: 3, 1: 2})] + decodes(1, 7, (0, 1))),
    ("the same two prompts one step apart never share a 5-token step",
     SchedulerConfig(4, BIG), [{"prompt_len": 3}, {"prompt_len": 2, "arrival_step": 1}], None,
     # step 1: request 0's decode (1) + request 1's prefill (2) = 3 tokens;
     # request 1's 7 decodes run at steps 2..8, the last one alone
     [(0, {0: 3}), (1, {0: 1, 1: 2})] + decodes(2, 7, (0, 1)) + [(8, {1: 1})]),
    ("spaced out, each prompt is served alone",
     SchedulerConfig(4, BIG), [{"prompt_len": 3}, {"prompt_len": 2, "arrival_step": 20}], None,
     # request 0 runs steps 0..7 and is done long before step 20
     [(0, {0: 3})] + decodes(1, 7, (0,)) + [(20, {1: 2})] + decodes(21, 27, (1,))),
    ("chunked prefill mixed with decodes under B = 64",
     SchedulerConfig(4, 64), [{"prompt_len": 3}, {"prompt_len": 200, "arrival_step": 2}], None,
     # running first: request 0's decode takes 1, the 200-token prompt gets
     # 64 - 1 = 63 per step: 63 + 63 + 63 = 189, then 200 - 189 = 11;
     # request 0 finishes at step 7 (1 + 7 tokens), request 1 at step 12
     # (token 1 from step 5's last chunk, then steps 6..12)
     [(0, {0: 3}), (1, {0: 1}), (2, {0: 1, 1: 63}), (3, {0: 1, 1: 63}),
      (4, {0: 1, 1: 63}), (5, {0: 1, 1: 11})] + decodes(6, 7, (0, 1))
     + decodes(8, 12, (1,))),
    ("max_num_seqs = 2 keeps the third prompt waiting",
     SchedulerConfig(2, BIG), [{"prompt_len": 4}] * 3, None,
     # requests 0, 1 run steps 0..7; step 7's output (their 8th token) is only
     # processed in step 8, after step 8's schedule still sees 2 running
     # (both skipped: surely done) -> request 2 starts at step 9
     [(0, {0: 4, 1: 4})] + decodes(1, 7, (0, 1)) + [(9, {2: 4})] + decodes(10, 16, (2,))),
    ("max_model_len stops a request: positions are capped at L - 1",
     SchedulerConfig(4, BIG, max_model_len=320), [{"prompt_len": 318}], None,
     # step 0: 318 tokens -> token 1 (319 tokens); step 1: 1 token, min(.., L - 1 - 318
     # = 1) -> token 2 makes 320 >= L: finished with 2 of M = 8 tokens
     [(0, {0: 318}), (1, {0: 1})]),
    ("two equal prompts arriving together cannot hit each other",
     SchedulerConfig(4, BIG), [{"prompt_len": 200}] * 2, None,
     # nothing is published in the host tier before step 0's transfers complete
     [(0, {0: 200, 1: 200})] + decodes(1, 7, (0, 1))),
    ("prefix caching: a later equal prompt computes only its last partial block",
     SchedulerConfig(4, BIG), [{"prompt_len": 200}, {"prompt_len": 200, "arrival_step": 20}],
     None,
     # hit <= (200 - 1) // 64 = 3 full blocks = 192 tokens -> 200 - 192 = 8
     [(0, {0: 200})] + decodes(1, 7, (0,)) + [(20, {1: 8})] + decodes(21, 27, (1,))),
    ("prefix caching off: the later prompt computes all 200 tokens",
     SchedulerConfig(4, BIG, enable_prefix_caching=False),
     [{"prompt_len": 200}, {"prompt_len": 200, "arrival_step": 20}], None,
     [(0, {0: 200})] + decodes(1, 7, (0,)) + [(20, {1: 200})] + decodes(21, 27, (1,))),
    ("MTP K = 2 with nothing accepted: 1 + 2 tokens verified, one gained per step",
     SchedulerConfig(1, BIG, num_speculative_tokens=2), [{"prompt_len": 3}], None,
     # prefill -> token 1; then 7 verify steps of 1 + K = 3 tokens, 1 token each
     [(0, {0: 3})] + [(k, {0: 3}) for k in range(1, 8)]),
    ("MTP K = 2 with everything accepted: 3 tokens per verify step",
     SchedulerConfig(1, BIG, num_speculative_tokens=2), [{"prompt_len": 3}], "all",
     # tokens: 1 (prefill) + 3 + 3 = 7 after step 2, step 3 adds the 8th (trimmed)
     [(0, {0: 3}), (1, {0: 3}), (2, {0: 3}), (3, {0: 3})]),
    ("async MTP schedules one more verify step than the request needs",
     SchedulerConfig(1, BIG, num_speculative_tokens=1), [{"prompt_len": 3, "max_tokens": 3}],
     "all",
     # step 1 (1 + 1 accepted = 2 tokens) completes M = 3, but its output is
     # processed after step 2 is scheduled: computed 5 + 2 - placeholders 2 = 5
     # < P + M = 6, so step 2 is not known to be useless
     [(0, {0: 3}), (1, {0: 2}), (2, {0: 2})]),
    ("sync scheduling does not: it learns the outcome before the next step",
     SchedulerConfig(1, BIG, num_speculative_tokens=1, async_scheduling=False),
     [{"prompt_len": 3, "max_tokens": 3}], "all",
     [(0, {0: 3}), (1, {0: 2})]),
    ("a 1-token prompt next to a decode is padded to 1 + K with placeholder drafts",
     SchedulerConfig(4, BIG, num_speculative_tokens=1),
     [{"prompt_len": 3}, {"prompt_len": 1, "arrival_step": 2}], None,
     # step 2: request 0 verifies 1 + 1; request 1 has 1 token left, no running
     # prefill chunk is scheduled -> 1 + K = 2
     [(0, {0: 3}), (1, {0: 2})] + [(k, {0: 2, 1: 2}) for k in range(2, 8)]
     + [(8, {1: 2}), (9, {1: 2})]),
    ("drafts only follow a completed prefill; B = 3 splits a 5-token prompt 3 + 2",
     SchedulerConfig(2, 3, num_speculative_tokens=2), [{"prompt_len": 5, "max_tokens": 3}], None,
     # step 1 finishes the prompt (no drafts yet); steps 2, 3 verify 1 + 2
     [(0, {0: 3}), (1, {0: 2}), (2, {0: 3}), (3, {0: 3})]),
]


@pytest.mark.parametrize("name,cfg,requests,accepted,want", CASES, ids=[c[0] for c in CASES])
def test_schedule_table(name, cfg, requests, accepted, want):
    """Every engine step's scheduled tokens equal the hand-worked schedule."""
    assert table(cfg, requests, accepted) == want


@pytest.mark.parametrize("version,before,tokens", [
    # K = 1, two 192-token prompts, the second at step 20: the hit drops one block
    ("0.31.0", 64, 128),  # lookup capped at (192 - 1) // 64 = 2 blocks, - 1 -> 64
    ("0.32.0", 128, 64),  # EAGLE probe reaches 192 // 64 = 3 blocks, - 1 -> 128
    ("0.33.0", 128, 64),
])
def test_mtp_prefix_hit_per_version(version, before, tokens):
    """Under MTP the prefix hit loses its last block; 0.32.0+ probe one block further."""
    cfg = SchedulerConfig(4, BIG, num_speculative_tokens=1, vllm_version=version)
    st = [s for s in steps_of(cfg, [{"prompt_len": 192}, {"prompt_len": 192, "arrival_step": 20}])
          if 1 in s.scheduled][0]
    assert (st.num_computed_before[1], st.scheduled[1], st.kinds[1]) == (before, tokens, "prefill")


def test_hit_on_a_page_without_gpu_copy_is_not_all_resident():
    """A page published after its writer finished has no GPU copy: all_context_pages_resident is False."""
    # request 0 (M = 1) finishes with step 0's output, before its page-0
    # transfer (carried by step 1's output) completes -> detached publication;
    # request 1 hits that page (64 of (100 - 1) // 64 = 1 block) and computes 36
    st = steps_of(SchedulerConfig(4, BIG), [{"prompt_len": 100, "max_tokens": 1},
                                            {"prompt_len": 100, "arrival_step": 20, "max_tokens": 2}])
    assert [(s.index, s.scheduled, s.resident) for s in st] == [
        (0, {0: 100}, True), (20, {1: 36}, False), (21, {1: 1}, False)]
    # a writer still running when its transfer completes leaves a copy
    st = steps_of(SchedulerConfig(4, BIG), [{"prompt_len": 100},
                                            {"prompt_len": 100, "arrival_step": 20}])
    assert all(s.resident for s in st) and st[8].scheduled == {1: 36}


def test_kinds_spec_and_finished():
    """Each step says which requests prefill, decode or verify, their drafts, and who finishes."""
    st = steps_of(SchedulerConfig(4, BIG, num_speculative_tokens=1),
                  [{"prompt_len": 3, "max_tokens": 2}, {"prompt_len": 1, "arrival_step": 1,
                                                        "max_tokens": 1}])
    # step 1: request 0 verifies 1 + 1 (draft 1); request 1's single token
    # is padded to 2 (it is still its prompt -> "prefill")
    s1 = st[1]
    assert s1.scheduled == {0: 2, 1: 2} and s1.spec == {0: 1, 1: 1}
    assert s1.kinds == {0: "verify", 1: "prefill"}
    assert s1.num_computed_before == {0: 3, 1: 0}
    # request 1 (M = 1) and request 0 (1 + 1 = M = 2 tokens) finish with step 1's output
    assert s1.finished == [0, 1]
    assert st[0].finished == [] and st[0].kinds == {0: "prefill"}


@pytest.mark.parametrize("scheduled,spec,k,order,lens,dec", [
    # drafts first; then query length == 1 + K; then ascending length; stable.
    # dec: decode tokens = the leading queries <= 1 + K (split_decodes_and_prefills)
    ({0: 5, 1: 2, 2: 2, 3: 1}, {1: 1}, 1, [1, 2, 3, 0], [2, 2, 1, 5], 5),  # 2+2+1
    ({0: 3, 1: 2}, {}, 0, [1, 0], [2, 3], 0),  # K = 0: q = 1, both longer
    ({0: 1, 1: 7, 2: 1}, {}, 0, [0, 2, 1], [1, 1, 7], 2),  # decodes (q = 1) lead
    ({0: 3, 1: 3, 2: 40}, {0: 2, 1: 2}, 2, [0, 1, 2], [3, 3, 40], 6),  # 3 + 3
])
def test_runner_order(scheduled, spec, k, order, lens, dec):
    """The runner batches verify/decode-like requests before longer prefills (sort_batch_req_ids)."""
    st = Step(0, scheduled, {}, {}, spec, num_speculative_tokens=k)
    assert st.runner_order() == order and st.runner_query_lens() == lens
    assert decode_tokens(st.runner_query_lens(), 1 + k) == dec  # what simulate() routes by


def test_acceptance_inputs():
    """The MTP acceptance input forms are clamped to 0..drafts and deterministic."""
    assert acceptance(None)(3, 0, 2) == 0
    assert acceptance(1)(3, 0, 2) == 1 and acceptance(5)(3, 0, 2) == 2
    assert acceptance("all")(3, 0, 2) == 2
    assert acceptance({"table": {"3:0": 1}})(3, 0, 2) == 1
    assert acceptance({"table": {"3:0": 1}})(4, 0, 2) == 0
    seeded = acceptance({"seed": 7})
    draws = [seeded(s, r, 2) for s in range(50) for r in range(5)]
    assert set(draws) == {0, 1, 2}  # clamped to 0..drafts, and every count occurs
    # a second instance with the same seed draws the same; another seed draws otherwise
    assert [acceptance({"seed": 7})(s, r, 2) for s in range(50) for r in range(5)] == draws
    assert [acceptance({"seed": 8})(s, r, 2) for s in range(50) for r in range(5)] != draws
    with pytest.raises(ValueError):
        acceptance({"bogus": 1})


def test_large_workload_finishes():
    """10,000 requests all finish, each once (its speed: python -m hisparse_model.bench)."""
    wl = synthetic(10000, prompt_lens=(3, 70, 150, 250), spacing=0, max_tokens=8)
    st = schedule(SchedulerConfig(256, BIG), wl)
    assert sorted(r for s in st for r in s.finished) == list(range(10000))


# -- workloads ---------------------------------------------------------------

WORKLOAD_ERRORS = [
    ("x", "workload: requests must be a list, got str"),
    ([], "workload: no requests"),
    ({"requests": []}, "workload: no requests"),
    ({"reqs": []}, "workload: expected {\"requests\": [...]} or a list; unknown key(s) 'reqs'"),
    ([{"prompt_len": "x"}], "request 1: prompt_len must be an integer >= 1, got 'x'"),
    ([{"prompt_len": 3}, {"prompt_len": 0}], "request 2: prompt_len must be an integer >= 1, got 0"),
    ([{"prompt_len": True}], "request 1: prompt_len must be an integer >= 1, got True"),
    ([{"prompt_len": 3, "prompt_token_ids": [1]}],
     "request 1: give exactly one of prompt_len and prompt_token_ids"),
    ([{"max_tokens": 3}], "request 1: give exactly one of prompt_len and prompt_token_ids"),
    ([{"prompt_len": 3, "foo": 1}], "request 1: unknown key(s) 'foo'; allowed: prompt_len, "
                                    "prompt_id, prompt_blocks, prompt_token_ids, max_tokens, "
                                    "arrival_step, dp_rank"),
    ([{"prompt_id": 3, "prompt_token_ids": [1]}],
     "request 1: prompt_id goes with prompt_len (prompt_token_ids are the prompt already)"),
    ([{"prompt_len": 3, "prompt_id": -1}], "request 1: prompt_id must be an integer >= 0, got -1"),
    ([{"prompt_len": 3, "prompt_id": 10**6}],
     "request 1: prompt_id must be < 1,000,000, got 1000000"),
    ([{"prompt_len": 3, "max_tokens": 0}], "request 1: max_tokens must be an integer >= 1, got 0"),
    ([{"prompt_len": 3, "arrival_step": -1}],
     "request 1: arrival_step must be an integer >= 0, got -1"),
    ([{"prompt_token_ids": []}], "request 1: The decoder prompt cannot be empty"),
    ([{"prompt_token_ids": [1, "a"]}],
     "request 1: prompt_token_ids must be a list of integers >= 0, got [1, 'a']"),
    ([5], "request 1: must be an object with prompt_len or prompt_token_ids, got 5"),
]


@pytest.mark.parametrize("obj,message", WORKLOAD_ERRORS, ids=[m for _, m in WORKLOAD_ERRORS])
def test_workload_errors(obj, message):
    """A malformed workload is one WorkloadError line naming the request."""
    with pytest.raises(WorkloadError) as err:
        Workload.from_json(obj)
    assert str(err.value) == message and "\n" not in str(err.value)


def test_validate_uses_vllms_wording():
    """validate() refuses what vLLM's input processor refuses, with its text and the request."""
    wl = Workload.from_json([{"prompt_len": 5}, {"prompt_len": 321}])
    with pytest.raises(WorkloadError) as err:
        wl.validate(320)
    assert str(err.value) == (
        "request 2: The decoder prompt (length 321) is longer than the maximum model "
        "length of 320. Make sure that `max_model_len` is no smaller than the number of "
        "text tokens.")
    with pytest.raises(WorkloadError) as err:
        Workload.from_json([{"prompt_len": 320}]).validate(320)
    assert str(err.value) == (
        "request 1: The decoder prompt (length 320) plus the number of requested output "
        "tokens (at least 1) is longer than the maximum model length of 320. Make sure "
        "that `max_model_len` is no smaller than the number of text tokens (prompt + "
        "requested output tokens).")
    # prompt + max_tokens beyond L is accepted (it stops at L)
    Workload.from_json([{"prompt_len": 319, "max_tokens": 100}]).validate(320)


def test_workload_forms_and_files(tmp_path):
    """Both file forms load; prompt_len means ids 100.., defaults are max_tokens 8, step 0."""
    a = Workload.from_json({"requests": [{"prompt_len": 3}, {"prompt_token_ids": [7, 8],
                                                              "max_tokens": 2, "arrival_step": 4}]})
    assert a.requests[0].prompt_token_ids == (100, 101, 102)
    assert (a.requests[0].max_tokens, a.requests[0].arrival_step) == (8, 0)
    assert (a.requests[1].prompt_len, a.requests[1].arrival_step) == (2, 4)
    assert Workload.from_json(a.as_json()["requests"]) == a
    path = tmp_path / "w.json"
    path.write_text(json.dumps(a.as_json()))
    assert load_workload(path) == a
    path.write_text("{not json")
    with pytest.raises(WorkloadError, match=r"^workload .*w\.json: malformed JSON: "):
        load_workload(path)


def test_synthetic():
    """synthetic() cycles prompt lengths and spaces arrivals."""
    wl = synthetic(5, prompt_lens=(3, 70), spacing=2, max_tokens=4)
    assert [(r.prompt_len, r.arrival_step, r.max_tokens) for r in wl.requests] == [
        (3, 0, 4), (70, 2, 4), (3, 4, 4), (70, 6, 4), (3, 8, 4)]
