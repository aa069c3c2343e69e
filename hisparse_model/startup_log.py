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
  are read for the keys the model reads.  ``hf_overrides`` (a config override the log does
  not spell out) and the compilation config's other keys are named as ignored.
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

import ast
import re
from typing import NamedTuple

from .knobs import DEFAULT_ATTENTION_BACKEND, VLLM_VERSIONS, knob_specs
from .log_text import read_log  # noqa: F401 (tests and users read logs through it)
from .launch import Launch, check_model, knobs_from_settings, resolve_defaults
from .vllm_flags import ASSUMED, KNOB_FLAGS

SOURCE = "vLLM start-up log"
ARCHITECTURE = "DeepseekV32ForCausalLM"  # the architecture the model covers
DEFAULT_MAX_NUM_SEQS = 1024  # requests/step: vLLM's default on a >= 70 GiB GPU (launch.py)

# How each message starts, and the whole message (a line holding the start but not the
# whole is cut mid-way).  The numbers end in the message's own "." where it has one, so a
# cut number (640 -> 64) is never read.
ARGS, ENGINE, CHUNKED, HOT, BACKEND, ARCH = "args", "engine", "chunked", "hot", "backend", "arch"
HEADS = {ARGS: "non-default args:", ENGINE: "Initializing a V1 LLM engine",
         CHUNKED: "Chunked prefill is enabled with",
         HOT: "Enabled experimental HiSparse HMA hot cache",
         BACKEND: " attention backend out of potential backends", ARCH: "Resolved architecture:"}
WHOLE = {ARGS: re.compile(r"non-default args: (?P<value>\{.*)"),
         ENGINE: re.compile(r"Initializing a V1 LLM engine \(v(?P<value>[^)\s]+)\) with config: "
                            r"(?P<config>.*)"),
         CHUNKED: re.compile(r"Chunked prefill is enabled with max_num_batched_tokens="
                             r"(?P<value>\d+)\."),
         HOT: re.compile(r"Enabled experimental HiSparse HMA hot cache: .*\bmax_num_seqs="
                         r"(?P<value>\d+)\."),
         BACKEND: re.compile(r"Using (?P<value>\w+) attention backend out of potential backends"),
         ARCH: re.compile(r"Resolved architecture: (?P<value>\S+)\s*$")}
WHAT = {ARGS: "non-default args: {...}", ENGINE: "Initializing a V1 LLM engine (vX.Y.Z) with "
        "config: ...", CHUNKED: "Chunked prefill is enabled with max_num_batched_tokens=N",
        HOT: "Enabled experimental HiSparse HMA hot cache: ... max_num_seqs=N"}
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
               "kv_transfer_config": ("kv_connector",),
               "speculative_config": ("method", "num_speculative_tokens", "parallel_drafting"),
               "compilation_config": ("cudagraph_mode",)}


class Line(NamedTuple):
    """One message found in the log: its line number and its text from the message on."""

    number: int
    text: str

    def excerpt(self, width: int = 60) -> str:
        return self.text if len(self.text) <= width else self.text[:width - 3] + "..."


def _flag(knob: str) -> str:
    """The ``vllm serve`` flag that gives a knob, with a placeholder value."""
    if knob == "vllm_version":
        return "check --vllm X.Y.Z -- vllm serve ..."
    row = next((r for r in KNOB_FLAGS if r.knob == knob), None)
    if row is None:  # not a knob: the engine's arguments, its model, an assumption
        return "check -- vllm serve MODEL [flags]"
    flag = row.flags[0] if row.flags else f"--{row.config[0].replace('_', '-')}.{row.config[1]}"
    kind = {s.name: s.kind for s in knob_specs()}[knob]
    value = "" if kind is bool else " N" if kind is int else " " + knob.split("_")[-1].upper()
    return f"check -- vllm serve ... {flag}{value}"


