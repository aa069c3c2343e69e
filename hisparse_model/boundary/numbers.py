"""Numbers given on a command line: finite, whole where a count is meant, within a range.

Every numeric flag is declared with a :class:`Range` (its bounds and why), and read by
:func:`parse` before anything runs: ``nan``, ``inf``, ``1e400`` and a value past its bound are
refused in one line naming the flag and the bound.
"""

from __future__ import annotations

import math
from typing import NamedTuple


def shown(x: float) -> str:
    """A bound or a value as people read it: 10,080, 1,000,000, 0.5, 1e+300; an integer past
    a float (10^400) as its order of magnitude, ~1e+400 (no float conversion overflows)."""
    if isinstance(x, int) and abs(x) > 10**300:
        return f"~1e+{int(math.log10(abs(x)))}"  # log10 takes any int
    return f"{int(x):,}" if x == int(x) and abs(x) < 1e15 else f"{x:g}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 token"``, ``"3 tokens"``, ``"1,024 tokens"`` (``plural``: an irregular one): a count
    and its noun as people read it, in the bottom layer so every layer words counts alike
    (:mod:`hisparse_model.text.plural` is its name above the answers)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


class Range(NamedTuple):
    """The values a number may take: ``kind`` (int or float) from ``low`` to ``high``."""

    kind: type
    low: float
    high: float
    why: str = ""  # why ``high`` is where it is
    low_open: bool = False  # ``low`` itself is refused (a rate, a time: > 0)

    def words(self) -> str:
        low = f"> {shown(self.low)}" if self.low_open else f">= {shown(self.low)}"
        return f"{low} and <= {shown(self.high)}" + (f" ({self.why})" if self.why else "")

    def check(self, value, name: str = ""):
        """``value`` when in range, else ValueError naming ``name`` (none: "must be ...",
        as argparse words it after the flag)."""
        whole, must = self.kind is int, f"{name} must" if name else "must"
        if isinstance(value, bool) or not isinstance(value, (int, float) if not whole else int):
            raise ValueError(f"{must} be {'an integer' if whole else 'a number'}, "
                             f"got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):  # an int is finite
            raise ValueError(f"{must} be a finite number, got {value!r}")
        if value < self.low or (self.low_open and value == self.low) or value > self.high:
            raise ValueError(f"{must} be {self.words()}, got {shown(value)}")
        return value


def ascii_int(text: str) -> int:
    """``int(text)`` for ASCII digits only (Python's ``int`` reads a full-width ``１４３`` and
    ``1_0``; no file reader here does): ValueError otherwise.  Named ``int`` for argparse's
    "invalid int value" line."""
    text = text.strip()
    if not text.isascii() or "_" in text:
        raise ValueError(f"invalid literal for int(): {text!r}")
    return int(text)


ascii_int.__name__ = "int"


def parse(text: str, rng: Range, name: str = ""):
    """The number ``text`` says, checked against ``rng`` (ValueError naming ``name``)."""
    text = text.strip()
    try:
        if not text.isascii() or "_" in text:  # Python reads "１４３" and "1_000" as numbers:
            raise ValueError  # the files' readers do not, and neither does the command line
        value = int(text) if rng.kind is int else float(text)
    except ValueError:
        kind = "an integer" if rng.kind is int else "a number"
        raise ValueError(f"{f'{name} must' if name else 'must'} be {kind}, got "
                         f"{text[:40]!r}") from None
    return rng.check(value, name)
