"""Prove that the CPU-side pieces of an installed vLLM import and run.

Run as:  PYTHONPATH=.vllm/X python scripts/vllm_probe.py [--strict]

Each check prints "OK" or "FAIL" plus a short proof line. Exit status is 1
when a required check fails (with --strict also when an optional one fails).
No GPU, model weights or network are needed.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
import types
import warnings
from collections.abc import Callable

RESULTS: list[tuple[str, bool, bool]] = []  # (name, ok, required)


def check(name: str, required: bool = True) -> Callable:
    def deco(fn: Callable[[], object]) -> Callable:
        try:
            detail = fn()
        except BaseException as exc:  # noqa: BLE001 - report everything
            root = exc
            while root.__cause__ is not None or root.__context__ is not None:
                root = root.__cause__ or root.__context__
            where = traceback.extract_tb(root.__traceback__)
            loc = f" ({where[-1].filename}:{where[-1].lineno})" if where else ""
            print(f"FAIL {name}: {type(exc).__name__}: {exc}"[:600])
            if root is not exc:
                print(f"     root cause: {type(root).__name__}: {root}{loc}"[:600])
            RESULTS.append((name, False, required))
        else:
            print(f"OK   {name}: {detail}")
            RESULTS.append((name, True, required))
        return fn

    return deco


def scheduler_config():
    from vllm.config import SchedulerConfig

    return SchedulerConfig(
        max_num_seqs=2,
        max_num_batched_tokens=640,
        max_model_len=320,
        is_encoder_decoder=False,
    )


def build_vllm_config():
    from vllm.config import DeviceConfig, VllmConfig

    return VllmConfig(
        device_config=DeviceConfig(device="cpu"), scheduler_config=scheduler_config()
    )


def spec_standin(num_speculative_tokens: int):
    """Just what max_decode_query_len() reads from a SpeculativeConfig."""
    return types.SimpleNamespace(
        num_speculative_tokens=num_speculative_tokens, parallel_drafting=False
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    @check("vllm import")
    def _():
        import torch

        import vllm

        return (
            f"vllm {vllm.__version__} from {os.path.dirname(vllm.__file__)}; "
            f"torch {torch.__version__}; "
            f"VLLM_TARGET_DEVICE={os.environ.get('VLLM_TARGET_DEVICE', '<unset>')}"
        )

    @check("platform")
    def _():
        from vllm.platforms import current_platform as p

        return (
            f"{type(p).__name__} (device_type={p.device_type!r}, "
            f"is_cuda={p.is_cuda()}, is_cpu={p.is_cpu()})"
        )

    @check("vllm.config: VllmConfig(cpu, no model)")
    def _():
        from vllm.config import (  # noqa: F401 - the import itself is checked
            CacheConfig,
            CompilationConfig,
            DeviceConfig,
            ParallelConfig,
            SchedulerConfig,
            VllmConfig,
        )

        cfg = build_vllm_config()
        sc = cfg.scheduler_config
        assert cfg.model_config is None
        return (
            f"max_num_seqs={sc.max_num_seqs} "
            f"max_num_batched_tokens={sc.max_num_batched_tokens} "
            f"max_model_len(InitVar)=320 "
            f"cudagraph_mode={cfg.compilation_config.cudagraph_mode.name}"
        )

    @check("HiSparseConfig refused at construction, attachable after")
    def _():
        from vllm.config import DeviceConfig, VllmConfig
        from vllm.config.attention import AttentionConfig, HiSparseConfig
        from vllm.v1.hisparse.runtime import ResolvedHiSparseConfig

        try:
            VllmConfig(
                device_config=DeviceConfig(device="cpu"),
                scheduler_config=scheduler_config(),
                attention_config=AttentionConfig(hisparse_config=HiSparseConfig()),
            )
        except Exception as exc:  # pydantic ValidationError wrapping ValueError
            assert "HiSparse currently requires NVIDIA CUDA" in str(exc), exc
        else:
            raise AssertionError("expected HiSparse to be refused without CUDA")
        cfg = build_vllm_config()
        cfg.attention_config.hisparse_config = HiSparseConfig()
        resolved = ResolvedHiSparseConfig.from_vllm_config(cfg, 2048)
        assert resolved is not None and resolved.device_buffer_size == 2 * 2048
        return f"refused as expected; attached -> {resolved}"

    @check("VllmConfig._set_cudagraph_sizes() with a stand-in model_config")
    def _():
        from vllm.config import CUDAGraphMode

        out = []
        for seqs, tokens in ((2, 640), (256, 8192)):
            from vllm.config import DeviceConfig, SchedulerConfig, VllmConfig

            cfg = VllmConfig(
                device_config=DeviceConfig(device="cpu"),
                scheduler_config=SchedulerConfig(
                    max_num_seqs=seqs,
                    max_num_batched_tokens=tokens,
                    max_model_len=tokens,
                    is_encoder_decoder=False,
                ),
            )
            # No model => cudagraphs off; re-enable as a CUDA run would have it.
            cfg.model_config = types.SimpleNamespace(enforce_eager=False)
            cc = cfg.compilation_config
            cc.cudagraph_mode = CUDAGraphMode.FULL_AND_PIECEWISE
            cc.cudagraph_capture_sizes = None
            cc.max_cudagraph_capture_size = None
            cfg._set_cudagraph_sizes()
            sizes = cc.cudagraph_capture_sizes
            out.append(
                f"seqs={seqs}: {len(sizes)} sizes {sizes[:4]}..{sizes[-1]} "
                f"(max {cc.max_cudagraph_capture_size})"
            )
        return "; ".join(out)

    @check("vllm.v1.attention.backend.max_decode_query_len")
    def _():
        from vllm.v1.attention.backend import max_decode_query_len

        cfg = build_vllm_config()
        plain = max_decode_query_len(cfg)
        cfg.speculative_config = spec_standin(3)
        spec = max_decode_query_len(cfg)
        assert (plain, spec) == (1, 4), (plain, spec)
        return f"no spec -> {plain}; 3 spec tokens (stand-in) -> {spec}"

    @check("vllm.v1.hisparse.runtime: _get_max_swap_rows, HiSparseRuntime")
    def _():
        from vllm.v1.hisparse import runtime
        from vllm.v1.hisparse.runtime import HiSparseRuntime, _get_max_swap_rows

        cfg = build_vllm_config()
        rows = _get_max_swap_rows(cfg)
        cfg.speculative_config = spec_standin(3)
        rows_spec = _get_max_swap_rows(cfg)
        assert (rows, rows_spec) == (2, 8), (rows, rows_spec)
        ops = runtime._has_hisparse_ops()
        return (
            f"_get_max_swap_rows={rows} (spec3: {rows_spec}); "
            f"{HiSparseRuntime.__name__} imported (constructible: {ops}, "
            "needs compiled _C_cache_ops CUDA kernels)"
        )

    @check("vllm.v1.attention.backends.mla.index_group")
    def _():
        import torch

        from vllm.v1.attention.backends.mla.index_group import (
            HiSparseMLAIndexGroup,
            SparseMLAIndexGroup,
            SparseMLAIndexGroupBuilder,
            get_sparse_mla_index_group_max_rows,
        )

        cfg = build_vllm_config()
        max_rows = get_sparse_mla_index_group_max_rows(cfg)
        assert issubclass(HiSparseMLAIndexGroup, SparseMLAIndexGroup)
        # Without a HiSparse config the builder makes a plain group; on CPU
        # torch.Stream/torch.Event are CPU no-op objects.
        builder = SparseMLAIndexGroupBuilder(
            torch.zeros(8, 16, dtype=torch.int32), max_decode_rows=max_rows
        )
        group, index = builder.register_layer(True)
        return (
            f"get_sparse_mla_index_group_max_rows={max_rows}; builder -> "
            f"{type(group).__name__}[{index}] "
            f"physical_topk={tuple(group.physical_topk_indices.shape)}"
        )

    @check("vllm.engine.arg_utils.EngineArgs batch defaults")
    def _():
        from vllm.engine.arg_utils import EngineArgs
        from vllm.platforms import current_platform
        from vllm.usage.usage_lib import UsageContext

        def llm_default(max_model_len: int) -> tuple[int, int]:
            ea = EngineArgs(max_model_len=max_model_len)
            ea._set_default_max_num_seqs_and_batched_tokens_args(
                UsageContext.LLM_CLASS,
                types.SimpleNamespace(  # stand-in ModelConfig
                    max_model_len=max_model_len,
                    is_multimodal_model=False,
                    is_mm_prefix_lm=False,
                ),
                types.SimpleNamespace(use_batched_dp_moe=False),  # ParallelConfig
            )
            return ea.max_num_batched_tokens, ea.max_num_seqs

        here = llm_default(320)
        # Stand-in for an H200 (141 GiB): get_batch_defaults only asks the
        # platform for memory and name.
        p = type(current_platform)
        saved = (p.get_device_total_memory, p.get_device_name)
        p.get_device_total_memory = classmethod(lambda cls, device_id=0: 141 << 30)
        p.get_device_name = classmethod(lambda cls, device_id=0: "NVIDIA H200")
        try:
            h200 = llm_default(8192)
        finally:
            p.get_device_total_memory, p.get_device_name = saved
        return (
            f"LLM class, this platform, max_model_len=320 -> (tokens, seqs)={here}; "
            f"H200 stand-in, max_model_len=8192 -> {h200}"
        )

    @check("vllm.v1.worker.gpu.input_batch", required=False)
    def _():
        import torch

        from vllm.v1.worker.gpu import input_batch

        buf = input_batch.InputBuffers(2, 640, torch.device("cpu"))
        return f"InputBuffers(cpu) input_ids={tuple(buf.input_ids.shape)}"

    @check("vllm.v1.worker.gpu.cudagraph_utils", required=False)
    def _():
        from vllm.v1.worker.gpu import cudagraph_utils

        return f"CudaGraphManager={cudagraph_utils.CudaGraphManager.__name__}"

    @check("vllm.v1.worker.gpu.warmup", required=False)
    def _():
        import torch

        from vllm.v1.kv_cache_interface import FullAttentionSpec
        from vllm.v1.worker.gpu import warmup

        spec = FullAttentionSpec(
            block_size=64, num_kv_heads=1, head_size=576, dtype=torch.bfloat16
        )
        n = warmup._reserved_block_count(
            300,
            spec,
            num_lookahead_tokens=0,
            max_model_len=320,
            max_encoder_len=0,
        )
        return f"_reserved_block_count(300 tok, block 64)={n}"

    failed = [n for n, ok, req in RESULTS if not ok and (req or args.strict)]
    n_ok = sum(ok for _, ok, _ in RESULTS)
    print(f"probe summary: {n_ok}/{len(RESULTS)} checks ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
