// Score table parts (widgets/table.py assembles _common.js, this file and table.js into one
// module): a column's histogram, the columns menu, the page-size choice, and the scroller
// that draws a window of all rows and asks Python for the rows coming into sight.

const SVG_NS = "http://www.w3.org/2000/svg";

/** A column's histogram as tiny bars (Python counts them over the shown rows). */
function columnHistogram(col, hist) {
  const W = 64, H = 16, counts = hist.counts || [];
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
  svg.setAttribute("class", "dni-hist"); svg.dataset.col = col;
  const top = Math.max(1, ...counts);
  const n = counts.length || 1, step = (hist.hi - hist.lo) / n;
  counts.forEach((c, i) => {
    const r = document.createElementNS(SVG_NS, "rect");
    const bh = c ? Math.max(1, (H - 1) * c / top) : 0;
    r.setAttribute("x", (i * W) / n); r.setAttribute("width", Math.max(1, W / n - 1));
    r.setAttribute("y", H - bh); r.setAttribute("height", bh);
    const t = document.createElementNS(SVG_NS, "title");
    t.textContent = `${fmt(hist.lo + i * step)} to ${fmt(hist.lo + (i + 1) * step)}: ${fmt(c)}`
      + (c === 1 ? " row" : " rows");
    r.append(t); svg.append(r);
  });
  const range = h("span", { class: "dni-hist-range" }, `${hist.lo_text} … ${hist.hi_text}`);
  const nulls = hist.nulls ? `; ${fmt(hist.nulls)} empty` : "";
  return h("div", { class: "dni-hist-box", title: `${col}: ${hist.lo_text} to ${hist.hi_text}`
    + ` over ${fmt(hist.n)} values${nulls}` }, svg, range);
}

/** The columns menu: a checkbox per column; a change sends the hidden ones. */
function columnsMenu(model, page) {
  const all = page.all_columns || [];
  const hidden = new Set(page.hidden || []);
  const box = h("div", { class: "dni-col-menu" });
  for (const c of all) {
    const cb = h("input", { type: "checkbox", "data-col": c, checked: !hidden.has(c) });
    cb.addEventListener("change", () => {
      const off = [...box.querySelectorAll("input")].filter((x) => !x.checked)
        .map((x) => x.dataset.col);
      setTraits(model, { _hidden: off });
    });
    box.append(h("label", {}, cb, " ", c));
  }
  return box;
}

/** Rows a page: the choices, 0 being every row in one scrolled list. */
function pageSizes(model, current) {
  const sizes = [25, 100, 500, 0];
  if (!sizes.includes(current)) sizes.unshift(current);
  const sel = h("select", { class: "dni-input dni-page-size", title: "rows a page, or all rows "
    + "in one scrolled list (only the rows in sight travel)" },
  sizes.map((n) => h("option", { value: n, selected: n === current },
    n ? `${fmt(n)} a page` : "all rows, scrolled")));
  sel.addEventListener("change", () =>
    setTraits(model, { page_size: Number(sel.value), _page_index: 0 }));
  return sel;
}

const BLOCK = 100;  // rows a request asks for (Python's first window is one block)
const MAX_PX = 8e6;  // under the browsers' element height limit: longer lists scale

/**
 * The scrolled list of all rows: a spacer as tall as every row, the table kept in sight
 * over it (position: sticky) and filled with the rows at the scroll position. Rows come
 * in blocks of BLOCK, the first with the page, others on request ({type: "rows"}); the
 * blocks around the rows in sight are asked for ahead. Each redraw's time (the DOM update
 * and the layout it forces) is kept in root.dniDraws.
 */
