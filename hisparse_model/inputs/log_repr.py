"""Python reprs as vLLM logs them, read back as data: the start-up log reader's parser.

vLLM's start-up lines print Python objects with ``repr``: the user's engine arguments as a
dict (``non-default args: {...}``), the resolved config as ``field=value, ...`` with config
objects (``SpeculativeConfig(...)``), enum members (``<CUDAGraphMode.NONE: 0>``), strings,
numbers and bare words (``torch.bfloat16``).  :class:`ReprReader` reads them without
evaluating anything; :func:`plain` turns what it read into JSON-like data.  A text that
ends inside a value raises :class:`ReprCut` (a log line cut short); anything else it cannot
read is a ValueError naming the character.  :mod:`hisparse_model.inputs.startup_log` maps what it
reads onto the knobs.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple


class ReprCut(Exception):
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


class ReprReader:
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
            raise ReprCut
        if got != char:
            raise ValueError(f"expected {char!r} at character {self.i + 1}, got {got!r}")
        self.i += 1

    def value(self, stops: str = _BARE_END):
        c = self.peek()
        if not c:
            raise ReprCut
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
            raise ReprCut
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
                    raise ReprCut
                j = k
            depth += (c == "<") - (c == ">")
            j += 1
            if depth == 0:
                self.i = j
                return Angle(self.s[start:j])
        raise ReprCut

    def _bare(self, stops: str):
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in stops + "(":
            self.i += 1
        word = self.s[start:self.i].strip()
        if self.i < len(self.s) and self.s[self.i] == "(" and re.fullmatch(r"[\w.]+", word):
            return Obj(word, self.kwargs(")"))
        if not word:
            raise ValueError(f"a value expected at character {start + 1}")
        return bare_word(word)

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
                    raise ReprCut
                self.cut = True
                return out
            if not m and not close:
                raise ValueError(f"a field name expected at character {self.i + 1}")
            self.i = m.end() if m else self.i  # Name(value, ...): a positional argument
            try:  # at the top level a bare word runs to the next comma (a path may hold ":")
                value = self.value(_BARE_END if close else ",")
            except ReprCut:
                if close:
                    raise
                self.cut = True
                return out
            bare = isinstance(value, Bare) or not isinstance(value, (dict, list, tuple, Obj,
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


def bare_word(word: str):
    if word in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[word]
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return Bare(word)


class Bare(str):
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
