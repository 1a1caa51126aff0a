// Feature dashboard: one latent. Python sends `_payload` (widgets/feature_dashboard.py);
// this draws it. Clicking a hypothesis row selects that (latent, hypothesis) pair.

// One bar per bin with log height (counts span orders of magnitude); the latent
// dashboard's parts (feature_dashboard_parts.js) draw their logit-weight histogram with it.
function barHistogram(bins, cls, fill, label) {
  const W = 240, H = 60, n = bins.length || 1;
  const top = Math.max(1, ...bins.map((b) => b.count));
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", cls);
  bins.forEach((b, i) => {
    const r = document.createElementNS(ns, "rect");
    const bh = (H - 2) * Math.log1p(b.count) / Math.log1p(top);
    r.setAttribute("x", (i * W) / n); r.setAttribute("width", W / n - 1);
    r.setAttribute("y", H - bh); r.setAttribute("height", bh); r.setAttribute("fill", fill(b));
    const t = document.createElementNS(ns, "title");
    t.textContent = label(b);
    r.append(t); svg.append(r);
  });
  return svg;
}

function render({ model, el }) {
  const root = h("div", { class: "dni-panel dni-feature-dashboard" });
  el.append(root);

  function shade(a, max) {
    const t = max > 0 ? Math.max(0, Math.min(1, a / max)) : 0;
    return `rgba(214, 96, 77, ${t.toFixed(3)})`;
  }

  function example(ex, max) {
    // one column per symbol: the text on its activation's shade, the hypothesis bar under it
    const text = h("div", { class: "dni-fd-text" });
    ex.symbols.forEach((s, i) => {
      const a = ex.acts[i];
      const cell = h("span", { class: "dni-fd-cell" },
        h("span", { class: "dni-fd-sym", title: `activation ${fmt(a)}`, style: { background: shade(a, max) } },
          s === "" ? "\u00a0" : s));
      if (ex.hyp) {
        const v = ex.hyp[i];
        cell.append(h("span", { class: "dni-fd-bar", title: `hypothesis ${fmt(v)}`,
                                style: { background: v > 0 ? "#2166ac" : "#e6e6e6" } }));
      }
      text.append(cell);
    });
    return h("div", { class: "dni-fd-example" }, h("span", { class: "dni-muted" }, `#${ex.record} `), text);
  }

  function histogram(bins) {
    return barHistogram(bins, "dni-fd-density", () => "#d6604d",
      (b) => `${fmt(b.lo)}–${fmt(b.hi)}: ${b.count}`);
  }

  function table(rows, cols, onclick) {
    const body = rows.map((r) => h("tr", { class: onclick ? "dni-click" : null, onclick: onclick ? () => onclick(r) : null },
      cols.map((c) => h("td", {}, fmt(Array.isArray(r) ? r[c] : r[c])))));
    return h("table", { class: "dni-fd-table" }, body);
  }

  function draw() {
    const p = model.get("_payload") || {};
    root.replaceChildren();
    if (!p.title) { root.append(h("span", { class: "dni-muted" }, "no latent yet")); return; }
    root.append(h("div", { class: "dni-fd-title" }, h("b", {}, p.title),
                  h("span", { class: "dni-muted" }, ` · fires on ${fmt(100 * p.firing_rate, 1)}% of symbols`)));
    const side = h("div", { class: "dni-fd-side" },
      h("div", {}, h("b", {}, "activation density"), histogram(p.density || [])));
    if (p.logits) {
      side.append(h("div", {}, h("b", {}, "promotes"), table(p.logits.top, [0, 1])),
                  h("div", {}, h("b", {}, "suppresses"), table(p.logits.bottom, [0, 1])));
    }
    if ((p.hypotheses || []).length) {
      side.append(h("div", {}, h("b", {}, "best hypotheses"),
        table(p.hypotheses, ["hid", "measure", "unit_score"], (r) => model.send({ type: "hypothesis", row: r }))));
    }
    side.append(h("div", {}, h("b", {}, "correlated neurons"), table(p.neurons || [], ["unit", "r"])));
    const main = h("div", { class: "dni-fd-main" });
    for (const b of p.bins || []) {
      main.append(h("div", { class: "dni-fd-bin" }, h("b", {}, `quantile bin ${b.bin}`),
                    b.examples.map((ex) => example(ex, p.max_act))));
    }
    root.append(h("div", { class: "dni-fd-body", style: { display: "flex", gap: "16px" } }, main, side));
  }

  model.on("change:_payload", draw);
  draw();
  return () => model.off("change:_payload", draw);
}

export default { render };
