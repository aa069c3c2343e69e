"""One verdict, rendered everywhere: no dashboard may say what the command line contradicts.

Invariant: for a few hundred seeded random configurations (version, routing, backend, S, K,
B, max_model_len, CUDA-graph mode, eager, prompts), every dashboard that shows the knobs
(notebooks 1, 2, 3, 5, 6 and 7, and the app's tabs, which are the same dashboards) shows the verdict
``hisparse predict --exposure --json`` gives for them, read from what the dashboard shows:
its verdict line's kind and sentence, notebook 2's strip cell at the current
max_num_seqs, notebook 7's own word; and no dashboard's text holds a phrase that contradicts
that verdict.  A later change of any view's wording cannot bring a contradiction back
without failing here.
"""

import contextlib
import html
import io
import json
import random
import re

import pytest

from hisparse_model.cli import main
from hisparse_model.engine.llm_args import llm_kwargs
from hisparse_model.model.knobs import ATTENTION_BACKENDS, CUDAGRAPH_MODES, VLLM_VERSIONS, Knobs
from hisparse_model.model.reproduction import TINY_OVERRIDES
from hisparse_model.views.exposure import exposure_dashboard
from hisparse_model.views.first_request import startup_dashboard
from hisparse_model.views.fixes import versions_dashboard
from hisparse_model.views.off_by_one import off_by_one_dashboard
from hisparse_model.views.traffic import traffic_dashboard
from hisparse_model.views.two_gpus import two_gpus_dashboard

CONFIGS = 240
SEED = 20261206
VERDICT = re.compile(r"<div class='hs-verdict' data-verdict='(\w+)'[^>]*><b>[^<]*</b> "
                     r"<span[^>]*>([^<]*)</span>")
# what no dashboard may say for a server of that kind (phrases views wrote before)
CONTRADICTS = {
    "never_starts": ("cannot crash", "NOT EXPOSED", "no traffic can kill", "start-up survives",
                     "cannot decide", "crash at start-up"),
    "startup_crash": ("cannot crash", "NOT EXPOSED", "start-up survives"),
    "refused": ("NOT EXPOSED", "EXPOSED:"),
    "exposed": ("cannot crash", "NOT EXPOSED", "no traffic can kill", "no traffic crashes it"),
    "not_exposed": ("EXPOSED: some traffic", "Start-up dies"),
}
# (a symbol's value keeps its unit's plural: "C = 1 tokens" reads as C tokens, C being 1)
ONE_PLURAL = re.compile(r"(?<![\d,.+\-×=] )(?<![\d,.])\b1 (tokens|requests|prompts)\b")
# notebook 2's strip cell for each verdict (a lone prompt or requests together: both exposed)
STRIP = {"never_starts": {"never_starts"}, "startup_crash": {"startup_crash"},
         "exposed": {"runtime_crash", "exposed"}, "not_exposed": {"safe"},
         "undecided": {"undecided"}, "refused": {"invalid"}}
# notebook 7's own word for the verdict
WORD = {"exposed": "exposed", "startup_crash": "exposed", "not_exposed": "safe",
        "undecided": "undecided", "never_starts": "undecided"}


def _configs():
    rng = random.Random(SEED)
    for i in range(CONFIGS):
        version = rng.choice(VLLM_VERSIONS)
        s = rng.choice([1, 2, 2, 3, 4, 7, 16, rng.randint(1, 300)])
        k = rng.choice([0, 0, 0, 1, 2, 3])
        q = 1 + k
        length = rng.choice([16, 64, 320, 320, 1000])
        b = rng.choice([None, None, s * q, s * q + 1, k + 1, k + 2, 2, 64, rng.randint(1, 700)])
        config = {"vllm_version": version, "max_num_seqs": s, "num_speculative_tokens": k,
                  "max_model_len": length, "max_num_batched_tokens": b,
                  "attention_backend": rng.choice(ATTENTION_BACKENDS),
                  "routing": "fix" if version == "0.31.0" and rng.random() < 0.2 else "stock",
                  "cudagraph_mode": rng.choice((None, None, *CUDAGRAPH_MODES)),
                  "enforce_eager": rng.random() < 0.15}
        prompts = ", ".join(str(rng.choice([1, rng.randint(1, max(1, length - 1))]))
                            for _ in range(3))
        yield pytest.param(config, prompts, id=f"c{i}")


def _flags(config: dict) -> list[str]:
    out = []
    for name, value in config.items():
        flag = "--vllm" if name == "vllm_version" else "--" + name.replace("_", "-")
        if value is None or value is False or (name == "routing" and value == "stock"):
            continue
        out += [flag] if value is True else [flag, str(value)]
    return out