def _missing(knob: str, kind: str) -> ValueError:
    return ValueError(f'{knob}: no "{WHAT[kind]}" line in the log (give the whole start-up '
                      f"log, or {_flag(knob)})")


def _cut(knob: str, line: Line, before: str = "") -> ValueError:
    where = f"is cut before {before}" if before else "is cut mid-way"
    return ValueError(f'{knob}: line {line.number} ("{line.excerpt(48)}") {where} (give the '
                      f"whole line, or {_flag(knob)})")


# -- Python reprs, as vLLM logs them ---------------------------------------------------------
class _Cut(Exception):
    """The text ends inside a value."""


class Obj(NamedTuple):
    """``Name(field=value, ...)``: a config object's repr."""

    name: str
    fields: dict


class Angle(str):
    """``<...>``: an enum member (``<CUDAGraphMode.NONE: 0>``) or an object's default repr."""

    @property
    def member(self) -> str:
        m = re.match(r"<\w+\.(\w+):", self)
        return m.group(1) if m else str(self)


_BARE_END = ",)]}:="


class _Reader:
    """A recursive reader of the reprs vLLM logs: dicts, lists, tuples, strings, numbers,
    None/True/False, ``Name(k=v, ...)``, ``<...>`` and bare words (``torch.bfloat16``)."""

    def __init__(self, text: str):
        self.s, self.i = text, 0

    def peek(self) -> str:
        while self.i < len(self.s) and self.s[self.i] in " \t\r":
            self.i += 1
        return self.s[self.i] if self.i < len(self.s) else ""

    def take(self, char: str) -> None:
        got = self.peek()
        if not got:
            raise _Cut
        if got != char:
            raise ValueError(f"expected {char!r} at character {self.i + 1}, got {got!r}")
        self.i += 1

    def value(self, stops: str = _BARE_END):
        c = self.peek()
        if not c:
            raise _Cut
        if c == "{":
            return self._dict()
        if c in "[(":
            items = self._items({"[": "]", "(": ")"}[c])
            return items if c == "[" else tuple(items)
        if c in "'\"":
            return self._string(c)
        if c == "<":
            return self._angle()
        return self._bare(stops)

    def _dict(self) -> dict:
        self.take("{")
        out: dict = {}
        while self.peek() != "}":
            key = self.value()
            self.take(":")
            try:
                out[key] = self.value()
            except TypeError:  # unhashable: a dict, list or object as a key
                raise ValueError(f"a dict key that is not a name before character "
                                 f"{self.i + 1}") from None
            if self.peek() != ",":
                break
            self.i += 1
        self.take("}")
        return out

    def _items(self, close: str) -> list:
        self.i += 1
        out = []
        while self.peek() != close:
            out.append(self.value())
            if self.peek() != ",":
                break
            self.i += 1
        self.take(close)
        return out

    def _string(self, quote: str) -> str:
        start, j = self.i, self.i + 1
        while j < len(self.s) and self.s[j] != quote:
            j += 2 if self.s[j] == "\\" else 1
        if j >= len(self.s):
            raise _Cut
        self.i = j + 1
        try:
            return ast.literal_eval(self.s[start:self.i])
        except (ValueError, SyntaxError):
            return self.s[start + 1:j]

    def _angle(self) -> Angle:
        start, depth, j = self.i, 0, self.i
        while j < len(self.s):
            c = self.s[j]
            if c in "'\"":
                k = self.s.find(c, j + 1)
                if k < 0:
                    raise _Cut
                j = k
            depth += (c == "<") - (c == ">")
            j += 1
            if depth == 0:
                self.i = j
                return Angle(self.s[start:j])
        raise _Cut

    def _bare(self, stops: str):
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in stops + "(":
            self.i += 1
        word = self.s[start:self.i].strip()
        if self.i < len(self.s) and self.s[self.i] == "(" and re.fullmatch(r"[\w.]+", word):
            return Obj(word, self.kwargs(")"))
        if not word:
            raise ValueError(f"a value expected at character {start + 1}")
        return _word(word)

    def kwargs(self, close: str | None) -> dict:
        """``k=v, ...`` up to ``close`` (``(`` already read) or, for None, to the end: the
        fields read; at the end of the text (None) a field the text may have cut is left
        out and ``self.cut`` says so."""
        if close:
            self.i += 1
        out: dict = {}
        self.cut = False
        while self.peek() and self.peek() != close:
            m = re.compile(r"\s*(\w+)=").match(self.s, self.i)
            if not m and re.fullmatch(r"\s*\w*", self.s[self.i:]):
                if close:  # the text ends inside a field's name
                    raise _Cut
                self.cut = True
                return out
            if not m and not close:
                raise ValueError(f"a field name expected at character {self.i + 1}")
            self.i = m.end() if m else self.i  # Name(value, ...): a positional argument
            try:  # at the top level a bare word runs to the next comma (a path may hold ":")
                value = self.value(_BARE_END if close else ",")
            except _Cut:
                if close:
                    raise
                self.cut = True
                return out
            bare = isinstance(value, _Bare) or not isinstance(value, (dict, list, tuple, Obj,
                                                                       Angle, str))
            if close is None and not self.peek() and bare:
                self.cut = True  # a bare word the end of the text may have cut (640 -> 64)
                return out
            out[m.group(1) if m else len(out)] = value
            if self.peek() != ",":
                break
            self.i += 1
        if close:
            self.take(close)
        elif self.peek():
            raise ValueError(f"unexpected {self.peek()!r} at character {self.i + 1}")
        return out


