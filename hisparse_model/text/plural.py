"""A count and its noun, in the number the count takes ("1 token", "2 tokens").

Defined once in :mod:`hisparse_model.boundary.numbers` (the bottom layer), so the answers,
which may not import this layer, word their counts the same way.
"""

from __future__ import annotations

from ..boundary.numbers import count

__all__ = ["count"]
