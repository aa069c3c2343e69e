"""``live`` past the GPU probe, with the engine replaced: what reaches the runner, and the exit status.

The real engine runs only on a GPU (``tests/test_live_gpu.py``); here
``check_available``, ``run_one`` and ``run_sweep`` are stand-ins that record
their arguments, so the command line's own part is checked on any machine.
"""

import json

import pytest

from hisparse_model import cli
from hisparse_model.engine import live
from hisparse_model.model.knobs import Knobs


@pytest.fixture
def engine(monkeypatch):
    """The installed vLLM is 0.31.0; runs succeed unless ``calls["result"]`` says otherwise."""
    calls = {"result": {"startup": {"error": None}}, "one": [], "sweep": []}

    def run_one(knobs, prompt_lens, out, **kw):
        calls["one"].append((knobs, prompt_lens, out, kw))
        return calls["result"]

    def run_sweep(entries, out_dir, **kw):
        calls["sweep"].append(([e["name"] for e in entries], out_dir, kw))
        return calls["sweep_results"]

    monkeypatch.setattr(live, "check_available", lambda gpus=1: "0.31.0")  # GPUs asked for
    monkeypatch.setattr(live, "run_one", run_one)
    monkeypatch.setattr(live, "run_sweep", run_sweep)
    monkeypatch.setattr(live, "kill_children_on_termination", lambda: None)
    return calls


def test_prompts_reach_the_runner_with_the_installed_version(engine, tmp_path):
    """The knobs run under the installed vLLM version; a recording with a start-up is exit 0."""
    out = str(tmp_path / "rec.json")
    assert cli.main(["live", "--max-num-seqs", "2", "--prompt-lens", "2,3", "--out", out]) == 0
    (knobs, lens, path, kw), = engine["one"]
    assert knobs == Knobs(vllm_version="0.31.0", max_num_seqs=2)
    assert (lens, path, kw["workload"]) == ([2, 3], out, None)
    assert kw["command"].startswith("hisparse ")


def test_a_run_without_a_recording_is_exit_1(engine, tmp_path):
    """A child that wrote no start-up (it died) makes live exit 1."""
    engine["result"] = {"child": "exit 1"}
    assert cli.main(["live", "--max-num-seqs", "2", "--out", str(tmp_path / "r.json")]) == 1


def test_a_workload_is_validated_and_passed_on(engine, tmp_path):
    """--workload: the requests reach the runner as JSON; one too long for max_model_len is exit 2."""
    good = tmp_path / "w.json"
    good.write_text(json.dumps({"requests": [{"prompt_len": 3}, {"prompt_len": 2,
                                                                  "arrival_step": 5}]}))
    assert cli.main(["live", "--max-num-seqs", "4", "--workload", str(good),
                     "--out", str(tmp_path / "r.json")]) == 0
    (_, _, _, kw), = engine["one"]
    assert kw["workload"] == [{"prompt_len": 3, "max_tokens": 8, "arrival_step": 0},
                              {"prompt_len": 2, "max_tokens": 8, "arrival_step": 5}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"requests": [{"prompt_len": 400}]}))  # >= max_model_len 320
    assert cli.main(["live", "--max-num-seqs", "4", "--workload", str(bad),
                     "--out", str(tmp_path / "r.json")]) == 2
    assert len(engine["one"]) == 1  # the bad workload never reached the runner


def test_live_without_out_is_exit_2(engine, capsys):
    """Neither --out nor --sweep: one line naming --out, exit 2, nothing run."""
    assert cli.main(["live", "--max-num-seqs", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err
    assert engine["one"] == []


def _sweep(tmp_path, versions):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps([{"name": f"e{i}", "knobs": {"vllm_version": v, "max_num_seqs": 2},
                                 "prompt_lens": [2]} for i, v in enumerate(versions)]))
    return str(path)


def test_sweep_runs_and_reports_a_failed_entry(engine, tmp_path):
    """A sweep runs every entry; exit 1 when one child left no recording, else 0."""
    sweep = _sweep(tmp_path, ["0.31.0", "0.31.0"])
    engine["sweep_results"] = [{"startup": {}}, {"startup": {}}]
    assert cli.main(["live", "--sweep", sweep, "--out-dir", str(tmp_path / "d")]) == 0
    assert engine["sweep"][0][:2] == (["e0", "e1"], str(tmp_path / "d"))
    engine["sweep_results"] = [{"startup": {}}, {"child": "timeout"}]
    assert cli.main(["live", "--sweep", sweep, "--out-dir", str(tmp_path / "d")]) == 1


def test_sweep_for_another_version_is_exit_2(engine, tmp_path, capsys):
    """An entry asking for a version other than the installed one is refused, naming it."""
    assert cli.main(["live", "--sweep", _sweep(tmp_path, ["0.31.0", "0.32.0"])]) == 2
    assert "'e1'" in capsys.readouterr().err
    assert engine["sweep"] == []


def test_sweep_entries_writing_one_file_are_exit_2(engine, tmp_path, capsys):
    """Entry 'a' writes a.json, a.log and, failing, a.failed.json; entry 'a.failed' writes
    a.failed.json: one line naming both entries and the file, exit 2, before any GPU probe."""
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps([{"name": n, "knobs": {"max_num_seqs": 2}, "prompt_lens": [2]}
                                for n in ("a", "a.failed")]))
    assert cli.main(["live", "--sweep", str(path), "--out-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"sweep entries 'a' and 'a.failed' both write {tmp_path / 'd' / 'a.failed.json'}" in err
    assert engine["sweep"] == []
