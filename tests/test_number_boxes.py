"""A number typed into a dashboard's number box is taken or refused in one line, never clamped.

Invariant: a typed value past its slider's ends either becomes the slider's value (the
slider widens to it: the knob's declaration allows it) or leaves the slider as it was with
one line naming the control, the value and why, and the box showing the slider's value again.
"""

import html

import pytest

from hisparse_model.views.exposure import exposure_dashboard
from hisparse_model.views.traffic import traffic_dashboard


@pytest.mark.parametrize("make, name, typed, value, message", [
    # notebook 7: its help says max_model_len is at most 163,840: taken (was clamped to 4096)
    (exposure_dashboard, "max_model_len", 163840, 163840, ""),
    # vllm serve's default S on an H200 (was clamped to 256)
    (exposure_dashboard, "max_num_seqs", 1024, 1024, ""),
    # below the knob's minimum: refused with the knob's own rule, S stays 2
    (exposure_dashboard, "max_num_seqs", 0, 2,
     "max_num_seqs must be >= 1, got 0; max_num_seqs stays 2"),
    # notebook 5: requests is no knob; its range is the control's own (was clamped to 64)
    (traffic_dashboard, "requests", 200, 2,
     "requests: 200 is outside this control's range 1-64; it stays 2"),
    # inside the range: as before, the slider follows
    (traffic_dashboard, "requests", 9, 9, ""),
])
def test_a_typed_value_is_taken_or_refused_in_one_line(make, name, typed, value, message):
    dash = make()
    box, slider = dash.number_boxes[name], dash.controls[name]
    box.value = typed
    assert (slider.value, box.value) == (value, value)
    shown = html.unescape(dash.message.value)
    assert (message in shown) if message else shown == ""
    assert shown.count("<div") <= 1  # one line
    if not message:
        assert slider.min <= typed <= slider.max
