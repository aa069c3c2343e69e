"""check --from-log: a vLLM start-up log is read as the engine it started (each knob from the line
it names), answered as check answers that engine's command, and refused in one line where the log
cannot say."""

import io
import json
import pathlib
import re
import sys

import pytest

from hisparse_model.cli import main
from hisparse_model.model.knobs import Knobs
from hisparse_model.model.reproduction import TINY_OVERRIDES
from hisparse_model.inputs.startup_log import from_log, from_log_text, read_log
from hisparse_flags import connector_flags
from same_engine import assert_same_answers, assert_same_engine

ROOT = pathlib.Path(__file__).resolve().parent / "recorded"
LOGS = ROOT / "logs"
MODEL = "deepseek-ai/DeepSeek-V3.2"
PROG = "hisparse check: error: "
# Logs under tests/recorded/logs/ that are no engine's: what each is instead.
NOT_ENGINE_LOGS = {
    "quick-20x-2026-12-02.log": "the quick test tier run 20 times in a row: a test-run log",
    "quick-20x-2026-12-02.attempt1.log": "the same loop's first attempt: a test-run log",
    "full-check-5x-2026-12-04.log": "the full check 5 times beside a CPU hog: a test-run log",
    "full-check-5x-2026-12-04-second.log": "the second series (5 of 5 passed): a test-run log",
    "ci-clean-clone-2026-12-04.log": ".ci/run on a clean clone, caches cold: a test-run log",
    "full-check-2026-12-06.log": "the full check in a fresh clone: a test-run log",
    "full-check-5x-2026-12-04.attempt1.log": "that series' first attempt (stopped by a failing "
                                             "citation test): a test-run log",
    "gpu-pytest-2026-12-01/0.31.0/test_live_gpu.log": "a pytest session's console (its engines "
                                                      "log to their own files)",
    "gpu-pytest-2026-12-01/0.31.0/test_notebook_live_gpu.log": "a pytest session's console",
    "gpu-pytest-2026-12-01/0.33.0/test_live_gpu.log": "a pytest session's console",
    "gpu-pytest-2026-12-01/0.33.0/test_notebook_live_gpu.log": "a pytest session's console",
    "fresh-machine-2026-12-03/summary.log": "the README's two commands on a fresh clone: summary",
    "fresh-machine-2026-12-03/install.log": "the README's install command's output",
    "fresh-machine-2026-12-03/run1.log": "the README's test command, run 1: a test-run log",
    "fresh-machine-2026-12-03/run2.log": "the README's test command, run 2: a test-run log",
}


def _recordings() -> dict[str, dict]:
    """Log (relative to LOGS) -> the recording whose engine wrote it: its provenance's ``log``,
    or ``first_attempt_log`` (the same configuration's first start-up, retried because the GPU
    was in use).  A log sits beside its recording or in LOGS."""
    out = {}
    for path in sorted(ROOT.rglob("*.json")):
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or "knobs" not in rec:
            continue
        for key in ("log", "first_attempt_log"):
            name = rec.get("provenance", {}).get(key)
            if name:
                log = next(p for p in (path.parent / name, LOGS / name) if p.exists())
                out[str(log.relative_to(LOGS))] = rec
    return out


RECORDINGS = _recordings()
ENGINE_LOGS = sorted(RECORDINGS)

