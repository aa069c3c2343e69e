"""How the tests switch HiSparse on in a ``vllm serve`` command or an engine-args file.

vLLM sizes HiSparse's host pool from the HiSparseConnector's ``host_pool_gib`` and
refuses to start without it (``model/host_pool.py``), so a command that only sets
``--attention-config '{"hisparse_config": {}}'`` never serves.  The tests' servers take
2,048 GiB, as notebook 7's command does: with DeepSeek-V3.2's own config (4,497,408-byte
blocks) one request of its 163,840 tokens needs cdiv(163840, 64) + 2 = 2,562 blocks
(10.74 GiB), and the bundled example traffic's requests at serve's defaults can hold up to
1,954 GiB in 20 minutes (the model's bound).
"""

import json


def connector(gib: float = 2048) -> dict:
    """The HiSparseConnector's ``kv_transfer_config`` with a ``gib``-GiB host pool."""
    return {"kv_connector": "HiSparseConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"host_pool_gib": gib}}


def connector_flags(gib: float = 2048) -> list[str]:
    """``--kv-transfer-config JSON``: HiSparse on, with a ``gib``-GiB host pool."""
    return ["--kv-transfer-config", json.dumps(connector(gib))]


HS = f"--kv-transfer-config '{json.dumps(connector())}'"  # as typed in a shell
