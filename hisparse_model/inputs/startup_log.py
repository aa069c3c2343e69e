"""``check --from-log FILE``: the engine a vLLM start-up log describes, read as a :class:`Launch`.

An operator often has the log of a running ``vllm serve`` (or ``vllm.LLM``), not the command.
The engine prints what it resolved while it starts; this module reads the first start-up
in the log (any line prefix: ``(APIServer pid=..) INFO 12-01 10:00:00 [file.py:N]``,
``(EngineCore_DP0 pid=..)``, ...) and names, for each knob, the line it came from.  The
lines it reads, each printed by vLLM with the same text in every version the model covers:

* ``non-default args: {...}``, the engine arguments the user set (required: it says
  whether HiSparse is on, and holds ``block_size``, ``max_num_seqs``, the speculative
  config): vllm/entrypoints/serve/utils/api_utils.py:286 `non-default args: %s` in 0.31.0,
  vllm/entrypoints/serve/utils/api_utils.py:286@0.32.0 `non-default args: %s`,
  vllm/entrypoints/common/startup.py:96@0.33.0 `non-default args: %s`.  They are read
  by the rules of ``check --engine-args`` (``launch.knobs_from_settings``: the same
  assumptions held, the same settings ignored or refused, the same "HiSparse is off"
  refusal); the config objects' reprs (``AttentionConfig(...)``, ``KVTransferConfig(...)``)
  are read for the keys the model reads.  ``hf_overrides`` given as an object is read as
  ``--hf-overrides``; the project's live runner's function (``shrink_hf_config``) is the fix
  PR's reproduction; another function, which the log does not spell out, is named as
  ignored, and the hot cache's ``top_k`` must then be the config's ``index_topk``.  The
  compilation config's other keys are named as ignored.
* ``Initializing a V1 LLM engine (vX.Y.Z) with config: ...`` (required): the version and the
  resolved max_model_len (``max_seq_len``), K (``SpeculativeConfig(..., num_spec_tokens=K)``
  or None), enforce_eager, enable_prefix_caching, the four parallel sizes, chunked prefill,
  the CUDA-graph mode and capture sizes: vllm/v1/engine/core.py:130 `Initializing a V1 LLM
  engine (v%s) with config: %s`, vllm/v1/engine/core.py:134@0.32.0 `Initializing a V1 LLM
  engine (v%s) with config: %s`, vllm/v1/engine/core.py:140@0.33.0 `Initializing a V1 LLM
  engine (v%s) with config: %s`; the fields as vllm/config/vllm.py:2851 `max_seq_len=`,
  vllm/config/vllm.py:2714@0.32.0 `max_seq_len=`, vllm/config/vllm.py:2820@0.33.0
  `max_seq_len=` write them, K as vllm/config/speculative.py:1995 `{num_spec_tokens=}`,
  vllm/config/speculative.py:2004@0.32.0 `{num_spec_tokens=}`,
  vllm/config/speculative.py:2210@0.33.0 `{num_spec_tokens=}` does.  Only a host's first
  DP rank prints it (vllm/v1/engine/core.py:128 `data_parallel_rank_local`).
* ``Chunked prefill is enabled with max_num_batched_tokens=B.`` (required, B as resolved):
  vllm/config/scheduler.py:309 `Chunked prefill is enabled with max_num_batched_tokens=%d.`,
  vllm/config/scheduler.py:308@0.32.0 `Chunked prefill is enabled with max_num_batched_tokens`,
  vllm/config/scheduler.py:311@0.33.0 `Chunked prefill is enabled with max_num_batched_tokens`.
* ``Enabled experimental HiSparse HMA hot cache: ..., max_num_seqs=S.`` (S as resolved, when
  the log reaches the model's loading): vllm/v1/hisparse/runtime.py:1321 `Enabled
  experimental HiSparse HMA hot cache`, vllm/v1/hisparse/runtime.py:1342@0.32.0 `Enabled
  experimental HiSparse HMA hot cache`, vllm/v1/hisparse/runtime.py:1350@0.33.0 `Enabled
  experimental HiSparse HMA hot cache`, S being the scheduler's
  (vllm/v1/hisparse/runtime.py:1291 `max_num_reqs = vllm_config.scheduler_config.max_num_seqs`,
  vllm/v1/hisparse/runtime.py:1312@0.32.0 `max_num_reqs = vllm_config.scheduler_config`,
  vllm/v1/hisparse/runtime.py:1320@0.33.0 `max_num_reqs = vllm_config.scheduler_config`).
* ``Using X attention backend out of potential backends: [...]`` (the backend vLLM picked,
  when the log reaches it): vllm/platforms/cuda.py:527 `Using %s attention backend out of
  potential backends`, vllm/platforms/cuda.py:507@0.32.0 `Using %s attention backend`,
  vllm/platforms/cuda.py:509@0.33.0 `Using %s attention backend`.
* ``Resolved architecture: X``: the model (DeepseekV32ForCausalLM; the model's path in the
  log may be any name): vllm/config/model.py:699 `Resolved architecture: %s`,
  vllm/config/model.py:733@0.32.0 `Resolved architecture: %s`,
  vllm/config/model.py:744@0.33.0 `Resolved architecture: %s`.  Without it, the
  arguments' model name must name DeepSeek-V3.2, as ``check`` asks of a command.

Resolved values win over the arguments and over defaults.  What the log cannot show is
said: S without the hot-cache line is the arguments' (else vLLM's default on an H200,
min(1024, B)); the backend without its line is the arguments' (else vLLM's pick on an
H200); parallel_drafting and num_gpu_blocks_override are the arguments' (else vLLM's
defaults, off and None); the routing is stock, since the upstream fix patched into 0.31.0
leaves no trace in a log.  The CUDA-graph mode is the engine's: FULL_AND_PIECEWISE
(vLLM's default) and NONE under enforce_eager read as the knob's default, None.

Refused, one line each (exit 2): a log with no start-up lines, a missing or cut line (the
value and the ``check -- vllm serve`` flag that gives it are named), a version the model
does not cover or other than ``--vllm``, an engine other than DeepSeek-V3.2, and capture
sizes other than the model's plan for the knobs read (a setting the log does not show
changed them: the model would answer for another engine).  A log of several start-ups
(a restarted server) is answered for the first, and says so.
"""

