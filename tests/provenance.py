"""What every committed live recording must say about where it came from (README, Live recordings)."""

from hisparse_model.recorded.recordings import SCHEMA_VERSION

# versions, GPU, UTC date, engine arguments, routing mode, the command that made it
PROVENANCE_KEYS = ("vllm", "torch", "gpu", "date", "engine_args", "mode", "command")


def check_provenance(rec: dict) -> list[str]:
    """Names of the provenance fields a recording lacks (empty list: complete)."""
    prov = rec.get("provenance") or {}
    missing = [k for k in PROVENANCE_KEYS if not prov.get(k)]
    if rec.get("schema") != SCHEMA_VERSION:
        missing.append("schema")
    return missing
