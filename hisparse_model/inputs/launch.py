"""A pasted launch command (``vllm serve ...``) or engine-args file, read as :class:`Knobs`.

``hisparse check -- vllm serve deepseek-ai/DeepSeek-V3.2 --max-num-seqs 4
...`` reads vLLM's own flag names; ``check --engine-args FILE.json`` reads the same
settings as ``vllm.LLM(**args)`` keyword arguments.  Every setting is one of
(the tables are in ``vllm_flags.py``):

* a knob (:data:`KNOB_FLAGS`): one row per :class:`Knobs` field, naming vLLM's
  flag (or the key of a JSON config flag) that sets it; the value is converted
  and validated by the knob's declaration (``knob_specs``), so a knob added to
  ``Knobs`` needs only its row here (``-tp``/``-dp`` and the parallel sizes HiSparse
  refuses, ``-pp``/``-dcp``, included: the knobs refuse them with vLLM's texts);
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
import math
import os
from typing import NamedTuple

from .hisparse_config import hisparse_on
from ..model.host_pool import smallest_pool_gib
from ..model.kv_layout import QUANTIZED, layout_for
from ..model.served_model import DEEPSEEK_V32, canonical_overrides, served_model
from ..model.knobs import Knobs, knob_specs, picked_backend
from .vllm_flags import (ASSUMED, CHECK_OPTIONS, CONFIG_KEYS, IGNORED, KNOB_FLAGS, KnobFlag,
                         field_of, json_config, parse_bool, parse_command, parse_float,
                         parse_int, rows_by_key)
from ..schedule.workload import read_json_file, short_repr

SERVE_MAX_BATCHED_TOKENS = 8192  # tokens/step: vllm serve's default on a >= 70 GiB GPU
OFFLINE_MAX_BATCHED_TOKENS = 16384  # tokens/step: the offline LLM class's (plan.py)
DEFAULT_MAX_NUM_SEQS = 1024  # requests/step: both contexts' default on a >= 70 GiB GPU
SERVE, ENGINE_ARGS = "vllm serve command", "engine-args file"  # where the settings came from
MODEL_NAME = "deepseek-v3.2"  # the model this package covers (any name containing it)


class Launch(NamedTuple):
    """What a launch command says: the knobs, where each came from, what was ignored."""

    knobs: Knobs
    source: str  # SERVE or ENGINE_ARGS
    read: dict  # knob -> the flag (or config key) it came from
    defaults: dict  # knob -> why it has the value it has (vLLM's default in this context)
    ignored: list[str]  # the flags (or keys) that no batch depends on
    hisparse: str  # the flag (or key) that switches HiSparse on
    notes: tuple[str, ...] = ()  # what else the answer rests on (a start-up log's checks)

    def as_json(self) -> dict:
        out = {"source": self.source, "read": self.read, "defaults": self.defaults,
               "ignored": self.ignored, "hisparse": self.hisparse}
        return {**out, "notes": list(self.notes)} if self.notes else out


def launch_lines(launch: Launch) -> list[str]:
    """What ``check`` read, before the prediction: each knob and where its value came from."""
    k = launch.knobs
    version = ("" if "vllm_version" in launch.read else "; --vllm sets it")  # a log names it
    lines = [f"Read from the {launch.source} (vLLM {k.vllm_version}{version}):",
             f"  HiSparse on  ({launch.hisparse})"]
    for name in list(launch.read) + list(launch.defaults):
        origin = launch.read.get(name) or f"default: {launch.defaults[name]}"
        lines.append(f"  {name} = {getattr(k, name)}  ({origin})")
    if {s.name for s in knob_specs()} - set(launch.read) - set(launch.defaults):
        lines.append("  every other knob: vLLM's default "
                     "(hisparse predict --help)")
    lines += [f"  {note}" for note in launch.notes]
    lines.append("Ignored (no batch depends on them): " + (", ".join(launch.ignored) or "none"))
    lines.append(f"Answered like predict: the {launch.source}'s engine serving the prompts below "
                 "one after another.")
    return lines + [""]


def check_model(model) -> None:
    """Refuse a model other than DeepSeek-V3.2 (by its name, the one thing a command says;
    a local directory by its config.json)."""
    if not isinstance(model, str):  # EngineArgs.model is one name
        raise ValueError(f"model: expected one model name (a string), got {short_repr(model)}")
    if not os.path.isdir(model) and MODEL_NAME not in os.path.basename(
            str(model).rstrip("/")).lower():
        raise ValueError(f"model {model!r}: the model covers DeepSeek-V3.2 only "
                         "(a model name containing DeepSeek-V3.2, or a local directory with "
                         "its config.json)")
    served_model(model)  # a local directory's config.json: readable, the keys HiSparse needs


def served_model_name(model, checked: bool) -> str:
    """The model a command serves, as the knob takes it.  ``checked``: a start-up log named
    the architecture, so a path the model does not know (the log's machine) is answered
    with DeepSeek-V3.2's own config."""
    if not checked:
        check_model(model)
        return model
    try:
        served_model(model)
    except ValueError:
        return DEEPSEEK_V32
    return model


def knobs_from_settings(model: str, settings: dict, vllm_version: str, source: str, *,
                        model_checked: bool = False) -> Launch:
    """The knobs of one engine: ``settings`` maps EngineArgs fields to values (text or JSON).

    ``model_checked``: the caller has checked the model otherwise (a start-up log names its
    architecture), so ``model`` is not judged by its name."""
    model = served_model_name(model, model_checked)
    specs = {s.name: s for s in knob_specs()}
    by_flag = rows_by_key()
    by_field = {field_of(r.flags[0]): r for r in KNOB_FLAGS if r.flags}
    serve = source == SERVE
    values: dict = {}
    read: dict = {}
    ignored: list[str] = []
    hisparse = ""  # where HiSparse is switched on
    connector = False  # the HiSparseConnector is configured (it carries the host pool)

    def spell(name: str) -> str:  # as the user wrote it: a flag, or a file's key
        return "--" + name.replace("_", "-") if serve else name

    def set_knob(row: KnobFlag, value, where: str) -> None:
        kind = specs[row.knob].kind
        if kind is int:
            value = parse_int(row.knob, value, where, human_readable=serve)
        elif kind is float:
            value = parse_float(row.knob, value, where)
        elif kind is bool:
            value = parse_bool(value, where)
        elif row.knob in ("cudagraph_mode", "attention_backend"):
            value = str(value).upper()  # vLLM's enums take their names in either case
        elif row.knob == "hf_overrides":
            value = canonical_overrides(value)
        values[row.knob] = value
        read[row.knob] = where

    for name, value in settings.items():
        where = spell(name)
        if name in CONFIG_KEYS and value is None and not serve:
            continue  # vllm.LLM makes vLLM's default config of None (_make_config, below)
        if name in NONE_IS_DEFAULT and value is None and not serve:
            continue  # vLLM's default, as if not given
        if name == "compilation_config" and not serve and isinstance(value, int):
            ignored.append(compilation_mode(value))
            continue
        if name in CONFIG_KEYS:
            config = json_config(where, value)
            allowed = CONFIG_KEYS[name]
            if name == "speculative_config" and "method" not in config:
                raise ValueError(f"{where}: give \"method\": \"mtp\" (the model covers "
                                 "DeepSeek-V3.2's MTP drafter only)")
            if name == "kv_transfer_config":
                kv_role_refusal(config, where)
            for key, sub in config.items():
                here = f"{where} {key}"
                if key not in allowed:
                    raise ValueError(f"{here}: the model does not cover this setting (it reads "
                                     f"{', '.join(allowed)} from {where})")
                row = by_flag.get(f"{name}.{key}")
                if key == "kv_connector_extra_config":
                    extra = connector_extra(here, sub)
                    for extra_key, extra_value in extra.items():
                        row = by_flag.get(f"{name}.{key}.{extra_key}")
                        if row is not None and extra_value is None:
                            continue  # null: vLLM's .get() finds no pool (host_pool_refusal)
                        if row is not None:
                            set_knob(row, extra_value, f"{here} {extra_key}")
                        else:
                            ignored.append(f"{here} {extra_key}")
                elif row is not None:
                    set_knob(row, sub, here)
                elif allowed[key] is not None and str(sub) not in allowed[key]:
                    raise ValueError(f"{here} {sub!r}: the model covers "
                                     f"{' or '.join(allowed[key])} only")
                elif key == "hisparse_config" and not hisparse_on(sub, here):
                    continue  # null: off (hisparse_config.py), unless a connector switches it on
                elif key == "hisparse_config" or config.get(key) == "HiSparseConnector":
                    hisparse = hisparse or here  # switches HiSparse on
                    connector = connector or key == "kv_connector"
                elif allowed[key] is None:
                    ignored.append(here)
        elif name in by_field:
            set_knob(by_field[name], value, where)
        elif name in ASSUMED:
            _, assumed, what = ASSUMED[name]
            got = (parse_bool(value, where) if isinstance(assumed, bool)
                   else parse_int(name, value, where) if isinstance(assumed, int) else str(value))
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
        raise ValueError("HiSparse is off in these settings (no --attention-config with "
                         "hisparse_config, no --kv-transfer-config with HiSparseConnector): "
                         "the off-by-one cannot happen; the model covers HiSparse engines")
    values["model"] = model
    read["model"] = "vllm serve MODEL" if serve else "model"
    host_pool_refusal(connector, values, spell("kv_transfer_config"))
    return resolve_defaults(values, read, ignored, vllm_version, source, hisparse)


# vLLM's KVTransferConfig roles (vllm/config/kv_transfer.py:11-13 `KVProducer = Literal`)
KV_ROLES = ("kv_producer", "kv_both", "kv_consumer")


def kv_role_refusal(config: dict, where: str) -> None:
    """Refuse what vLLM's ``KVTransferConfig`` refuses of ``kv_role``: a role other than its
    three (vllm/config/kv_transfer.py:129-133 `Unsupported kv_role`), and none with a
    connector (vllm/config/kv_transfer.py:135-139 `Please specify kv_role when kv_connector`,
    vllm/config/kv_transfer.py:141-145@0.34.0 `Please specify kv_role`).  ``null`` is no
    role, as vLLM's ``None``."""
    role = config.get("kv_role")
    if role is not None and role not in KV_ROLES:
        raise ValueError(f"{where} kv_role: vLLM refuses it: Unsupported kv_role: "
                         f"{short_repr(role)}. Supported roles are {KV_ROLES}")
    if config.get("kv_connector") is not None and role is None:
        raise ValueError(f"{where}: vLLM refuses it: Please specify kv_role when kv_connector "
                         f"is set, supported roles are {KV_ROLES} (the HiSparseConnector "
                         "takes \"kv_role\": \"kv_both\")")


def connector_extra(where: str, extra) -> dict:
    """The HiSparseConnector's ``kv_connector_extra_config``: an object (vLLM's field is a
    ``dict[str, Any]``, vllm/config/kv_transfer.py:93 `kv_connector_extra_config: dict[str, Any]`)."""
    if not isinstance(extra, dict):
        raise ValueError(f"{where}: vLLM refuses it: expected an object, got "
                         f"{short_repr(extra)}")
    return extra


def host_pool_refusal(connector: bool, values: dict, where: str) -> None:
    """Refuse HiSparse without a host pool, as vLLM's engine core does when it sizes the
    KV cache: HiSparse on without the HiSparseConnector (vllm/v1/hisparse/layout.py:85-88
    `HiSparse requires HiSparseConnector with host_pool_gib`), or the connector without
    ``host_pool_gib`` (vllm/config/kv_transfer.py:41-43 `HiSparseConnector requires host_pool_gib`);
    vLLM has no default size for the pool."""
    if "host_pool_gib" in values:
        return
    # a pool that holds one request of the command's max_model_len, in whole GiB, for the
    # command's own model and KV-cache dtype
    served = served_model(values["model"], values.get("hf_overrides"))
    lay = layout_for(values["model"], values.get("hf_overrides"),
                  values.get("num_speculative_tokens", 0), values.get("kv_cache_dtype", "auto"),
                  values.get("tensor_parallel_size", 1) > 1)
    gib = math.ceil(smallest_pool_gib(values.get("max_model_len",
                                                 served.max_position_embeddings), lay))
    if not connector:
        raise ValueError(f"{where}: HiSparse needs the HiSparseConnector and its host pool, "
                         "else vLLM refuses to start (\"HiSparse requires HiSparseConnector "
                         "with host_pool_gib\"): add --kv-transfer-config '{\"kv_connector\": "
                         "\"HiSparseConnector\", \"kv_role\": \"kv_both\", "
                         f"\"kv_connector_extra_config\": {{\"host_pool_gib\": {gib}}}}}' "
                         "(GiB; at least that for this max_model_len)")
    raise ValueError(f"{where} kv_connector_extra_config: give host_pool_gib (GiB), else vLLM "
                     "refuses to start (\"HiSparseConnector requires host_pool_gib\")")


# EngineArgs fields whose None is vLLM's default:
# vllm/engine/arg_utils.py:572 `enable_prefix_caching: bool | None = None`,
# vllm/engine/arg_utils.py:590 `max_num_batched_tokens: int | None = None`,
# vllm/engine/arg_utils.py:596 `max_num_seqs: int | None = None`,
# vllm/engine/arg_utils.py:682 `num_gpu_blocks_override: int | None`,
# vllm/engine/arg_utils.py:778 `attention_backend: AttentionBackendEnum | None`,
# vllm/config/model.py:217 `max_model_len: int = Field(default=None`
NONE_IS_DEFAULT = ("enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs",
                   "num_gpu_blocks_override", "attention_backend", "max_model_len")
# vllm.LLM's config arguments (vllm/entrypoints/llm.py:260-266 `def _make_config`): None
# is vLLM's default config, a dict is read; an integer compilation_config is a
# compilation mode (vllm/entrypoints/llm.py:268-271 `mode=CompilationMode(compilation_config)`).
COMPILATION_MODES = ("NONE", "STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE")
# vllm/config/compilation.py:37-50 `class CompilationMode(enum.IntEnum)`: 0 .. 3


def compilation_mode(value: int) -> str:
    """An integer ``compilation_config``: a torch.compile mode, which no batch depends on
    here: DeepSeek-V3.2's breakable CUDA graphs set the mode to NONE whatever it was
    (vllm/config/vllm.py:863-864 `self.compilation_config.mode = CompilationMode.NONE`)."""
    if not 0 <= value < len(COMPILATION_MODES):
        raise ValueError(f"compilation_config {value}: vllm.LLM refuses it ({value} is not a "
                         f"valid CompilationMode: 0 to {len(COMPILATION_MODES) - 1})")
    return (f"compilation_config {value} (mode {COMPILATION_MODES[value]}: breakable CUDA "
            "graphs set the mode to NONE)")


def resolve_defaults(values: dict, read: dict, ignored: list, version: str, source: str,
             hisparse: str) -> Launch:
    """Fill what the command leaves unset with vLLM's defaults in its usage context."""
    defaults = {}
    serve = source == SERVE
    cap = SERVE_MAX_BATCHED_TOKENS if serve else OFFLINE_MAX_BATCHED_TOKENS
    if "max_model_len" not in values:
        served = served_model(values["model"], values.get("hf_overrides"))
        values["max_model_len"] = served.max_position_embeddings
        defaults["max_model_len"] = f"the model's own length ({served.label})"
    if values.get("kv_cache_dtype") in QUANTIZED and "attention_backend" not in values:
        values["attention_backend"] = picked_backend(values["kv_cache_dtype"])
        defaults["attention_backend"] = ("vLLM's pick on an H200 for a quantized KV cache "
                                         "(FLASH_ATTN_MLA_SPARSE serves bf16 only)")
    length = values["max_model_len"]
    if isinstance(length, int) and length < 1:  # the defaults below are products of it
        said = f"max_model_len must be >= 1, got {length}"
        raise ValueError(f"{read['max_model_len']}: {said}" if "max_model_len" in read else said)
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
    args = read_json_file(path, "engine args")
    if not isinstance(args, dict) or "model" not in args:  # vllm.LLM(model=...) takes one
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
