"""Drive vLLM's own refusals on CPU: (e) HiSparse attached the way the engine attaches it.

``vllm.LLM(**engine/llm_args.py:llm_kwargs(knobs))`` builds, in this order
(engine/arg_utils.py ``create_engine_config``): the ModelConfig (its
max_model_len check, config/model.py:2471-2625 ``_get_and_verify_max_len`` in
0.31.0), the scheduler defaults and the SchedulerConfig (config/scheduler.py:
315-343 ``verify_max_model_len``: B >= S), then ``VllmConfig(...)`` *with*
``attention_config.hisparse_config`` and the speculative config already in
place, so ``__post_init__`` validates the V2 configuration HiSparse forces:
``_set_max_num_scheduled_tokens`` (config/vllm.py:2350-2386 / ... ) and
``_validate_v2_model_runner`` (:3315-3323 in 0.31.0, called from :2051), which
lists ``_get_v2_model_runner_unsupported_features`` (:3051-3100: parallel
drafting for MTP).  Each config is a pydantic dataclass, so what the user sees
is ``pydantic_core.ValidationError: 1 validation error for <Config>`` around
vLLM's ValueError; ``reason`` is that ValueError's text.

Stand-ins, only while ``VllmConfig`` is built: the platform answers
``is_cuda()`` True (HiSparse refuses other platforms, vllm.py:1821-1822) and
``support_hybrid_kv_cache()`` True as CUDA does (HiSparse requires the hybrid
KV cache manager, vllm.py:2290-2298), and
``vllm.config.vllm.HAS_TRITON`` is True (the H200 has Triton; V2 requires it).
The ModelConfig itself cannot be built on CPU (its architecture inspection
imports CUDA kernels), so the max_model_len check is the real
``_get_and_verify_max_len`` fed the shipped config.json through the real
``derive_max_model_len_and_key`` (max_position_embeddings 163840; YaRN rope
scaling, which the check does not multiply in).  The
speculative config is a real ``SpeculativeConfig`` instance made with
``object.__new__`` and its field defaults (a validated one needs the target and
draft HF configs), with method "mtp", num_speculative_tokens and
parallel_drafting set as llm_args passes them (no speculative config at K=0).
The attention backend and cudagraph_mode are passed as llm_args passes them.
enforce_eager lives on the ModelConfig, which is not built; its one effect on
these checks -- cudagraph_mode becomes NONE before the HiSparse block reads it
(0.32.0 / 0.33.0 refuse cudagraph_mode=FULL) -- is applied to the mode passed.

Run in a subprocess (``PYTHONPATH=.vllm/<version>:<repo>``) through
``vllm_driver.rejections_main``: stdin a JSON list of knob sets (or ``{"knobs",
"device"}``), stdout ``{"vllm_version", "vllm_file", "results"}``, one
``check_rejection`` result per knob set.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import json

from hisparse_model.crosscheck.config_path import _scheduler_config, _scheduler_defaults
from hisparse_model.crosscheck.driver_io import _format_exc, json_main, quiet_vllm, run_each
from hisparse_model.crosscheck.standins import (H200_DEVICE, _as_h200, _patched,
                                                uses_v2_model_runner)


def _reason(exc: BaseException) -> str:
    """vLLM's own message: the ValueError inside a pydantic ValidationError, else str()."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
        except Exception:  # noqa: BLE001
            return str(exc)
        ctx = first.get("ctx") or {}
        inner = ctx.get("error")
        if inner is not None:
            return str(inner)
        msg = str(first.get("msg", ""))
        return msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
    return str(exc)


def _speculative_config(num_speculative_tokens: int, parallel_drafting: bool):
    """A real SpeculativeConfig instance for MTP, built without its validator."""
    import dataclasses

    from vllm.config.speculative import SpeculativeConfig

    sc = object.__new__(SpeculativeConfig)
    for f in dataclasses.fields(SpeculativeConfig):
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = f.default_factory()  # type: ignore[misc]
        else:
            value = None
        object.__setattr__(sc, f.name, value)
    object.__setattr__(sc, "method", "mtp")
    object.__setattr__(sc, "num_speculative_tokens", num_speculative_tokens)
    object.__setattr__(sc, "parallel_drafting", parallel_drafting)
    return sc


