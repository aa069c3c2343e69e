"""``--attention-config '{"hisparse_config": ...}'`` read as vLLM 0.31.0 reads it.

vLLM declares ``hisparse_config: HiSparseConfig | None = None``
(vllm/config/attention.py:98 `hisparse_config: HiSparseConfig | None = None`), a
pydantic dataclass that forbids unknown fields
(vllm/config/utils.py:71 `merged_config = ConfigDict(extra="forbid")`), with two fields:
``device_buffer_size: int | None``, greater than 0
(vllm/config/attention.py:21 `device_buffer_size: int | None = Field(default=None, gt=0)`),
and ``eager_host_mirror: bool``
(vllm/config/attention.py:29 `eager_host_mirror: bool = True`).  So

* ``null`` leaves HiSparse off (HiSparse is on when the field is not None,
  vllm/config/vllm.py:1820 `if self.attention_config.hisparse_config is not None:`),
  unless a HiSparseConnector switches it on with defaults
  (vllm/config/vllm.py:1813-1818 `has_connector("HiSparseConnector")`);
* an object switches it on; ``false``, ``true``, a list or a string are refused
  (pydantic: "Input should be a dictionary or an instance of HiSparseConfig"), as are
  unknown keys and invalid values, in pydantic's lax-mode words.

Neither field changes C, W or the routing the model covers (C comes from S, q and B:
vllm/v1/hisparse/runtime.py:51-57 `def _get_max_swap_rows`), so a valid object only
switches HiSparse on.  ``tests/test_hisparse_config.py`` compares every row with vLLM's
own ``AttentionConfig`` on CPU.
"""

from __future__ import annotations

import math

# pydantic's lax-mode strings for a bool field
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _refuse(where: str, what: str) -> ValueError:
    return ValueError(f"{where}: vLLM refuses it: {what}")


def _buffer_size(value, where: str) -> None:
    if value is None:
        return
    if isinstance(value, float):
        if not math.isfinite(value):  # JSON's 1e400 (inf) or NaN: pydantic's finite_number
            raise _refuse(where, "Input should be a finite number")
        if value != int(value):
            raise _refuse(where, "Input should be a valid integer, got a number with a "
                          "fractional part")
        value = int(value)
    elif isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise _refuse(where, "Input should be a valid integer, unable to parse string "
                          "as an integer") from None
    elif not isinstance(value, int):  # bool is an int: True reads as 1, False as 0
        raise _refuse(where, "Input should be a valid integer")
    if value <= 0:
        raise _refuse(where, "Input should be greater than 0")


def _mirror(value, where: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int) and value in (0, 1):
        return
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return
    if value is None or not isinstance(value, (int, str, float)):
        raise _refuse(where, "Input should be a valid boolean")
    raise _refuse(where, "Input should be a valid boolean, unable to interpret input")


def hisparse_on(value, where: str) -> bool:
    """Whether ``hisparse_config`` = ``value`` switches HiSparse on (None: off); ValueError
    (naming ``where``) where vLLM refuses the value."""
    if value is None:
        return False
    if not isinstance(value, dict):
        raise _refuse(where, f"{value!r}: Input should be a dictionary or an instance of "
                      "HiSparseConfig (null leaves HiSparse off; {} switches it on)")
    for key, sub in value.items():
        here = f"{where}.{key}"
        if key == "device_buffer_size":
            _buffer_size(sub, here)
        elif key == "eager_host_mirror":
            _mirror(sub, here)
        else:
            raise _refuse(here, "Unexpected keyword argument (HiSparseConfig takes "
                          "device_buffer_size and eager_host_mirror)")
    return True
