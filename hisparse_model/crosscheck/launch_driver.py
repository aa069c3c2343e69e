"""Drive vLLM's own ``vllm serve`` parser and batch defaults on CPU, for ``check``'s tables.

Run in a subprocess against one vLLM tree::

    PYTHONPATH=.vllm/0.31.0:. python -m hisparse_model.crosscheck.launch_driver < payload.json

stdin: ``{"flags": [flag, ...], "defaults": [{"context": "serve" | "offline",
"max_model_len": L, "max_num_seqs": S | null, "max_num_batched_tokens": B | null}, ...]}``.

stdout: ``{"vllm_version", "flags": {flag: {"known", "switch", "negatable"}},
"defaults": [{"max_num_seqs", "max_num_batched_tokens"}, ...], "config_fields": {config:
[field, ...]}}`` (``"configs"`` in stdin names the JSON config flags to list):

* each flag as vLLM's serve parser knows it (``make_arg_parser``,
  vllm/entrypoints/launchers/cli_args.py:410 `def make_arg_parser` in 0.31.0 and
  0.32.0, ``entrypoints/common/cli_args.py`` in 0.33.0): whether it exists, whether it
  is a switch (takes no value), and whether ``--no-<flag>`` exists.  ``-O`` is
  not an option: ``FlexibleArgumentParser`` rewrites ``-O<n>`` and ``-O <n>`` into
  ``--optimization-level`` (vllm/utils/argparse_utils.py:353-364 `optimization_level`),
  so it is checked by parsing ``-O2``.  Stand-in: the platform reports
  ``device_type="cuda"`` while the parser is built (its default ``DeviceConfig``
  infers the device, which a CPU-only torch cannot).
* ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`` with
  ``UsageContext.OPENAI_API_SERVER`` (``vllm serve``) or ``LLM_CLASS`` (an
  engine-args file), the platform answering as the H200 (``standins._as_h200``),
  on the stand-in model config ``config_path._scheduler_defaults`` uses.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import sys

from hisparse_model.crosscheck.driver_io import json_main, quiet_vllm
from hisparse_model.crosscheck.standins import H200_DEVICE, _as_h200, _patched


def _serve_parser():
    """vLLM's own ``vllm serve`` argument parser."""
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # 0.33.0
        from vllm.entrypoints.common.cli_args import make_arg_parser
    with _patched(type(current_platform), "device_type", "cuda"):
        return make_arg_parser(FlexibleArgumentParser())


def _flag(parser, flag: str) -> dict:
    opts = parser._option_string_actions
    if flag == "-O":  # rewritten by FlexibleArgumentParser, not an option
        args = parser.parse_args(["-O2"])
        return {"known": args.optimization_level in (2, "2"), "switch": False,
                "negatable": False}
    action = opts.get(flag)
    if action is None:
        return {"known": False, "switch": False, "negatable": False}
    no = "--no-" + flag[2:] if flag.startswith("--") else None
    return {"known": True, "switch": action.nargs == 0, "negatable": no in opts}


def _defaults(case: dict) -> dict:
    from types import SimpleNamespace

    from vllm.engine.arg_utils import EngineArgs
    from vllm.usage.usage_lib import UsageContext

    ea = EngineArgs(max_model_len=case["max_model_len"], max_num_seqs=case["max_num_seqs"],
                    max_num_batched_tokens=case["max_num_batched_tokens"])
    model_config = SimpleNamespace(  # as config_path._scheduler_defaults
        max_model_len=case["max_model_len"], is_chunked_prefill_supported=True,
        is_prefix_caching_supported=True, runner_type="generate", is_multimodal_model=False,
        is_mm_prefix_lm=False)
    context = {"serve": UsageContext.OPENAI_API_SERVER,
               "offline": UsageContext.LLM_CLASS}[case["context"]]
    with _as_h200(H200_DEVICE, memory_and_name=True):
        ea._set_default_chunked_prefill_and_prefix_caching_args(model_config)
        ea._set_default_max_num_seqs_and_batched_tokens_args(
            context, model_config, SimpleNamespace(use_batched_dp_moe=False))
    return {"max_num_seqs": ea.max_num_seqs, "max_num_batched_tokens": ea.max_num_batched_tokens}


def _config_fields(name: str) -> list[str]:
    """The fields of the config class a JSON config flag builds (``speculative_config`` ...)."""
    import vllm.config as config

    cls = {"speculative_config": config.SpeculativeConfig,
           "compilation_config": config.CompilationConfig,
           "attention_config": config.AttentionConfig,
           "kv_transfer_config": config.KVTransferConfig}[name]
    return sorted(cls.__dataclass_fields__)


def run(payload: dict) -> dict:
    quiet_vllm()
    import vllm

    parser = _serve_parser()
    return {"vllm_version": vllm.__version__,
            "flags": {f: _flag(parser, f) for f in payload["flags"]},
            "defaults": [_defaults(c) for c in payload["defaults"]],
            "config_fields": {n: _config_fields(n) for n in payload.get("configs", [])}}


def main() -> int:
    return json_main(run)


if __name__ == "__main__":
    sys.exit(main())
