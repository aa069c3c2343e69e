"""vLLM's own flags, as ``check`` reads them: one row per knob, and every other setting's rule.

The tables say, for each setting a ``vllm serve`` command or an engine-args file can
hold, whether it sets a knob (:data:`KNOB_FLAGS`, converted by the knob's declaration),
must hold the model's assumption (:data:`ASSUMED`), is a JSON config key the model
reads or ignores (:data:`CONFIG_KEYS`), or is ignored (:data:`IGNORED`).
:func:`parse_command` splits a command into EngineArgs fields the way vLLM's
``FlexibleArgumentParser`` does (``--a-b`` / ``--a_b``, ``=`` forms, ``-O2``,
dotted JSON keys).  ``tests/test_launch_crosscheck.py`` checks every flag named
here against vLLM's own serve parser.  ``launch.py`` turns the fields into knobs.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import NamedTuple

from ..boundary.json_file import too_many_digits
from ..model.knobs import knob_specs
from ..schedule.workload import short_repr

# How a pasted command starts: vllm serve, or the OpenAI server module it runs (same flags).
SERVE_PREFIXES = (("vllm", "serve"), *((py, "-m", "vllm.entrypoints.openai.api_server")
                                       for py in ("python", "python3")))


class KnobFlag(NamedTuple):
    """Where vLLM reads one knob: its flags, or a key of a JSON config flag."""

    knob: str
    flags: tuple[str, ...] = ()  # vLLM's flags, long form first
    config: tuple[str, str] | None = None  # (EngineArgs field of a JSON config, key)


# One row per knob a vLLM flag sets (vllm/engine/arg_utils.py add_cli_args); the value is
# converted by the knob's declaration.  vllm_version comes from --vllm; routing is stock.
KNOB_FLAGS = (
    KnobFlag("max_num_seqs", ("--max-num-seqs",)),
    KnobFlag("max_model_len", ("--max-model-len",)),
    KnobFlag("max_num_batched_tokens", ("--max-num-batched-tokens",)),
    KnobFlag("num_speculative_tokens", config=("speculative_config", "num_speculative_tokens")),
    KnobFlag("parallel_drafting", config=("speculative_config", "parallel_drafting")),
    KnobFlag("enforce_eager", ("--enforce-eager",)),
    KnobFlag("cudagraph_mode", config=("compilation_config", "cudagraph_mode")),
    KnobFlag("attention_backend", ("--attention-backend",), ("attention_config", "backend")),
    KnobFlag("enable_prefix_caching", ("--enable-prefix-caching",)),
    KnobFlag("num_gpu_blocks_override", ("--num-gpu-blocks-override",)),
    KnobFlag("host_pool_gib", config=("kv_transfer_config",
                                      "kv_connector_extra_config.host_pool_gib")),
    KnobFlag("tensor_parallel_size", ("--tensor-parallel-size", "-tp")),
    KnobFlag("data_parallel_size", ("--data-parallel-size", "-dp")),
    KnobFlag("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp")),
    KnobFlag("decode_context_parallel_size", ("--decode-context-parallel-size", "-dcp")),
    KnobFlag("kv_cache_dtype", ("--kv-cache-dtype",)),
    KnobFlag("hf_overrides", ("--hf-overrides",)),
)

# EngineArgs field -> (flags, the model's value, why it matters); other values are refused.
ASSUMED = {
    "block_size": (("--block-size",), 64, "64-token KV blocks"),
    "enable_chunked_prefill": (("--enable-chunked-prefill",), True, "chunked prefill"),
    "async_scheduling": (("--async-scheduling",), True, "async scheduling"),
    "optimization_level": (("--optimization-level", "-O"), "2", "-O2 compilation"),
    "performance_mode": (("--performance-mode",), "balanced", "vLLM's default batch sizes"),
    "scheduling_policy": (("--scheduling-policy",), "fcfs", "first-come scheduling"),
    "scheduler_reserve_full_isl": (("--scheduler-reserve-full-isl",), True,
                                   "HiSparse's full-prompt reservation"),
}
# JSON config keys the model reads or ignores; any other key is refused.  vLLM takes
# deepseek_mtp as mtp (vllm/config/speculative.py:1135-1139 `self.method = "mtp"`).
CONFIG_KEYS = {
    "speculative_config": {"method": ("mtp", "deepseek_mtp"), "num_speculative_tokens": None,
                           "parallel_drafting": None},
    "compilation_config": {"cudagraph_mode": None},
    "attention_config": {"backend": None, "hisparse_config": None},
    "kv_transfer_config": {"kv_connector": ("HiSparseConnector",), "kv_role": None,
                           "kv_connector_extra_config": None},
}
# EngineArgs field -> takes a value (True) or is a switch (False).  No batch depends on them.
IGNORED = {
    "host": True, "port": True, "api_key": True, "served_model_name": True,
    "trust_remote_code": False, "tokenizer": True, "tokenizer_mode": True, "revision": True,
    "download_dir": True, "load_format": True, "dtype": True, "seed": True,
    "gpu_memory_utilization": True, "disable_log_stats": False, "enable_log_requests": False,
    "uvicorn_log_level": True, "chat_template": True,
    "enable_auto_tool_choice": False, "tool_call_parser": True, "reasoning_parser": True,
    "max_logprobs": True, "disable_uvicorn_access_log": False, "skip_tokenizer_init": False,
    "distributed_executor_backend": True, "enable_expert_parallel": False,
    "quantization": True,
}
CHECK_OPTIONS = ("prompt_lens", "json", "check", "full", "vllm", "engine_args",
                 "check_prompts_only", "exposure", "from_log")  # check's
# Fields whose flag takes one or more values (nargs "+": a ``str | list[str]`` field,
# vllm/engine/arg_utils.py:473 `served_model_name: str | list[str] | None`,
# vllm/engine/arg_utils.py:251 `"nargs": "+"`).
MANY_VALUES = ("served_model_name",)
SHORT_FLAGS = {"-sc": "speculative_config", "-cc": "compilation_config",
               "-ac": "attention_config"}


def all_flags() -> dict[str, bool]:
    """Every vLLM flag the tables name, and whether ``check`` reads it as a switch."""
    flags = [f for r in KNOB_FLAGS for f in r.flags]
    flags += [f for flags_, _, _ in ASSUMED.values() for f in flags_]
    flags += ["--" + n.replace("_", "-") for n in list(IGNORED) + list(CONFIG_KEYS)]
    flags += list(SHORT_FLAGS)
    return {f: f != "-O" and is_switch(field_of(f)) for f in flags}


def rows_by_key() -> dict[str, KnobFlag]:
    """Flag or config key -> its row."""
    out: dict = {}
    for row in KNOB_FLAGS:
        for key in row.flags + ((f"{row.config[0]}.{row.config[1]}",) if row.config else ()):
            out[key] = row
    return out


def field_of(flag: str) -> str:
    """``--max-num-seqs`` / ``--max_num_seqs`` / ``-tp`` -> its EngineArgs field name."""
    for row in KNOB_FLAGS:
        if flag in row.flags:
            return row.flags[0][2:].replace("-", "_")
    for name, (flags, _, _) in ASSUMED.items():
        if flag in flags:
            return name
    return SHORT_FLAGS.get(flag) or flag.lstrip("-").replace("-", "_")


def is_switch(name: str) -> bool:
    """Whether the field is an on/off switch (no value follows its flag)."""
    specs = {s.name: s for s in knob_specs()}
    knob = next((r.knob for r in KNOB_FLAGS if r.flags and field_of(r.flags[0]) == name), None)
    if knob in specs:
        return specs[knob].kind is bool
    if name in ASSUMED:
        return isinstance(ASSUMED[name][1], bool)
    return IGNORED.get(name) is False


def parse_command(argv: list[str]) -> tuple[str, dict]:
    """(model, {EngineArgs field: the flag's text, or True/False for a switch}) of a
    ``vllm serve MODEL --flag value ...`` command, split as a shell would."""
    if len(argv) == 1:  # the whole command pasted as one quoted string
        try:
            argv = shlex.split(argv[0].replace("\\\n", " "))
        except ValueError as exc:  # "No closing quotation", "No escaped character"
            raise ValueError(f"command: the quoted command does not split as a shell would "
                             f"split it ({exc}): check its quotes") from None
    head = next((len(p) for p in SERVE_PREFIXES if list(argv[:len(p)]) == list(p)), None)
    if head is None:
        raise ValueError("command: expected `vllm serve MODEL [flags]` after `--`")
    args, model, values = list(argv[head:]), None, {}
    while args:
        arg = args.pop(0)
        if not arg.startswith("-"):
            if model is not None:
                raise ValueError(f"command: unexpected argument {arg!r} (one model only)")
            model = arg
            continue
        if arg.startswith("-O") and len(arg) > 2:  # -O3, -O=3 (vLLM's parser allows both)
            values["optimization_level"] = arg[2:].lstrip("=")
            continue
        flag, eq, text = arg.partition("=")
        negated = flag.startswith("--no-")
        # --speculative-config.num_speculative_tokens 1, -cc.cudagraph_mode PIECEWISE: the
        # part before the first dot is the flag, long or short
        # (vllm/utils/argparse_utils.py:420-446 `key, *keys = processed_arg.split(".")`)
        head, _, key = flag.partition(".")
        name = field_of("--" + head[5:] if negated else head)
        if name in CHECK_OPTIONS and not key:
            raise ValueError(f"{flag}: check's own options go before the -- (the rest is "
                             "the vllm serve command)")
        if is_switch(name) and not key:
            if eq:
                raise ValueError(f"{flag}: a switch takes no value")
            values[name] = not negated
            continue
        if negated:
            raise ValueError(f"{flag}: {flag[5:]!r} is not a switch")
        if not eq:
            if not args:
                raise ValueError(f"{flag}: needs a value")
            text = args.pop(0)
        while name in MANY_VALUES and not eq and args and not args[0].startswith("-"):
            text += " " + args.pop(0)  # --served-model-name a b: one or more names
        if name == "model":
            if model is not None and model != text:
                # vllm/utils/argparse_utils.py:282-312 `Move <model> to the front`: --model's
                # value becomes the positional one, the other an unrecognized argument
                raise ValueError(f"command: vLLM refuses two models ({model!r} and --model "
                                 f"{text!r}: the first is left as an unrecognized argument); "
                                 "give the model once")
            model = text
        elif key:  # each dot one level deeper, as vLLM's parser nests them
            nested = values.setdefault(name, {})
            *path, leaf = key.split(".")
            for part in path:
                nested = nested.setdefault(part, {}) if isinstance(nested, dict) else None
            if not isinstance(nested, dict) or not all(path + [leaf]):
                raise ValueError(f"{flag}: {name} given both as JSON and by key, or a key "
                                 "with an empty part")
            nested[leaf] = dotted_value(text)
        else:
            values[name] = text
    if model is None:
        raise ValueError("command: no model (vllm serve MODEL ...)")
    return model, values


def dotted_value(text: str):
    """A dotted flag's value as vLLM's parser reads it: JSON (``512``, ``true``, ``null``),
    else a human-readable integer (``80g``), else the text
    (vllm/utils/argparse_utils.py:434-444 `value = json.loads(value_str)`)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError; an integer past 4300 digits
        pass
    m = _HUMAN_INT.fullmatch(text)
    try:
        if m and m.group(2) in _DECIMAL:
            return int(float(m.group(1)) * _DECIMAL[m.group(2)])
        if m and m.group(1).isdigit():
            return int(m.group(1)) * _BINARY[m.group(2)]
    except (OverflowError, ValueError):  # digits past what a float or an int holds
        pass
    return text


def json_config(where: str, value) -> dict:
    """A JSON config flag's value (a file gives it as an object already)."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):  # a file's list or number: vllm.LLM takes a dict or None
        raise ValueError(f"{where}: expected a JSON object (or null), got {short_repr(value)}")
    try:
        out = json.loads(value)
    except RecursionError:
        raise ValueError(f"{where}: JSON nested too deeply to read") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more than 4300 digits
        said = None if isinstance(exc, json.JSONDecodeError) else too_many_digits(value)
        raise ValueError(f"{where}: {said}" if said else f"{where}: not JSON "
                         f"({getattr(exc, 'msg', exc)}): {short_repr(value)}") from None
    if not isinstance(out, dict):
        raise ValueError(f"{where}: expected a JSON object, got {value!r}")
    return out


HUMAN_READABLE = ("max_model_len", "max_num_batched_tokens")  # take 4k / 2K, as in vLLM:
# vllm/engine/arg_utils.py:390-401 `human_readable_int_args`,
# vllm/utils/argparse_utils.py:29-73 `def human_readable_int`


# vLLM's human-readable form: digits, an optional decimal part, one suffix
# (vllm/utils/argparse_utils.py:41 `re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)`);
# anything else is read by int() (vllm/utils/argparse_utils.py:73 `return int(value)`), so
# 1e3k, infk and -1k are refused.
_HUMAN_INT = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}  # 25.6k = 25600
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}  # whole numbers only


def parse_float(name: str, value, flag: str) -> float:
    """A number the way vLLM takes ``host_pool_gib``: Python's ``float()`` of the JSON value
    (vllm/config/kv_transfer.py:44 `host_pool_gib = float(host_pool_gib)`)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{flag}: {name} must be a number, got {short_repr(value)}: vLLM "
                         "refuses it (float() cannot read it)") from None


def parse_int(name: str, value, flag: str, human_readable: bool = True) -> int:
    """An integer the way vLLM's flags take one: 4, "4"; for HUMAN_READABLE knobs also
    "32k" (x1000) and "32K" (x1024).  ``human_readable=False`` (an engine-args file, the
    keyword arguments of ``vllm.LLM``, which no flag parser reads) takes no suffix."""
    bad = f"{flag}: {name} must be an integer, got {short_repr(value)}"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(bad)
    # an int -1 too: vllm.LLM(max_model_len=-1) fits it to the GPU's memory as the flag does
    text = value.strip() if isinstance(value, str) else "-1" if value == -1 else ""
    if name == "max_model_len" and (text == "-1" or text.lower() == "auto"):
        raise ValueError(f"{flag} {text}: fits max_model_len to the GPU's memory, which the "
                         "model does not know; give a number")
    if isinstance(value, int):
        return value
    m = _HUMAN_INT.fullmatch(text) if name in HUMAN_READABLE else None
    if m and not human_readable:
        raise ValueError(f"{flag}: {name} must be an integer, got {value!r}: vllm.LLM takes "
                         "a number, the 4k / 4K spellings are vllm serve's flags only")
    try:
        if m and m.group(2) in _DECIMAL:
            return int(float(m.group(1)) * _DECIMAL[m.group(2)])
        if m:
            return int(m.group(1)) * _BINARY[m.group(2)]
        return int(text)
    except OverflowError:  # 1e400-sized digits with a decimal suffix: float() is infinite
        raise ValueError(f"{flag}: {name} {short_repr(value)}: too large a number") from None
    except ValueError:
        if m:  # vLLM's own words (vllm/utils/argparse_utils.py:66-70 `Decimals are not allowed`)
            raise ValueError(f"{flag}: Decimals are not allowed with binary suffixes like "
                             f"{m.group(2)}. Did you mean to use {m.group(1)}"
                             f"{m.group(2).lower()} instead?") from None
        raise ValueError(bad) from None


def parse_bool(value, flag: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ValueError(f"{flag}: expected true or false, got {value!r}")
