"""check: a pasted `vllm serve` command (or engine-args file) read with vLLM's own flag names,
defaults of its usage context, ignored flags named, assumption-changing flags refused (exit 2),
answered like predict."""

import json
import shlex
import subprocess
import sys

import pytest

from hisparse_model.cli import main
from hisparse_model.model.knobs import MODEL_MAX_LEN, Knobs, knob_specs
from hisparse_model.inputs.launch import from_command
from hisparse_model.answers.predict import predict
from hisparse_model.answers.simulate import simulate
from hisparse_model.inputs.vllm_flags import ASSUMED, KNOB_FLAGS
from hisparse_model.model.routing import ERROR_TEMPLATE
from hisparse_model.schedule.workload import Workload

from hisparse_flags import HS, connector

CMD = [sys.executable, "-m", "hisparse_model", "check"]
HS_KV = ("""--kv-transfer-config '{"kv_connector": "HiSparseConnector", "kv_role": "kv_both", """
         """"kv_connector_extra_config": {"host_pool_gib": 1}}'""")  # the reproduction's 1 GiB
AC = """--attention-config '{"hisparse_config": {}}'"""  # HiSparse on, with no host pool
MTP1 = """--speculative-config '{"method": "deepseek_mtp", "num_speculative_tokens": 1}'"""
MODEL = "deepseek-ai/DeepSeek-V3.2"


def run(*args):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=120)


def serve(text: str) -> list[str]:
    return shlex.split(f"vllm serve {text}")


# (command after `vllm serve`, knobs it sets) -- each value worked out from vLLM's rules:
# serve's defaults on an H200: B = min(S * L, 8192), S = min(1024, B); L = 163840 unset.
READ_CASES = [
    # the command: S = 4, K = 1; B = min(4 * 163840, 8192) = 8192
    (f"{MODEL} --max-num-seqs 4 {MTP1} {HS} --port 8000 --trust-remote-code",
     {"max_num_seqs": 4, "num_speculative_tokens": 1, "max_model_len": MODEL_MAX_LEN,
      "max_num_batched_tokens": 8192}),
    # the fix PR's reproduction as flags: L = 320 -> B = min(2 * 320, 8192) = 640
    (f"{MODEL} --max-model-len 320 --max-num-seqs 2 --block-size 64 --no-enable-prefix-caching "
     f"--gpu-memory-utilization 0.3 --load-format dummy {HS_KV}",
     {"max_num_seqs": 2, "max_model_len": 320, "max_num_batched_tokens": 640,
      "enable_prefix_caching": False}),
    # '=' forms, underscores (vLLM's parser takes both), human-readable ints: 4k = 4000
    (f"{MODEL} --max_num_seqs=8 --max-model-len=4k --max-num-batched-tokens=2K {HS}",
     {"max_num_seqs": 8, "max_model_len": 4000, "max_num_batched_tokens": 2048}),
    # eager, FLASHMLA_SPARSE by its flag, -tp 1 (the model's one GPU), -O2 (the default)
    (f"{MODEL} --max-num-seqs 1 --enforce-eager --attention-backend FLASHMLA_SPARSE -tp 1 "
     f"-O2 {HS}", {"max_num_seqs": 1, "enforce_eager": True,
                   "attention_backend": "FLASHMLA_SPARSE"}),
    # compilation config's cudagraph_mode; dotted JSON keys for the speculative config
    (f"""{MODEL} --max-num-seqs 3 -cc '{{"cudagraph_mode": "PIECEWISE"}}' """
     f"--speculative-config.method mtp --speculative-config.num_speculative_tokens 2 {HS}",
     {"max_num_seqs": 3, "cudagraph_mode": "PIECEWISE", "num_speculative_tokens": 2}),
    # no --max-num-seqs: S = min(1024, B) with B = min(1024 * 163840, 8192) = 8192 -> 1024
    (f"{MODEL} {HS} --num-gpu-blocks-override 200000 --host 0.0.0.0",
     {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "num_gpu_blocks_override": 200000}),
    # the backend inside --attention-config, with HiSparse's own settings
    (f"""{MODEL} --max-num-seqs 2 -ac '{{"backend": "flashmla_sparse", "hisparse_config": """
     f"""{{"device_buffer_size": 512}}}}' --enable-prefix-caching {HS}""",
     {"max_num_seqs": 2, "attention_backend": "FLASHMLA_SPARSE", "enable_prefix_caching": True}),
    # the host pool in GiB, a JSON number as vLLM's float() reads it ("1.5" too)
    (f"""{MODEL} --max-num-seqs 2 --max-model-len 320 --kv-transfer-config '{{"kv_connector": """
     """"HiSparseConnector", "kv_role": "kv_both", "kv_connector_extra_config": """
     """{"host_pool_gib": "1.5"}}'""",
     {"max_num_seqs": 2, "host_pool_gib": 1.5}),
    # vLLM's dotted forms, each dot a level deeper (vllm/utils/argparse_utils.py:434-446),
    # values read as JSON: the same 512-GiB connector as the JSON flag
    ("{MODEL} --max-num-seqs 2 --kv-transfer-config.kv_connector HiSparseConnector "
     "--kv-transfer-config.kv_role kv_both "
     "--kv-transfer-config.kv_connector_extra_config.host_pool_gib 512".format(MODEL=MODEL),
     {"max_num_seqs": 2, "host_pool_gib": 512.0}),
    # ... and a human-readable value, as vLLM's dotted parser takes one (80g = 80e9 GiB is
    # past the 32 TiB bound: 2k = 2,000)
    (f"{MODEL} --max-num-seqs 2 --kv-transfer-config.kv_connector HiSparseConnector "
     "--kv-transfer-config.kv_role=kv_both "
     "--kv-transfer-config.kv_connector_extra_config.host_pool_gib=2k",
     {"max_num_seqs": 2, "host_pool_gib": 2000.0}),
    # an 8-GPU tensor-parallel launch: -tp 8 (the tiny model's 8 heads split 1 per GPU)
    (f"{MODEL} --max-num-seqs 4 -tp 8 {HS}", {"max_num_seqs": 4, "tensor_parallel_size": 8}),
]


