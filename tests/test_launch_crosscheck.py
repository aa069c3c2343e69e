"""check's flag tables and serve defaults against vLLM's own `vllm serve` parser and EngineArgs.

Per version, one call of the test run's driver server (``hisparse_model.crosscheck.launch_driver``) builds vLLM's
serve parser and runs its batch defaulting with the platform answering as the H200.
"""

import pytest

from hisparse_model.model.knobs import VLLM_VERSIONS

from hisparse_model.inputs.launch import ENGINE_ARGS, SERVE, resolve_defaults
from hisparse_model.inputs.vllm_flags import CONFIG_KEYS, all_flags

pytestmark = pytest.mark.vllm_cpu
VERSIONS = VLLM_VERSIONS  # every version the model covers (and a release-check candidate)
# (context, L, S or None, B or None): unset knobs take the context's defaults
DEFAULTS = [("serve", 163840, None, None), ("serve", 163840, 4, None),
            ("serve", 320, 2, None), ("serve", 320, None, None), ("serve", 320, 30, None),
            ("serve", 4000, None, 2048), ("offline", 320, 4, None), ("offline", 163840, None, None),
            ("offline", 320, None, None)]


@pytest.fixture(scope="module", params=VERSIONS)
def driven(request, vllm_servers):
    payload = {"flags": list(all_flags()), "configs": list(CONFIG_KEYS),
               "defaults": [{"context": c, "max_model_len": n, "max_num_seqs": s,
                             "max_num_batched_tokens": b} for c, n, s, b in DEFAULTS]}
    return request.param, vllm_servers.call(
        request.param, "hisparse_model.crosscheck.launch_driver:run", payload, timeout=600)


def test_every_flag_is_vllms_and_switches_agree(driven):
    """Every flag check reads, holds or ignores is a `vllm serve` flag, a switch where vLLM's is."""
    version, out = driven
    for flag, switch in all_flags().items():
        got = out["flags"][flag]
        assert got["known"], f"{version}: {flag} is not a vllm serve flag"
        assert got["switch"] == switch, f"{version}: {flag} switch={got['switch']}"
    # the switches check accepts as --no-<flag> are negatable in vLLM
    for flag in ("--enable-prefix-caching", "--enable-chunked-prefill", "--async-scheduling",
                 "--scheduler-reserve-full-isl"):
        assert out["flags"][flag]["negatable"], f"{version}: --no-{flag[2:]}"


def test_defaults_are_vllms_for_serve_and_offline(driven):
    """check's defaults for an unset max_num_seqs / max_num_batched_tokens are EngineArgs' own."""
    version, out = driven
    for (context, length, seqs, tokens), want in zip(DEFAULTS, out["defaults"]):
        values = {"max_model_len": length}
        if seqs is not None:
            values["max_num_seqs"] = seqs
        if tokens is not None:
            values["max_num_batched_tokens"] = tokens
        source = SERVE if context == "serve" else ENGINE_ARGS
        knobs = resolve_defaults(values, {}, [], version, source, "").knobs
        got = {"max_num_seqs": knobs.max_num_seqs,
               "max_num_batched_tokens": knobs.max_num_batched_tokens}
        assert got == want, (version, context, length, seqs, tokens)


def test_config_keys_are_vllms(driven):
    """Every JSON config key check reads or ignores is a field of vLLM's config class."""
    version, out = driven
    for name, keys in CONFIG_KEYS.items():
        missing = set(keys) - set(out["config_fields"][name])
        assert not missing, f"{version}: {name} has no {sorted(missing)}"