from __future__ import annotations

import re

from ..model.knobs import DEFAULT_ATTENTION_BACKEND, VLLM_VERSIONS, knob_specs
from ..model.served_model import REPRODUCTION
from .log_layout import function_overrides, logged_gpu_pool, logged_layout_agrees
from .stall_stacks import compiled_note
from .log_text import read_log  # noqa: F401 (tests and users read logs through it)
from .launch import Launch, check_model, knobs_from_settings, resolve_defaults
from .log_lines import (ARCH, ARGS, BACKEND, CHUNKED, ENGINE, HEADS, HOT, WHOLE, Line, cut_line,
                        flag_for, missing_line, scan, whole_message)
from .log_repr import Angle, Obj, ReprCut, ReprReader, plain
from .vllm_flags import ASSUMED

SOURCE = "vLLM start-up log"
ARCHITECTURE = "DeepseekV32ForCausalLM"  # the architecture the model covers
# the project's live runner passes the fix PR's overrides as this function (engine/llm_args.py)
RUNNER_OVERRIDES = "<function shrink_hf_config "

HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name: a Hugging Face model id
DEFAULT_MAX_NUM_SEQS = 1024  # requests/step: vLLM's default on a >= 70 GiB GPU (launch.py)

# The engine line's fields, in the order vLLM writes them: knob -> field.
ENGINE_FIELDS = {"num_speculative_tokens": "speculative_config", "max_model_len": "max_seq_len",
                 "tensor_parallel_size": "tensor_parallel_size",
                 "pipeline_parallel_size": "pipeline_parallel_size",
                 "data_parallel_size": "data_parallel_size",
                 "decode_context_parallel_size": "decode_context_parallel_size",
                 "enforce_eager": "enforce_eager",
                 "enable_prefix_caching": "enable_prefix_caching",
                 "enable_chunked_prefill": "enable_chunked_prefill",
                 "cudagraph_mode": "compilation_config"}
