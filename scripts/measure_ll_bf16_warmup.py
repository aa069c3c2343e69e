"""Cost of vLLM's ll_bf16 router-GEMM warmup on this machine, one M at a time.

On a CUDA machine with vLLM 0.32.0 or 0.33.0 (the offline bundle: ``source
.gpu/run/device-env.sh 0.32.0``)::

    python scripts/measure_ll_bf16_warmup.py OUT.json

vLLM's kernel warmup JIT-compiles the CuTe-DSL ``ll_bf16`` router GEMM for
M = 1..16 (``_LL_BF16_WARMUP_M_RANGE`` in
vllm/model_executor/warmup/kernel_warmup.py) for every bf16 router shape; the
tiny DeepSeek-V3.2 of the reproduction has one, (K, N) = (256, 8) (hidden size
256, 8 routed experts; the engine logs "Warming up ll_bf16 router GEMM kernels
for shapes: ((256, 8),)").  The live runner narrows that range to M = 1
(engine/instrument.py); this script measures what the narrowing saves: the
seconds each M takes, compiled in the order vLLM compiles them, written to
OUT.json after each M so a timeout still leaves what finished.
"""

from __future__ import annotations

import json
import sys
import time

SHAPES = ((256, 8),)  # (K, N) of the tiny model's router: hidden size, routed experts


def main(out: str) -> None:
    import torch
    import vllm
    from vllm.model_executor.kernels.linear.cute_dsl.ll_bf16 import (
        is_available,
        ll_bf16_gemm_kernel,
    )
    from vllm.model_executor.warmup import kernel_warmup

    res = {"vllm": vllm.__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "shapes": SHAPES,
           "m_range": list(kernel_warmup._LL_BF16_WARMUP_M_RANGE),
           "available": bool(is_available()), "seconds_per_m": {}}
    t_all = time.monotonic()
    for m in res["m_range"] if res["available"] else []:
        t0 = time.monotonic()
        ll_bf16_gemm_kernel.warmup(shapes=SHAPES, m_values=[m])
        res["seconds_per_m"][str(m)] = round(time.monotonic() - t0, 2)
        res["seconds_total"] = round(time.monotonic() - t_all, 2)
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"M={m}: {res['seconds_per_m'][str(m)]} s", flush=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
