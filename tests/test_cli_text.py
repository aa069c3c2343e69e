"""What a person reads on the command line: whole entries, plurals, numbering from 1."""

import json
import subprocess
import sys

import pytest

from hisparse_model import Knobs, predict
from hisparse_model.text.report import REQUESTS_WIDTH, requests_column
from hisparse_model.schedule.workload import Workload, WorkloadError

CMD = [sys.executable, "-m", "hisparse_model"]


def run(*args):
    return subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=120)


def test_requests_column_cuts_between_entries():
    """The per-request column ends on a whole entry and says how many are left; full keeps all."""
    scheduled = {i: 10 + i for i in range(14)}  # requests 1..14 compute 10..23 tokens
    cut = requests_column(scheduled)
    assert len(cut) <= REQUESTS_WIDTH
    shown = cut.split(" … ")[0].split(" ")
    # every shown entry is whole: "#i:t" with t = 9 + i, numbered from 1
    assert shown == [f"#{i}:{9 + i}" for i in range(1, len(shown) + 1)]
    assert cut.endswith(f" … +{14 - len(shown)} more")
    assert requests_column(scheduled, full=True).split(" ") == [
        f"#{i}:{9 + i}" for i in range(1, 15)]
    assert requests_column({0: 3, 1: 2}) == "#1:3 #2:2"  # short: as is


def test_simulate_full_expands_the_column_and_counts_read_right(tmp_path):
    """simulate --full shows every request of a step; one request is "1 request"."""
    many = tmp_path / "many.json"
    many.write_text(json.dumps([{"prompt_len": 3 + i} for i in range(14)]))
    folded = run("simulate", "--max-num-seqs", "16", "--workload", str(many)).stdout
    full = run("simulate", "--max-num-seqs", "16", "--workload", str(many), "--full").stdout
    # S = 16 >= 14: step 0 prefills all 14 requests together
    first = folded.split("step 0")[1].splitlines()[0]
    assert first.endswith(" more") and "#14:" not in first and "#1:3 #2:4" in first
    assert full.split("step 0")[1].splitlines()[0].endswith("#14:16")  # request 14: 3 + 13
    one = tmp_path / "one.json"
    one.write_text(json.dumps([{"prompt_len": 3}]))
    out = run("simulate", "--max-num-seqs", "2", "--workload", str(one)).stdout
    assert "  1 request\n" in out and "finished: 0 of 1 request (what the caller received)\n" in out
    assert "1 requests" not in out


@pytest.mark.parametrize("requests,message", [
    ([{"prompt_len": 3}, {"prompt_len": 0}], "request 2: prompt_len must be an integer >= 1"),
    ([{"prompt_len": "x"}], "request 1: prompt_len must be"),
])
def test_workload_requests_are_numbered_from_one(requests, message):
    """A workload error names the request as a person counts it: the file's first is request 1."""
    with pytest.raises(WorkloadError, match=message):
        Workload.from_json(requests)


def test_prompts_are_numbered_from_one():
    """predict names a bad prompt by its place in the list, counted from 1."""
    with pytest.raises(ValueError, match="prompt_lens: prompt 2 must be an integer >= 1, got 0"):
        predict(Knobs(), [3, 0])
