// Score table: draws the page Python sends (_page) and the run's progress (_status);
// sends the filter, page, page size, best-unit view and hidden columns with setTraits,
// clicks on headers, rows and Stop as messages.
// Sorting, filtering and paging happen in Python over Polars: only one page travels, or,
// scrolling all rows (page size 0), the rows in sight (table_parts.js: makeScroller).
// Cells come as text, written as the snapshots write them (widgets/_format.py).

function progressBar(st) {
  if (st.records_read === undefined) return null;
  const total = st.total_records;
  const share = total ? Math.min(1, st.records_read / total) : (st.state === "running" ? 0 : 1);
  // Same words as _status.py: progress_line (the static snapshot). The records are those
  // read (the rows' n_records), and `ending` says why reading stopped before the total.
  const parts = [
    `${fmt(st.records_read)}${total ? " of " + fmt(total) : ""} records read`
      + (st.ending ? ` — ${st.ending}` : ""),
    `${fmt(st.blocks)} blocks`,
    // eps=None reads every record: no pair "converges" early, so no share to show
    st.early_stopping ? `${Math.round((st.share_converged || 0) * 100)}% of pairs converged`
      : st.state === "running" ? "reading all records (eps=None)" : "eps=None: no early stop",
  ];
  if (st.state === "running") {
    if (st.records_per_s) parts.push(`${fmt(Math.round(st.records_per_s))} records/s`);
    // the kernel pins the estimate (engine Progress.mark): it never grows between blocks
    if (st.time_left_s !== null && st.time_left_s !== undefined) {
      parts.push(`≤ ${fmt(Math.round(st.time_left_s))} s left`);
    }
  } else if (st.elapsed_s !== undefined && st.elapsed_s !== null) {
    parts.push(`${st.elapsed_s.toFixed(1)} s`);
  }
  if (st.cluster) parts.push(st.cluster);  // a sharded run: nodes, workers, failures
  return h("span", { class: "dni-bar", style: { margin: 0 } },
    h("span", { class: "dni-progress", "data-partial": st.partial ? "true" : null,
      title: `${Math.round(share * 100)}% of the records read` },
      h("div", { style: { width: `${share * 100}%` } })),
    h("span", { class: "dni-progress-text" }, parts.join(" · ")));
}

