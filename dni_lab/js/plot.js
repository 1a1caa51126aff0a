// Plot: shows an SVG rendered in the kernel (vl-convert). Clickable marks are wrapped
// in <a href="...#dni=i">; a click selects mark i's unit (Python resolves i), and the
// marks of the selected unit are outlined here without asking the kernel.

function render({ model, el }) {
  const root = h("div", { class: "dni-panel dni-plot" });
  const svgBox = h("div", {});
  const tip = h("div", { class: "dni-tooltip", role: "tooltip", hidden: true });
  root.append(svgBox, tip);
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

  // A tooltip by the pointer: Vega writes each mark's description (unit · hypothesis ·
  // score, see charts.py) into its aria-label. Lines are drawn without one.
  const MARK = '[role="graphics-symbol"][aria-label]:not([aria-roledescription="axis"])' +
    ':not([aria-roledescription="legend"]):not([aria-roledescription="title"])';
  svgBox.addEventListener("mousemove", (ev) => {
    const mark = ev.target.closest(MARK);
    if (!mark) { tip.hidden = true; return; }
    tip.textContent = mark.getAttribute("aria-label");
    tip.hidden = false;
    const box = root.getBoundingClientRect();
    const x = Math.min(ev.clientX - box.left + 12, box.width - tip.offsetWidth - 4);
    tip.style.left = `${Math.max(0, x)}px`;
    tip.style.top = `${ev.clientY - box.top + 14}px`;
  });
  svgBox.addEventListener("mouseleave", () => { tip.hidden = true; });

  model.on("change:_svg", draw);
  model.on("change:selection", markSelected);
  draw();
  return () => { model.off("change:_svg", draw); model.off("change:selection", markSelected); };
}

export default { render };