# The recordings that left B to vLLM (knobs max_num_batched_tokens None): the B each log's
# scheduler line prints, which is the offline LLM class's default min(S * max_model_len, 16384)
# (vllm/engine/arg_utils.py:2861 `UsageContext.LLM_CLASS: 16384`, clamped by
# vllm/engine/arg_utils.py:3102-3105 `self.max_num_seqs * model_config.max_model_len`).
DEFAULT_B = {
    "gpu-pytest-2026-12-01/0.31.0/live-notebook.log": 640,  # min(2 * 320, 16384)
    "gpu-pytest-2026-12-01/0.31.0/live-traffic.log": 1280,  # min(4 * 320, 16384)
    "gpu-pytest-2026-12-01/0.33.0/live-notebook.log": 640,  # min(2 * 320, 16384)
    "gpu-pytest-2026-12-01/0.33.0/live-traffic.log": 1280,  # min(4 * 320, 16384)
    "v0.31.0-stock-s2-mtp2.log": 640,  # min(2 * 320, 16384)
    "v0.31.0-stock-s2-mtp3.log": 640,  # min(2 * 320, 16384)
    "v0.31.0-stock-s2-mtp3.attempt1.log": 640,  # min(2 * 320, 16384)
    "v0.32.0-stock-s1.log": 320,  # min(1 * 320, 16384)
    "v0.32.0-stock-s2.log": 640,  # min(2 * 320, 16384)
    "v0.32.0-stock-s8-blocks100.log": 2560,  # min(8 * 320, 16384)
    "v0.33.0-stock-s1.log": 320,  # min(1 * 320, 16384)
    "v0.33.0-stock-s2-mtp1.log": 640,  # min(2 * 320, 16384)
    "v0.33.0-stock-s2.log": 640,  # min(2 * 320, 16384)
    "v0.33.0-stock-s8-blocks100.log": 2560,  # min(8 * 320, 16384)
    "v0.34.0-stock-s1.log": 320,  # min(1 * 320, 16384)
    "v0.34.0-stock-s2.log": 640,  # min(2 * 320, 16384)
    "v0.34.0-stock-s2-flashmla.log": 640,  # min(2 * 320, 16384)
    "v0.34.0-stock-s2-mtp1.log": 640,  # min(2 * 320, 16384)
    "v0.34.0-stock-s2-mtp2.log": 640,  # min(2 * 320, 16384)
    "v0.34.0-stock-s4.log": 1280,  # min(4 * 320, 16384)
    "v0.34.0-stock-s8-blocks100.log": 2560,  # min(8 * 320, 16384)
    "v0.34.0-stock-s16.log": 5120,  # min(16 * 320, 16384)
    "v0.34.0-stock-s1-eager.log": 320,  # min(1 * 320, 16384)
}
# Engine logs of an engine the runner built in code rather than through vLLM's CLI: AsyncLLM
# (engine/serve_engine.py) prints no "non-default args" line (vllm serve's CLI does), so
# --from-log cannot tell whether HiSparse is on and refuses them with its one line.
PROGRAMMATIC_LOGS = {"v0.34.0-serve-s64-b8192-l16384.log"}
READ_LOGS = [n for n in sorted(RECORDINGS) if n not in PROGRAMMATIC_LOGS]


def expected_knobs(name: str) -> Knobs:
    """The recording's own knobs (the live runner's, when it launched the engine)."""
    rec = RECORDINGS[name]
    want = dict(rec["knobs"])
    if want["routing"] == "fix":
        # the upstream fix is patched into 0.31.0 at run time (provenance.patches); the log
        # shows no trace of it, so --from-log answers for stock routing and says so
        assert want["vllm_version"] == "0.31.0" and rec["provenance"]["patches"]
        want["routing"] = "stock"
    if want["max_num_batched_tokens"] is None:
        s, length = want["max_num_seqs"], want["max_model_len"]
        assert DEFAULT_B[name] == min(s * length, 16384)
        want["max_num_batched_tokens"] = DEFAULT_B[name]
    else:
        assert name not in DEFAULT_B
    # knobs an older recording predates take the declaration's default, vLLM's: its engine
    # arguments do not set them either
    args = rec["provenance"]["engine_args"]
    for knob in ("num_gpu_blocks_override", "tensor_parallel_size", "data_parallel_size"):
        assert knob in want or knob not in args
    return Knobs.from_dict(want)


def test_every_log_is_an_engine_log_of_a_recording_or_excluded_with_a_reason():
    """Each committed log is tabled: an engine log its recording names, or a test-run log."""
    logs = {str(p.relative_to(LOGS)) for p in LOGS.rglob("*.log")}
    assert logs == set(ENGINE_LOGS) | set(NOT_ENGINE_LOGS)
    assert not set(ENGINE_LOGS) & set(NOT_ENGINE_LOGS)
    assert set(DEFAULT_B) <= set(ENGINE_LOGS)
    for name in NOT_ENGINE_LOGS:
        with pytest.raises(ValueError, match="not a vLLM start-up log"):
            from_log(str(LOGS / name))


@pytest.mark.parametrize("name", READ_LOGS)
def test_the_log_gives_the_recordings_knobs(name):
    """Every engine log reads as exactly the knobs its recording was launched with."""
    text = read_log(str(LOGS / name))
    launch = from_log_text(text)
    assert launch.knobs == expected_knobs(name)
    # B is the scheduler's own line, whatever the recording left to vLLM
    b = launch.knobs.max_num_batched_tokens
    assert f"Chunked prefill is enabled with max_num_batched_tokens={b}." in text
    assert re.fullmatch(r"line \d+: Chunked prefill is enabled with max_num_batched_tokens=\d+",
                        launch.read["max_num_batched_tokens"])
    # every knob is read from a line or has its default explained
    assert set(launch.read) | set(launch.defaults) == set(Knobs.__dataclass_fields__)


