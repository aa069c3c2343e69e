"""Notebook 7's command box (``views/prompt_box.js``) in a browser, with no Jupyter: the box
rendered into a page that stands in for the dashboard (its numbers box, the line the reset
button writes) and a model that stands in for the kernel's (a saved value is "applied", and
the kernel's redraw of the numbers follows it).

Each row is what a reader does and what the page then says: the hint under the box, whether
the dashboard is greyed, whether the "Nothing applied" line shows, and the value the kernel
has.  The expectations are the reader's, written in the table.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is absent under CI=true (apt-get install -y chromium)",
                    pytrace=False)
    pytest.skip(f"{CHROMIUM} is absent (install it with: apt-get install -y chromium)",
                allow_module_level=True)

from playwright import sync_api as playwright_sync  # noqa: E402  a test extra

JS = Path(__file__).resolve().parents[1] / "hisparse_model" / "views" / "prompt_box.js"
CMD = "vllm serve deepseek-ai/DeepSeek-V3.2"
NOTHING = "Nothing applied: the command box is empty"
# the page: a dashboard with the box, its numbers and the kernel's stand-in.  save_changes
# "applies" the value: the kernel redraws the numbers (after ``redraw_ms``) and, as the
# dashboard's update does, drops the reset button's line; reset() is that button: with an
# empty value it writes the line and redraws nothing
PAGE = """<div class='hisparse-dashboard'><div id='box'></div>
<div class='hs-message'></div><div class='hs-numbers-box'>numbers 0</div></div>
<script type='module'>
const handlers = {};
const model = {
  values: {value: %r, description: "command", description_width: "210px", multiline: true,
           tooltip: ""},
  get(k) { return this.values[k]; },
  set(k, v) { this.values[k] = v; },
  on() {}, off() {},
  save_changes() {
    window.applied = this.values.value;
    setTimeout(() => {
      document.querySelector('.hs-message').innerHTML = '';
      const n = document.querySelector('.hs-numbers-box');
      n.textContent = 'numbers ' + (++window.redraws);
    }, window.redraw_ms);
  },
};
window.redraws = 0; window.redraw_ms = 30; window.applied = model.values.value;
window.reset = () => {
  if (!window.applied.trim()) document.querySelector('.hs-message').innerHTML =
    "<div class='hs-note hs-nothing-applied'>%s: ...</div>";
};
const url = URL.createObjectURL(new Blob([%r], {type: 'text/javascript'}));
const mod = await import(url);
mod.default.render({model, el: document.getElementById('box')});
window.ready = true;
</script>"""


def _state(page) -> tuple[str, bool, bool | None, str]:
    """(the hint's first words, greyed, the Nothing-applied line shown (None: not there),
    the kernel's value)."""
    return page.evaluate("""() => {
        const line = document.querySelector('.hs-nothing-applied');
        return [document.querySelector('.hs-prompt-hint').textContent.split(':')[0],
                document.querySelector('.hisparse-dashboard').classList.contains('hs-stale'),
                line ? line.style.display !== 'none' : null, window.applied];
    }""")


# (what the reader does, the hint's first words, greyed, the Nothing-applied line, the value
# the kernel has) -- each row continues from the one above it
STEPS = [
    ("opened with a command", "applied", False, None, CMD),
    ("empties the box", "edited, not applied yet", True, None, CMD),
    ("presses Enter", "empty", False, None, ""),
    # an empty box and nothing to reset to: the line says so
    ("clicks reset", "empty", False, True, ""),
    # a new command typed, not applied: the line about the empty box no longer holds
    ("types a command", "edited, not applied yet", True, False, ""),
    # back to the applied (empty) text: nothing is pending, the line holds again
    ("empties the box again, leaves it", "empty", False, True, ""),
    ("types a command, presses Enter", "applied", False, None, CMD + " -tp 8"),
    # the browser fires no "change" here (the text is what it was when the box took the
    # focus, before the Enter): leaving the box still applies the empty box, before the
    # reset's click
    ("empties the box, clicks reset", "empty", False, True, ""),
    # the kernel's redraw for an applied text comes after the reader typed again: the box
    # still differs from what is applied, so it stays greyed and says so
    ("types, Enter, types again before the redraw", "edited, not applied yet", True, None,
     CMD + " -dp 2"),
]


@pytest.fixture(scope="module")
def browser():
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page()
    try:
        pg.set_content(PAGE % (CMD, NOTHING, JS.read_text()))
        pg.wait_for_function("() => window.ready === true")
        yield pg
    finally:
        pg.close()


def _settle(page) -> None:
    page.wait_for_timeout(120)  # the stand-in kernel redraws 30 ms after a save


def _do(page, what: str) -> None:
    box = page.locator("textarea")
    reset = lambda: page.evaluate("() => window.reset()")  # noqa: E731
    if what == "opened with a command":
        return
    if what == "empties the box":
        box.fill("")
    elif what == "empties the box again, leaves it":
        box.fill("")
        page.evaluate("() => document.activeElement.blur()")
    elif what == "presses Enter":
        box.press("Enter")
    elif what == "clicks reset":
        reset()
    elif what == "types a command":
        box.fill(CMD + " -tp 8")
    elif what == "types a command, presses Enter":
        box.fill(CMD + " -tp 8")
        box.press("Enter")
    elif what == "empties the box, clicks reset":
        box.fill("")
        page.evaluate("() => document.activeElement.blur()")  # the click takes the focus
        _settle(page)
        reset()
    elif what == "types, Enter, types again before the redraw":
        page.evaluate("() => { window.redraw_ms = 200; }")
        box.focus()
        box.fill(CMD + " -dp 2")
        box.press("Enter")
        box.fill(CMD + " -dp 2 --x")
        page.wait_for_timeout(400)
        return
    _settle(page)


@pytest.mark.parametrize("i", range(len(STEPS)), ids=[w for w, *_ in STEPS])
def test_the_command_box_says_what_is_applied_at_every_step(page, i):
    """The hint, the grey and the reset button's line always describe the box against the
    text the kernel has applied, whatever the reader did before (each row replays the rows
    above it)."""
    for what, *_ in STEPS[:i + 1]:
        _do(page, what)
    what, hint, greyed, line, applied = STEPS[i]
    assert _state(page) == [hint, greyed, line, applied], what
