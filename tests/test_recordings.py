"""Every committed live recording (tests/recorded/) agrees exactly with the model.

The recordings were produced on an H200 by ``hisparse_model.engine`` (see each
file's ``provenance``); the model's prediction for the same knobs must match
the engine's capture sizes, sizes, start-up and per-prompt outcomes, and every
logged routing row (token counts, route, CUDA-graph mode, error, call count).
"""

import copy
import os

import pytest

from hisparse_model.recorded.recordings import compare_recording, expected_log
from hisparse_model.model.knobs import Knobs
from hisparse_model.answers.predict import predict
from hisparse_model.recorded.recordings import load_all, recorded_dir
from provenance import check_provenance

RECORDINGS = load_all()
IDS = [os.path.basename(r["_path"]) for r in RECORDINGS]


def test_there_are_recordings():
    """The PR's reproduction and >= 8 more configurations are recorded."""
    names = set(IDS)
    for must in ("v0.31.0-stock-s1.json", "v0.31.0-stock-s2.json", "v0.31.0-fix-s1.json",
                 "v0.31.0-fix-s2.json", "v0.32.0-stock-s2.json"):
        assert must in names
    assert len(RECORDINGS) >= 13


@pytest.mark.parametrize("rec", RECORDINGS, ids=IDS)
def test_recording_has_provenance(rec):
    """A recording names vLLM, torch, GPU, date, engine args, mode and command."""
    assert check_provenance(rec) == []
    assert rec["provenance"]["gpu"].startswith("NVIDIA H200")
    assert rec["provenance"]["vllm"] == rec["knobs"]["vllm_version"]


@pytest.mark.parametrize("rec", RECORDINGS, ids=IDS)
def test_recording_matches_model(rec):
    """Model and engine agree on every number and every logged routing row."""
    diffs = compare_recording(rec)
    assert not diffs, "\n".join([rec["_path"], *diffs])


def test_comparison_can_fail():
    """A recording altered by one token or one route is reported, with a readable diff."""
    rec = next(r for r in RECORDINGS if IDS[RECORDINGS.index(r)] == "v0.31.0-stock-s2.json")
    bad = copy.deepcopy(rec)
    bad["routing_log"][0]["num_tokens"] += 1  # 4 -> 5 tokens in the first capture row
    assert any("routing row 0" in d for d in compare_recording(bad))
    bad = copy.deepcopy(rec)
    bad["prompts"][1]["error"] = None  # pretend the 3-token prompt survived
    bad["prompts"][1]["ok"] = True
    assert any("prompt n=3" in d for d in compare_recording(bad))
    bad = copy.deepcopy(rec)
    bad["engine"]["capture_sizes"] = [1, 2, 4, 8]
    assert any("capture_sizes" in d for d in compare_recording(bad))


def test_missing_provenance_is_reported():
    """Dropping the GPU name or the command makes the provenance check fail."""
    rec = copy.deepcopy(RECORDINGS[0])
    del rec["provenance"]["gpu"]
    rec["provenance"]["command"] = ""
    assert set(check_provenance(rec)) >= {"gpu", "command"}


def test_expected_log_folds_layers():
    """S=2: a PIECEWISE capture of 4 tokens logs 8 eager calls then 8 PIECEWISE calls."""
    rows = expected_log(predict(Knobs(max_num_seqs=2), [2]))
    first, second = rows[0], rows[1]
    # 8 target layers, each its own index group; capture = eager warmup + capture forward
    assert (first["num_tokens"], first["cudagraph_mode"], first["calls"]) == (4, "NONE", 8)
    assert (second["num_tokens"], second["cudagraph_mode"], second["calls"]) == (4, "PIECEWISE", 8)


def test_recorded_dir_is_the_tests_folder():
    """Recordings live next to the tests, where notebook 4 reads them."""
    assert recorded_dir().endswith(os.path.join("tests", "recorded"))


def test_expected_log_leaves_mtp_decode_calls_open():
    """MTP K=1, eager, S=2: the decode's verify steps are uncounted (accepted drafts), so calls is None.

    q = 2, C = min(640, 2 * 2) = 4; eager: no capture, no JIT warmup.  The 3-token prompt
    (3 > q: a prefill) routes 3 <= C to swap_in, on 8 target + 1 drafter layers; then its
    decodes, 1 request of q = 2 tokens each, as many as the target's acceptance makes.
    """
    rows = expected_log(predict(Knobs(max_num_seqs=2, num_speculative_tokens=1,
                                      enforce_eager=True), [3]))
    keys = ("phase", "num_tokens", "num_decode_tokens", "num_actual_tokens", "route",
            "cudagraph_mode", "error", "calls")
    assert [tuple(r[k] for k in keys) for r in rows] == [
        ("prompt:0", 3, 0, 3, "swap_in", "NONE", None, 9),
        ("prompt:0", 2, 2, 2, "swap_in", "NONE", None, None),
    ]
