"""The step time from the operator's own server: its /metrics over HTTP, or its log.

Invariant: the step time said is the recorded server's mean inter-token latency between two
reads of its /metrics (Δsum / Δcount of ``vllm:inter_token_latency_seconds``), or the median
of Running / generation throughput over its log's periodic lines; the output names which
source it used and its value.  The recordings are a real vLLM 0.34.0 on an H200
(tests/recorded/metrics/README.md); expected values are computed here from their text with
a regex, not with ``step_time.py``.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys

import pytest

from loopback import Loopback

from hisparse_model.inputs.step_time import StepTimeError, from_log, from_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARM = os.path.join(ROOT, "tests", "recorded", "metrics", "v0.34.0-azure-warm")
COLD = os.path.join(ROOT, "tests", "recorded", "metrics", "v0.34.0-azure-cold")
AZURE = os.path.join(ROOT, "tests", "traces", "azure-code-2023-excerpt.csv")


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name)) as f:
        return f.read()


def _value(text: str, name: str) -> float:
    (v,) = re.findall(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, flags=re.M)
    return float(v)


def _itl_ms(folder: str, a: str, b: str) -> float:
    """Δ sum / Δ count of the inter-token latency between snapshots a and b, in ms."""
    x, y = _read(folder, f"metrics-{a}.txt"), _read(folder, f"metrics-{b}.txt")
    name = "vllm:inter_token_latency_seconds"
    return 1000 * (_value(y, name + "_sum") - _value(x, name + "_sum")) / (
        _value(y, name + "_count") - _value(x, name + "_count"))


def Served(texts: list[str]) -> Loopback:  # noqa: N802 - used as a class
    """A loopback server whose /metrics answers each recorded text in turn (the last one
    again after that), as a server read twice some seconds apart answers."""
    texts = list(texts)

    def answer(h):
        if h.path != "/metrics":
            h.send_error(404)
            return
        body = (texts.pop(0) if len(texts) > 1 else texts[0]).encode()
        h.send_response(200)
        h.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    return Loopback(answer)


@pytest.mark.parametrize("folder, a, b", [
    # the warm run, 30 -> 50 s: a burst of the trace arrives; 1,115 tokens in 20 s
    (WARM, "30", "50"),
    # 10 -> 30 s: the trace's quiet stretch (75 tokens)
    (WARM, "10", "30"),
    # the cold run, 40 -> 60 s: after the JIT stall
    (COLD, "40", "60"),
])
def test_the_step_time_is_the_servers_mean_inter_token_latency(folder, a, b):
    """Read over HTTP twice: the step time is Δsum / Δcount of the ITL histogram."""
    run = json.loads(_read(folder, "run.json"))
    wall = run["snapshots_wall_clock"]
    clock = iter([wall[f"{float(a)}"], wall[f"{float(b)}"]])
    with Served([_read(folder, f"metrics-{a}.txt"), _read(folder, f"metrics-{b}.txt")]) as s:
        got = from_metrics(s.url, 0.01, clock=lambda: next(clock))
    assert got.ms == pytest.approx(_itl_ms(folder, a, b), rel=1e-12)
    assert got.source == f"metrics {s.url}"
    assert "idle time included" in got.how  # the iteration count's bound is said beside


def test_a_server_that_ran_no_step_is_refused_in_one_line():
    """The cold run, 20 -> 40 s: no step at all (kernels compiling): no step time to read."""
    with Served([_read(COLD, "metrics-20.txt"), _read(COLD, "metrics-40.txt")]) as s:
        with pytest.raises(StepTimeError, match="ran no engine step in"):
            from_metrics(s.url, 0.01)


@pytest.mark.parametrize("text, message", [
    ("# HELP x\nx 1\n", "no vllm:inter_token_latency_seconds_count (is it a vLLM server's"),
    ("<html>not metrics</html>\n", "not a Prometheus sample line"),
])
def test_what_is_not_a_vllm_metrics_page_is_named(text, message):
    with Served([text]) as s:
        with pytest.raises(StepTimeError, match=re.escape(message)):
            from_metrics(s.url, 0.01)


def test_an_unreachable_server_is_named():
    with Served(["x 1"]) as s:
        url = s.url
    with pytest.raises(StepTimeError, match=re.escape(f"--step-ms-from-metrics {url}:")):
        from_metrics(url, 0.01)


@pytest.mark.parametrize("folder", [WARM, COLD])
def test_the_log_says_running_over_generation_throughput(folder):
    """The median over vLLM's periodic lines with requests running and tokens generated of
    1000 * Running / generation throughput."""
    lines = re.findall(r"Avg generation throughput: ([\d.]+) tokens/s, Running: (\d+) reqs",
                       _read(folder, "console.log"))
    want = statistics.median(1000 * int(n) / float(g) for g, n in lines
                             if int(n) > 0 and float(g) > 0)
    got = from_log(os.path.join(folder, "console.log"))
    assert got.ms == pytest.approx(want, rel=1e-12)


def test_a_log_without_throughput_lines_is_refused(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("INFO nothing here\n")
    with pytest.raises(StepTimeError, match="no 'Avg prompt throughput"):
        from_log(str(log))


def _simulate(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hisparse_model", "simulate", "--traffic",
                           AZURE, "--minutes", "1", "--max-num-seqs", "64", "--max-model-len",
                           "8192", "--host-pool-gib", "512", *args], capture_output=True,
                          text=True, cwd=ROOT)


def test_simulate_says_which_step_time_it_used_and_its_value():
    """From the loopback /metrics (warm run, 30 -> 50 s: 8.93 ms), from the log, given, and
    the stated fallback."""
    with Served([_read(WARM, "metrics-30.txt"), _read(WARM, "metrics-50.txt")]) as s:
        out = _simulate("--step-ms-from-metrics", s.url, "--metrics-seconds", "0.2")
    assert out.returncode == 0, out.stderr
    want = _itl_ms(WARM, "30", "50")
    assert f"Step time: {want:.3g} ms per engine step, from metrics {s.url}" in out.stdout
    log = os.path.join(WARM, "console.log")
    out = _simulate("--step-ms-from-log", log)
    assert f"from log {log}: median of Running" in out.stdout
    assert "Step time: 12 ms per engine step, from --step-ms: given" in _simulate(
        "--step-ms", "12").stdout
    assert "Step time: 25 ms per engine step, from the fallback: assumed" in _simulate().stdout


@pytest.mark.parametrize("args, message", [
    (["--step-ms", "5", "--step-ms-from-log", "x.log"],
     "--step-ms and --step-ms-from-log: give one step time"),
    (["--metrics-seconds", "3"], "--metrics-seconds: only with --step-ms-from-metrics URL"),
    (["--step-ms-from-metrics", "ftp://x/metrics"], "give an http:// or https:// URL"),
])
def test_step_time_options_are_refused_in_one_line(args, message):
    out = _simulate(*args)
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1


def test_a_gzipped_or_coloured_log_reads_as_the_plain_one(tmp_path):
    """The log is read as check --from-log reads one (log_text.read_log): gzipped (as log
    rotation leaves it) or with terminal colour codes, the same step time."""
    import gzip

    text = _read(WARM, "console.log")
    plain = from_log(os.path.join(WARM, "console.log")).ms
    zipped = tmp_path / "serve.log.gz"
    zipped.write_bytes(gzip.compress(text.encode()))
    coloured = tmp_path / "colour.log"
    coloured.write_text(text.replace("Avg prompt throughput",
                                     "\x1b[32mAvg prompt\x1b[0m throughput"))
    assert from_log(str(zipped)).ms == plain == from_log(str(coloured)).ms
    with pytest.raises(StepTimeError, match=r"^--step-ms-from-log: log .*missing\.log: "):
        from_log(str(tmp_path / "missing.log"))


# Content-Length headers of the /metrics answer -> refused (the body is 4 bytes, "x 1\n")
FRAMING = [
    (["4"], False),             # one, right
    (["4", "4"], False),        # two that agree: one framing
    (["4", "40"], True),        # two that disagree: which body is it?
    (["40", "4"], True),        # either order
]


@pytest.mark.parametrize("lengths, refused", FRAMING)
def test_disagreeing_content_lengths_are_refused(lengths, refused):
    """A response framed two ways (Content-Length headers that disagree) is refused in one line
    naming the flag and the URL, not read by whichever header came first."""
    from hisparse_model.boundary.files import InputError
    from hisparse_model.boundary.http import fetch
    from hisparse_model.boundary.limits import METRICS

    def answer(h):
        h.send_response(200)
        for n in lengths:
            h.send_header("Content-Length", n)
        h.end_headers()
        h.wfile.write(b"x 1\n")

    with Loopback(answer) as s:
        if refused:
            with pytest.raises(InputError, match=re.escape(
                    f"--step-ms-from-metrics {s.url}: Content-Length headers that disagree "
                    "(4, 40); the body cannot be framed")):
                fetch(s.url, "--step-ms-from-metrics", METRICS, 5)
        else:
            assert fetch(s.url, "--step-ms-from-metrics", METRICS, 5) == b"x 1\n"
