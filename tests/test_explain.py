"""explain: the two crashes the model covers, in the forms a log shows them; anything else is
said plainly, with no fix advice and exit status 4."""

import subprocess
import sys

import pytest

from hisparse_model.answers.diagnose import (ENGINE_DEAD, NOT_THIS_BUG, OFF_BY_ONE, WARMUP_INDEX_ERROR,
                                     diagnose)

ERR = ("HiSparse swap rows exceed the configured speculative decode capacity: "
       "stop={}, capacity={}.")
FIX = "upgrade to vLLM 0.32.0"

CASES = [
    # the bare line: 3 = 2 + 1
    ("ValueError: " + ERR.format(3, 2), OFF_BY_ONE),
    # the worker's error as the multiprocessing executor re-raises it (no class name)
    ("RuntimeError: Worker failed with error '" + ERR.format(5, 4) + "', please check the "
     "stack trace above for the root cause", OFF_BY_ONE),
    # the engine core's log line above the traceback, then the error
    ("ERROR 12-01 10:00:00 [core.py:1435] EngineCore encountered a fatal error.\n"
     "Traceback (most recent call last):\n  ...\nValueError: " + ERR.format(17, 16), OFF_BY_ONE),
    # stop = capacity: fits, vLLM raises only when stop > capacity
    ("ValueError: " + ERR.format(3, 3), NOT_THIS_BUG),
    # stop = capacity + 2: more than the off-by-one's one extra token
    ("ValueError: " + ERR.format(6, 4), NOT_THIS_BUG),
    # the MTP warmup crash at start-up, bare and wrapped
    ("EngineCore failed to start.\nTraceback (most recent call last):\n"
     "IndexError: list index out of range", WARMUP_INDEX_ERROR),
    ("RuntimeError: Worker failed with error 'list index out of range', please check the "
     "stack trace above for the root cause", WARMUP_INDEX_ERROR),
    # an IndexError while serving is not the warmup's
    ("EngineCore encountered a fatal error.\nIndexError: list index out of range", NOT_THIS_BUG),
    # the offline caller's view under multiprocessing: no cause in the text
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
     "trace (above) for the root cause.", ENGINE_DEAD),
    ("torch.OutOfMemoryError: CUDA out of memory.", NOT_THIS_BUG),
]


@pytest.mark.parametrize("text,kind", CASES)
def test_diagnosis_kind(text, kind):
    """Each text gets the diagnosis its numbers and wrapping imply; only the off-by-one gets
    the upgrade advice."""
    found = diagnose(text)
    assert found.kind == kind
    assert (FIX in "\n".join(found.lines)) == (kind == OFF_BY_ONE)
    if kind == NOT_THIS_BUG:
        assert "No fix advice" in "\n".join(found.lines)


def test_wrapped_forms_name_their_wrapping_and_when():
    """A start-up wrapper narrows where the batch came from; the worker form is named."""
    startup = diagnose("EngineCore failed to start.\nValueError: " + ERR.format(2, 1)).lines
    text = "\n".join(startup)
    assert "while starting" in text and "- start-up:" in text and "- serving:" not in text
    worker = "\n".join(diagnose("Worker failed with error '" + ERR.format(3, 2)
                                + "', please check the stack trace above").lines)
    assert "Worker failed with error" in worker and "capacity=2" in worker


@pytest.mark.parametrize("text,status", [
    ("ValueError: " + ERR.format(3, 2), 0),  # the off-by-one: explained
    ("EngineCore failed to start.\nIndexError: list index out of range", 0),  # covered
    ("ValueError: " + ERR.format(3, 3), 4),  # not this bug
    ("EngineDeadError: EngineCore encountered an issue.", 4),  # cause not in the text
    ("", 2),  # nothing pasted: bad input
])
def test_explain_exit_status(text, status):
    """explain exits 0 for a crash the model covers, 4 for any other text, 2 for none."""
    out = subprocess.run([sys.executable, "-m", "hisparse_model", "explain", text],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == status, out.stdout + out.stderr


def test_the_callers_start_up_text_points_to_the_log():
    """Under vLLM's default multiprocessing a start-up crash reaches the caller as 'Engine core
    initialization failed' (parallel.ENGINE_INIT_FAILED, what predict -tp prints): explain says
    it died at start-up, where the cause is, and gives no fix (exit 4)."""
    text = ("RuntimeError: Engine core initialization failed. See root cause above. "
            "Failed core proc(s): {'EngineCore': 1}")
    found = diagnose(text)
    assert found.kind == ENGINE_DEAD
    assert any("died while starting" in line for line in found.lines)
    assert any("HiSparse swap rows exceed" in line for line in found.lines)