def _word(word: str):
    if word in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[word]
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return _Bare(word)


class _Bare(str):
    """A bare word (``cuda``, ``torch.bfloat16``): a str that the cut test tells apart."""


def plain(value):
    """A repr read as JSON-like data: objects as dicts of their fields, enums by name."""
    if isinstance(value, Obj):
        return {k: plain(v) for k, v in value.fields.items()}
    if isinstance(value, Angle):
        return value.member
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value) if isinstance(value, str) else value


# -- the log -----------------------------------------------------------------------------------
def scan(text: str) -> tuple[dict[str, list[Line]], list[int]]:
    """Each message's lines in the first start-up, and the line where each start-up begins.

    A start-up begins at a ``non-default args`` line, or at an engine line that follows
    another engine line with no arguments line between (an engine restarted)."""
    found: dict[str, list[Line]] = {kind: [] for kind in HEADS}
    starts: list[int] = []
    engine_seen = False
    for number, raw in enumerate(text.split("\n"), 1):
        for kind, head in HEADS.items():
            at = raw.find(head)
            if at < 0:
                continue
            if kind == BACKEND:  # the name comes before the head: from "Using "
                at = raw.rfind("Using ", 0, at)
                if at < 0:
                    continue
            if kind == ARGS or (kind == ENGINE and (engine_seen or not starts)):
                starts.append(number)
            engine_seen = (engine_seen and kind != ARGS) or kind == ENGINE
            if len(starts) < 2 or number < starts[1]:
                found[kind].append(Line(number, raw[at:].split("\r")[0]))
    return found, starts


def _whole(kind: str, knob: str, found: dict) -> tuple[Line, re.Match] | None:
    """The first line of ``kind``, matched whole; None if there is none; cut: refused."""
    if not found[kind]:
        return None
    line = found[kind][0]
    m = WHOLE[kind].match(line.text)
    if m is None:
        raise _cut(knob, line)
    return line, m