function download(msg, buffers) {
  const blob = new Blob([buffers[0]], { type: msg.mime });
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: msg.name, style: { display: "none" } });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function render({ model, el }) {
  const root = h("div", { class: "dni-panel dni-table-panel" });
  el.append(root);
  const filter = h("input", {
    class: "dni-input dni-filter", type: "search", size: 34,
    placeholder: "filter: text, or unit_score > 0.5 and hid = 'x'",
    value: model.get("_filter"),
    title: "Enter applies the filter; Escape clears it",
  });
  const applyFilter = () => {
    if (filter.value === model.get("_filter")) return;
    setTraits(model, { _filter: filter.value, _page_index: 0 });
  };
  filter.addEventListener("change", applyFilter);  // blur, and the search box's clear (x)
  filter.addEventListener("keydown", (e) => {
    // Enter applies at once; stopPropagation keeps Jupyter from treating keys typed here
    // as notebook shortcuts (Shift+Enter would run the cell).
    e.stopPropagation();
    if (e.key === "Enter") { e.preventDefault(); applyFilter(); }
    else if (e.key === "Escape") { filter.value = ""; applyFilter(); }
  });
  const head = h("div", { class: "dni-bar" });
  const body = h("div", { class: "dni-table-wrap" });
  root.dniDraws = [];  // each redraw's time (ms), read by the browser test
  const foot = h("div", { class: "dni-bar" });
  root.append(head, body, foot);

  function sortState(col) {
    // The sort in force as Python reports it (an empty _sort means the default:
    // by measure, then by |unit_score|); "|col|" is a sort by absolute value.
    const page = model.get("_page") || {};
    const s = page.sort || model.get("_sort") || [];
    for (const [c, d] of s) {
      if (c === col) return d;
      if (c === `|${col}|`) return "abs-" + d;
    }
    return null;
  }

  function mark(state) {
    if (!state) return "";
    const arrow = state.endsWith("desc") ? "▼" : "▲";
    return state.startsWith("abs-") ? ` |${arrow}|` : ` ${arrow}`;
  }

  function clickHeader(col) {
    // Python owns the cycle (ScoreTable.click_header: a score column by |score| first,
    // another column A to Z first, then the default order), so it is tested there.
    model.send({ type: "sort", column: col });
  }

  // Static parts of the header are built once: redrawing them on every progress
  // update would steal the focus from the filter box while a person types.
  const stateEl = h("span", { class: "dni-state" });
  const progressEl = h("span", {});
  const stopBtn = h("button", {
    class: "dni-btn dni-stop", title: "stop the run after the block in flight",
    onclick: () => model.send({ type: "stop" }),
  }, "Stop");
  const exp = (f) => h("button", { class: "dni-btn", title: `download the shown rows as ${f}`,
    onclick: () => model.send({ type: "export", format: f }) }, `⤓ ${f}`);
  const errorEl = h("div", { class: "dni-error", style: { flexBasis: "100%" } });
  const noteEl = h("div", { class: "dni-muted dni-note", style: { flexBasis: "100%" } });
  // hidden columns that hold one value in every row, said once (e.g. one model, one layer)
  const constEl = h("div", { class: "dni-muted dni-constant", style: { flexBasis: "100%" } });
  const bestBtn = h("button", {
    class: "dni-btn dni-best", title: "per model, hypothesis and measure, the row with the "
      + "largest |unit_score| among the rows the filter keeps",
    onclick: () => setTraits(model, { _best: !(model.get("_page") || {}).best, _page_index: 0 }),
  }, "★ best unit per hypothesis");
  const menuHolder = h("span", { class: "dni-col-holder" });
  const colsBtn = h("button", { class: "dni-btn dni-cols", title: "hide or show columns",
    onclick: () => {
      if (menuHolder.firstChild) menuHolder.replaceChildren();
      else menuHolder.replaceChildren(columnsMenu(model, model.get("_page") || {}));
    } }, "columns ▾");
  head.append(h("span", { class: "dni-title" }, "Scores"), stateEl, progressEl, stopBtn, filter,
    bestBtn, h("span", { class: "dni-col-anchor" }, colsBtn, menuHolder),
    exp("parquet"), exp("csv"), noteEl, constEl, errorEl);
  let autoHidden = false;
  const scroller = makeScroller(model, body, root, drawRow, fillRow);

  function drawHead() {
    const st = model.get("_status") || {};
    stateEl.textContent = st.state || "";
    stateEl.dataset.state = st.state || "";
    progressEl.replaceChildren(progressBar(st) || "");
    const live = st.records_read !== undefined;
    stopBtn.style.display = live ? "" : "none";
    stopBtn.disabled = st.state !== "running" || !!st.stopping;
    stopBtn.textContent = st.stopping ? "Stopping…" : "Stop";
    noteEl.textContent = st.note || "";
    noteEl.style.display = st.note ? "" : "none";
    errorEl.textContent = st.error || "";
    errorEl.style.display = st.error ? "" : "none";
  }

  // A row's element, made once and filled again as the scrolled list moves (a scroll step
  // then changes texts, not elements).
  function drawRow(row, index, key, reason) {
    const tr = h("tr", { onclick: () => model.send({ type: "select",
      index: Number(tr.dataset.index), key: tr.dataset.key }) });
    return fillRow(tr, row, index, key, reason);
  }

  function fillRow(tr, row, index, key, reason) {
    const kinds = (model.get("_page") || {}).kinds || [];
    const sel = selKey(model.get("selection"));
    tr.dataset.key = key;
    tr.dataset.index = String(index);
    tr.classList.toggle("dni-selected", !!key && key === sel);
    while (tr.children.length > row.length) tr.lastChild.remove();
    row.forEach((v, j) => {
      const td = tr.children[j] || tr.appendChild(document.createElement("td"));
      td.className = kinds[j] === "int" || kinds[j] === "float" ? "dni-num" : "";
      td.textContent = v;
      if (v === "—" && reason) td.title = reason; else td.removeAttribute("title");
    });
    return tr;
  }

  function drawBody() {
    const t0 = performance.now();
    const page = model.get("_page") || {};
    const cols = page.columns || [];
    const hist = page.hist || {};
    const keys = page.keys || [];
    const reasons = page.reasons || [];
    const thead = h("tr", {}, cols.map((c) => {
      const s = sortState(c);
      const title = page.default_sort && s ? "default order: by measure, then by |unit_score|; "
        + "click to sort by this column" : "sort by this column";
      return h("th", { "data-col": c, "data-sort": s || "", title, onclick: () => clickHeader(c) },
        h("div", {}, c, mark(s)), hist[c] && hist[c].counts.length ? columnHistogram(c, hist[c]) : null);
    }));
    const tbody = h("tbody", {});
    const table = h("table", { class: "dni-table" }, h("thead", {}, thead), tbody);
    body.classList.toggle("dni-scroll", !!page.scroll);
    if (page.scroll) {
      scroller.show(page, table, tbody);
    } else {
      tbody.append(...(page.rows || []).map((row, i) =>
        drawRow(row, page.offset + i, keys[i] || "", reasons[i] || null)));
      body.replaceChildren(table);
    }
    bestBtn.classList.toggle("dni-on", !!page.best);
    bestBtn.setAttribute("aria-pressed", page.best ? "true" : "false");
    if (menuHolder.firstChild) menuHolder.replaceChildren(columnsMenu(model, page));
    drawFoot();
    void body.offsetHeight;  // the layout the update costs, inside the time
    const ms = performance.now() - t0;
    root.dniDraws.push({ what: "page", first: page.offset || 0, ms });
    root.dataset.paintMs = ms.toFixed(2);
    stamp(root, page.sent_at);
    root.dataset.seq = String(page.seq || 0);
    autoHide();
    drawConstant(page);
  }

  function drawConstant(page) {
    const hidden = new Set(page.hidden || []);
    const said = Object.entries(page.constant || {}).filter(([c]) => hidden.has(c));
    constEl.textContent = said.length
      ? "every row: " + said.map(([c, v]) => `${c} ${v}`).join(" · ") : "";
    constEl.style.display = said.length ? "" : "none";
  }

  // A narrow table hides the unit id (it repeats layer and unit) and the id columns with one
  // value in every row (said once above the table) until the person chooses columns; once, so that showing it again holds. Checked again once laid out (the first
  // draw may come before the panel is attached).
  function autoHide() {
    const page = model.get("_page") || {};
    if (!autoHidden && page.hidden === null && (page.auto_hide || []).length
        && root.clientWidth > 0 && root.clientWidth < 800) {
      autoHidden = true;
      setTraits(model, { _hidden: page.auto_hide });
    }
  }
  const sized = new ResizeObserver(autoHide);
  sized.observe(root);

  function drawFoot() {
    const page = model.get("_page") || {};
    const st = model.get("_status") || {};
    const n = st.n_rows ?? 0;
    foot.replaceChildren(
      page.scroll ? "" : pager(page.page || 0, page.n_pages || 1,
        (i) => setTraits(model, { _page_index: i })),
      pageSizes(model, model.get("page_size")),
      h("span", { class: "dni-muted dni-count" },
        `${fmt(n)}` + (st.n_total !== st.n_rows ? ` of ${fmt(st.n_total ?? 0)}` : "")
        + ((st.n_total ?? n) === 1 ? " row" : " rows")),
    );
  }

  function markSelection() {
    const sel = selKey(model.get("selection"));
    for (const tr of body.querySelectorAll("tbody tr")) {
      tr.classList.toggle("dni-selected", !!sel && tr.dataset.key === sel);
    }
  }

  const onMsg = (msg, buffers) => {
    if (!msg) return;
    if (msg.type === "download") download(msg, buffers);
    else if (msg.type === "rows") scroller.receive(msg);
    else if (msg.type === "reveal") scroller.reveal(msg.index);
  };
  const onStatus = () => { drawHead(); drawFoot(); };
  model.on("change:_page", drawBody);
  model.on("change:_status", onStatus);
  model.on("change:_sort", drawBody);
  model.on("change:selection", markSelection);
  model.on("msg:custom", onMsg);
  drawHead();
  drawBody();
  return () => {
    model.off("change:_page", drawBody);
    model.off("change:_status", onStatus);
    model.off("change:_sort", drawBody);
    model.off("change:selection", markSelection);
    model.off("msg:custom", onMsg);
    sized.disconnect();
    scroller.stop();
  };
}

export default { render };