@pytest.mark.parametrize("command,want", READ_CASES)
def test_commands_are_read_with_vllms_flags(command, want):
    """Each real-looking command sets exactly the knobs its flags (or serve's defaults) say."""
    launch = from_command(serve(command), "0.31.0")
    got = {name: getattr(launch.knobs, name) for name in want}
    assert got == want


def test_ignored_flags_are_named():
    """Flags no batch depends on are listed by name in the answer."""
    out = run("--", *serve(READ_CASES[0][0]))
    assert out.returncode == 0, out.stderr
    assert ("Ignored (no batch depends on them): --kv-transfer-config kv_role, --port, "
            "--trust-remote-code") in out.stdout
    got = json.loads(run("--json", "--", *serve(READ_CASES[1][0])).stdout)
    assert set(got["launch"]["ignored"]) >= {"--gpu-memory-utilization", "--load-format"}


REFUSED = [
    # changes what the model assumes
    # HiSparse refuses pipeline parallelism (vllm/config/vllm.py, the knob's own refusal)
    (f"{MODEL} --max-num-seqs 2 -pp 2 {HS}",
     "pipeline_parallel_size: HiSparse does not support pipeline parallelism."),
    (f"{MODEL} --max-num-seqs 2 --block-size 32 {HS}", "--block-size 32: changes what"),
    (f"{MODEL} --max-num-seqs 2 --no-enable-chunked-prefill {HS}", "--enable-chunked-prefill"),
    (f"{MODEL} --max-num-seqs 2 -O3 {HS}", "--optimization-level 3: changes what"),
    # a dtype no sparse-MLA backend of an H200 serves HiSparse with
    (f"{MODEL} --max-num-seqs 2 --kv-cache-dtype fp8_e5m2 {HS}",
     "--kv-cache-dtype: kv_cache_dtype must be one of auto, bfloat16, fp8, fp8_ds_mla"),
    (f"""{MODEL} --max-num-seqs 2 -cc '{{"cudagraph_capture_sizes": [1, 2]}}' {HS}""",
     "--compilation-config cudagraph_capture_sizes: the model does not cover"),
    (f"""{MODEL} --speculative-config '{{"method": "ngram", "num_speculative_tokens": 2}}' """
     f"{HS}", "--speculative-config method 'ngram': the model covers mtp or deepseek_mtp only"),
    # not HiSparse, not this model, a flag it does not know, a bad value
    (f"{MODEL} --max-num-seqs 2", "HiSparse is off in these settings"),
    (f"meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 2 {HS}", "the model covers DeepSeek-V3.2"),
    (f"{MODEL} --max-num-seqs 2 --frobnicate 3 {HS}", "--frobnicate: not a setting this check"),
    (f"{MODEL} --max-num-seqs 0 {HS}", "--max-num-seqs: max_num_seqs must be >= 1"),
    (f"{MODEL} --max-model-len auto {HS}", "--max-model-len auto: fits max_model_len"),
    # vLLM takes 4k only for max_model_len and max_num_batched_tokens
    (f"{MODEL} --max-num-seqs 4k {HS}", "--max-num-seqs: max_num_seqs must be an integer"),
    # HiSparse without its host pool: vLLM refuses to size the KV cache (model/host_pool.py)
    (f"{MODEL} --max-num-seqs 2 {AC}", "(\"HiSparse requires HiSparseConnector with "
     "host_pool_gib\"): add --kv-transfer-config"),
    (f"""{MODEL} --max-num-seqs 2 --kv-transfer-config '{{"kv_connector": "HiSparseConnector", """
     """"kv_role": "kv_both"}'""", "give host_pool_gib (GiB), else vLLM refuses to start"),
    # KVTransferConfig's kv_role: required with a connector, one of three
    # (vllm/config/kv_transfer.py:129-139), null as no role
    (f"""{MODEL} --max-num-seqs 2 --kv-transfer-config '{{"kv_connector": "HiSparseConnector", """
     """"kv_connector_extra_config": {"host_pool_gib": 4}}'""",
     "vLLM refuses it: Please specify kv_role when kv_connector is set"),
    (f"""{MODEL} --max-num-seqs 2 --kv-transfer-config '{{"kv_connector": "HiSparseConnector", """
     """"kv_role": null, "kv_connector_extra_config": {"host_pool_gib": 4}}'""",
     "Please specify kv_role when kv_connector is set"),
    (f"""{MODEL} --max-num-seqs 2 --kv-transfer-config '{{"kv_connector": "HiSparseConnector", """
     """"kv_role": "bogus", "kv_connector_extra_config": {"host_pool_gib": 4}}'""",
     "kv_role: vLLM refuses it: Unsupported kv_role: 'bogus'. Supported roles are "
     "('kv_producer', 'kv_both', 'kv_consumer')"),
    (f"{MODEL} --max-num-seqs 2 {AC} --kv-transfer-config.kv_connector HiSparseConnector "
     "--kv-transfer-config.kv_connector_extra_config.host_pool_gib 4",
     "Please specify kv_role when kv_connector is set"),
    # null host_pool_gib: vLLM's .get() finds none (vllm/config/kv_transfer.py:41-43)
    (f"""{MODEL} --max-num-seqs 2 --kv-transfer-config '{{"kv_connector": "HiSparseConnector", """
     """"kv_role": "kv_both", "kv_connector_extra_config": {"host_pool_gib": null}}'""",
     "give host_pool_gib (GiB), else vLLM refuses to start (\"HiSparseConnector requires "
     "host_pool_gib\")"),
    # 1 GiB = 1,820 blocks; L 163,840 needs cdiv(163840, 64) + 2 = 2,562
    # DeepSeek-V3.2's own config: 2**30 // (64 x 61 layers x 1,152 bytes = 4,497,408) = 238
    (f"{MODEL} --max-num-seqs 2 {HS_KV}",
     "host_pool_gib: 1 GiB holds 238 host blocks of 4,497,408 bytes (deepseek-ai/DeepSeek-V3.2"),
    (f"""{MODEL} --max-num-seqs 2 --kv-transfer-config '{{"kv_connector": "HiSparseConnector", """
     """"kv_role": "kv_both", "kv_connector_extra_config": {"host_pool_gib": "lots"}}'""",
     "host_pool_gib must be a number, got 'lots'"),
]


