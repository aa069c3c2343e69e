// The dashboard's numbers (numbers_pane.py).  The kernel sends the numbers it computed
// (``value``) and, once idle, the numbers of every state one move away (``ahead_blob``,
// with ``ahead_index`` keyed by the state: every control's value as this page holds it).
// When a control changes here, the pane shows the state's numbers at once, if it holds them,
// and the kernel's own numbers when they arrive (the same HTML: a screen is a function of
// the controls).  ``data-source`` says which one is shown: "ahead" or "kernel";
// ``data-ahead`` how many screens the page holds.
async function render({ model, el }) {
  let shown = null;
  const draw = (html, source) => {
    if (html === shown) return;
    shown = html;
    el.innerHTML = html;
    el.dataset.source = source;
    reveal();
  };
  // A selected row (notebook 4's recording) is scrolled into view inside its scroll box, a
  // third of the way down, where the sticky header cannot hide it; the page does not move.
  const reveal = () => {
    for (const row of el.querySelectorAll(".hs-scroll tr.hs-selected")) {
      const box = row.closest(".hs-scroll");
      const delta = row.getBoundingClientRect().top - box.getBoundingClientRect().top;
      box.scrollTop += delta - box.clientHeight / 3;
    }
  };
  const spec = model.get("controls");  // [[model id, synced trait, id of the control it follows]]
  const models = {};
  await Promise.all(spec.map(async ([id]) => {
    models[id] = await model.widget_manager.get_model(id);
  }));
  const state = (id, trait, follows) => {
    // A number box's value is its slider's: the slider follows it once the kernel has it.
    const over = follows ? { [follows]: models[id].get(trait) } : {};
    return spec.filter(([, , f]) => !f)
      .map(([cid, t]) => String(cid in over ? over[cid] : models[cid].get(t))).join("|");
  };
  const utf8 = new TextDecoder();
  const ahead = (key) => {  // the screen of state ``key`` from the blob, or undefined
    const at = (model.get("ahead_index") || {})[key];
    const blob = model.get("ahead_blob");
    if (!at || !blob) return undefined;
    return utf8.decode(new Uint8Array(blob.buffer, blob.byteOffset + at[0], at[1] - at[0]));
  };
  const moved = (id, trait, follows) => () => queueMicrotask(() => {  // after the control sent
    const html = ahead(state(id, trait, follows));
    if (html !== undefined) draw(html, "ahead");
  });
  for (const [id, trait, follows] of spec) {
    models[id].on(`change:${trait}`, moved(id, trait, follows), el);
  }
  const count = () => { el.dataset.ahead = Object.keys(model.get("ahead_index") || {}).length; };
  model.on("change:ahead_index", count);
  model.on("change:value", () => draw(model.get("value"), "kernel"));
  draw(model.get("value"), "kernel");
  count();
  return () => { for (const id in models) models[id].off(null, null, el); };
}

export default { render };
