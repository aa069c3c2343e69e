"""Small calls into vLLM's own code that tests make through the test run's driver server.

Each function runs inside ``crosscheck/server.py``'s forked child, where
``.vllm/<version>`` is on the path (``tests/`` is too: conftest's ``vllm_servers``), and
answers JSON: ``vllm_servers.call(version, "vllm_calls:<name>", payload)``.
"""

from __future__ import annotations


def hisparse_config_verdicts(values: list) -> list:
    """vLLM's ``AttentionConfig(hisparse_config=v)``: on (True), off (False) or 'refused'."""
    from vllm.config.attention import AttentionConfig

    out = []
    for value in values:
        try:
            out.append(AttentionConfig(hisparse_config=value).hisparse_config is not None)
        except Exception:  # noqa: BLE001 - pydantic's ValidationError, or vLLM's ValueError
            out.append("refused")
    return out


def human_readable_ints(texts: list[str]) -> list:
    """vLLM's ``human_readable_int`` of each text, or None where it refuses it."""
    from vllm.utils.argparse_utils import human_readable_int

    out = []
    for text in texts:
        try:
            out.append(human_readable_int(text))
        except Exception:  # noqa: BLE001 - ValueError, or argparse's ArgumentTypeError (1.5K)
            out.append(None)
    return out


def run_script(payload: dict):
    """Run ``payload["code"]`` as a script with ``payload["argv"]``; the JSON of the last
    line it prints (what ``python -c CODE ARGV...`` would print last)."""
    import contextlib
    import io
    import json
    import sys

    buf = io.StringIO()
    sys.argv = ["-c", *payload.get("argv", [])]
    with contextlib.redirect_stdout(buf):
        exec(compile(payload["code"], "<test script>", "exec"), {"__name__": "__main__"})
    return json.loads(buf.getvalue().strip().splitlines()[-1])