@pytest.mark.parametrize("command,message", REFUSED)
def test_refused_commands_exit_2_with_one_line(command, message):
    """A command the model cannot answer for: exit 2, one line naming the flag, no stdout."""
    out = run("--", *serve(command))
    assert out.returncode == 2, out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert out.stdout == ""


def test_answers_like_predict_with_the_version_and_advice_in_flags():
    """check's answer is predict's for the same knobs; --vllm picks the version; advice in flags."""
    # S = 2, L = 320: B = 640, C = 2, W = 3: the 3-token prompt crashes 0.31.0
    command = serve(f"{MODEL} --max-num-seqs 2 --max-model-len 320 {HS}")
    got = json.loads(run("--json", "--check-prompts-only", "--prompt-lens", "2,3", "--",
                         *command).stdout)
    want = json.loads(subprocess.run(
        [sys.executable, "-m", "hisparse_model", "predict", "--max-num-seqs", "2",
         "--max-num-batched-tokens", "640", "--prompt-lens", "2,3", "--json"],
        capture_output=True, text=True, timeout=120).stdout)
    assert got["prompts"] == want["prompts"] and got["advice"] == want["advice"]
    assert got["prompts"][1]["error"] == ERROR_TEMPLATE.format(stop=3, capacity=2)
    text = run("--check-prompts-only", "--prompt-lens", "2,3", "--", *command).stdout
    assert "1. upgrade to vLLM 0.32.0" in text and "--max-num-seqs 3" in text
    # for all traffic S = 3 only moves C to 3 (a 4-token prompt still crashes): not offered
    text = run("--prompt-lens", "2,3", "--", *command).stdout
    assert "1. upgrade to vLLM 0.32.0" in text and "--max-num-seqs 3" not in text
    assert run("--check", "--prompt-lens", "2,3", "--", *command).returncode == 1
    fixed = run("--vllm", "0.32.0", "--check", "--prompt-lens", "2,3", "--", *command)
    assert fixed.returncode == 0 and "vLLM 0.32.0" in fixed.stdout


