"""Workloads: the requests an offline ``vllm.LLM`` is given, and when.

A workload file is ``{"requests": [...]}`` or a bare list; each request is
``{"prompt_len": n}`` (token ids ``range(100, 100 + n)``, the fix PR's prompts,
so any two share a prefix) or ``{"prompt_token_ids": [...]}``, plus optional
``"prompt_id"`` with ``prompt_len``: prompt number k of that length, whose tokens share no
64-token block with any other prompt_id's or the fix PR's (:class:`DistinctPrompt`: traffic
of distinct prompts, as real users send, without listing their tokens) or ``"prompt_blocks"``
with ``prompt_len``: content ids of its 512-token blocks, prompts sharing the ids they share
(:class:`~hisparse_model.schedule.shared_prompts.BlockPrompt`: a trace's ``hash_ids``), plus optional
``"max_tokens"`` (default 8), ``"arrival_step"`` (default 0: the engine step
before whose ``schedule()`` the request is added) and ``"dp_rank"`` (with
``data_parallel_size`` > 1: the rank that serves it; default: vLLM's offline
example's split, ``parallel.split_requests``).  ``ignore_eos`` is implied.
Every error is a :class:`WorkloadError` whose message is one line naming the
request (numbered from 1, the file's first request being request 1).
"""

from __future__ import annotations

import bisect
import functools
import os
from dataclasses import dataclass

from ..boundary.files import InputError
from ..boundary.json_file import load as load_json
from ..model.knobs import MODEL_MAX_LEN
from ..model.served_model import shipped_config
from ..model.reproduction import MAX_TOKENS, PROMPT_FIRST_TOKEN_ID, prompt_token_ids
from .shared_prompts import BlockPrompt, LazyPrompt, check_blocks

_KEYS = ("prompt_len", "prompt_id", "prompt_blocks", "prompt_token_ids", "max_tokens",
         "arrival_step", "dp_rank")
PROMPT_IDS = 10**6  # prompt_id 0 .. 999,999 (two leading tokens encode it, base 1000)
_ID_TOKENS = (1000, 2000)  # first token 1000 + k // 1000, second 2000 + k % 1000