# Config arguments: the keys the model reads of each (launch.py's CONFIG_KEYS).
CONFIG_READ = {"attention_config": ("backend", "hisparse_config"),
               "kv_transfer_config": ("kv_connector", "kv_role", "kv_connector_extra_config"),
               "speculative_config": ("method", "num_speculative_tokens", "parallel_drafting"),
               "compilation_config": ("cudagraph_mode",)}


def _args(found: dict) -> tuple[Line, dict]:
    if not found[ARGS] and not found[ENGINE]:
        raise ValueError("not a vLLM start-up log: it has no \"non-default args: {...}\" line "
                         "and no \"Initializing a V1 LLM engine (vX.Y.Z)\" line (give the "
                         "log of vllm serve from its first line)")
    if not found[ARGS]:
        raise ValueError("engine arguments: no \"non-default args: {...}\" line in the log, "
                         "which says whether HiSparse is on (give the whole start-up log, or "
                         "check -- vllm serve MODEL [flags])")
    line, m = whole_message(ARGS, "engine arguments", found)
    reader = ReprReader(m.group("value"))  # starts with "{": a dict, or an error
    try:
        args = reader.value()
        if reader.peek():
            raise ValueError(f"unexpected {reader.peek()!r} after the arguments")
    except ReprCut:
        raise cut_line("engine arguments", line) from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"engine arguments: line {line.number} (\"{line.excerpt(40)}\") is "
                         f"not as vLLM writes it ({exc})") from None
    return line, args


def _settings(args: dict) -> tuple[str | None, dict, list[str], bool]:
    """(model name, EngineArgs settings as check reads them, extra ignored entries, whether
    the project's runner's overrides made the fix PR's reproduction)."""
    settings, ignored, model, runner = {}, [], None, False
    for key, value in args.items():
        if key in ("model", "model_tag"):  # the model: vllm serve logs both
            model = model or (value if isinstance(value, str) else str(value))
        elif key == "hf_overrides" and isinstance(value, dict):
            settings["hf_overrides"] = plain(value)  # read as --hf-overrides
        elif key == "hf_overrides" and RUNNER_OVERRIDES in str(value):
            runner = True  # the project's own runner: the fix PR's overrides, as a function
        elif key == "hf_overrides":
            ignored.append("hf_overrides (a function the log does not spell out: the model's "
                           "config without it is assumed; the hot cache's top_k is checked)")
        elif key in CONFIG_READ and isinstance(value, dict) and key != "compilation_config":
            settings[key] = plain(value)  # the user's JSON, read (and refused) as check reads it
        elif key in CONFIG_READ and isinstance(value, (Obj, dict)):
            # a config object's repr, or the compilation config: every field, set or not; the
            # ones the model reads
            fields = value.fields if isinstance(value, Obj) else value
            if key == "speculative_config" and "num_spec_tokens" in fields:  # its own repr
                fields = {**fields, "num_speculative_tokens": fields["num_spec_tokens"]}
            config = {k: plain(fields[k]) for k in CONFIG_READ[key]
                      if k in fields and fields[k] is not None}
            if key == "compilation_config":
                ignored.append("compilation_config's other keys (the capture sizes the "
                               "engine printed are checked against the model's)")
            if config or key != "compilation_config":
                settings[key] = config
        else:
            settings[str(key)] = plain(value)
    return model, settings, ignored, runner


