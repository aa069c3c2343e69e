// The prompt_lens box (prompt_box.py): one <input> (or, multiline, a <textarea>), styled as
// ipywidgets' Text.  Its value
// goes to the kernel in one message, on Enter or when the reader leaves the box after an
// edit.  (ipywidgets' Text sends a "submit" message before the value on Enter; the kernel
// dispatches both.)
function render({ model, el }) {
  el.classList.add("widget-inline-hbox", "jupyter-widget-inline-hbox",
                   "widget-text", "jupyter-widget-text", "hs-prompt-box");
  const label = document.createElement("label");
  label.className = "widget-label";
  // A multi-line box (notebook 7's pasted command) is a wide text area with a hint under it
  // that says how it is applied and when an edit is not applied yet; while it is not, the
  // dashboard's numbers are greyed (they still answer the applied text), until they redraw.
  const multiline = model.get("multiline");
  const input = document.createElement(multiline ? "textarea" : "input");
  if (!multiline) input.type = "text";
  input.spellcheck = false;
  const hint = document.createElement("div");
  hint.className = "hs-prompt-hint";
  const dashboard = () => el.closest(".hisparse-dashboard");
  const numbers = () => dashboard()?.querySelector(".hs-numbers-box");
  // ``pending``: applied, the kernel's numbers not yet drawn; a box that differs from the
  // applied text is stale whoever asks (a redraw the reset button caused included)
  const stale = (pending) => {
    const on = pending || input.value !== model.get("value");
    dashboard()?.classList.toggle("hs-stale", on);
    // a line about the box as it was ("Nothing applied: the command box is empty") no longer
    // holds once the box is edited: hidden while the edit is not applied (applied, the
    // kernel's update replaces it)
    dashboard()?.querySelectorAll(".hs-nothing-applied")
      .forEach((line) => { line.style.display = on ? "none" : ""; });
    hint.textContent = on ? "edited, not applied yet: press Enter (Shift+Enter: a new line) " +
      "or click outside the box" : !model.get("value").trim() ? "empty: no command applied; " +
      "the verdict reads the knobs (paste a command, then Enter or click outside the box)" :
      "applied: the verdict below reads this command " +
      "(Enter or clicking outside the box applies an edit)";
  };
  let watcher = null;
  const clearWhenRedrawn = () => {  // the kernel's numbers for the applied text: not stale
    const box = numbers();
    if (!box) { stale(false); return; }
    watcher?.disconnect();
    watcher = new MutationObserver(() => { watcher.disconnect(); stale(false); });
    watcher.observe(box, { childList: true, subtree: true, characterData: true });
  };
  if (multiline) {
    input.rows = 3;
    // the rest of the row beside the label (a flex item alone would keep its own width)
    input.style.width = "100%";  // its grid column: the row beside the label
    input.style.boxSizing = "border-box";
    input.style.fontFamily = "monospace";
    hint.style.cssText = "font-size:12px;color:#555;box-sizing:border-box;" +
      "white-space:normal;max-width:100%;" +
      "padding-left:" + (model.get("description_width") || "0px");
    input.addEventListener("input", () => stale(input.value !== model.get("value")));
  }

  const draw = () => {
    label.textContent = model.get("description");
    label.style.width = model.get("description_width");
    label.title = model.get("tooltip") || "";
    if (input.value !== model.get("value")) input.value = model.get("value");
  };
  const commit = () => {
    if (input.value === model.get("value")) return;  // Enter already sent it
    model.set("value", input.value);
    model.save_changes();
    if (multiline) clearWhenRedrawn();
  };
  const onKey = (e) => {
    e.stopPropagation();  // the reader is typing: no notebook shortcuts
    if (e.key === "Enter" && !e.isComposing && !(multiline && e.shiftKey)) {
      if (multiline) e.preventDefault();  // Enter applies; it adds no line
      commit();
    }
  };
  input.addEventListener("keydown", onKey);
  input.addEventListener("keypress", (e) => e.stopPropagation());
  input.addEventListener("change", commit);  // leaving the box after an edit
  // leaving it in any way (a click on the reset button included): the browser fires no
  // "change" when the text is back to what it was at its last one, though an Enter applied
  // another text since
  input.addEventListener("blur", commit);

  model.on("change:value change:description change:description_width change:tooltip", draw);
  draw();
  if (multiline) {
    const row = document.createElement("div");
    row.style.cssText = "display:grid;align-items:start;width:100%;box-sizing:border-box;" +
      `grid-template-columns:${model.get("description_width") || "auto"} minmax(0, 1fr)`;
    row.append(label, input);
    const column = document.createElement("div");  // the row with the hint under it, taking
    column.style.cssText = "flex:1 1 100%;min-width:0";  // the whole of the widget's line
    column.append(row, hint);
    el.append(column);
    stale(false);
  } else {
    el.append(label, input);
  }
  return () => { model.off(null, draw); watcher?.disconnect(); };
}

export default { render };