class DistinctPrompt(LazyPrompt):
    """The token ids of prompt ``prompt_id`` of ``n`` tokens, without storing them.

    ``(1000 + k // 1000, 2000 + k % 1000, 102, 103, ..., 99 + n)``: the fix PR's prompt
    ``range(100, 100 + n)`` with its first two tokens naming k, so prompts of different k
    differ in their first 64-token block (and so in every block key, which chains), while
    prompts of the same k share their common prefix."""

    __slots__ = ("prompt_id", "n")

    def __init__(self, prompt_id: int, n: int):
        self.prompt_id, self.n = prompt_id, n

    def _head(self) -> tuple[int, ...]:
        k = self.prompt_id
        return (_ID_TOKENS[0] + k // 1000, _ID_TOKENS[1] + k % 1000)[:self.n]

    def _token(self, i: int) -> int:
        return self._head()[i] if i < 2 else PROMPT_FIRST_TOKEN_ID + i

    def _ident(self) -> tuple:
        return self.prompt_id, self.n

    def __iter__(self):  # the head, then one range: faster than token by token
        yield from self._head()
        yield from range(PROMPT_FIRST_TOKEN_ID + 2, PROMPT_FIRST_TOKEN_ID + self.n)

    def block(self, j: int) -> tuple[int, ...]:
        """Tokens of the j-th full 64-token block (blocks after the first are shared)."""
        if j == 0:
            return self._head() + tuple(range(PROMPT_FIRST_TOKEN_ID + 2,
                                              PROMPT_FIRST_TOKEN_ID + 64))
        return self.tail_block(j)

    @staticmethod
    def tail_block(j: int) -> tuple[int, ...]:
        """Block j >= 1 of every DistinctPrompt (and fix-PR prompt) long enough to hold it."""
        start = PROMPT_FIRST_TOKEN_ID + 64 * j
        return tuple(range(start, start + 64))

    def __repr__(self) -> str:
        return f"DistinctPrompt(prompt_id={self.prompt_id}, n={self.n})"




class WorkloadError(ValueError):
    """A workload vLLM would not accept (one line, naming the request)."""


@dataclass(frozen=True)
class Request:
    prompt_token_ids: tuple[int, ...]
    max_tokens: int = MAX_TOKENS
    arrival_step: int = 0
    dp_rank: int | None = None  # the data-parallel rank that serves it (None: split, parallel.py)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    def as_dict(self) -> dict:
        ids = self.prompt_token_ids
        out: dict = ({"prompt_len": ids.n, "prompt_id": ids.prompt_id}
                     if isinstance(ids, DistinctPrompt)
                     else {"prompt_len": ids.n, "prompt_blocks": list(ids.blocks)}
                     if isinstance(ids, BlockPrompt)
                     else {"prompt_len": len(ids)} if ids == _fix_pr_prompt(len(ids))
                     else {"prompt_token_ids": list(ids)})
        out["max_tokens"] = self.max_tokens
        out["arrival_step"] = self.arrival_step
        if self.dp_rank is not None:
            out["dp_rank"] = self.dp_rank
        return out


@functools.lru_cache(maxsize=4096)
def _fix_pr_prompt(n: int) -> tuple[int, ...]:
    return tuple(prompt_token_ids(n))  # shared: cheap for 10,000-request workloads


def vocab_size() -> int:
    """DeepSeek-V3.2's vocabulary (its config's ``vocab_size``, 129280; the fix PR's
    overrides keep it)."""
    return shipped_config()["vocab_size"]


def _int(value, what: str, minimum: int, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WorkloadError(f"{where}: {what} must be an integer >= {minimum}, "
                            f"got {short_repr(value)}")
    return value


def short_repr(value) -> str:
    """``repr(value)`` for an error line: at most 80 characters (a huge or deeply nested
    value too), its end kept."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # nested too deeply / an int of > 4300 digits
        text = f"a {type(value).__name__} too large to show"
    return text if len(text) <= 80 else text[:60] + "..." + text[-17:]


def _request(i: int, obj) -> Request:
    where = f"request {i + 1}"  # numbered for people, from 1
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: must be an object with prompt_len or "
                            f"prompt_token_ids, got {short_repr(obj)}")
    unknown = sorted(set(obj) - set(_KEYS))
    if unknown:
        raise WorkloadError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
                            f"allowed: {', '.join(_KEYS)}")
    if ("prompt_len" in obj) == ("prompt_token_ids" in obj):
        raise WorkloadError(f"{where}: give exactly one of prompt_len and prompt_token_ids")
    if "prompt_id" in obj and "prompt_len" not in obj:
        raise WorkloadError(f"{where}: prompt_id goes with prompt_len (prompt_token_ids "
                            "are the prompt already)")
    if "prompt_blocks" in obj and ("prompt_len" not in obj or "prompt_id" in obj):
        raise WorkloadError(f"{where}: prompt_blocks goes with prompt_len alone (not with "
                            "prompt_id or prompt_token_ids)")
    if "prompt_len" in obj:
        n = _int(obj["prompt_len"], "prompt_len", 1, where)
        if n > MODEL_MAX_LEN:  # checked before any token id is built
            raise WorkloadError(_too_long(where, n, MODEL_MAX_LEN))
        if "prompt_blocks" in obj:
            try:
                ids = BlockPrompt(check_blocks(obj["prompt_blocks"], n, where), n)
            except ValueError as exc:
                raise WorkloadError(str(exc)) from None
        elif "prompt_id" in obj:
            k = _int(obj["prompt_id"], "prompt_id", 0, where)
            if k >= PROMPT_IDS:
                raise WorkloadError(f"{where}: prompt_id must be < {PROMPT_IDS:,}, got {k}")
            ids = DistinctPrompt(k, n)
        else:
            ids = _fix_pr_prompt(n)
    else:
        raw = obj["prompt_token_ids"]
        if raw == []:
            raise WorkloadError(f"{where}: The decoder prompt cannot be empty")
        if not isinstance(raw, list) or any(
                isinstance(t, bool) or not isinstance(t, int) for t in raw):
            raise WorkloadError(f"{where}: prompt_token_ids must be a list of "
                                f"integers >= 0, got {short_repr(raw)}")
        # vLLM's input processor: a negative id, or one past the vocabulary, is refused
        # (vllm/v1/engine/input_processor.py:614-626 `is out of vocabulary`).
        bad = next((t for t in raw if not 0 <= t < vocab_size()), None)
        if bad is not None:
            raise WorkloadError(f"{where}: Token id {short_repr(bad)} is out of vocabulary "
                                f"(DeepSeek-V3.2's {vocab_size()} token ids are 0 .. "
                                f"{vocab_size() - 1})")
        ids = tuple(raw)
    rank = obj.get("dp_rank")
    return Request(ids, _int(obj.get("max_tokens", MAX_TOKENS), "max_tokens", 1, where),
                   _int(obj.get("arrival_step", 0), "arrival_step", 0, where),
                   None if rank is None else _int(rank, "dp_rank", 0, where))


@dataclass(frozen=True)
class Workload:
    requests: tuple[Request, ...]

    def __post_init__(self) -> None:
        if not self.requests:
            raise WorkloadError("workload: no requests")

    def __len__(self) -> int:
        return len(self.requests)

    @classmethod
    def from_json(cls, obj) -> Workload:
        """From ``{"requests": [...]}`` or a bare list of request objects."""
        if isinstance(obj, dict):
            extra = sorted(set(obj) - {"requests"})
            if extra or "requests" not in obj:
                raise WorkloadError("workload: expected {\"requests\": [...]} or a list"
                                    + (f"; unknown key(s) {', '.join(map(repr, extra))}"
                                       if extra else ""))
            obj = obj["requests"]
        if not isinstance(obj, list):
            raise WorkloadError(f"workload: requests must be a list, got {type(obj).__name__}")
        return cls(tuple(_request(i, r) for i, r in enumerate(obj)))

    def as_json(self) -> dict:
        return {"requests": [r.as_dict() for r in self.requests]}

    def validate(self, max_model_len: int) -> None:
        """Reject prompts vLLM's input processor refuses, with its own words.

        ``InputProcessor._validate_prompt_len`` (vllm/v1/engine/input_processor.py:508-553
        `def _validate_prompt_len`; vllm/v1/engine/input_processor.py:557-602@0.32.0
        `def _validate_prompt_len`; vllm/v1/engine/input_processor.py:557-602@0.33.0
        `def _validate_prompt_len`): an empty prompt (refused by ``from_json``); a
        prompt longer than max_model_len; one of exactly max_model_len (no room for
        an output token, generate runner).  A prompt + max_tokens beyond it is
        accepted: the request then stops at max_model_len.
        """
        for i, r in enumerate(self.requests):
            n = r.prompt_len
            if n > max_model_len:
                raise WorkloadError(_too_long(f"request {i + 1}", n, max_model_len))
            if n == max_model_len:
                raise WorkloadError(
                    f"request {i + 1}: The decoder prompt (length {n}) plus the number of "
                    f"requested output tokens (at least 1) is longer than the maximum "
                    f"model length of {max_model_len}. Make sure that `max_model_len` "
                    "is no smaller than the number of text tokens (prompt + requested "
                    "output tokens).")


    def check_ranks(self, data_parallel_size: int) -> None:
        """Each ``dp_rank`` names a rank there is: vLLM refuses a ``data_parallel_rank``
        outside ``[0, data_parallel_size)``, -dp 1 included
        (vllm/v1/engine/input_processor.py:363-367 `is out of range [0, {num_ranks}).`)."""
        for i, r in enumerate(self.requests):
            if r.dp_rank is not None and r.dp_rank >= data_parallel_size:
                raise WorkloadError(
                    f"request {i + 1}: dp_rank: data_parallel_rank {r.dp_rank} is out of "
                    f"range [0, {data_parallel_size}) (data_parallel_size="
                    f"{data_parallel_size})")


def _too_long(where: str, n: int, max_model_len: int) -> str:
    """vLLM's words for a prompt longer than max_model_len."""
    return (f"{where}: The decoder prompt (length {n}) is longer than the maximum model "
            f"length of {max_model_len}. Make sure that `max_model_len` is no smaller than "
            "the number of text tokens.")


def read_json_file(path: str | os.PathLike, what: str, error=ValueError):
    """A user's JSON file (a workload, engine arguments), read through the input boundary
    (bounded, one line naming ``what`` and the file: :mod:`~hisparse_model.boundary.json_file`)."""
    try:
        return load_json(os.fspath(path), f"{what} {os.fspath(path)}")
    except InputError as exc:
        raise error(str(exc)) from None


def load_workload(path: str | os.PathLike) -> Workload:
    """Read a workload file; malformed JSON is a WorkloadError naming the file."""
    return Workload.from_json(read_json_file(path, "workload", WorkloadError))


def synthetic(n_requests: int, prompt_lens=(16,), spacing: int = 0,
              max_tokens: int = MAX_TOKENS) -> Workload:
    """``n_requests`` fix-PR prompts cycling through ``prompt_lens``; request i
    arrives at step ``i * spacing`` (0: all at once)."""
    lens = [prompt_lens] if isinstance(prompt_lens, int) else list(prompt_lens)
    if n_requests < 1 or not lens or spacing < 0:
        raise WorkloadError("synthetic: need n_requests >= 1, prompt lengths, spacing >= 0")
    return Workload.from_json([
        {"prompt_len": lens[i % len(lens)], "max_tokens": max_tokens,
         "arrival_step": i * spacing} for i in range(n_requests)])


class Arrivals(dict):
    """Engine step -> the requests that join before it (their ``arrival_step``), and the next
    such step after a given one (how the engine loop jumps over an idle stretch in O(log n))."""

    @classmethod
    def of(cls, workload) -> "Arrivals":
        out = cls()
        for i, r in enumerate(workload.requests):
            out.setdefault(r.arrival_step, []).append(i)
        out.later = sorted(out)
        return out

    def next_after(self, step: int) -> int | None:
        nxt = bisect.bisect_right(self.later, step)
        return self.later[nxt] if nxt < len(self.later) else None

