// The prompt_lens box (prompt_box.py): one <input>, styled as ipywidgets' Text.  Its value
// goes to the kernel in one message, on Enter or when the reader leaves the box after an
// edit.  (ipywidgets' Text sends a "submit" message before the value on Enter; the kernel
// dispatches both.)
function render({ model, el }) {
  el.classList.add("widget-inline-hbox", "jupyter-widget-inline-hbox",
                   "widget-text", "jupyter-widget-text", "hs-prompt-box");
  const label = document.createElement("label");
  label.className = "widget-label";
  const input = document.createElement("input");
  input.type = "text";
  input.spellcheck = false;

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
  };
  const onKey = (e) => {
    e.stopPropagation();  // the reader is typing: no notebook shortcuts
    if (e.key === "Enter" && !e.isComposing) commit();
  };
  input.addEventListener("keydown", onKey);
  input.addEventListener("keypress", (e) => e.stopPropagation());
  input.addEventListener("change", commit);  // leaving the box after an edit

  model.on("change:value change:description change:description_width change:tooltip", draw);
  draw();
  el.append(label, input);
  return () => model.off(null, draw);
}

export default { render };