def _args(found: dict) -> tuple[Line, dict]:
    if not found[ARGS] and not found[ENGINE]:
        raise ValueError("not a vLLM start-up log: it has no \"non-default args: {...}\" line "
                         "and no \"Initializing a V1 LLM engine (vX.Y.Z)\" line (give the "
                         "log of vllm serve from its first line)")
    if not found[ARGS]:
        raise ValueError("engine arguments: no \"non-default args: {...}\" line in the log, "
                         "which says whether HiSparse is on (give the whole start-up log, or "
                         "check -- vllm serve MODEL [flags])")
    line, m = _whole(ARGS, "engine arguments", found)
    reader = _Reader(m.group("value"))  # starts with "{": a dict, or an error
    try:
        args = reader.value()
        if reader.peek():
            raise ValueError(f"unexpected {reader.peek()!r} after the arguments")
    except _Cut:
        raise _cut("engine arguments", line) from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"engine arguments: line {line.number} (\"{line.excerpt(40)}\") is "
                         f"not as vLLM writes it ({exc})") from None
    return line, args


def _settings(args: dict) -> tuple[str | None, dict, list[str]]:
    """(model name, EngineArgs settings as check reads them, extra ignored entries)."""
    settings, ignored, model = {}, [], None
    for key, value in args.items():
        if key in ("model", "model_tag"):  # the model: vllm serve logs both
            model = model or (value if isinstance(value, str) else str(value))
        elif key == "hf_overrides":
            ignored.append("hf_overrides (a model-config override the log does not spell "
                           "out: DeepSeek-V3.2's config as the model knows it is assumed)")
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
    return model, settings, ignored


def _engine(found: dict, given: str | None) -> tuple[Line, str, dict, bool]:
    got = _whole(ENGINE, "vllm_version", found)
    if got is None:
        raise _missing("vllm_version", ENGINE)
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
    reader = _Reader(m.group("config"))
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
                raise _cut(knob, line, f"{field}=")
            raise ValueError(f"{knob}: line {line.number} has no {field}= (not the engine "
                             f"line vLLM {version} writes; give the whole line, or "
                             f"{_flag(knob)})")
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
                                 f"or {_flag(knob)})")
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
    from .plan import plan

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
    model, settings, extra_ignored = _settings(args)
    at_args = f"line {args_line.number} (non-default args)"
    try:  # the arguments by check's rules: assumptions, ignored, refused, HiSparse on
        user = knobs_from_settings(model, settings, VLLM_VERSIONS[0], SOURCE, model_checked=True)
    except ValueError as exc:
        raise ValueError(f"{at_args}: {exc}") from None
    engine_line, version, fields, cut = _engine(found, vllm_version)
    arch = _whole(ARCH, "model", found) if found[ARCH] else None
    if arch is not None and arch[1].group("value") != ARCHITECTURE:
        raise ValueError(f"model: line {arch[0].number}: {arch[0].text}: the model covers "
                         f"DeepSeek-V3.2 only ({ARCHITECTURE})")
    if arch is None:
        try:
            check_model(model)
        except ValueError as exc:
            raise ValueError(f"{at_args}: {exc} (and the log has no \"Resolved "
                             "architecture:\" line)") from None
    values, engine_read, sizes = _engine_knobs(engine_line, fields, cut, version)
    chunked = _whole(CHUNKED, "max_num_batched_tokens", found)
    if chunked is None:
        raise _missing("max_num_batched_tokens", CHUNKED)
    hot = _whole(HOT, "max_num_seqs", found)
    if hot is not None:  # every hot-cache line of the start-up must say the same S
        for other in found[HOT][1:]:
            m = WHOLE[HOT].match(other.text)
            if m is not None and m.group("value") != hot[1].group("value"):
                raise ValueError(f"max_num_seqs: lines {hot[0].number} and {other.number} "
                                 f"(Enabled experimental HiSparse HMA hot cache) disagree: "
                                 f"max_num_seqs={hot[1].group('value')}, then "
                                 f"{m.group('value')} (one start-up's engine has one S; give "
                                 "the log of one engine)")
    backend = _whole(BACKEND, "attention_backend", found)

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
    return launch._replace(notes=tuple(notes))
