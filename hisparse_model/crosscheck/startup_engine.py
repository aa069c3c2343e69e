"""Stand-in runner, MTP speculator and worker of the start-up driver, around vLLM's real methods.

``_Engine`` builds, per knob set, a ``GPUModelRunner`` and an ``MTPSpeculator``
with ``object.__new__`` carrying the attributes the driven methods read (the
real ``capture_model``, ``init_cudagraph_manager``, ``capture``, ``propose``,
the real fused/unfused draft-decode choice), a recording model, a stand-in
``model_state`` and block tables, and the graph managers
``initialize_kv_cache`` creates.  Its JIT-warmup worker half is
``startup_warmup._WarmupWorker``.

No vLLM or torch import happens at module level (package rule).
"""

from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace

from hisparse_model.crosscheck.startup_recorder import _Meta
from hisparse_model.crosscheck.startup_setup import _V, _setup
from hisparse_model.crosscheck.startup_warmup import _WarmupWorker
from hisparse_model.model.reproduction import BLOCK_SIZE

DEFAULT_NUM_GPU_BLOCKS = 10**6  # "plenty": the H200 at 30 % holds far more than any S needs


class _FakeModel:
    """The model forward: records the attention of this forward, returns zeros."""

    def __init__(self, runner: str):
        self.runner = runner

    def __call__(self, **kw):
        V = _V
        rec = V["rec"]
        cg = rec.cg_mode
        rec.forward(self.runner, rec._meta, cg)
        n = rec._meta.num_tokens
        return V["torch"].zeros(n, 1)

    def modules(self):
        return iter(())


def _model_state(V):
    def prepare_attn(input_batch, *a, **k):
        return _Meta(input_batch.num_scheduled_tokens, input_batch.num_tokens)

    return SimpleNamespace(
        prepare_dummy_inputs=lambda num_reqs, num_tokens: {},
        prepare_attn=prepare_attn,
        supports_mm_inputs=False,
        capture_inner_cudagraphs=lambda *a, **k: None,
        encoder_runner=None,
        max_model_len=0,
    )


def _block_tables(torch, max_reqs):
    return SimpleNamespace(
        get_dummy_block_tables=lambda num_reqs: [torch.zeros(num_reqs, 1, dtype=torch.int32)],
        get_dummy_slot_mappings=lambda num_tokens: torch.zeros(1, num_tokens, dtype=torch.int64),
        compute_slot_mappings=lambda *a, **k: torch.zeros(1, 1, dtype=torch.int64),
        input_block_tables=[torch.zeros(max_reqs, 1, dtype=torch.int32)],
        slot_mappings=torch.zeros(1, 1, dtype=torch.int64),
        cp_size=1, cp_rank=0, cp_interleave=1,
        gather_block_tables=lambda *a, **k: None,
        redirect_writes_to_null_block=False,
    )


def _block_spec():
    """A KV-cache group's spec as the warmups read it: 64-token blocks, not sharded over
    DCP, a block-table row of the base spec's ``max_num_blocks_per_req`` (0.34.0's warmups
    count the blocks a request reserves: vllm/v1/worker/gpu/warmup.py:40-84@0.34.0
    `def _reserved_block_count`)."""
    import types as _types

    spec = SimpleNamespace(block_size=BLOCK_SIZE, dcp_sharded=False)
    try:
        from vllm.v1.kv_cache_interface import KVCacheSpec
    except ImportError:  # pragma: no cover - every covered vLLM has it
        return spec
    spec.max_num_blocks_per_req = _types.MethodType(KVCacheSpec.max_num_blocks_per_req, spec)
    return spec


class _ConfigView:
    """The real VllmConfig, with a stand-in for a field the CPU config lacks."""

    def __init__(self, cfg, **overrides):
        self.__dict__["_cfg"] = cfg
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(self._cfg, name)


class _AttnGroup:
    """A drafter attention group: only what the drafter reads of it."""

    def __init__(self, name: str, supports_update: bool):
        self._name = name
        self.supports_draft_decode_metadata_update = supports_update
        self.backend = SimpleNamespace(get_name=lambda: name)
        self.kv_cache_group_id = 0

    def update_draft_decode_metadata(self, attn_metadata):
        pass

    def map_to_kernel_block_table(self, *a, **k):
        pass


@functools.lru_cache(maxsize=None)
def _supports_update(cls_name: str, builder_cls) -> bool:
    """The builder's ``supports_draft_decode_metadata_update`` at DCP=1.

    A class attribute where the builder declares one; the FA-sparse (0.32.0+)
    and indexer builders set it in ``__init__`` to ``dcp_world_size == 1``
    (flashattn_mla_sparse.py:139 / :144, indexer.py:1145 / :1146), read here
    from the same source line.
    """
    import inspect

    try:
        src = inspect.getsource(builder_cls.__init__)
    except (OSError, TypeError):
        src = ""
    if "self.supports_draft_decode_metadata_update = self.dcp_world_size == 1" in src:
        return True
    return bool(getattr(builder_cls, "supports_draft_decode_metadata_update", False))