function makeScroller(model, wrap, root, drawRow, fillRow) {
  const spacer = h("div", { class: "dni-spacer" });
  let page = {}, cache = new Map(), pending = new Set(), rowH = 21, headH = 40;
  let table = null, tbody = null, shown = -1;
  root.dniDraws = root.dniDraws || [];

  function visible() {  // 20 before the panel is laid out (drawn before it is attached)
    return wrap.clientHeight ? Math.max(1, Math.ceil((wrap.clientHeight - headH) / rowH)) : 20;
  }
  function firstRow() {
    const n = page.n_rows || 0, max = wrap.scrollHeight - wrap.clientHeight;
    const lastFirst = Math.max(0, n - Math.floor((wrap.clientHeight - headH) / rowH));
    return max > 0 ? Math.min(lastFirst, Math.round(wrap.scrollTop / max * lastFirst)) : 0;
  }
  function ask(first) {
    const n = page.n_rows || 0;
    const lo = Math.max(0, first - BLOCK), hi = Math.min(n, first + visible() + BLOCK);
    for (let b = Math.floor(lo / BLOCK) * BLOCK; b < hi; b += BLOCK) {
      if (cache.has(b) || pending.has(b)) continue;
      pending.add(b);
      model.send({ type: "rows", start: b, count: BLOCK, seq: page.seq });
    }
  }
  function rowsAt(first, count) {
    const out = [];
    for (let i = first; i < Math.min(first + count, page.n_rows || 0); i++) {
      const block = cache.get(Math.floor(i / BLOCK) * BLOCK);
      if (!block) return null;
      const j = i - block.start;
      out.push({ index: i, row: block.rows[j], key: block.keys[j] || "",
        reason: block.reasons[j] || null });
    }
    return out;
  }
  function update(what = "scroll") {
    if (!tbody) return;
    const first = firstRow();
    root.dataset.wantRow = String(first);  // the row the scroll position asks for first
    ask(first);
    if (first === shown) return;
    const rows = rowsAt(first, visible() + 1);
    if (!rows) return;  // drawn when the block arrives
    const t0 = performance.now();
    rows.forEach((r, i) => {
      const tr = tbody.children[i];
      if (tr) fillRow(tr, r.row, r.index, r.key, r.reason);
      else tbody.append(drawRow(r.row, r.index, r.key, r.reason));
    });
    while (tbody.children.length > rows.length) tbody.lastChild.remove();
    void tbody.offsetHeight;  // the layout the update costs, inside the time
    const ms = performance.now() - t0;
    root.dniDraws.push({ what, first, ms });
    root.dataset.firstRow = String(first);
    shown = first;
  }
  // Once laid out (the first draw may come before the panel is attached): the height of a
  // row and of the header, the spacer's height, and the widths of the first rows' columns,
  // which hold while scrolling (cells further down would move the columns at each window).
  function measure() {
    if (!table || !wrap.clientHeight || !tbody.firstChild) return;
    rowH = tbody.firstChild.getBoundingClientRect().height || rowH;
    headH = table.tHead.getBoundingClientRect().height || headH;
    spacer.style.height = `${Math.min(MAX_PX, (page.n_rows || 0) * rowH) + headH}px`;
    if (table.style.tableLayout !== "fixed") {
      const ths = [...table.tHead.rows[0].cells];
      const widths = ths.map((th) => th.getBoundingClientRect().width);
      const sum = widths.reduce((a, w) => a + w, 0) || 1;  // shares: the table keeps its width
      ths.forEach((th, i) => { th.style.width = `${(100 * widths[i] / sum).toFixed(3)}%`; });
      table.style.tableLayout = "fixed";
    }
    shown = -1;
    update("view");
  }
  let height = 0;
  const sized = new ResizeObserver(() => {
    if (wrap.clientHeight !== height) { height = wrap.clientHeight; measure(); }
  });
  sized.observe(wrap);
  let queued = false;
  wrap.addEventListener("scroll", () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => { queued = false; update("scroll"); });
  });
  return {
    /** A new view from Python: its first block, its header drawn by the caller. */
    show(newPage, newTable, newBody) {
      page = newPage; table = newTable; tbody = newBody;
      cache = new Map([[0, { start: 0, rows: page.rows || [], keys: page.keys || [],
        reasons: page.reasons || [] }]]);
      pending = new Set(); shown = -1;
      spacer.replaceChildren(table);
      wrap.replaceChildren(spacer);
      spacer.style.height = `${Math.min(MAX_PX, (page.n_rows || 0) * rowH) + headH}px`;
      update("view");
      measure();
    },
    /** A block Python sent: drawn if it belongs to the view and is in sight. */
    receive(msg) {
      if (msg.seq !== page.seq) return;
      cache.set(msg.start, msg);
      pending.delete(msg.start);
      update("rows");
    },
    stop() { sized.disconnect(); },
    /** Scroll so that row `index` shows (a selection made elsewhere). */
    reveal(index) {
      const max = wrap.scrollHeight - wrap.clientHeight;
      const lastFirst = Math.max(1, (page.n_rows || 0) - Math.floor((wrap.clientHeight - headH) / rowH));
      wrap.scrollTop = Math.max(0, (index - 2) / lastFirst * max);
      update("scroll");
    },
  };
}