def test_engine_args_file(tmp_path):
    """An engine-args JSON file is vllm.LLM's keyword arguments: the offline class's defaults."""
    args = {"model": "deepseek-ai/DeepSeek-V3.2-Exp", "max_num_seqs": 4, "max_model_len": 320,
            "speculative_config": {"method": "mtp", "num_speculative_tokens": 1},
            "kv_transfer_config": connector(1), "enforce_eager": True,
            "trust_remote_code": True}
    path = tmp_path / "engine.json"
    path.write_text(json.dumps(args))
    got = json.loads(run("--engine-args", str(path), "--json").stdout)
    # offline: B = min(4 * 320, 16384) = 1280; q = 2; C = min(1280, 4 * 2) = 8
    assert (got["max_num_batched_tokens"], got["swap_capacity"]) == (1280, 8)
    assert got["inputs"]["enforce_eager"] is True and got["launch"]["ignored"] == [
        "kv_transfer_config kv_role", "trust_remote_code"]
    assert got["inputs"]["host_pool_gib"] == 1  # the connector's host_pool_gib
    path.write_text(json.dumps({**args, "pipeline_parallel_size": 2}))
    out = run("--engine-args", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "pipeline_parallel_size: HiSparse does not support pipeline parallelism." in out.stderr


def test_flag_table_follows_the_knobs_declaration():
    """Every knob a vLLM setting can set has one row, and every row is a declared knob."""
    declared = {s.name for s in knob_specs()}
    rows = {r.knob for r in KNOB_FLAGS}
    # vllm_version comes from --vllm and routing is stock: no vLLM flag sets them; the model
    # is the command's positional MODEL (or --model)
    assert declared - rows == {"vllm_version", "routing", "model"}
    assert rows <= declared  # no row for a knob the declaration lacks
    assert not set(ASSUMED) & rows  # one place per setting


def test_checks_own_options_after_the_command_are_pointed_out():
    """An option of check written after -- is named as such, not as an unknown vLLM flag."""
    out = run("--", *serve(f"{MODEL} --max-num-seqs 2 {HS} --prompt-lens 3"))
    assert out.returncode == 2 and "check's own options go before the --" in out.stderr


def test_advice_in_flags_avoids_the_crash_when_applied():
    """Each flag-form change check advises, added to the same command, makes --check exit 0."""
    base = f"{MODEL} --max-num-seqs 2 --max-model-len 320 {HS}"
    got = json.loads(run("--json", "--prompt-lens", "2,3", "--", *serve(base)).stdout)
    flagged = 0
    for a in got["advice"]:
        flags = [{"max_num_seqs": f"--max-num-seqs {value}",
                  "max_num_batched_tokens": f"--max-num-batched-tokens {value}",
                  "num_speculative_tokens": "--speculative-config "
                  f"""'{{"method": "mtp", "num_speculative_tokens": {value}}}'""",
                  "attention_backend": f"--attention-backend {value}"}.get(knob)
                 for knob, value in a["change"].items()]
        if None in flags:  # the upgrade and the patch are not flags
            continue
        extra = " ".join(flags)
        # the flag given last wins, in vLLM's parser as in check's
        out = run("--check", "--prompt-lens", "2,3", "--", *serve(f"{base} {extra}"))
        assert out.returncode == 0, (a["change"], out.stdout[-500:], out.stderr)
        flagged += 1
    assert flagged >= 3  # the backend, S = B = 640 and the crippling B = 2


@pytest.mark.parametrize("argv", [
    # the whole command as one quoted string, with a shell line continuation
    [f"vllm serve {MODEL} \\\n  --max-num-seqs 2 --max-model-len 320 {HS}"],
    # the OpenAI server module vllm serve runs, with --model
    ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL,
     "--max-num-seqs", "2", "--max-model-len", "320", *shlex.split(HS)],
])
def test_other_ways_to_paste_the_same_command(argv):
    """One quoted string, or the api_server module with --model: the same knobs as vllm serve."""
    # S = 2, L = 320: B = min(2 * 320, 8192) = 640
    launch = from_command(argv, "0.31.0")
    assert (launch.knobs.max_num_seqs, launch.knobs.max_model_len,
            launch.knobs.max_num_batched_tokens) == (2, 320, 640)


