"""A pasted launch command (``vllm serve ...``) or engine-args file, read as :class:`Knobs`.

``python -m hisparse_model check -- vllm serve deepseek-ai/DeepSeek-V3.2 --max-num-seqs 4
...`` reads vLLM's own flag names; ``check --engine-args FILE.json`` reads the same
settings as ``vllm.LLM(**args)`` keyword arguments.  Every setting is one of:

* a knob (:data:`KNOB_FLAGS`): one row per :class:`Knobs` field, naming vLLM's
  flag (or the key of a JSON config flag) that sets it; the value is converted
  and validated by the knob's declaration (``knob_specs``), so a knob added to
  ``Knobs`` needs only its row here.  A row whose knob ``Knobs`` does not (yet)
  declare is held to the model's assumption instead (``-tp``/``-dp``: 1);
* held to the model's assumption (:data:`ASSUMED`): accepted at the assumed
  value, refused otherwise (exit 2), since the model would answer for another
  engine;
* ignored (:data:`IGNORED`): serving, logging or weight-loading settings that
  no batch depends on; each one found is named in the answer;
* anything else is refused: the check cannot tell whether it changes what the
  model assumes.

Defaults follow vLLM's usage context.  ``vllm serve`` is the OpenAI server:
without ``--max-num-batched-tokens`` B = min(S * max_model_len, 8192) on an H200
(vllm/engine/arg_utils.py:2870-2877 `UsageContext.OPENAI_API_SERVER: 8192`,
vllm/engine/arg_utils.py:3102-3105 `self.max_num_seqs * model_config.max_model_len`),
8192 instead of the offline class's 16384; without ``--max-num-seqs``
S = min(1024, B) (vllm/engine/arg_utils.py:2876 `UsageContext.OPENAI_API_SERVER: 1024`,
vllm/engine/arg_utils.py:3115 `self.max_num_seqs = min(self.max_num_seqs, self.max_num_batched_tokens)`).
An engine-args file is the offline class (16384, 1024).  Without
``--max-model-len`` the model's own 163840 applies.  B is then fixed at that
value, so advice that changes S keeps it (said in the answer).

HiSparse must be on: ``--attention-config`` with ``hisparse_config``, or
``--kv-transfer-config`` with the ``HiSparseConnector``, which switches it on
(vllm/config/vllm.py:1813-1818 `has_connector("HiSparseConnector")`).
"""

from __future__ import annotations

import json
import os
import shlex
from typing import NamedTuple

from .knobs import MODEL_MAX_LEN, Knobs, knob_specs

SERVE_MAX_BATCHED_TOKENS = 8192  # tokens/step: vllm serve's default on a >= 70 GiB GPU
OFFLINE_MAX_BATCHED_TOKENS = 16384  # tokens/step: the offline LLM class's (plan.py)
DEFAULT_MAX_NUM_SEQS = 1024  # requests/step: both contexts' default on a >= 70 GiB GPU
# How a pasted command starts: vllm serve, or the OpenAI server module it runs (same flags).
SERVE_PREFIXES = (("vllm", "serve"), *((py, "-m", "vllm.entrypoints.openai.api_server")
                                       for py in ("python", "python3")))
SERVE, ENGINE_ARGS = "vllm serve command", "engine-args file"  # where the settings came from
MODEL_NAME = "deepseek-v3.2"  # the model this package covers (any name containing it)


class KnobFlag(NamedTuple):
    """Where vLLM reads one knob: its flags, or a key of a JSON config flag."""

    knob: str
    flags: tuple[str, ...] = ()  # vLLM's flags, long form first
    config: tuple[str, str] | None = None  # (EngineArgs field of a JSON config, key)
    assumed: object = None  # the model's value while Knobs does not declare the knob


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
    KnobFlag("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), assumed=1),
    KnobFlag("data_parallel_size", ("--data-parallel-size", "-dp"), assumed=1),
)

