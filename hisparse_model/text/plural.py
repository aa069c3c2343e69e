"""A count and its noun, in the number the count takes ("1 token", "2 tokens")."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 token"``, ``"3 tokens"``, ``"1,024 tokens"`` (``plural``: an irregular one)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"