def _drafter_attn_groups(V, backend: str):
    from vllm.v1.attention.backends.mla import indexer

    sparse = (V["fms"].FlashMLASparseMetadataBuilder if backend == "FLASHMLA_SPARSE"
              else V["fas"].FlashAttnMLASparseMetadataBuilder)
    idx = indexer.DeepseekV32IndexerMetadataBuilder
    return [[_AttnGroup(backend, _supports_update(backend, sparse)),
             _AttnGroup("DEEPSEEK_V32_INDEXER", _supports_update("indexer", idx))]]


class _Engine(_WarmupWorker):
    """Runner, speculator and worker stand-ins for one knob set."""

    def __init__(self, cfg, knobs: dict, mode, q: int):
        V = _setup()
        torch = V["torch"]
        self.V, self.cfg, self.knobs, self.q = V, cfg, knobs, q
        S = cfg.scheduler_config.max_num_seqs
        B = cfg.scheduler_config.max_num_batched_tokens
        K = knobs.get("num_speculative_tokens", 0)
        self.K = K
        self.mode = mode
        device = torch.device("cpu")
        self.device = device
        self.input_buffers = V["ib"].InputBuffers(S, B, device)
        self.block_tables = _block_tables(torch, S)
        self.model_state = _model_state(V)

        r = object.__new__(V["mr"].GPUModelRunner)
        r.vllm_config = cfg
        r.compilation_config = cfg.compilation_config
        r.scheduler_config = cfg.scheduler_config
        r.cache_config = cfg.cache_config
        r.lora_config = None
        r.model = _FakeModel("target")
        r.model_state = self.model_state
        r.input_buffers = self.input_buffers
        r.intermediate_tensors = None
        r.block_tables = self.block_tables
        r.attn_groups = [[]]
        r.kv_cache_config = SimpleNamespace(
            num_blocks=int(knobs.get("num_gpu_blocks") or DEFAULT_NUM_GPU_BLOCKS),
            kv_cache_groups=[SimpleNamespace(kv_cache_spec=_block_spec())
                             for _ in range(int(knobs.get("kv_cache_groups") or 1))],
        )
        r.pcp_manager = None
        r.use_aux_hidden_state_outputs = False
        r.adaptive_verification = None
        r.rejection_sampler = None
        r.kv_connector = SimpleNamespace(reset_capture_state=lambda: None,
                                         set_disabled=lambda flag: None)
        r.kv_block_zeroer = None
        r.max_num_reqs = S
        r.max_num_tokens = B
        r.max_model_len = knobs["max_model_len"]
        r.decode_query_len = q
        r.num_speculative_steps = K
        r.is_pooling_model = False
        r.is_encoder_decoder = False
        r.is_last_pp_rank = True
        r.speculative_config = cfg.speculative_config
        r.model_config = SimpleNamespace(get_vocab_size=lambda: 32)
        r._draft_workspace_lane = 1  # model_runner.py:195: its own workspace lane
        r.lora_capture_cases = None
        r.step_timing = SimpleNamespace(collect=contextlib.nullcontext)
        r.speculator = self._speculator() if K else None
        self.runner = r
        self.cudagraph_manager = None
        self._prefilled: set = set()  # warmup requests whose prompt has run
        self._state = None

    # -- the speculator ----------------------------------------------------
    def _speculator(self):
        V, torch, cfg = self.V, self.V["torch"], self.cfg
        S = cfg.scheduler_config.max_num_seqs
        B = cfg.scheduler_config.max_num_batched_tokens
        sp = object.__new__(V["mtp"].MTPSpeculator)
        sp.vllm_config = _ConfigView(cfg, model_config=SimpleNamespace(
            max_model_len=self.knobs["max_model_len"]))
        sp.device = self.device
        sp.speculative_config = cfg.speculative_config
        sp.method = "mtp"
        sp.num_speculative_steps = self.K
        sp.max_num_reqs = S
        sp.max_num_tokens = B
        if not isinstance(getattr(type(sp), "max_model_len", None), property):
            sp.max_model_len = self.knobs["max_model_len"]  # 0.33.0: a property over model_config
        sp.draft_max_seq_len = sp.max_model_len
        sp.dp_size, sp.dp_rank, sp.dcp_size = 1, 0, 1
        sp.eplb_state = None
        sp.pcp_manager = None
        sp.supports_mm_inputs = False
        sp.input_buffers = V["ib"].InputBuffers(S, B, self.device)
        sp.idx_mapping = torch.zeros(S, dtype=torch.int32)
        sp.temperature = torch.zeros(S)
        sp.seeds = torch.zeros(S, dtype=torch.int64)
        sp.draft_tokens = torch.zeros(S, self.K, dtype=torch.int64)
        sp.hidden_states = torch.zeros(B, 1)
        sp.current_draft_step = torch.tensor(0)
        sp.last_token_indices = torch.zeros(S, dtype=torch.int64)
        sp.sample_src_positions = torch.zeros(S, dtype=torch.int64)
        sp.draft_is_prefilling = torch.zeros(S, dtype=torch.bool)
        import numpy as np

        sp.arange_np = np.arange(S + 1, dtype=np.int32)
        sp.draft_watermarker = None
        sp.acceptance_estimator = None
        sp.model = _FakeModel("drafter")
        sp.model_state = self.model_state
        sp.kv_cache_config = SimpleNamespace(kv_cache_groups=[None])
        sp.block_tables = self.block_tables
        sp.target_input_buffers = self.input_buffers
        sp.target_attn_groups = [[]]
        sp.attn_groups = _drafter_attn_groups(V, self.knobs.get("attention_backend")
                                              or "FLASH_ATTN_MLA_SPARSE")
        # the real fused / unfused decision from the drafter's attention groups
        if hasattr(sp, "_configure_fused_multi_step_decode"):
            sp._configure_fused_multi_step_decode()
            self.fused = sp.use_fused_multi_step_decode
        else:
            sp._configure_decode_metadata_update()
            self.fused = sp.supports_decode_metadata_update
        rec = V["rec"]

        def _prefill(num_reqs, num_tokens, attn_metadata, slot_mappings,
                     num_tokens_across_dp=None, cudagraph_runtime_mode=None, **kw):
            rec.forward("drafter", attn_metadata, rec.cg_mode or cudagraph_runtime_mode)

        def _generate_draft(num_reqs, num_tokens_padded, attn_metadata, slot_mappings,
                            num_tokens_across_dp=None, cudagraph_runtime_mode=None, *a, **kw):
            rec.forward("drafter_decode", attn_metadata, rec.cg_mode or cudagraph_runtime_mode)

        sp._prefill = _prefill
        sp._generate_draft = _generate_draft
        if hasattr(type(sp), "_decode"):  # 0.34.0: one draft step is _decode
            self._speculator_v34(sp, _generate_draft)
        return sp

    def _speculator_v34(self, sp, draft_step) -> None:
        """What 0.34.0's speculator reads beside 0.33.0's (its __init__'s values for this
        config: vllm/v1/worker/gpu/spec_decode/speculator.py:156-270@0.34.0
        `self.enable_adaptive_verification = (`), its one draft
        step ``_decode`` recorded as 0.33.0's ``_generate_draft`` was, and its Triton
        decode-input kernel stubbed."""
        torch, spec = self.V["torch"], self.cfg.speculative_config
        sp.scheduler_config = self.cfg.scheduler_config
        sp.enable_adaptive_verification = bool(spec.enable_adaptive_verification)
        sp.use_acceptance_estimator = sp.enable_adaptive_verification
        sp.draft_logits = None
        sp.use_draft_logits = False
        sp.inputs_embeds = None
        sp.max_model_len_gpu = torch.tensor(sp.max_model_len, dtype=torch.int32)
        sp.draft_token_confidence_probs = torch.zeros(sp.max_num_reqs, self.K)
        sp.prefill_cudagraph_manager = sp.decode_cudagraph_manager = None

        def _decode(num_reqs, num_tokens_padded, attn_metadata, slot_mappings,
                    num_tokens_across_dp, cudagraph_runtime_mode, num_speculative_steps):
            draft_step(num_reqs, num_tokens_padded, attn_metadata, slot_mappings,
                       num_tokens_across_dp, cudagraph_runtime_mode)

        sp._decode = _decode
        sp._prepare_decode_inputs = lambda *a, **k: None

    # -- what initialize_kv_cache does for the graphs (model_runner.py:703-746) --
    def init_managers(self, is_profiling: bool):
        V, cfg = self.V, self.cfg
        import inspect

        manager = V["cgu"].ModelCudaGraphManager
        if "decode_query_lens" in inspect.signature(manager.__init__).parameters:
            # 0.34.0: graphs per uniform decode query length (model_runner.py:801-811@0.34.0)
            width = {"decode_query_lens": cfg.get_decode_cudagraph_query_lens(self.q)}
        else:
            width = {"decode_query_len": self.q}
        self.cudagraph_manager = manager(
            cfg, self.device, self.mode, **width,
            lora_capture_cases=None, varlen_decode=False, ubatch_runner=None,
        )
        self.runner.cudagraph_manager = self.cudagraph_manager
        if self.runner.speculator is not None:
            self.runner.speculator.init_cudagraph_manager(self.mode)