# EngineArgs field -> (flags, the model's value, why it matters); other values are refused.
ASSUMED = {
    "pipeline_parallel_size": (("--pipeline-parallel-size", "-pp"), 1, "one GPU per rank"),
    "decode_context_parallel_size": (("--decode-context-parallel-size", "-dcp"), 1,
                                     "no context parallelism"),
    "block_size": (("--block-size",), 64, "64-token KV blocks"),
    "enable_chunked_prefill": (("--enable-chunked-prefill",), True, "chunked prefill"),
    "async_scheduling": (("--async-scheduling",), True, "async scheduling"),
    "optimization_level": (("--optimization-level", "-O"), "2", "-O2 compilation"),
    "performance_mode": (("--performance-mode",), "balanced", "vLLM's default batch sizes"),
    "scheduling_policy": (("--scheduling-policy",), "fcfs", "first-come scheduling"),
    "kv_cache_dtype": (("--kv-cache-dtype",), "auto", "the KV-cache dtype that picks the "
                       "attention backend"),
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
CHECK_OPTIONS = ("prompt_lens", "json", "check", "full", "vllm", "engine_args")  # check's own
_SHORT = {"-sc": "speculative_config", "-cc": "compilation_config", "-ac": "attention_config"}


class Launch(NamedTuple):
    """What a launch command says: the knobs, where each came from, what was ignored."""

    knobs: Knobs
    source: str  # SERVE or ENGINE_ARGS
    read: dict  # knob -> the flag (or config key) it came from
    defaults: dict  # knob -> why it has the value it has (vLLM's default in this context)
    ignored: list[str]  # the flags (or keys) that no batch depends on
    hisparse: str  # the flag (or key) that switches HiSparse on

    def as_json(self) -> dict:
        return {"source": self.source, "read": self.read, "defaults": self.defaults,
                "ignored": self.ignored, "hisparse": self.hisparse}


def launch_lines(launch: Launch) -> list[str]:
    """What ``check`` read, before the prediction: each knob and where its value came from."""
    k = launch.knobs
    lines = [f"Read from the {launch.source} (vLLM {k.vllm_version}; --vllm sets it):",
             f"  HiSparse on  ({launch.hisparse})"]
    for name in list(launch.read) + list(launch.defaults):
        origin = launch.read.get(name) or f"default: {launch.defaults[name]}"
        lines.append(f"  {name} = {getattr(k, name)}  ({origin})")
    lines.append("  every other knob: vLLM's default (python -m hisparse_model predict --help)")
    lines.append("Ignored (no batch depends on them): " + (", ".join(launch.ignored) or "none"))
    lines.append(f"Answered like predict: the {launch.source}'s engine serving the prompts below "
                 "one after another.")
    return lines + [""]


def all_flags() -> dict[str, bool]:
    """Every vLLM flag the tables name, and whether ``check`` reads it as a switch."""
    flags = [f for r in KNOB_FLAGS for f in r.flags]
    flags += [f for flags_, _, _ in ASSUMED.values() for f in flags_]
    flags += ["--" + n.replace("_", "-") for n in list(IGNORED) + list(CONFIG_KEYS)]
    flags += list(_SHORT)
    return {f: f != "-O" and _switch(_field(f)) for f in flags}


def _rows() -> dict[str, KnobFlag]:
    """Flag or config key -> its row; knobs Knobs does not declare are held to ``assumed``."""
    out: dict = {}
    for row in KNOB_FLAGS:
        for key in row.flags + ((f"{row.config[0]}.{row.config[1]}",) if row.config else ()):
            out[key] = row
    return out


def _field(flag: str) -> str:
    """``--max-num-seqs`` / ``--max_num_seqs`` / ``-tp`` -> its EngineArgs field name."""
    for row in KNOB_FLAGS:
        if flag in row.flags:
            return row.flags[0][2:].replace("-", "_")
    for name, (flags, _, _) in ASSUMED.items():
        if flag in flags:
            return name
    return _SHORT.get(flag) or flag.lstrip("-").replace("-", "_")


def _switch(name: str) -> bool:
    """Whether the field is an on/off switch (no value follows its flag)."""
    specs = {s.name: s for s in knob_specs()}
    knob = next((r.knob for r in KNOB_FLAGS if r.flags and _field(r.flags[0]) == name), None)
    if knob in specs:
        return specs[knob].kind is bool
    if name in ASSUMED:
        return isinstance(ASSUMED[name][1], bool)
    return IGNORED.get(name) is False


def parse_command(argv: list[str]) -> tuple[str, dict]:
    """(model, {EngineArgs field: the flag's text, or True/False for a switch}) of a
    ``vllm serve MODEL --flag value ...`` command, split as a shell would."""
    if len(argv) == 1:  # the whole command pasted as one quoted string
        argv = shlex.split(argv[0].replace("\\\n", " "))
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
        name = _field("--" + flag[5:] if negated else flag)
        name, _, key = name.partition(".")  # --speculative-config.num_speculative_tokens 1
        if _switch(name) and not key:
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
        if name == "model":
            model = text
        elif key:
            nested = values.setdefault(name, {})
            if not isinstance(nested, dict):
                raise ValueError(f"{flag}: {name} given both as JSON and by key")
            nested[key] = text
        else:
            values[name] = text
    if model is None:
        raise ValueError("command: no model (vllm serve MODEL ...)")
    return model, values


def _json_config(where: str, value) -> dict:
    """A JSON config flag's value (a file gives it as an object already)."""
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc.msg}): {value!r}") from None
    if not isinstance(out, dict):
        raise ValueError(f"{where}: expected a JSON object, got {value!r}")
    return out


