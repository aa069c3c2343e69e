"""The messages of a vLLM start-up log that ``check --from-log`` reads, found and quoted.

:func:`scan` finds each message (by how it starts: :data:`HEADS`) in the log's first start-up,
with its line number; :func:`whole_message` matches one whole (:data:`WHOLE`), so a line cut
short is refused rather than misread.  The refusals name the message and the ``check --
vllm serve`` flag that would give the value instead (:func:`missing_line`,
:func:`cut_line`).  Which line each knob comes from, and why, is
:mod:`hisparse_model.inputs.startup_log`'s.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ..model.knobs import knob_specs
from .vllm_flags import KNOB_FLAGS

# How each message starts, and the whole message (a line holding the start but not the
# whole is cut mid-way).  The numbers end in the message's own "." where it has one, so a
# cut number (640 -> 64) is never read.
ARGS, ENGINE, CHUNKED, HOT, BACKEND, ARCH = "args", "engine", "chunked", "hot", "backend", "arch"
HOST = "host"  # vllm/v1/hisparse/layout.py:357-364 `HiSparse HMA: %.1f GiB host source (%d blocks)`
HEADS = {ARGS: "non-default args:", ENGINE: "Initializing a V1 LLM engine",
         CHUNKED: "Chunked prefill is enabled with",
         HOT: "Enabled experimental HiSparse HMA hot cache",
         BACKEND: " attention backend out of potential backends", ARCH: "Resolved architecture:",
         HOST: "HiSparse HMA: "}
WHOLE = {ARGS: re.compile(r"non-default args: (?P<value>\{.*)"),
         ENGINE: re.compile(r"Initializing a V1 LLM engine \(v(?P<value>[^)\s]+)\) with config: "
                            r"(?P<config>.*)"),
         CHUNKED: re.compile(r"Chunked prefill is enabled with max_num_batched_tokens="
                             r"(?P<value>\d+)\."),
         HOT: re.compile(r"Enabled experimental HiSparse HMA hot cache: .*\bmax_num_seqs="
                         r"(?P<value>\d+)\."),
         BACKEND: re.compile(r"Using (?P<value>\w+) attention backend out of potential backends"),
         ARCH: re.compile(r"Resolved architecture: (?P<value>\S+)\s*$"),
         HOST: re.compile(r"HiSparse HMA: [0-9.]+ GiB host source \((?P<value>\d+) blocks\)"
                          r"(?:, [0-9.]+ GiB shared GPU indexer/resident/hot pool "
                          r"\((?P<gpu>\d+) blocks\))?")}
WHAT = {ARGS: "non-default args: {...}", ENGINE: "Initializing a V1 LLM engine (vX.Y.Z) with "
        "config: ...", CHUNKED: "Chunked prefill is enabled with max_num_batched_tokens=N",
        HOT: "Enabled experimental HiSparse HMA hot cache: ... max_num_seqs=N"}


class Line(NamedTuple):
    """One message found in the log: its line number and its text from the message on."""

    number: int
    text: str

    def excerpt(self, width: int = 60) -> str:
        return self.text if len(self.text) <= width else self.text[:width - 3] + "..."


def flag_for(knob: str) -> str:
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


def missing_line(knob: str, kind: str) -> ValueError:
    return ValueError(f'{knob}: no "{WHAT[kind]}" line in the log (give the whole start-up '
                      f"log, or {flag_for(knob)})")


def cut_line(knob: str, line: Line, before: str = "") -> ValueError:
    where = f"is cut before {before}" if before else "is cut mid-way"
    return ValueError(f'{knob}: line {line.number} ("{line.excerpt(48)}") {where} (give the '
                      f"whole line, or {flag_for(knob)})")


DP_RANK = re.compile(r"\(\w*_DP(\d+)\b")  # a line's process prefix: (EngineCore_DP1 pid=..)


def scan(text: str) -> tuple[dict[str, list[Line]], list[int]]:
    """Each message's lines in the first start-up, and the line where each start-up begins.

    A start-up begins at a ``non-default args`` line, or at an engine line that follows
    another engine line with no arguments line between (an engine restarted) -- unless the
    two are different data-parallel ranks' (``EngineCore_DP0``, ``EngineCore_DP1``: the
    ranks of one server, each printing its own engine line), which are one start-up."""
    found: dict[str, list[Line]] = {kind: [] for kind in HEADS}
    starts: list[int] = []
    engine_seen = False
    ranks: set = set()  # the DP ranks whose engine line this start-up has shown
    for number, raw in enumerate(text.split("\n"), 1):
        for kind, head in HEADS.items():
            at = raw.find(head)
            if at < 0:
                continue
            if kind == BACKEND:  # the name comes before the head: from "Using "
                at = raw.rfind("Using ", 0, at)
                if at < 0:
                    continue
            rank = DP_RANK.search(raw[:at])
            rank = rank.group(1) if rank else None
            if kind == ARGS or (kind == ENGINE and (not starts or (
                    engine_seen and (rank is None or rank in ranks)))):
                starts.append(number)
                ranks = set()
            if kind == ENGINE:
                ranks.add(rank)
            engine_seen = (engine_seen and kind != ARGS) or kind == ENGINE
            if len(starts) < 2 or number < starts[1]:
                found[kind].append(Line(number, raw[at:].split("\r")[0]))
    return found, starts


def whole_message(kind: str, knob: str, found: dict) -> tuple[Line, re.Match] | None:
    """The first line of ``kind``, matched whole; None if there is none; cut: refused."""
    if not found[kind]:
        return None
    line = found[kind][0]
    m = WHOLE[kind].match(line.text)
    if m is None:
        raise cut_line(knob, line)
    return line, m