def _engine(found: dict, given: str | None) -> tuple[Line, str, dict, bool]:
    got = whole_message(ENGINE, "vllm_version", found)
    if got is None:
        raise missing_line("vllm_version", ENGINE)
    line, m = got
    version = m.group("value")
    built, _, local = version.partition("+")  # a local build tag: 0.31.0+cu130 (CUDA builds)
    if local and built in VLLM_VERSIONS:
        version = built
    if version not in VLLM_VERSIONS:
        raise ValueError(f"vllm_version: the log's engine is vLLM {version} (line "
                         f"{line.number}); the model covers vLLM {', '.join(VLLM_VERSIONS)} only")
    if given is not None and given != version:
        raise ValueError(f"--vllm {given}: the log's engine is vLLM {version} (line "
                         f"{line.number}: Initializing a V1 LLM engine (v{version})); drop "
                         "--vllm, the log names the version")
    reader = ReprReader(m.group("config"))
    try:
        fields = reader.kwargs(None)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"engine config: line {line.number} (\"{line.excerpt(40)}\") is not "
                         f"as vLLM {version} writes it ({exc})") from None
    return line, version, fields, reader.cut


def _engine_knobs(line: Line, fields: dict, cut: bool, version: str) -> tuple[dict, dict, list]:
    """The knobs the engine line resolves, where each came from, and its capture sizes."""
    values, read, sizes = {}, {}, None
    here = f"line {line.number}: Initializing a V1 LLM engine (v{version}) ..."
    for knob, field in ENGINE_FIELDS.items():
        if field not in fields:
            if cut:
                raise cut_line(knob, line, f"{field}=")
            raise ValueError(f"{knob}: line {line.number} has no {field}= (not the engine "
                             f"line vLLM {version} writes; give the whole line, or "
                             f"{flag_for(knob)})")
        value = fields[field]
        if knob == "num_speculative_tokens":
            if value is None:
                values[knob], shown = 0, "None"
            elif isinstance(value, Obj) and isinstance(value.fields.get("num_spec_tokens"), int):
                method = value.fields.get("method")
                if method not in ("mtp", "deepseek_mtp"):
                    raise ValueError(f"speculative_config: line {line.number}: method "
                                     f"{method!r}: the model covers mtp only")
                values[knob] = value.fields["num_spec_tokens"]
                shown = (f"SpeculativeConfig(method={method!r}, ..., "
                         f"num_spec_tokens={values[knob]})")
            else:
                raise ValueError(f"{knob}: line {line.number}: speculative_config "
                                 f"{str(value)[:40]!r} is not as vLLM {version} writes it")
            read[knob] = f"{here} speculative_config={shown}"
            continue
        if knob == "cudagraph_mode":
            if not isinstance(value, dict) or not isinstance(value.get("cudagraph_mode"), Angle):
                raise ValueError(f"{knob}: line {line.number}: compilation_config holds no "
                                 f"'cudagraph_mode': <CUDAGraphMode...> (give the whole line, "
                                 f"or {flag_for(knob)})")
            mode = value["cudagraph_mode"].member
            sizes = value.get("cudagraph_capture_sizes")
            # FULL_AND_PIECEWISE is vLLM's default, NONE what enforce_eager makes of any
            # mode: both are the knob's default, None (plan.cudagraph_mode)
            default = mode == ("NONE" if values["enforce_eager"] else "FULL_AND_PIECEWISE")
            values[knob] = None if default else mode
            read[knob] = f"{here} 'cudagraph_mode': {mode}" + (
                " (vLLM's default for these knobs)" if default else "")
            continue
        kind = bool if knob.startswith("enable") or knob == "enforce_eager" else int
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{knob}: line {line.number}: {field}={value!s:.20} is not "
                             f"{'true or false' if kind is bool else 'a number'}")
        if knob == "enable_chunked_prefill":
            _, assumed, what = ASSUMED[knob]
            if value != assumed:
                raise ValueError(f"{knob}: line {line.number}: enable_chunked_prefill={value} "
                                 f"changes what the model assumes ({what}: {knob} = {assumed})")
            continue
        values[knob] = value
        read[knob] = f"{here} {field}={value}"
    return values, read, sizes