# a malformed command -> the one line that names what is wrong (vLLM's parser refuses each too)
MALFORMED = [
    (["vllm", "run", MODEL], "command: expected `vllm serve MODEL [flags]`"),
    (serve(f"{MODEL} other-model {HS}"), "unexpected argument 'other-model' (one model only)"),
    (serve(f"{HS} --max-num-seqs 2"), "command: no model"),
    (serve(f"{MODEL} --enforce-eager=true {HS}"), "--enforce-eager: a switch takes no value"),
    (serve(f"{MODEL} --no-max-num-seqs {HS}"), "--no-max-num-seqs: 'max-num-seqs' is not a switch"),
    (serve(f"{MODEL} {HS} --max-num-seqs"), "--max-num-seqs: needs a value"),
    (serve(f"""{MODEL} --speculative-config '{{"method": "mtp"}}' """
           f"--speculative-config.num_speculative_tokens 1 {HS}"),
     "speculative_config given both as JSON and by key"),
    (serve(f"{MODEL} -cc [1] {HS}"), "expected a JSON object"),
    (serve(f"{MODEL} -cc nope {HS}"), "not JSON"),
    (serve(f"{MODEL} --max-model-len auto {HS}"), "fits max_model_len to the GPU's memory"),
    (serve(f"{MODEL} --max-num-seqs 2x {HS}"), "max_num_seqs must be an integer, got '2x'"),
]