def serve_command(k: Knobs) -> list[str]:
    """``vllm serve`` with the knobs as flags, B and S explicit (the serve defaults differ)."""
    argv = ["vllm", "serve", MODEL, "--max-num-seqs", str(k.max_num_seqs),
            "--max-model-len", str(k.max_model_len),
            "--max-num-batched-tokens", str(k.max_num_batched_tokens),
            "--attention-backend", k.attention_backend,
            "--enable-prefix-caching" if k.enable_prefix_caching else "--no-enable-prefix-caching",
            "-tp", str(k.tensor_parallel_size), "-dp", str(k.data_parallel_size),
            "--hf-overrides", json.dumps(TINY_OVERRIDES),  # the recordings' tiny model
            *connector_flags(k.host_pool_gib)]
    if k.num_speculative_tokens:
        argv += ["--speculative-config", json.dumps(
            {"method": "mtp", "num_speculative_tokens": k.num_speculative_tokens,
             "parallel_drafting": k.parallel_drafting})]
    if k.enforce_eager:
        argv.append("--enforce-eager")
    if k.cudagraph_mode:
        argv += ["-cc", json.dumps({"cudagraph_mode": k.cudagraph_mode})]
    if k.num_gpu_blocks_override:
        argv += ["--num-gpu-blocks-override", str(k.num_gpu_blocks_override)]
    return argv


