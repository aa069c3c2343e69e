"""One engine, its model spelled either way: the fix PR's reproduction, or DeepSeek-V3.2 (a
name or a local directory) with the PR's ``--hf-overrides``.  A start-up log names the second,
the live runner's recordings the first."""

from __future__ import annotations

import dataclasses

from hisparse_model.model.knobs import Knobs
from hisparse_model.model.served_model import served_model


def served(model: str, overrides) -> object:
    """The config's numbers, whatever its label."""
    return dataclasses.replace(served_model(model, overrides), label="")


def assert_same_engine(got: Knobs, want: Knobs) -> None:
    """Two knob sets are one engine."""
    assert served(got.model, got.hf_overrides) == served(want.model, want.hf_overrides)
    assert got.replace(model=want.model, hf_overrides=want.hf_overrides) == want


def assert_same_answers(got: dict, want: dict) -> None:
    """Two --json answers agree, the model spelled either way."""
    named = [(d["inputs"].pop("model"), d["inputs"].pop("hf_overrides")) for d in (got, want)]
    assert served(*named[0]) == served(*named[1])
    for d in (got, want):  # the config's label names the spelling; its numbers must agree
        d.get("model_config", {}).pop("model", None)
    assert got == want
