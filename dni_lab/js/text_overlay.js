// Text overlay: each record symbol by symbol; background = a unit's behavior on the
// diverging map, a thin aligned track under each symbol = the hypothesis signal.
// Values arrive as float32 bytes (_values, _signals), laid out unit-major per _layout.

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };
function esc(s) {
  if (s === " ") return "&nbsp;";
  if (s === "\n") return "⏎";
  if (s === "\t") return "⇥";
  return s.replace(/[&<>"]/g, (c) => ESC[c]);
}

function signalColor(v, lo, hi) {
  if (!Number.isFinite(v)) return "transparent";
  const t = hi > lo ? (v - lo) / (hi - lo) : (v > 0 ? 1 : 0);
  if (t <= 0.001) return "transparent";
  const g = Math.round(230 - 200 * t);
  return `rgb(${g},${g},${g})`;
}

// One unit's column as an HTML string: building one string and assigning innerHTML
// once is several times faster than creating ~10^5 span nodes one by one.
function unitColumn(lay, u, vals, sigs) {
  const n = lay.n_symbols, meta = lay.units[u];
  const sig = meta.signal;
  const out = [];
  for (const rec of lay.records) {
    out.push(`<div class="dni-rec"><span class="dni-rec-id">#${rec.index}</span><div class="dni-rec-body"><div class="dni-seq">`);
    rec.symbols.forEach((s, t) => {
      const i = rec.offset + t;
      const v = vals[u * n + i];
      const c = diverging(v / meta.scale);
      // white text on the darkest blues and reds (black on them is hard to read)
      const fg = 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] < 130 ? "#fff" : "#111";
      const under = sig ? signalColor(sigs[u * n + i], sig[0], sig[1]) : "transparent";
      out.push(`<span data-i="${i}" style="background:${rgb(c)};color:${fg};border-bottom:3px solid ${under}">${esc(s)}</span>`);
    });
    out.push("</div></div></div>");
  }
  return out.join("");
}

function render({ model, el }) {
  const root = h("div", { class: "dni-panel dni-text-overlay" });
  el.append(root);
  const bar = h("div", { class: "dni-bar" });
  const info = h("div", { class: "dni-muted dni-hover" }, "\u00a0");
  const cols = h("div", { class: "dni-units" });
  const foot = h("div", { class: "dni-bar" });
  root.append(bar, cols, info, foot);

  function setOrder(o) { setTraits(model, { _order: o, _page_index: 0 }); }

  function draw() {
    const lay = model.get("_layout") || {};
    const vals = floats(model.get("_values"));
    const sigs = floats(model.get("_signals"));
    const order = lay.order || "index";
    const ob = (o, label, title) => h("button", { class: "dni-btn" + (order === o ? " dni-on" : ""),
      title, "data-order": o, onclick: () => setOrder(o) }, label);
    bar.replaceChildren(
      h("span", { class: "dni-title" }, "Activations"),
      ob("index", "record order", "records as given"),
      ob("top", "top activating", "records with the highest peak of the first unit first"),
      ob("bottom", "most negative", "records with the lowest trough of the first unit first"),
      h("button", { class: "dni-btn", title: "keep the selected unit on screen",
        onclick: () => {
          const s = model.get("selection");
          const pinned = model.get("pinned") || [];
          if (s && selKey(s) && !pinned.some((p) => selKey(p) === selKey(s))) {
            setTraits(model, { pinned: [...pinned, s] });
          }
        } }, "pin"),
      // change the unit from here: the neighbours in its layer (the table follows)
      h("button", { class: "dni-btn dni-step", "data-step": "-1", title: "previous unit of this layer",
        disabled: !selKey(model.get("selection")), onclick: () => model.send({ type: "step", delta: -1 }) }, "‹ unit"),
      h("button", { class: "dni-btn dni-step", "data-step": "1", title: "next unit of this layer",
        disabled: !selKey(model.get("selection")), onclick: () => model.send({ type: "step", delta: 1 }) }, "unit ›"),
    );
    if (lay.error) bar.append(h("div", { class: "dni-error", style: { flexBasis: "100%" } }, lay.error));
    const units = lay.units || [];
    // Records flow in as many columns as fit (a 30-symbol window filled ~30% of the
    // width); a column is as wide as the page's longest record, up to 80 symbols.
    const longest = Math.max(1, ...(lay.records || []).map((r) => r.symbols.length));
    cols.style.setProperty("--dni-rec-w", `${(Math.min(longest, 80) * 0.65 + 4.5).toFixed(1)}em`);
    if (!units.length) {
      cols.replaceChildren(h("div", { class: "dni-muted dni-empty" }, "Select a unit (click a row of the score table) to see its behavior over the records."));
    } else {
      cols.replaceChildren(...units.map((m, u) => {
        const pinned = (model.get("pinned") || []).some((p) => selKey(p) === m.key);
        const head = h("div", { class: "dni-unit-head" },
          h("span", { class: "dni-unit-label" }, m.label),
          m.hid ? h("span", { class: "dni-muted" }, `vs ${m.hid}`) : null,
          legend(m.scale, `scale: ${m.scale_of}`),
          pinned ? h("button", { class: "dni-btn", title: "unpin", onclick: () => {
            setTraits(model, { pinned: (model.get("pinned") || []).filter((p) => selKey(p) !== m.key) });
          } }, "×") : null);
        const body = h("div", { class: "dni-unit-body", "data-unit": u });
        body.innerHTML = unitColumn(lay, u, vals, sigs);
        return h("div", { class: "dni-unit-col", "data-key": m.key }, head, body);
      }));
    }
    foot.replaceChildren(
      pager(lay.page || 0, lay.n_pages || 1, (i) => setTraits(model, { _page_index: i })),
      h("span", { class: "dni-muted" }, `${fmt(lay.n_records || 0)} records`),
    );
    stamp(root, lay.sent_at);
  }

  // Hovering a symbol shows its values (one listener, not one per symbol).
  cols.addEventListener("mouseover", (ev) => {
    const span = ev.target.closest("span[data-i]");
    const body = ev.target.closest("[data-unit]");
    if (!span || !body) return;
    const lay = model.get("_layout") || {};
    const u = Number(body.dataset.unit), i = Number(span.dataset.i), n = lay.n_symbols;
    const v = floats(model.get("_values"))[u * n + i];
    const s = floats(model.get("_signals"))[u * n + i];
    info.textContent = `${lay.units[u].label}: ${fmt(v)}` +
      (Number.isFinite(s) ? ` · ${lay.units[u].hid}: ${fmt(s)}` : "");
  });

  model.on("change:_layout", draw);
  model.on("change:pinned", draw);
  draw();
  return () => {
    model.off("change:_layout", draw);
    model.off("change:pinned", draw);
  };
}

export default { render };
