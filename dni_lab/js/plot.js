// Plot: shows an SVG rendered in the kernel (vl-convert). Clickable marks are wrapped
// in <a href="...#dni=i">; a click selects mark i's unit (Python resolves i), and the
// marks of the selected unit are outlined here without asking the kernel.

function render({ model, el }) {
  const root = h("div", { class: "dni-panel dni-plot" });
  const svgBox = h("div", {});
  const hover = h("div", { class: "dni-muted dni-hover" }, "\u00a0");
  root.append(svgBox, hover);
  el.append(root);

  function markSelected() {
    const keys = model.get("_keys") || [];
    const sel = selKey(model.get("selection"));
    for (const a of svgBox.querySelectorAll("a")) {
      const m = /#dni=(\d+)/.exec(a.getAttribute("xlink:href") || a.getAttribute("href") || "");
      a.classList.toggle("dni-sel", !!m && !!sel && keys[Number(m[1])] === sel);
    }
  }

  function draw() {
    svgBox.innerHTML = model.get("_svg") || '<span class="dni-muted">no data yet</span>';
    markSelected();
  }

  root.addEventListener("click", (ev) => {
    const a = ev.target.closest("a");
    if (!a) return;
    ev.preventDefault();
    const m = /#dni=(\d+)/.exec(a.getAttribute("xlink:href") || a.getAttribute("href") || "");
    if (m) model.send({ type: "select", index: Number(m[1]) });
  });

  // Vega writes each mark's fields into aria-label: show them on hover (SVG has no tooltips).
  svgBox.addEventListener("mouseover", (ev) => {
    const mark = ev.target.closest("[aria-label]");
    if (mark && mark.getAttribute("role") === "graphics-symbol") hover.textContent = mark.getAttribute("aria-label");
  });

  model.on("change:_svg", draw);
  model.on("change:selection", markSelected);
  draw();
  return () => { model.off("change:_svg", draw); model.off("change:selection", markSelected); };
}

export default { render };
