"""`hisparse_config` is read as vLLM reads it: null is off, an object is on, anything else refused.

The table's verdicts are vLLM 0.31.0's pydantic ``AttentionConfig(hisparse_config=...)``
(checked against vLLM itself on CPU by the ``vllm_cpu`` test below): ``null`` -> None (off),
``{}`` -> HiSparseConfig() (on), ``false`` / ``true`` / lists / strings refused, unknown
keys refused (extra="forbid"), ``device_buffer_size`` an integer > 0 (lax: "5", 5.0, True),
``eager_host_mirror`` a boolean (lax: 0/1, "yes"/"off", ...).
"""


import pytest

from hisparse_model.inputs.hisparse_config import hisparse_on
from hisparse_model.inputs.launch import from_command

# value, True (on) / False (off) / "refused"
CASES = [
    (None, False), ({}, True), (False, "refused"), (True, "refused"), ([], "refused"),
    ("x", "refused"), ({"foo": 1}, "refused"),
    ({"device_buffer_size": 0}, "refused"), ({"device_buffer_size": -1}, "refused"),
    ({"device_buffer_size": 5}, True), ({"device_buffer_size": None}, True),
    ({"device_buffer_size": "5"}, True), ({"device_buffer_size": "x"}, "refused"),
    ({"device_buffer_size": 5.0}, True), ({"device_buffer_size": 5.5}, "refused"),
    ({"device_buffer_size": True}, True), ({"device_buffer_size": False}, "refused"),
    ({"device_buffer_size": [1]}, "refused"),
    ({"eager_host_mirror": False}, True), ({"eager_host_mirror": 1}, True),
    ({"eager_host_mirror": "yes"}, True), ({"eager_host_mirror": "off"}, True),
    ({"eager_host_mirror": 2}, "refused"), ({"eager_host_mirror": None}, "refused"),
    ({"eager_host_mirror": "maybe"}, "refused"), ({"eager_host_mirror": [True]}, "refused"),
]


def verdict(value) -> object:
    try:
        return hisparse_on(value, "hisparse_config")
    except ValueError:
        return "refused"


@pytest.mark.parametrize("value,expected", CASES)
def test_hisparse_config_table(value, expected):
    """Each value is on, off or refused as vLLM 0.31.0's AttentionConfig takes it."""
    assert verdict(value) == expected


def test_check_reads_null_as_off_and_refuses_bad_values():
    """check: null is HiSparse off (unless a HiSparseConnector), a bad value names the key."""
    base = ["vllm", "serve", "deepseek-ai/DeepSeek-V3.2", "--attention-config"]
    with pytest.raises(ValueError, match="HiSparse is off"):
        from_command(base + ['{"hisparse_config": null}'], "0.31.0")
    with pytest.raises(ValueError, match="hisparse_config.device_buffer_size: vLLM refuses"):
        from_command(base + ['{"hisparse_config": {"device_buffer_size": 0}}'], "0.31.0")
    with pytest.raises(ValueError, match="hisparse_config: vLLM refuses"):
        from_command(base + ['{"hisparse_config": false}'], "0.31.0")
    kv = ['--kv-transfer-config', '{"kv_connector": "HiSparseConnector", "kv_role": "kv_both", '
          '"kv_connector_extra_config": {"host_pool_gib": 2}}']
    launch = from_command(base + ['{"hisparse_config": null}'] + kv, "0.31.0")
    assert "kv_connector" in launch.hisparse


@pytest.mark.vllm_cpu
def test_table_matches_vllm(vllm_servers):
    """vLLM 0.31.0's own AttentionConfig gives every row's verdict."""
    got = vllm_servers.call("0.31.0", "vllm_calls:hisparse_config_verdicts",
                            [v for v, _ in CASES], timeout=300)
    assert got == [e for _, e in CASES]