def _model_max_len(max_model_len: int) -> int:
    """config/model.py ``_get_and_verify_max_len`` on the shipped DeepSeek-V3.2 config."""
    from types import SimpleNamespace

    from vllm.config.model import _get_and_verify_max_len

    from hisparse_model.engine.llm_args import model_config_text

    hf = json.loads(model_config_text())
    rope = dict(hf.get("rope_scaling") or {})
    if rope:
        rope.setdefault("rope_type", rope.get("type"))
    hf_config = SimpleNamespace(
        **{k: v for k, v in hf.items() if k != "rope_scaling"},
        rope_parameters=rope or None,
    )
    from vllm.transformers_utils.model_arch_config_convertor import (
        ModelArchConfigConvertorBase,
    )

    convertor = object.__new__(ModelArchConfigConvertorBase)  # reads hf_text_config only
    convertor.hf_config = convertor.hf_text_config = hf_config
    arch = SimpleNamespace(
        derived_max_model_len_and_key=convertor.derive_max_model_len_and_key())
    return _get_and_verify_max_len(
        hf_config=hf_config, model_arch_config=arch, tokenizer_config=None,
        max_model_len=max_model_len, disable_sliding_window=False, sliding_window=None,
    )


def check_rejection(knobs: dict, device: dict | None = None) -> dict:
    """Does ``vllm.LLM(**llm_kwargs(knobs))`` refuse these knobs?  Where, and why."""
    from vllm.config import (
        AttentionConfig,
        DeviceConfig,
        KVTransferConfig,
        VllmConfig,
    )
    from vllm.config import vllm as vllm_mod
    from vllm.config.attention import HiSparseConfig
    from vllm.platforms import current_platform

    device = {**H200_DEVICE, **(device or {})}
    res: dict = {"knobs": knobs, "rejected": False, "stage": None, "error": None,
                 "reason": None}

    def reject(stage: str, exc: BaseException) -> dict:
        res.update(rejected=True, stage=stage, error=_format_exc(exc), reason=_reason(exc))
        return res

    try:
        _model_max_len(knobs["max_model_len"])
    except Exception as exc:  # noqa: BLE001
        return reject("ModelConfig", exc)
    try:
        sched = _scheduler_defaults(knobs, device)
        scheduler_config = _scheduler_config(sched, knobs)
    except Exception as exc:  # noqa: BLE001
        return reject("SchedulerConfig", exc)
    res["max_num_batched_tokens"] = sched["max_num_batched_tokens"]
    k = knobs.get("num_speculative_tokens", 0)
    kwargs = dict(
        device_config=DeviceConfig(device="cpu"),
        scheduler_config=scheduler_config,
        attention_config=AttentionConfig(
            hisparse_config=HiSparseConfig(),
            **({"backend": knobs["attention_backend"]}
               if knobs.get("attention_backend") not in (None, "FLASH_ATTN_MLA_SPARSE") else {})),
        kv_transfer_config=KVTransferConfig(
            kv_connector="HiSparseConnector", kv_role="kv_both",
            kv_connector_extra_config={"host_pool_gib": 1}),
    )
    if k:
        kwargs["speculative_config"] = _speculative_config(k, bool(knobs.get("parallel_drafting")))
    mode = knobs.get("cudagraph_mode")  # llm_args: compilation_config={"cudagraph_mode": ...}
    if knobs.get("enforce_eager") and mode is not None:
        # enforce_eager sets cudagraph_mode NONE (config/vllm.py:1694-1697 / :1691-1694
        # / :1766-1769) before the HiSparse checks (:1820 / :1807 / :1883) read it.
        mode = "NONE"
    if mode is not None:
        from vllm.config import CompilationConfig

        kwargs["compilation_config"] = CompilationConfig(cudagraph_mode=mode)
    # Import the connector class now, under the CPU platform: imported while the
    # platform claims CUDA, its attention imports would load the CUDA-only
    # flash-attention extension (v1/attention/backends/fa_utils.py:21-28).
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    KVConnectorFactory.get_connector_class(kwargs["kv_transfer_config"])
    plat = type(current_platform)
    try:
        with _patched(plat, "is_cuda", lambda self: True), \
                _patched(plat, "support_hybrid_kv_cache", classmethod(lambda cls: True)), \
                _patched(vllm_mod, "HAS_TRITON", True), \
                _as_h200(device, memory_and_name=True):
            cfg = VllmConfig(**kwargs)
            res["use_v2_model_runner"] = uses_v2_model_runner(cfg)
    except Exception as exc:  # noqa: BLE001
        return reject("VllmConfig", exc)
    return res


def run_rejections(payload) -> dict:
    """``check_rejection`` for every knob set of ``payload`` (a list, or {"knobs", "device"})."""
    quiet_vllm()
    import vllm

    if isinstance(payload, dict):
        device, knob_list = payload.get("device"), payload["knobs"]
    else:
        device, knob_list = None, payload
    results = run_each(check_rejection, knob_list, device)
    return {"vllm_version": vllm.__version__, "vllm_file": vllm.__file__, "results": results}


def rejections_main() -> int:
    """stdin JSON knob sets -> stdout JSON ``run_rejections`` (vLLM's logs go to stderr)."""
    return json_main(run_rejections)