def cli_verdict(config: dict) -> tuple[str, str]:
    """(kind, sentence) of ``hisparse predict --exposure --json`` (exit 2: vLLM's refusal)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            # one 1-token prompt: the verdict is for all traffic, not the given prompts
            status = main(["predict", *_flags(config), "--prompt-lens", "1", "--exposure",
                           "--json"])
        except SystemExit as exc:  # the parser's own refusal (a knob's bound)
            status = exc.code
    if status == 2:
        return "refused", err.getvalue().strip().split("error: ", 1)[-1]
    assert status == 0, err.getvalue()
    got = json.loads(out.getvalue())["verdict"]
    return got["kind"], got["headline"]


def cli_verdict_dp(state: dict, tmp_path) -> tuple[str, str]:
    """(kind, sentence) of ``hisparse check --exposure --json --engine-args FILE`` for a
    data-parallel server (``predict`` takes one rank): the engine arguments of the
    dashboard's knobs, the fix PR's tiny overrides as JSON, ``data_parallel_size``."""
    knobs = Knobs(**{n: state[n] for n in KNOB_NAMES if state.get(n) is not None
                     and n not in ("routing", "data_parallel_size")})
    kwargs = llm_kwargs(knobs, "deepseek-ai/DeepSeek-V3.2")
    kwargs.update(hf_overrides=dict(TINY_OVERRIDES),
                  data_parallel_size=state["data_parallel_size"])
    path = tmp_path / "engine-args.json"
    path.write_text(json.dumps(kwargs))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["check", "--vllm", state["vllm_version"], "--engine-args", str(path),
                       "--exposure", "--json"])
    if status == 2:
        return "refused", err.getvalue().strip().split("error: ", 1)[-1]
    assert status == 0, err.getvalue()
    got = json.loads(out.getvalue())["verdict"]
    return got["kind"], got["headline"]


def _shown(dash) -> tuple[str, str] | None:
    """(kind, sentence) of the verdict line a dashboard shows; its refusal as 'refused'."""
    if dash.error is not None:
        return "refused", dash.error
    m = VERDICT.search(dash.numbers.value)
    assert m is not None, "no verdict line"
    return m[1], html.unescape(m[2])


def _text(dash) -> str:
    """What the dashboard says of its own server: its numbers and message, without the list
    of changes it advises (each says what the server would be after it)."""
    markup = re.sub(r"<ol class='hs-advice'>.*?</ol>|<div class='hs-verdict-advice'>.*?</div>",
                    "", dash.numbers.value, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", markup + dash.message.value))


KNOB_NAMES = ("vllm_version", "routing", "attention_backend", "max_num_seqs",
              "num_speculative_tokens", "max_num_batched_tokens", "max_model_len",
              "enforce_eager", "cudagraph_mode", "data_parallel_size")


def _dashboards(config: dict, prompts: str):
    yield "notebook 2", startup_dashboard(prompt_lens=prompts, **{
        n: config[n] for n in ("vllm_version", "attention_backend", "max_num_seqs",
                               "num_speculative_tokens", "max_num_batched_tokens",
                               "max_model_len", "enforce_eager", "cudagraph_mode")}), None
    yield "notebook 7", exposure_dashboard(**{
        n: config[n] for n in ("vllm_version", "attention_backend", "routing", "max_num_seqs",
                               "max_num_batched_tokens", "num_speculative_tokens",
                               "max_model_len")}), {"enforce_eager": False,
                                                    "cudagraph_mode": None}
    if config["vllm_version"] == "0.31.0" and config["routing"] == "stock":
        yield "notebook 1", off_by_one_dashboard(**{
            n: config[n] for n in ("max_num_seqs", "num_speculative_tokens",
                                   "max_num_batched_tokens", "max_model_len")}), {
            "attention_backend": ATTENTION_BACKENDS[0], "enforce_eager": False,
            "cudagraph_mode": None}
    common = {n: config[n] for n in ("vllm_version", "routing", "attention_backend",
                                     "max_num_seqs", "num_speculative_tokens",
                                     "max_num_batched_tokens", "max_model_len",
                                     "enforce_eager", "cudagraph_mode")}
    yield "notebook 5", traffic_dashboard(**common), None
    yield "notebook 6", two_gpus_dashboard(**common), None
    yield "notebook 3", versions_dashboard(prompt_lens=prompts, **{
        n: config[n] for n in ("vllm_version", "attention_backend", "routing", "max_num_seqs",
                               "num_speculative_tokens", "max_num_batched_tokens",
                               "max_model_len")}), {"enforce_eager": False,
                                                    "cudagraph_mode": None}


@pytest.mark.parametrize("config,prompts", list(_configs()))
def test_every_dashboard_shows_the_command_lines_verdict(config, prompts, tmp_path):
    """Each dashboard's verdict line, digest, strip cell and own word are the CLI's, and
    nothing on it contradicts them."""
    for name, dash, fixed in _dashboards(config, prompts):
        # the knobs the dashboard shows (a slider holds what it can), as the CLI takes them
        knobs = ({n: dash.state.get(n) for n in KNOB_NAMES} if dash.error is None else
                 {**config, **(fixed or {})})
        if name == "notebook 1" and dash.error is not None:
            knobs["vllm_version"] = "0.31.0"
        if knobs.get("data_parallel_size") in (None, 1):
            knobs.pop("data_parallel_size", None)
            want = cli_verdict(knobs)
        else:  # notebook 6 serves two DP ranks: check, as an operator asks of such a server
            want = cli_verdict_dp(knobs, tmp_path)
        shown = _shown(dash)
        if want[0] == "refused":
            assert shown[0] == "refused", (name, shown)
            continue
        assert shown == want, name
        text = _text(dash)
        for phrase in CONTRADICTS.get(want[0], ()):
            assert phrase not in text.replace(want[1], ""), (name, phrase)
        # a count of one takes the singular ("C + 1 tokens" is a count of C + 1)
        assert not ONE_PLURAL.search(text), (name, ONE_PLURAL.search(text)[0])
        if name == "notebook 2":
            cell = dash.plot_data["outcome"][knobs["max_num_seqs"] - 1]
            assert cell in STRIP[want[0]], (name, cell)
            assert dash.plot_data["vllm_version"] == config["vllm_version"]
        if name == "notebook 7":
            assert dash.labels["exposed"] == WORD[want[0]], name


def test_the_configurations_reach_every_verdict():
    """The seeded configurations are not all alike: each verdict kind occurs among them."""
    kinds = {cli_verdict(c)[0] for c, _ in (p.values for p in _configs())}
    assert kinds >= {"refused", "never_starts", "startup_crash", "exposed", "not_exposed"}
