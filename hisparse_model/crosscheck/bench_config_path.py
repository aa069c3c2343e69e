"""Time vLLM's own config path for the benchmark: ``python -m hisparse_model.crosscheck.bench_config_path``.

stdin: a JSON list of knob dicts; stdout: ``{"seconds", "n"}`` (run with vLLM on the path).
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from .vllm_driver import time_config_path

    knobs = json.load(sys.stdin)
    print(json.dumps({"seconds": time_config_path(knobs), "n": len(knobs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
