// Helpers shared by every dni_lab panel. Python prepends this file to each panel's
// module (anywidget loads one self-contained ES module per widget, so relative
// imports cannot work and nothing may come from a CDN).

/** Create an element: h("div", {class: "x", onclick: f}, child, "text"). */
function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "style" && typeof v === "object") Object.assign(node.style, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

/** Numbers as a person reads them: 3 significant decimals, thousands separated. */
function fmt(v, digits = 3) {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") {
    if (Number.isInteger(v)) return v.toLocaleString("en-US");
    if (!Number.isFinite(v)) return String(v);
    return v.toFixed(digits);
  }
  if (typeof v === "boolean") return v ? "✓" : "·";
  return String(v);
}

/**
 * Set traits of the panel's model through Python: setTraits(model, {_page_index: 2}).
 *
 * Every change a person makes goes this way, not model.set + save_changes: the widget
 * front end sends a state sync only after the kernel's idle for the one before, and
 * ipykernel 7 publishes no busy/idle for a message it handles while an async cell awaits
 * (a cell waiting on a %%inspect run), so a second sync would be held for good. A custom
 * message is never held; Python sets the traits (widgets/_base.py: Panel._on_set, only
 * those named in the panel's _browser_sets) and its update comes back as any other.
 */
function setTraits(model, changes) {
  // set here too, so that views drawn from a trait (an opacity) follow at once; the diff
  // this leaves is never saved, and Python's update brings the same values
  for (const [k, v] of Object.entries(changes)) model.set(k, v);
  model.send({ type: "set", traits: changes });
}

/** Selection key shared with Python (widgets/_base.py: selection_key). */
function selKey(s) {
  if (!s || s.mid === undefined || s.mid === null) return "";
  return `${s.mid}|${s.uid}|${s.hid ?? ""}`;
}

// Diverging map (blue - white - red, after ColorBrewer RdBu): t in [-1, 1].
const DIVERGING = [
  [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
  [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43],
];

function diverging(t) {
  if (!Number.isFinite(t)) return [200, 200, 200];
  const x = (Math.max(-1, Math.min(1, t)) + 1) / 2 * (DIVERGING.length - 1);
  const i = Math.min(Math.floor(x), DIVERGING.length - 2);
  const f = x - i;
  const a = DIVERGING[i], b = DIVERGING[i + 1];
  return [0, 1, 2].map((k) => Math.round(a[k] + (b[k] - a[k]) * f));
}

function rgb(c) {
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/** A horizontal legend of the diverging map from -scale to +scale. */
function legend(scale, label) {
  const stops = DIVERGING.map((c, i) => `${rgb(c)} ${(i / (DIVERGING.length - 1)) * 100}%`);
  return h(
    "div", { class: "dni-legend" },
    h("span", {}, fmt(-scale, 2)),
    h("span", { class: "dni-legend-bar", style: { background: `linear-gradient(to right, ${stops.join(",")})` } }),
    h("span", {}, fmt(scale, 2)),
    label ? h("span", { class: "dni-muted" }, label) : null,
  );
}

/** Float32 values from a synced bytes trait (DataView in anywidget 0.9+). */
function floats(view) {
  if (!view) return new Float32Array(0);
  const buf = view.buffer ? view : new DataView(view);
  return new Float32Array(buf.buffer, buf.byteOffset, Math.floor(buf.byteLength / 4));
}

function bytes(view) {
  if (!view) return new Uint8Array(0);
  const buf = view.buffer ? view : new DataView(view);
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** Pager: « ‹ page i / n › » calling go(index). */
function pager(page, nPages, go) {
  const btn = (label, target, title) =>
    h("button", { class: "dni-btn", title, disabled: target < 0 || target >= nPages || target === page,
      onclick: () => go(target) }, label);
  return h("span", { class: "dni-pager" },
    btn("«", 0, "first page"), btn("‹", page - 1, "previous page"),
    h("span", { class: "dni-page-label" }, `page ${nPages ? page + 1 : 0} / ${nPages}`),
    btn("›", page + 1, "next page"), btn("»", nPages - 1, "last page"));
}

/** Send a time stamp back for latency measurements (benchmarks read data-rendered-at). */
function stamp(el, sentAt) {
  el.dataset.renderedAt = String(Date.now());
  if (sentAt) el.dataset.sentAt = String(sentAt);
}