def _agree(kind: str, knob: str, first, found: dict, what: str) -> None:
    """Every line of ``kind`` in the start-up (each DP rank prints its own) says what the
    first says: one server's ranks run one S and one backend, else the log is refused."""
    if first is None:
        return
    for other in found[kind][1:]:
        m = WHOLE[kind].match(other.text)
        if m is not None and m.group("value") != first[1].group("value"):
            raise ValueError(f"{knob}: lines {first[0].number} and {other.number} ({what}) "
                             f"disagree: {knob}={first[1].group('value')}, then "
                             f"{m.group('value')} (one start-up's engines, every data-parallel "
                             f"rank's, run one {knob}; give the log of one engine)")


def from_log(path: str, vllm_version: str | None = None) -> Launch:
    """The knobs of the engine whose start-up the log at ``path`` (``-``: standard input)
    shows; ``vllm_version``: ``--vllm``, which must agree with the log."""
    text = read_log(path)  # an unreadable file: one line naming it
    where = "standard input" if path == "-" else path
    try:
        return from_log_text(text, vllm_version)
    except ValueError as exc:
        raise ValueError(f"--from-log {where}: {exc}") from None


def from_log_text(text: str, vllm_version: str | None = None) -> Launch:
    """The knobs of the first engine start-up in a log's text (see the module docstring)."""
    from ..model.plan import plan

    if not text.strip():
        raise ValueError("the log is empty (give the vLLM start-up log, from its first line)")
    found, starts = scan(text)
    if len(starts) > 1 and found[ARGS] and not found[ENGINE] and HEADS[ENGINE] in text:
        # a second server's arguments line before the first one's engine line: two logs
        # interleaved line by line (two servers writing to one file)
        raise ValueError(f"the log mixes two or more servers' start-ups line by line (a second "
                         f"non-default args line, line {starts[1]}, before the first "
                         f"start-up's engine line): give the log of one server")
    args_line, args = _args(found)
    model, settings, extra_ignored, runner = _settings(args)
    at_args = f"line {args_line.number} (non-default args)"
    try:  # the arguments by check's rules: assumptions, ignored, refused, HiSparse on
        user = knobs_from_settings(REPRODUCTION if runner else model, settings,
                                   VLLM_VERSIONS[0], SOURCE, model_checked=True)
    except ValueError as exc:
        raise ValueError(f"{at_args}: {exc}") from None
    engine_line, version, fields, cut = _engine(found, vllm_version)
    arch = whole_message(ARCH, "model", found) if found[ARCH] else None
    if arch is not None and arch[1].group("value") != ARCHITECTURE:
        raise ValueError(f"model: line {arch[0].number}: {arch[0].text}: the model covers "
                         f"DeepSeek-V3.2 only ({ARCHITECTURE})")
    if arch is None:
        try:
            check_model(model)
        except ValueError as exc:
            raise ValueError(f"{at_args}: {exc} (and the log has no \"Resolved "
                             "architecture:\" line)") from None
    elif isinstance(model, str) and HUB_ID.fullmatch(model):
        try:  # a Hugging Face id names its model: another one's is refused as check refuses it
            check_model(model)
        except ValueError as exc:
            raise ValueError(f"{at_args}: {exc} (the model's id names another model than "
                             f"the architecture line {arch[0].number} says; a local path may "
                             "have any name)") from None
    values, engine_read, sizes = _engine_knobs(engine_line, fields, cut, version)
    chunked = whole_message(CHUNKED, "max_num_batched_tokens", found)
    if chunked is None:
        raise missing_line("max_num_batched_tokens", CHUNKED)
    hot = whole_message(HOT, "max_num_seqs", found)
    _agree(HOT, "max_num_seqs", hot, found, "Enabled experimental HiSparse HMA hot cache")
    backend = whole_message(BACKEND, "attention_backend", found)
    _agree(BACKEND, "attention_backend", backend, found, "Using ... attention backend")

    tag = WHOLE[ENGINE].search(engine_line.text).group("value")  # as printed: 0.31.0+cu130
    read, defaults = {"vllm_version": f"line {engine_line.number}: Initializing a V1 LLM "
                                      f"engine (v{tag})" + (
                                          f", read as {version} (a local build of it)"
                                          if tag != version else "")}, {}

    def from_args(knob: str) -> bool:
        if knob not in user.read:
            return False
        values[knob] = getattr(user.knobs, knob)
        read[knob] = (f"line {args_line.number}: non-default args {user.read[knob]} = "
                      f"{values[knob]}")
        return True

    for spec in knob_specs():
        knob = spec.name
        if knob in engine_read:
            read[knob] = engine_read[knob]
        elif knob == "max_num_batched_tokens":
            values[knob] = int(chunked[1].group("value"))
            read[knob] = f"line {chunked[0].number}: {chunked[0].text.rstrip('.')}"
        elif knob == "max_num_seqs" and hot is not None:
            values[knob] = int(hot[1].group("value"))
            read[knob] = (f"line {hot[0].number}: Enabled experimental HiSparse HMA hot cache: "
                          f"... max_num_seqs={values[knob]}")
        elif knob == "attention_backend" and backend is not None:
            values[knob] = backend[1].group("value")
            read[knob] = f"line {backend[0].number}: Using {values[knob]} attention backend"
        elif knob in ("vllm_version", "routing") or from_args(knob):
            continue
        elif knob == "max_num_seqs":
            values[knob] = min(DEFAULT_MAX_NUM_SEQS, values["max_num_batched_tokens"])
            defaults[knob] = (f"no hot-cache line and not among the non-default args: vLLM's "
                              f"default on an H200, min({DEFAULT_MAX_NUM_SEQS}, "
                              "max_num_batched_tokens)")
        elif knob == "attention_backend":
            values[knob] = DEFAULT_ATTENTION_BACKEND
            defaults[knob] = ("no \"Using ... attention backend\" line (the log ends before the "
                              "model loads) and none among the non-default args: vLLM's pick "
                              "on an H200")
        elif knob == "hf_overrides" and (runner or "(a function" in str(extra_ignored)):
            values[knob], defaults[knob] = spec.default, function_overrides(args_line, runner)
        else:  # parallel_drafting, num_gpu_blocks_override
            values[knob] = spec.default
            defaults[knob] = "not among the non-default args: vLLM's default"
    defaults["routing"] = (
        "a start-up log does not show the upstream fix patched into 0.31.0: answered for "
        "stock vLLM (a patched engine: predict --routing fix)" if version == "0.31.0"
        else f"vLLM {version}'s own routing")
    hisparse = f"line {args_line.number}: non-default args {user.hisparse}" + (
        f"; line {hot[0].number}: Enabled experimental HiSparse HMA hot cache" if hot else "")
    launch = resolve_defaults(values, read, user.ignored + extra_ignored, version, SOURCE,
                              hisparse)._replace(defaults=defaults)
    logged_layout_agrees(launch.knobs, found, hot)
    notes = []
    if len(starts) > 1:
        notes.append(f"the log holds {len(starts)} engine start-ups (from lines "
                     f"{', '.join(map(str, starts))}): this answer is for the first (give the "
                     "lines of another to check it)")
    try:
        sizes_planned = list(plan(launch.knobs).capture_sizes)
    except ValueError:  # vLLM refuses these knobs: the answer says so
        sizes_planned = None
    if sizes is None or sizes_planned is None:
        notes.append("capture sizes: not cross-checked (" + (
            "the engine line prints none)" if sizes is None else "vLLM refuses these knobs)"))
    elif sizes != sizes_planned:
        raise ValueError(f"cudagraph_capture_sizes: the log's engine captures {sizes} (line "
                         f"{engine_line.number}), the model's plan for the knobs read "
                         f"{sizes_planned}: a setting the log does not show changed them, so "
                         "the model would answer for another engine (check -- vllm serve ... "
                         "with the engine's command)")
    else:
        notes.append(f"cudagraph_capture_sizes {sizes} (line {engine_line.number}): the "
                     "model's plan for these knobs")
    notes += [n for n in (logged_gpu_pool(launch.knobs, found), compiled_note(text)) if n]
    return launch._replace(notes=tuple(notes))
