"""One engine configuration, run in its own process: ``python -m hisparse_model.engine.child SPEC OUT``.

SPEC is a JSON file ``{"knobs": {...}, "prompt_lens": [...], "command": "..."}``.
The child builds the engine, serves the prompts one at a time (the fix PR's
loop, ``max_tokens=8``, ``ignore_eos=True``) and writes the recording to OUT.
A prompt that fails leaves the engine unusable, so later prompts are marked
``"ran": false``.  The parent (:mod:`.live`) owns the timeout.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import tempfile
import time

from ..knobs import Knobs
from ..recordings import SCHEMA_VERSION, write_json_atomic
from . import instrument, llm_args


def _versions() -> dict:
    import torch
    import vllm

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "vllm": getattr(vllm, "__version__", "unknown"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu,
        "python": sys.version.split()[0],
    }


def _error_text(log: instrument.RouteLog, phase_prefix: str, exc: BaseException) -> str:
    """The routing error if one was raised in this phase, else the exception's own text."""
    return log.first_error(phase_prefix) or instrument.format_exception(exc)


def run(spec: dict) -> dict:
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    knobs = Knobs(**spec["knobs"])
    prompt_lens = [int(n) for n in spec["prompt_lens"]]
    log = instrument.RouteLog()
    instrument.install(log, routing=knobs.routing)
    model_dir = llm_args.write_model_dir(tempfile.mkdtemp(prefix="dsv32-tiny-"))
    kwargs = llm_args.llm_kwargs(knobs, model_dir)
    rec: dict = {
        "schema": SCHEMA_VERSION,
        "knobs": knobs.as_dict(),
        "prompt_lens": prompt_lens,
        "provenance": {
            **_versions(),
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "engine_args": {**kwargs, "model": "hisparse_model/data/dsv32-config.json"},
            "hf_overrides": llm_args.TINY_OVERRIDES,
            "mode": knobs.routing,
            "command": spec.get("command", ""),
            "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith("VLLM_")},
        },
    }
    t0 = time.monotonic()
    llm = None
    try:
        llm = llm_args.build_llm(kwargs)
        rec["startup"] = {"ok": True, "error": None}
    except BaseException as exc:  # noqa: BLE001 - the point is to record it
        rec["startup"] = {"ok": False, "error": _error_text(log, "", exc)}
    rec["startup"]["seconds"] = round(time.monotonic() - t0, 1)
    rec["engine"] = log.engine_report
    rec["provenance"]["patches"] = log.patches

    prompts = []
    alive = llm is not None
    for i, n in enumerate(prompt_lens):
        if not alive:
            prompts.append({"n": n, "ran": False, "ok": None, "error": None})
            continue
        from vllm import SamplingParams

        phase = f"prompt:{i}"
        with log.in_phase(phase):
            try:
                llm.generate(
                    [{"prompt_token_ids": llm_args.prompt_token_ids(n)}],
                    SamplingParams(max_tokens=llm_args.MAX_TOKENS, ignore_eos=True),
                    use_tqdm=False,
                )
                prompts.append({"n": n, "ran": True, "ok": True, "error": None})
            except BaseException as exc:  # noqa: BLE001
                prompts.append(
                    {"n": n, "ran": True, "ok": False, "error": _error_text(log, phase, exc)}
                )
                alive = False
    rec["prompts"] = prompts
    rec["routing_log"] = log.rows
    rec["provenance"]["patches"] = log.patches
    return rec


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path) as f:
        spec = json.load(f)
    rec = run(spec)
    write_json_atomic(out_path, rec)
    print(f"wrote {out_path}: startup ok={rec['startup']['ok']}", flush=True)
    sys.stdout.flush()
    # vLLM may leave non-daemon threads behind; the recording is safely on disk.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
