"""``python -m hisparse_model.bench``: each measurement runs and is reported; no time is asserted."""

import json

import pytest

from hisparse_model import bench

FIGURES = {  # a made-up run: what main() prints is these numbers, not new measurements
    "predict_warm_us": 3.5, "predict_cold_us": 41.25, "plan_us": 2.0,
    "vllm_config_path_us": 91000.0, "ratio_cold": 2206, "sweep_100k_s": 0.0123,
    "simulate_10k_s": 0.456, "vllm_scheduler_10k_s": 12.3, "simulate_ratio": 27.0,
    "simulate_advice_2k_s": 4.321, "traffic_1h_s": 2.5, "traffic_1h_seeds_s": 11.0,
    "crash_replay_s": 1.234,
    "browser_latency_ms": {"01_off_by_one/max_num_seqs": {"label_ms": 40.0}},
}


def test_each_measurement_runs_small():
    """The timers run the model on small inputs and return positive seconds / microseconds."""
    configs = bench._configs(8)
    assert len(configs) == 8 and all(1 <= c["max_num_seqs"] <= 256 for c in configs)
    assert configs == bench._configs(8)  # seeded: a second draw is the same grid
    assert bench.time_predict(repeat=64) > 0
    assert bench.time_predict(repeat=64, cold=True) > 0
    assert bench.time_sweep(n=1000) > 0
    assert bench.time_model_config_path(configs) > 0
    assert bench.time_simulate_dp(n=200, dp=2) > 0
    assert len(bench.exposure_configs()) == 36 and bench.time_exposure() > 0  # 2 x 3 x 2 x 3
    assert bench.time_predict_advice(n=10) > 0
    assert bench.time_traffic_hour(minutes=0.5, seeds=2, jobs=1) > 0
    assert bench.time_crash_replay(minutes=0.5) > 0  # no crash within 30 s: the replay alone


def test_a_refused_replay_is_not_timed(monkeypatch):
    """The crash replay is timed only when simulate answers it (exit 0): a refusal (a host pool
    too small for max_model_len once made it take 17 ms) raises instead of being reported."""
    from hisparse_model import cli

    monkeypatch.setattr(cli, "main", lambda argv: 2)
    with pytest.raises(RuntimeError, match="exited 2"):
        bench.time_crash_replay(minutes=0.5)


def test_without_vllm_trees_vllm_figures_are_none(tmp_path, monkeypatch):
    """Where .vllm/<version> is not installed, vLLM's timings are None and no ratio is made up."""
    monkeypatch.setattr(bench, "REPO", str(tmp_path))
    monkeypatch.delenv("VLLM_TARGET_ROOT", raising=False)  # else the trees are found there
    assert bench.time_vllm_config_path(bench._configs(2)) is None
    figs = bench._simulate_figures(n=2000)  # enough to take over the 1 ms it is rounded to
    assert figs["simulate_10k_s"] > 0
    assert figs["vllm_scheduler_10k_s"] is None and figs["simulate_ratio"] is None
    assert bench.browser_latency() is None  # no test-artifacts/latency.json there


def test_browser_latency_file_is_reported(tmp_path, monkeypatch):
    """The browser test's latency file is returned as written."""
    (tmp_path / "test-artifacts").mkdir()
    (tmp_path / "test-artifacts" / "latency.json").write_text(json.dumps({"a/b": {"label_ms": 1}}))
    monkeypatch.setattr(bench, "REPO", str(tmp_path))
    assert bench.browser_latency() == {"a/b": {"label_ms": 1}}


def test_main_prints_one_runs_figures(monkeypatch, capsys):
    """main() prints the figures of one measure() call, with their targets; --json prints them as is."""
    monkeypatch.setattr(bench, "measure", lambda: dict(FIGURES))
    assert bench.main([]) == 0
    text = capsys.readouterr().out
    for needle in ("41.2 µs   (target < 50 µs)", "0.012 s    (target < 1 s)",
                   "91000.0 µs per config", "2206 x  (target >= 1000x)",
                   "simulate_ratio:", "27.0", "browser 01_off_by_one/max_num_seqs",
                   "simulate + advice, 2,000 requests: 4.321 s  (target < 5 s)",
                   "simulate --traffic, 1 h at 10 requests/s: 2.5 s  (target < 10 s); the "
                   "default seeds, one per core: 11.0 s",
                   "simulate --workload of a 1,761-request crash workload: 1.234 s  (target < 2 s)"):
        assert needle in text, needle
    assert bench.main(["--json"]) == 0
    assert json.loads(capsys.readouterr().out) == FIGURES


