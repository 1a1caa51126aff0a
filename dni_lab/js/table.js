// Score table: draws the page Python sends (_page) and the run's progress (_status);
// sends the filter (_filter) and the page index (_page_index) with setTraits, clicks on
// headers, rows and Stop as messages.
// Sorting, filtering and paging happen in Python over Polars: only one page travels.

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
  head.append(h("span", { class: "dni-title" }, "Scores"), stateEl, progressEl, stopBtn, filter,
    exp("parquet"), exp("csv"), noteEl, errorEl);

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

  function drawBody() {
    const page = model.get("_page") || {};
    const cols = page.columns || [];
    const kinds = page.kinds || [];
    const keys = page.keys || [];
    const reasons = page.reasons || [];
    const sel = selKey(model.get("selection"));
    const thead = h("tr", {}, cols.map((c) => {
      const s = sortState(c);
      const title = page.default_sort && s ? "default order: by measure, then by |unit_score|; "
        + "click to sort by this column" : "sort by this column";
      return h("th", { "data-col": c, "data-sort": s || "", title, onclick: () => clickHeader(c) },
        c, mark(s));
    }));
    const rows = (page.rows || []).map((row, i) => {
      const tr = h("tr", {
        "data-key": keys[i] || "", class: keys[i] && keys[i] === sel ? "dni-selected" : null,
        onclick: () => model.send({ type: "select", index: page.offset + i, key: keys[i] || "" }),
      });
      row.forEach((v, j) => {
        const num = kinds[j] === "int" || kinds[j] === "float";
        const title = v === null && reasons[i] ? reasons[i] : null;
        tr.append(h("td", { class: num ? "dni-num" : null, title }, fmt(v)));
      });
      return tr;
    });
    const table = h("table", { class: "dni-table" }, h("thead", {}, thead), h("tbody", {}, rows));
    body.replaceChildren(table);
    drawFoot();
    stamp(root, page.sent_at);
    root.dataset.seq = String(page.seq || 0);
  }

  function drawFoot() {
    const page = model.get("_page") || {};
    const st = model.get("_status") || {};
    foot.replaceChildren(
      pager(page.page || 0, page.n_pages || 1, (i) => setTraits(model, { _page_index: i })),
      h("span", { class: "dni-muted dni-count" },
        `${fmt(st.n_rows ?? 0)} rows` + (st.n_total !== st.n_rows ? ` of ${fmt(st.n_total ?? 0)}` : "")),
    );
  }

  function markSelection() {
    const sel = selKey(model.get("selection"));
    for (const tr of body.querySelectorAll("tbody tr")) {
      tr.classList.toggle("dni-selected", !!sel && tr.dataset.key === sel);
    }
  }

  const onMsg = (msg, buffers) => { if (msg && msg.type === "download") download(msg, buffers); };
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
  };
}

export default { render };