def run(capsys, *argv):
    status = main(["check", *argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("name", READ_LOGS)
def test_the_log_gets_the_verdict_of_the_engines_command(capsys, name):
    """check --from-log LOG answers (exposure, prompts, exit status) as check -- vllm serve ... of
    the same engine does."""
    k = expected_knobs(name)
    logged = run(capsys, "--json", "--check", "--from-log", str(LOGS / name))
    command = run(capsys, "--json", "--check", "--vllm", k.vllm_version, "--",
                  *serve_command(k))
    assert logged[0] == command[0] and logged[2] == command[2] == ""
    got, want = json.loads(logged[1]), json.loads(command[1])
    assert got.pop("launch")["source"] == "vLLM start-up log"
    want.pop("launch")
    assert_same_answers(got, want)




def test_the_answer_names_each_line_and_the_routing_assumption(capsys):
    """The text answer names the log line of each knob, and for 0.31.0 that it assumes stock."""
    status, out, err = run(capsys, "--from-log", str(LOGS / "w-v0.31.0-fix-concurrent.log"))
    assert status == 0 and err == ""
    assert "Read from the vLLM start-up log (vLLM 0.31.0):" in out
    assert ("max_num_batched_tokens = 256  (line 7: Chunked prefill is enabled with "
            "max_num_batched_tokens=256)") in out
    assert "routing = stock  (default: a start-up log does not show the upstream fix" in out
    assert "every other knob" not in out  # every knob is listed
    got = json.loads(run(capsys, "--json", "--from-log",
                         str(LOGS / "w-v0.31.0-fix-concurrent.log"))[1])
    assert got["launch"]["read"]["max_num_seqs"] == (
        "line 22: Enabled experimental HiSparse HMA hot cache: ... max_num_seqs=4")
    # the GPU pool of the log's last layout line (line 40; line 31's 4 blocks are the memory
    # profile's): a 320-token request claims 9 x 5 + 8 x 4 = 77 blocks, 591,996 // 77 = 7,688
    # at once; 5 + 8 x (5 + 4) + 1 = 78 blocks start it
    assert got["launch"]["notes"] == [
        "cudagraph_capture_sizes [1, 2, 4, 8] (line 12): the model's plan for these knobs",
        "GPU KV pool (line 40): 591997 blocks: 7688 requests of max_model_len (320 tokens, up "
        "to 77 blocks each) at once; 78 to start"]


def test_standard_input(capsys, monkeypatch):
    """--from-log - reads the log from standard input, with the file's answer."""
    path = LOGS / "v0.33.0-stock-s2-mtp1.log"
    want = run(capsys, "--json", "--from-log", str(path))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert run(capsys, "--json", "--from-log", "-") == want


BASE = "v0.32.0-stock-s2.log"  # line 1 args, 4 architecture, 7 B, 12 engine, 21 backend, 22 S
FLAG_HINT = "give the whole start-up log, or check -- vllm serve ..."


def _lines() -> list[str]:
    return read_log(str(LOGS / BASE)).split("\n")  # lines as grep -n numbers them


def _edit(number: int, old: str, new: str):
    def edit(lines):
        assert old in lines[number - 1]
        lines[number - 1] = lines[number - 1].replace(old, new, 1)
        return lines
    return edit


def _cut_line(number: int, after: str):
    def edit(lines):  # the line ends just after `after` (a collector's line limit)
        at = lines[number - 1].index(after) + len(after)
        lines[number - 1] = lines[number - 1][:at]
        return lines
    return edit


EDITS = [
    # (what, edit of the base log's lines, --vllm, the one line on stderr after "--from-log F: ")
    ("B's line removed", lambda ls: ls[:6] + ls[7:], None,
     'max_num_batched_tokens: no "Chunked prefill is enabled with max_num_batched_tokens=N" '
     f"line in the log ({FLAG_HINT} --max-num-batched-tokens N)"),
    # 640 cut to 64: without its "." the number is not read
    ("B's line cut mid-number", _cut_line(7, "max_num_batched_tokens=64"), None,
     'max_num_batched_tokens: line 7 ("Chunked prefill is enabled with max_num_batch...") is '
     "cut mid-way (give the whole line, or check -- vllm serve ... --max-num-batched-tokens N)"),
    ("the log cut before B's line", lambda ls: ls[:5], None,
     'vllm_version: no "Initializing a V1 LLM engine (vX.Y.Z) with config: ..." line in the log '
     "(give the whole start-up log, or check --vllm X.Y.Z -- vllm serve ...)"),
    ("the version line removed", lambda ls: ls[:11] + ls[12:], None,
     'vllm_version: no "Initializing a V1 LLM engine (vX.Y.Z) with config: ..." line in the log '
     "(give the whole start-up log, or check --vllm X.Y.Z -- vllm serve ...)"),
    # the engine line cut after pipeline_parallel_size=1: data_parallel_size is the first lost
    ("the engine line cut mid-way", _cut_line(12, "pipeline_parallel_size=1, data_para"), None,
     'data_parallel_size: line 12 ("Initializing a V1 LLM engine (v0.32.0) with c...") is cut '
     "before data_parallel_size= (give the whole line, or check -- vllm serve ... "
     "--data-parallel-size N)"),
    ("the hot-cache line cut mid-way", _cut_line(22, "max_num_seqs="), None,
     'max_num_seqs: line 22 ("Enabled experimental HiSparse HMA hot cache: ...") is cut mid-way '
     "(give the whole line, or check -- vllm serve ... --max-num-seqs N)"),
    ("the arguments line cut mid-way", _cut_line(1, "'max_model_len': 320"), None,
     "engine arguments: line 1 (\"non-default args: {'skip_tokenizer_init': Tru...\") is cut "
     "mid-way (give the whole line, or check -- vllm serve MODEL [flags])"),
    ("the arguments line removed", lambda ls: ls[1:], None,
     'engine arguments: no "non-default args: {...}" line in the log, which says whether '
     "HiSparse is on (give the whole start-up log, or check -- vllm serve MODEL [flags])"),
    ("an empty file", lambda ls: [], None,
     "the log is empty (give the vLLM start-up log, from its first line)"),
    ("not a log", lambda ls: ["# HiSparse buffer-sizing lab", "", "pip install -e ."], None,
     'not a vLLM start-up log: it has no "non-default args: {...}" line and no "Initializing a '
     'V1 LLM engine (vX.Y.Z)" line (give the log of vllm serve from its first line)'),
    ("a version the model does not cover", _edit(12, "(v0.32.0)", "(v0.30.1)"), None,
     "vllm_version: the log's engine is vLLM 0.30.1 (line 12); the model covers vLLM 0.31.0, "
     "0.32.0, 0.33.0, 0.34.0 only"),
    # a local build tag of a version the model does not cover is still refused by the version
    ("a local build of a version the model does not cover",
     _edit(12, "(v0.32.0)", "(v0.35.0+cu130)"), None,
     "vllm_version: the log's engine is vLLM 0.35.0+cu130 (line 12); the model covers vLLM "
     "0.31.0, 0.32.0, 0.33.0, 0.34.0 only"),
    ("--vllm other than the log's", lambda ls: ls, "0.31.0",
     "--vllm 0.31.0: the log's engine is vLLM 0.32.0 (line 12: Initializing a V1 LLM engine "
     "(v0.32.0)); drop --vllm, the log names the version"),
    # S = 2, B = 640, q = 1: the plan captures 1, 2, 4 (min(640, 2 * 1 * 2) = 4)
    ("capture sizes other than the plan's",
     _edit(12, "'cudagraph_capture_sizes': [1, 2, 4]", "'cudagraph_capture_sizes': [1, 2, 4, 8]"),
     None, "cudagraph_capture_sizes: the log's engine captures [1, 2, 4, 8] (line 12), the "
     "model's plan for the knobs read [1, 2, 4]: a setting the log does not show changed them, "
     "so the model would answer for another engine (check -- vllm serve ... with the engine's "
     "command)"),
    ("HiSparse off", lambda ls: _edit(1, "kv_connector='HiSparseConnector'", "kv_connector=None")(
        _edit(1, "hisparse_config=HiSparseConfig(device_buffer_size=None, "
              "eager_host_mirror=True)", "hisparse_config=None")(ls)), None,
     "line 1 (non-default args): HiSparse is off in these settings (no --attention-config with "
     "hisparse_config, no --kv-transfer-config with HiSparseConnector): the off-by-one cannot "
     "happen; the model covers HiSparse engines"),
    ("another model", _edit(4, "DeepseekV32ForCausalLM", "LlamaForCausalLM"), None,
     "model: line 4: Resolved architecture: LlamaForCausalLM: the model covers DeepSeek-V3.2 "
     "only (DeepseekV32ForCausalLM)"),
    # issue 43: a real log edited to another model, its name and architecture line alike
    ("another model's name as the architecture",
     lambda ls: _edit(4, "DeepseekV32ForCausalLM", "Qwen/Qwen3-8B")(ls), None,
     "model: line 4: Resolved architecture: Qwen/Qwen3-8B: the model covers DeepSeek-V3.2 "
     "only (DeepseekV32ForCausalLM)"),
    # issue 51: a Hugging Face id of another model, the architecture line left as it was:
    # refused as check -- vllm serve Qwen/Qwen3-8B refuses it (a local path may have any name)
    ("another model's id in the arguments",
     _edit(1, "'/tmp/dsv32-tiny-drqf1qom'", "'Qwen/Qwen3-8B'"), None,
     "line 1 (non-default args): model 'Qwen/Qwen3-8B': the model covers DeepSeek-V3.2 only "
     "(a model name containing DeepSeek-V3.2, or a local directory with its config.json) (the "
     "model's id names another model than the "
     "architecture line 4 says; a local path may have any name)"),
    ("an assumption changed", _edit(1, "'block_size': 64", "'block_size': 32"), None,
     "line 1 (non-default args): block_size 32: changes what the model assumes (64-token KV "
     "blocks: block_size = 64)"),
    # a second hot-cache line of the same start-up with another S (a mixed or edited log)
    ("a second hot-cache line that disagrees",
     lambda ls: ls[:22] + [ls[21].replace("max_num_seqs=2.", "max_num_seqs=180.")] + ls[22:],
     None, "max_num_seqs: lines 22 and 23 (Enabled experimental HiSparse HMA hot cache) "
     "disagree: max_num_seqs=2, then 180 (one start-up's engines, every data-parallel rank's, "
     "run one max_num_seqs; give the log of one engine)"),
    # two servers' logs interleaved line by line: the second server's arguments come first
    ("two servers interleaved", lambda ls: [x for pair in zip(ls, ls) for x in pair], None,
     "the log mixes two or more servers' start-ups line by line (a second non-default args "
     "line, line 2, before the first start-up's engine line): give the log of one server"),
    ("a speculative setting check does not cover",
     _edit(1, "'max_num_seqs': 2,", "'max_num_seqs': 2, 'speculative_config': {'method': 'mtp', "
           "'num_speculative_tokens': 1, 'prompt_lookup_max': 3},"), None,
     "line 1 (non-default args): speculative_config prompt_lookup_max: the model does not cover "
     "this setting (it reads method, num_speculative_tokens, parallel_drafting from "
     "speculative_config)"),
]


@pytest.mark.parametrize("what,edit,vllm,message", EDITS, ids=[e[0] for e in EDITS])
def test_a_log_that_cannot_say_is_refused_in_one_line(capsys, tmp_path, what, edit, vllm,
                                                     message):
    """Each edit of a real log is exit 2 and one line naming the value (and the flag that gives
    it), with nothing on stdout."""
    path = tmp_path / "serve.log"
    path.write_text("\n".join(edit(_lines())))
    status, out, err = run(capsys, *(["--vllm", vllm] if vllm else []), "--from-log", str(path))
    assert (status, out) == (2, "")
    assert err == f"{PROG}--from-log {path}: {message}\n"


def _gzip(text: str) -> bytes:
    import gzip

    return gzip.compress(text.encode())


# how the same log is stored -> it reads as the same engine, each knob from the same line
STORED = [
    ("as vLLM wrote it", lambda t: t.encode()),
    ("gzip-compressed (log rotation)", _gzip),
    ("CR-only line endings", lambda t: t.replace("\n", "\r").encode()),
    # a terminal's colours around the values: 640 read as 640, not as a cut line
    ("ANSI colours in values", lambda t: t.replace("max_num_batched_tokens=640",
                                                    "max_num_batched_tokens=\x1b[1;32m640\x1b[0m")
     .replace("max_num_seqs=2.", "max_num_seqs=\x1b[1m2\x1b[0m.").encode()),
]


@pytest.mark.parametrize("what,store", STORED, ids=[w for w, _ in STORED])
def test_a_log_reads_the_same_however_it_is_stored(tmp_path, what, store):
    """The base log, stored each way, gives the same knobs, each from the same line."""
    text = (LOGS / BASE).read_text()
    path = tmp_path / "serve.log"
    path.write_bytes(store(text))
    plain, stored = from_log(str(LOGS / BASE)), from_log(str(path))
    assert stored.knobs == plain.knobs
    assert stored.read == plain.read


def test_a_cut_gzip_log_and_explain_of_a_gzip_log(tmp_path, capsys):
    """A gzip log cut short is one line saying so (exit 2); explain --file reads a gzip log as
    the plain one (its exit status is the diagnosis's, not 4 for an unreadable file)."""
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(_gzip((LOGS / BASE).read_text())[:200])
    status, out, err = run(capsys, "--from-log", str(cut))
    assert (status, out) == (2, "")
    assert err == f"{PROG}log {cut}: a gzip file cut short (it ends inside its compressed data)\n"
    crash = "ValueError: HiSparse swap rows exceed the configured speculative decode " \
            "capacity: stop=3, capacity=2.\n"
    plain, packed = tmp_path / "engine.log", tmp_path / "engine.log.gz"
    plain.write_text(crash)
    packed.write_bytes(_gzip(crash))
    assert main(["explain", "--file", str(plain)]) == 0
    said = capsys.readouterr().out
    assert main(["explain", "--file", str(packed)]) == 0
    assert capsys.readouterr().out == said


def test_a_local_build_tag_reads_as_its_release():
    """CUDA builds print their local tag (v0.32.0+cu130): the log reads as 0.32.0, the same
    engine as the stock log, and says so where it names the version's line."""
    lines = _lines()
    lines[11] = lines[11].replace("(v0.32.0)", "(v0.32.0+cu130)")
    tagged = from_log_text("\n".join(lines))
    assert tagged.knobs == from_log_text("\n".join(_lines())).knobs
    assert tagged.read["vllm_version"] == ("line 12: Initializing a V1 LLM engine "
                                           "(v0.32.0+cu130), read as 0.32.0 (a local build "
                                           "of it)")


def test_a_log_cut_anywhere_is_the_same_engine_or_refused():
    """The base log cut at every 97th character reads as the whole log's knobs (S and the
    backend then from the arguments and the H200 default, which agree) or is one line."""
    text = read_log(str(LOGS / BASE))
    whole, answered = from_log_text(text).knobs, 0
    for end in range(0, len(text), 97):
        try:
            knobs = from_log_text(text[:end]).knobs
        except ValueError as exc:
            assert "\n" not in str(exc)
            continue
        assert knobs == whole, end
        answered += 1
    # from the scheduler line (7) and the whole engine line (12) on, every cut answers
    assert answered >= len(text[text.index("[parallel_state.py"):]) // 97


def test_a_restarted_server_is_answered_for_its_first_start_up(tmp_path):
    """A log of two start-ups is read for the first, and the answer says where each began."""
    second = read_log(str(LOGS / "v0.33.0-stock-s8-blocks100.log"))
    launch = from_log_text(read_log(str(LOGS / BASE)) + second)
    assert launch.knobs == expected_knobs(BASE)  # S = 2, not the second engine's 8
    # the second start-up begins at its arguments line: the first log's 78 lines, then the
    # second's 3 torch warnings, so 78 + 4 = 82
    assert "non-default args:" in second.split("\n")[3]
    assert launch.notes[0] == ("the log holds 2 engine start-ups (from lines 1, 82): this "
                               "answer is for the first (give the lines of another to check it)")


def test_a_vllm_serve_log_with_its_process_prefixes(capsys, tmp_path):
    """A vllm serve log (APIServer / EngineCore prefixes, the namespace's arguments with
    model_tag, port and JSON configs) reads as the same engine as its LLM-class twin."""
    lines = [re.sub(r"^\(MainProcess pid=\d+\)", "(EngineCore_DP0 pid=78)", ln)
             for ln in _lines()]
    lines[0] = ("(APIServer pid=77) INFO 12-01 10:00:00 [api_utils.py:286] non-default args: "
                f"{{'model_tag': '{MODEL}', 'port': 8000, 'model': '{MODEL}', "
                "'max_model_len': 320, 'block_size': 64, 'enable_prefix_caching': False, "
                "'max_num_seqs': 2, 'attention_config': {'hisparse_config': {}}, "
                "'kv_transfer_config': {'kv_connector': 'HiSparseConnector', 'kv_role': "
                "'kv_both', 'kv_connector_extra_config': {'host_pool_gib': 1}}, "
                f"'hf_overrides': {TINY_OVERRIDES!r}}}")
    launch = from_log_text("\n".join(lines))
    assert_same_engine(launch.knobs, expected_knobs(BASE))
    # kv_role is checked as vLLM checks it and changes no answer: ignored, as check says
    assert launch.ignored == ["port", "kv_transfer_config kv_role"]
    # no architecture line: the arguments' model name must then name DeepSeek-V3.2
    del lines[3]
    assert_same_engine(from_log_text("\n".join(lines)).knobs, expected_knobs(BASE))
    lines[0] = lines[0].replace(MODEL, "meta-llama/Llama-3.1-8B")
    with pytest.raises(ValueError, match="the model covers DeepSeek-V3.2 only"):
        from_log_text("\n".join(lines))


def test_data_parallel_logs_go_to_checks_own_handling(capsys, tmp_path):
    """A DP log reads data_parallel_size from the engine line and is answered as check answers
    the command with the same -dp."""
    path = tmp_path / "dp.log"
    path.write_text("\n".join(_edit(12, "data_parallel_size=1", "data_parallel_size=2")(
        _lines())))
    assert from_log(str(path)).knobs.data_parallel_size == 2
    k = expected_knobs(BASE).replace(data_parallel_size=2)
    logged = run(capsys, "--json", "--from-log", str(path))
    command = run(capsys, "--json", "--vllm", k.vllm_version, "--", *serve_command(k))
    assert logged[0] == command[0]
    if logged[0] == 2:  # refused: the same reason, named for the log
        assert logged[2].split(": error: ")[-1] in command[2]
    else:
        got, want = json.loads(logged[1]), json.loads(command[1])
        got.pop("launch"), want.pop("launch")
        assert_same_answers(got, want)


def _dp_log(backend: str) -> str:
    """The base log as `vllm serve --data-parallel-size 2` prints it, from vLLM's code: the
    API server's arguments line (with data_parallel_size), the engine line once, from DP
    rank 0 only (vllm/v1/engine/core.py:128 `data_parallel_rank_local`), then each rank's
    own backend and hot-cache lines (each engine core process logs them), prefixed
    `(EngineCore_DP0 pid=..)` and `(EngineCore_DP1 pid=..)`."""
    lines = _lines()
    lines[0] = lines[0].replace("(MainProcess pid=2663)", "(APIServer pid=2600)").replace(
        "'max_num_seqs': 2,", "'max_num_seqs': 2, 'data_parallel_size': 2,")
    lines[11] = lines[11].replace("(MainProcess pid=2663)", "(EngineCore_DP0 pid=2701)") \
        .replace("data_parallel_size=1", "data_parallel_size=2")
    rank = [ln.replace("FLASH_ATTN_MLA_SPARSE attention backend", f"{backend} attention backend")
            for ln in lines[20:22]]
    return "\n".join(lines[:20] + [ln.replace("(MainProcess pid=2663)", f"(EngineCore_DP{r} "
                                               f"pid={2701 + r})") for r in (0, 1) for ln in rank]
                     + lines[22:])


def test_a_data_parallel_log_is_one_start_up_with_its_ranks_backend():
    """A DP = 2 serve log (each rank's backend and hot-cache lines, one engine line) reads as
    one start-up of a DP server, the backend as the ranks' lines say (here FLASHMLA_SPARSE,
    which no argument set), with no note of several start-ups."""
    for backend in ("FLASH_ATTN_MLA_SPARSE", "FLASHMLA_SPARSE"):
        launch = from_log_text(_dp_log(backend))
        assert launch.knobs.data_parallel_size == 2
        assert launch.knobs.attention_backend == backend
        assert launch.read["attention_backend"].startswith("line 21: Using ")
        assert not any("start-ups" in note for note in launch.notes), launch.notes


def _dp_log_each_rank_engine(backend: str, s1: int = 2) -> str:
    """:func:`_dp_log` with an engine line from DP rank 1 too (as a server whose ranks each
    print theirs: issue 51's probe), DP1's hot-cache line saying max_num_seqs ``s1``."""
    lines = _dp_log(backend).split("\n")
    engine = next(i for i, ln in enumerate(lines) if "Initializing a V1 LLM engine" in ln)
    dp1 = lines[engine].replace("EngineCore_DP0 pid=2701", "EngineCore_DP1 pid=2702")
    hot = max(i for i, ln in enumerate(lines) if "EngineCore_DP1" in ln and "hot cache" in ln)
    lines[hot] = lines[hot].replace("max_num_seqs=2.", f"max_num_seqs={s1}.")
    return "\n".join(lines[:engine + 1] + [dp1] + lines[engine + 1:])


def test_each_ranks_engine_line_is_one_start_up_and_the_ranks_must_agree():
    """Engine lines of different DP ranks with no arguments line between are one start-up
    (no restart): the ranks' backend is read (FLASHMLA_SPARSE, set by no argument), and a
    rank whose hot-cache line says another S (DP1: 180) refuses the log."""
    launch = from_log_text(_dp_log_each_rank_engine("FLASHMLA_SPARSE"))
    assert launch.knobs.attention_backend == "FLASHMLA_SPARSE"
    assert launch.knobs.data_parallel_size == 2 and launch.knobs.max_num_seqs == 2
    assert not any("start-ups" in note for note in launch.notes), launch.notes
    with pytest.raises(ValueError, match=r"max_num_seqs: lines \d+ and \d+ \(Enabled "
                       r"experimental HiSparse HMA hot cache\) disagree: max_num_seqs=2, "
                       r"then 180"):
        from_log_text(_dp_log_each_rank_engine("FLASHMLA_SPARSE", s1=180))
    ranks = _dp_log_each_rank_engine("FLASHMLA_SPARSE").split("\n")
    first = next(i for i, ln in enumerate(ranks) if "EngineCore_DP1" in ln and "Using " in ln)
    ranks[first] = ranks[first].replace("FLASHMLA_SPARSE", "FLASH_ATTN_MLA_SPARSE")
    with pytest.raises(ValueError, match="attention_backend: lines .* disagree: "
                       "attention_backend=FLASHMLA_SPARSE, then FLASH_ATTN_MLA_SPARSE"):
        from_log_text("\n".join(ranks))


@pytest.mark.parametrize("name", sorted(PROGRAMMATIC_LOGS))
def test_a_log_without_the_cli_args_line_is_refused_in_one_line(capsys, name):
    """An engine built in code (AsyncLLM, no "non-default args" line): exit 2, one line."""
    assert name in RECORDINGS  # an engine log of a committed recording all the same
    status, out, err = run(capsys, "--from-log", str(LOGS / name))
    assert (status, out) == (2, "")
    assert err == (PROG + f"--from-log {LOGS / name}: "
                   'engine arguments: no "non-default args: {...}" line in the log, '
                   "which says whether HiSparse is on (give the whole start-up log, or check "
                   "-- vllm serve MODEL [flags])\n")