def test_main_says_what_was_not_measured(monkeypatch, capsys):
    """Without vLLM's trees or a browser run, main() says so instead of printing numbers."""
    monkeypatch.setattr(bench, "measure", lambda: {
        **FIGURES, "vllm_config_path_us": None, "ratio_cold": None, "browser_latency_ms": None})
    assert bench.main([]) == 0
    text = capsys.readouterr().out
    assert "vLLM's own config path:    not measured" in text
    assert "widget latency in the browser: not measured yet" in text


def test_measure_puts_one_runs_figures_together(monkeypatch):
    """measure(): each timer once, rounded; ratio_cold = vLLM's seconds / the cold prediction's."""
    monkeypatch.setattr(bench, "time_predict", lambda cold=False: 40.0 if cold else 3.0)
    monkeypatch.setattr(bench, "time_vllm_config_path", lambda configs: 0.08)  # 80 ms a config
    monkeypatch.setattr(bench, "time_model_config_path", lambda configs: 2e-6)
    monkeypatch.setattr(bench, "time_sweep", lambda: 0.25)
    monkeypatch.setattr(bench, "_simulate_figures", lambda: {"simulate_10k_s": 0.5})
    monkeypatch.setattr(bench, "time_simulate_dp", lambda: 0.3)
    monkeypatch.setattr(bench, "time_simulate_advice", lambda: 4.0)
    monkeypatch.setattr(bench, "time_exposure", lambda: 310.04)  # rounded to 0.1 µs
    monkeypatch.setattr(bench, "time_predict_advice", lambda: 0.2804)  # rounded to 1 ms
    monkeypatch.setattr(bench, "time_traffic_hour",  # one seed 2.5 s, the default seeds 9 s
                        lambda seeds=None: 2.5004 if seeds == 1 else 9.0)
    monkeypatch.setattr(bench, "time_crash_replay", lambda: 1.5004)  # rounded to 1 ms
    monkeypatch.setattr(bench, "browser_latency", lambda: None)
    assert bench.measure() == {
        "predict_warm_us": 3.0, "predict_cold_us": 40.0, "plan_us": 2.0,
        "vllm_config_path_us": 80000.0,
        "ratio_cold": 2000,  # 0.08 s / 40 µs
        "sweep_100k_s": 0.25, "simulate_10k_s": 0.5, "simulate_dp8_10k_s": 0.3,
        "simulate_advice_2k_s": 4.0, "browser_latency_ms": None,
        "exposure_us": 310.0, "predict_advice_100_s": 0.28,
        "traffic_1h_s": 2.5, "traffic_1h_seeds_s": 9.0, "crash_replay_s": 1.5}  # to 1 ms


def test_advice_workload_crashes_where_it_says():
    """advice_workload(20) at S = 4 (C = 4, W = 5) on 0.31.0: the 3 + 2 pair, 5 tokens, raises in
    the last step (late) or in step 0 (early); the advice timer runs it."""
    from hisparse_model import Knobs
    from hisparse_model.answers.simulate import simulate

    late = simulate(Knobs(max_num_seqs=4), bench.advice_workload(20))
    assert late.crash["step"] == late.steps[-1].step and late.steps[-1].routed_tokens == 5
    early = simulate(Knobs(max_num_seqs=4), bench.advice_workload(20, late=False))
    assert early.crash["step"] == 0 and early.steps[0].scheduled == {0: 3, 1: 2}
    assert bench.time_simulate_advice(20) > 0


def test_run_vllm_reads_the_last_json_line(tmp_path, monkeypatch, capsys):
    """With a tree in place the module runs with it on the path and its last JSON line is the answer."""
    (tmp_path / ".vllm" / "0.31.0").mkdir(parents=True)
    (tmp_path / ".vllm" / "0.31.0" / ".hisparse-installed").write_text("")
    monkeypatch.setattr(bench, "REPO", str(tmp_path))
    # a module on the child's path (REPO) that logs a line, then echoes its input as JSON
    (tmp_path / "echo_last.py").write_text(
        "import json, sys\nprint('some log line')\nprint(json.dumps(json.load(sys.stdin)))\n")
    assert bench._run_vllm("echo_last", {"n": 2, "seconds": 1.0}, "0.31.0") == {
        "n": 2, "seconds": 1.0}
    assert bench._run_vllm("no_such_module_here", {}, "0.31.0") is None  # a failed child
    assert "no_such_module_here" in capsys.readouterr().err