HUMAN_READABLE = ("max_model_len", "max_num_batched_tokens")  # take 4k / 2K, as in vLLM:
# vllm/engine/arg_utils.py:390-401 `human_readable_int_args`,
# vllm/utils/argparse_utils.py:29-73 `def human_readable_int`


def _int(name: str, value, flag: str) -> int:
    """An integer the way vLLM's flags take one: 4, "4"; for HUMAN_READABLE knobs also
    "32k" (x1000) and "32K" (x1024)."""
    if isinstance(value, bool):
        raise ValueError(f"{flag}: {name} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if name == "max_model_len" and text in ("-1", "auto"):
        raise ValueError(f"{flag} {text}: fits max_model_len to the GPU's memory, which the "
                         "model does not know; give a number")
    suffix = text[-1:] if name in HUMAN_READABLE else ""
    decimal = {"k": 10**3, "m": 10**6, "g": 10**9}.get(suffix)  # 25.6k = 25600
    binary = {"K": 2**10, "M": 2**20, "G": 2**30}.get(suffix)  # whole numbers only
    try:
        if decimal:
            return int(float(text[:-1]) * decimal)
        return int(text[:-1]) * binary if binary else int(text)
    except ValueError:
        raise ValueError(f"{flag}: {name} must be an integer, got {value!r}") from None


def _as_bool(value, flag: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ValueError(f"{flag}: expected true or false, got {value!r}")


def knobs_from_settings(model: str, settings: dict, vllm_version: str, source: str) -> Launch:
    """The knobs of one engine: ``settings`` maps EngineArgs fields to values (text or JSON)."""
    if MODEL_NAME not in os.path.basename(str(model).rstrip("/")).lower():
        raise ValueError(f"model {model!r}: the model covers DeepSeek-V3.2 only "
                         "(a model name containing DeepSeek-V3.2)")
    specs = {s.name: s for s in knob_specs()}
    by_flag = _rows()
    by_field = {_field(r.flags[0]): r for r in KNOB_FLAGS if r.flags}
    serve = source == SERVE
    values: dict = {}
    read: dict = {}
    ignored: list[str] = []
    hisparse = ""  # where HiSparse is switched on

    def spell(name: str) -> str:  # as the user wrote it: a flag, or a file's key
        return "--" + name.replace("_", "-") if serve else name

    def set_knob(row: KnobFlag, value, where: str) -> None:
        if row.knob not in specs:  # a row whose knob is not declared: the model's value
            got = _int(row.knob, value, where)
            if got != row.assumed:
                raise ValueError(f"{where} {got}: changes what the model assumes "
                                 f"({row.knob} = {row.assumed}: one GPU)")
            return
        kind = specs[row.knob].kind
        if kind is int:
            value = _int(row.knob, value, where)
        elif kind is bool:
            value = _as_bool(value, where)
        elif row.knob in ("cudagraph_mode", "attention_backend"):
            value = str(value).upper()  # vLLM's enums take their names in either case
        values[row.knob] = value
        read[row.knob] = where

    for name, value in settings.items():
        where = spell(name)
        if name in CONFIG_KEYS:
            config = _json_config(where, value)
            allowed = CONFIG_KEYS[name]
            if name == "speculative_config" and "method" not in config:
                raise ValueError(f"{where}: give \"method\": \"mtp\" (the model covers "
                                 "DeepSeek-V3.2's MTP drafter only)")
            for key, sub in config.items():
                here = f"{where} {key}"
                if key not in allowed:
                    raise ValueError(f"{here}: the model does not cover this setting (it reads "
                                     f"{', '.join(allowed)} from {where})")
                row = by_flag.get(f"{name}.{key}")
                if row is not None:
                    set_knob(row, sub, here)
                elif allowed[key] is not None and str(sub) not in allowed[key]:
                    raise ValueError(f"{here} {sub!r}: the model covers "
                                     f"{' or '.join(allowed[key])} only")
                elif key == "hisparse_config" or config.get(key) == "HiSparseConnector":
                    hisparse = hisparse or here  # switches HiSparse on
                elif allowed[key] is None:
                    ignored.append(here)
        elif name in by_field:
            set_knob(by_field[name], value, where)
        elif name in ASSUMED:
            _, assumed, what = ASSUMED[name]
            got = (_as_bool(value, where) if isinstance(assumed, bool)
                   else _int(name, value, where) if isinstance(assumed, int) else str(value))
            if got != assumed:
                raise ValueError(f"{where} {value}: changes what the model assumes ({what}: "
                                 f"{name} = {assumed})")
        elif name in IGNORED:
            ignored.append(where)
        elif serve and name in CHECK_OPTIONS:
            raise ValueError(f"{where}: check's own options go before the -- (the rest is "
                             "the vllm serve command)")
        else:
            raise ValueError(f"{where}: not a setting this check knows; it cannot tell whether "
                             "it changes what the model assumes (remove it to check the rest)")
    if not hisparse:
        raise ValueError("HiSparse is off in this command (no --attention-config with "
                         "hisparse_config, no --kv-transfer-config with HiSparseConnector): "
                         "the off-by-one cannot happen; the model covers HiSparse engines")
    return _resolve(values, read, ignored, vllm_version, source, hisparse)


def _resolve(values: dict, read: dict, ignored: list, version: str, source: str,
             hisparse: str) -> Launch:
    """Fill what the command leaves unset with vLLM's defaults in its usage context."""
    defaults = {}
    serve = source == SERVE
    cap = SERVE_MAX_BATCHED_TOKENS if serve else OFFLINE_MAX_BATCHED_TOKENS
    if "max_model_len" not in values:
        values["max_model_len"] = MODEL_MAX_LEN
        defaults["max_model_len"] = "DeepSeek-V3.2's own length"
    length = values["max_model_len"]
    if "max_num_batched_tokens" not in values:
        seqs = values.get("max_num_seqs", DEFAULT_MAX_NUM_SEQS)
        values["max_num_batched_tokens"] = min(seqs * length, cap)
        defaults["max_num_batched_tokens"] = (
            f"{source}'s default on an H200: min(max_num_seqs * max_model_len, {cap}); "
            "advice keeps it fixed")
    if "max_num_seqs" not in values:
        values["max_num_seqs"] = min(DEFAULT_MAX_NUM_SEQS, values["max_num_batched_tokens"])
        defaults["max_num_seqs"] = (f"{source}'s default on an H200: min("
                                    f"{DEFAULT_MAX_NUM_SEQS}, max_num_batched_tokens)")
    try:
        knobs = Knobs(vllm_version=version, **values)
    except ValueError as exc:  # the message starts with the knob's name: add where it was set
        knob = str(exc).split(" ", 1)[0].rstrip(":")
        raise ValueError(f"{read[knob]}: {exc}" if knob in read else str(exc)) from None
    return Launch(knobs, source, read, defaults, ignored, hisparse)


def from_command(argv: list[str], vllm_version: str) -> Launch:
    """The knobs of ``vllm serve MODEL [flags]`` (split as a shell would)."""
    model, values = parse_command(argv)
    return knobs_from_settings(model, values, vllm_version, SERVE)


def from_engine_args(path: str, vllm_version: str) -> Launch:
    """The knobs of an engine-args JSON file: ``vllm.LLM(**args)``'s keyword arguments."""
    try:
        with open(path, encoding="utf-8") as f:
            args = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"engine args {path}: malformed JSON: {exc}") from None
    except OSError as exc:
        raise ValueError(f"engine args {path}: {exc.strerror}") from None
    if not isinstance(args, dict) or "model" not in args:
        raise ValueError(f"engine args {path}: expected an object with \"model\"")
    args = dict(args)
    model = args.pop("model")
    return knobs_from_settings(model, args, vllm_version, ENGINE_ARGS)


def change_as_flags(change: dict) -> str:
    """One piece of advice in vLLM's own words: ``--max-num-seqs 3``, ``vLLM 0.32.0``."""
    out = []
    for name, value in change.items():
        if name == "vllm_version":
            out.append(f"upgrade to vLLM {value}")
        elif name == "routing":
            out.append("patch 0.31.0 with the upstream fix (routing=fix)")
        elif name == "num_speculative_tokens":
            spec = {"method": "mtp", "num_speculative_tokens": value}
            out.append("--speculative-config '" + json.dumps(spec) + "'" if value
                       else "no --speculative-config (MTP off)")
        else:
            row = next(r for r in KNOB_FLAGS if r.knob == name)
            out.append(f"{row.flags[0]} {value}" if row.flags else f"{name}={value}")
    return ", ".join(out)