@pytest.mark.parametrize("argv,message", MALFORMED)
def test_malformed_commands_are_one_line_naming_the_flag(argv, message):
    """Each malformed command is refused with one line that names the flag or the part at fault."""
    with pytest.raises(ValueError) as err:
        from_command(argv, "0.31.0")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_model_flag_and_a_bad_switch_value_in_a_file(tmp_path):
    """`--model NAME` names the model like the positional form; an engine-args file's switch
    must be true or false."""
    launch = from_command(serve(f"--model {MODEL} --max-num-seqs 3 {HS}"), "0.31.0")
    assert launch.knobs.max_num_seqs == 3
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"model": MODEL, "enforce_eager": "maybe",
                                "attention_config": {"hisparse_config": {}}}))
    out = run("--engine-args", str(path))
    assert out.returncode == 2 and "expected true or false, got 'maybe'" in out.stderr


# -- data-parallel servers: the verdict for all traffic, the prompts on one rank --------------
DP_SERVE = ["--", *serve(f"{MODEL} {HS}")]
# (flags after the command, exit status with --check, words of the headline, the example)
DP_CHECKS = [
    # serve's defaults per rank (S = 1024, B = 8192, C = 1024) on two ranks, 0.31.0 and
    # FLASH_ATTN_MLA_SPARSE: a 1025-token prompt pinned to rank 0 computes C + 1 tokens in one
    # step; no dummy kind (C + 1 = 1025 > 512, the largest capture: such a step runs eagerly,
    # and an eager dummy runs its own q = 1 token)
    (["--data-parallel-size", "2"], 1, ("  EXPOSED: some traffic kills this server (a step "
                                         "with no decode running that computes exactly 1025"),
     '{"requests": [{"prompt_len": 1025, "dp_rank": 0}]}'),
    # FLASHMLA_SPARSE hands the routing only a step's decode part; an idle rank's dummy batch
    # of more than q tokens is one prefill request, of which it hands nothing either
    (["-dp", "2", "--attention-backend", "FLASHMLA_SPARSE"], 0,
     "  NOT EXPOSED: no traffic can kill this server (FLASHMLA_SPARSE on 0.31.0 hands only",
     None),
    # S = 2, B = 3, max_model_len 3: one rank alone is safe (no step without decode makes
    # C + 1 = 3 tokens from prompts of at most 2), two are not: prompts of 1 + 2 at rank 0 from
    # step 8 (rank 1's placeholder done) make a 3-token step, and the sync pads rank 1's dummy
    # to the 3-token graph (captures {1, 2, 3}): one 3-token prefill request, 3 <= W rows > C
    (["--max-num-seqs", "2", "--max-num-batched-tokens", "3", "--max-model-len", "3", "-dp",
      "2"], 1, ("  EXPOSED: some traffic kills this server (an idle rank's dummy batch "
                "padded to exactly 3 tokens"),
     ('{"requests": [{"prompt_len": 1, "arrival_step": 8, "dp_rank": 0}, {"prompt_len": 2, '
      '"arrival_step": 8, "dp_rank": 0}]}')),
]


@pytest.mark.parametrize("flags,status,headline,example", DP_CHECKS)
def test_data_parallel_server_is_answered(capsys, flags, status, headline, example):
    """A data-parallel server gets the verdict for all traffic (exit 1 exposed with a replayed
    example, 0 never), with the DP assumptions, and its prompts answered on rank 0, saying so."""
    got = main(["check", "--check", "--prompt-lens", "2", *DP_SERVE, *flags])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert got == status, out[:600]
    assert lines[1].startswith(headline), lines[1]
    assert example is None or f"example traffic: {example}" in out
    assert "did not crash simulate" not in out  # every example replayed to its error
    assert "  assumes (-dp 2): " in out and "dummy batch" in out
    assert ("The given prompts, served one after another on rank 0 of 2 DP ranks while the "
            "others idle") in out


def test_data_parallel_json_one_rank_and_mtp(capsys):
    """--json says how a DP server's prompts were served; DP_CHECKS' last server is safe on one
    rank; MTP under DP is undecided (exit 1)."""
    one = ["--max-num-seqs", "2", "--max-num-batched-tokens", "3", "--max-model-len", "3"]
    assert main(["check", "--check", "--prompt-lens", "2", *DP_SERVE, *one]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("  NOT EXPOSED")
    main(["check", "--json", *DP_SERVE, "-dp", "2"])
    got = json.loads(capsys.readouterr().out)
    assert got["exposure"]["exposed"] is True and got["exposure"]["steps"][0]["verified"]
    assert got["prompts_served"].startswith("The given prompts, served one after another on "
                                            "rank 0 of 2 DP ranks")
    assert main(["check", "--check", *DP_SERVE, "-dp", "2", *shlex.split(MTP1)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("  UNDECIDED: MTP under data parallelism is not "
                                          "modelled (the drafter's forwards sync across ranks")
    assert "for that rank alone: MTP under data parallelism is not modelled" in out


# two ranks, prompts, the first prompt that crashes (None: none) -- from C + 1, worked out
PER_RANK = [
    # the fix PR's S = 2: C = 2, the 3-token prompt is C + 1
    (Knobs(data_parallel_size=2), [2, 3, 200], 1),
    # S = 2, B = 3, max_model_len 3: steps of 1 and 2 tokens, a dummy padded to at most 2 (the
    # capture sizes are 1, 2, 3); the server is exposed, but not to these prompts one by one
    (Knobs(max_num_seqs=2, max_num_batched_tokens=3, max_model_len=3, data_parallel_size=2),
     [1, 2], None),
    # S = 255: C = 255, a 256-token prompt (C + 1) crashes rank 0, and its idle peer with it
    (Knobs(max_num_seqs=255, max_num_batched_tokens=8192, max_model_len=4000,
           enable_prefix_caching=False, data_parallel_size=2), [255, 256, 300], 1),
    # prefix caching on: the 255-token prompt's 3 full blocks (192 tokens) leave 64 of the
    # 256 to compute, a step of 64 < C + 1
    (Knobs(max_num_seqs=255, max_num_batched_tokens=8192, max_model_len=4000,
           data_parallel_size=2), [255, 256], None),
]


@pytest.mark.parametrize("knobs,prompts,first", PER_RANK)
def test_dp_prompts_are_predicts_walk_on_rank_0(knobs, prompts, first):
    """check's answer for a DP server's prompts (predict's walk, each prompt alone) is what
    simulate -dp 2 finds serving them one after another on rank 0 while rank 1 idles."""
    pred = predict(knobs, prompts)
    predicted = next((i for i, p in enumerate(pred.prompts) if p.error), None)
    gap = 64  # steps between arrivals: each prompt (one chunk, 8 outputs) is done by the next
    work = Workload.from_json([{"prompt_len": n, "arrival_step": 8 + gap * i, "dp_rank": 0}
                               for i, n in enumerate(prompts)])
    crash = simulate(knobs, work).crash
    simulated = None if crash is None else (crash["step"] - 8) // gap
    assert predicted == simulated == first
