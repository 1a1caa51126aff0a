// Query builder: a form over the catalog Python sends (_catalog); every edit writes the
// whole form state (_query); Python answers with the %%inspect text (_sql) or an error.

function render({ model, el }) {
  const cat = model.get("_catalog") || {};
  let q = structuredClone(model.get("_query") || {});
  const push = () => setTraits(model, { _query: structuredClone(q) });
  const root = h("div", { class: "dni-panel dni-query-builder" });
  el.append(root);

  // models and their layers/units
  const unitsBox = h("div", {});
  function drawUnits() {
    unitsBox.replaceChildren(...(q.models || []).map((mid) => {
      const layers = (cat.models.find((m) => m.mid === mid) || {}).layers || [];
      const rows = (q.units[mid] = q.units[mid] || []);
      return h("div", { class: "dni-bar", "data-mid": mid },
        h("span", { class: "dni-muted" }, mid + ":"),
        ...rows.map((row, i) => {
          const sel = h("select", { class: "dni-input", onchange: () => { row.layer = sel.value; push(); } },
            layers.map((l) => h("option", { value: l, selected: l === row.layer }, l)));
          const units = h("input", { class: "dni-input", size: 8, value: row.units || "*", title: "units: * or 0-3, 7",
            onchange: () => { row.units = units.value; push(); } });
          return h("span", { class: "dni-bar", style: { margin: 0 } }, sel, units,
            h("button", { class: "dni-btn", title: "remove", onclick: () => { rows.splice(i, 1); push(); drawUnits(); } }, "×"));
        }),
        h("button", { class: "dni-btn", onclick: () => { rows.push({ layer: layers[0], units: "*" }); push(); drawUnits(); } }, "+ layer"));
    }));
  }
  const models = h("div", {}, (cat.models || []).map((m) => {
    const box = h("input", { type: "checkbox", checked: q.models.includes(m.mid), onchange: () => {
      q.models = box.checked ? [...q.models, m.mid] : q.models.filter((x) => x !== m.mid);
      push(); drawUnits();
    } });
    return h("label", { style: { marginRight: "10px" } }, box, " ", m.mid);
  }));

  // hypotheses: searchable, grouped by family
  const search = h("input", { class: "dni-input", type: "search", placeholder: "search hypotheses", size: 24 });
  const hypList = h("div", { class: "dni-list" });
  function drawHyps() {
    const needle = search.value.toLowerCase();
    const chosen = new Set(q.hypotheses);
    hypList.replaceChildren(...(cat.families || []).map((f) => {
      const hids = f.hids.filter((x) => !needle || x.toLowerCase().includes(needle) || f.name.toLowerCase().includes(needle));
      if (!hids.length) return null;
      if (f.hids.length === 1) {
        // a one-signal hypothesis is one line: its family would only repeat its name
        const x = f.hids[0];
        const box = h("input", { type: "checkbox", checked: chosen.has(x), "data-hid": x, onchange: () => {
          q.hypotheses = box.checked ? [...q.hypotheses, x] : q.hypotheses.filter((y) => y !== x);
          push(); drawHyps();
        } });
        return h("label", { class: "dni-hyp-single" }, box, " ", x);
      }
      const all = h("input", { type: "checkbox", checked: hids.every((x) => chosen.has(x)), onchange: () => {
        const rest = q.hypotheses.filter((x) => !hids.includes(x));
        q.hypotheses = all.checked ? [...rest, ...hids] : rest;
        push(); drawHyps();
      } });
      return h("details", { open: true },
        h("summary", {}, all, ` ${f.name} `, h("span", { class: "dni-muted" }, `(${f.hids.length})`)),
        ...hids.map((x) => {
          const box = h("input", { type: "checkbox", checked: chosen.has(x), "data-hid": x, onchange: () => {
            q.hypotheses = box.checked ? [...q.hypotheses, x] : q.hypotheses.filter((y) => y !== x);
            push(); drawHyps();
          } });
          return h("label", { style: { marginLeft: "1.2em" } }, box, " ", x);
        }));
    }));
  }
  search.addEventListener("input", drawHyps);

  const measures = h("div", {}, (cat.measures || []).map((name) => {
    const box = h("input", { type: "checkbox", checked: q.measures.includes(name), onchange: () => {
      q.measures = box.checked ? [...q.measures, name] : q.measures.filter((x) => x !== name);
      push();
    } });
    return h("label", { style: { marginRight: "10px" } }, box, " ", name);
  }));
  const dataset = h("select", { class: "dni-input", onchange: () => { q.dataset = dataset.value; push(); } },
    (cat.datasets || []).map((d) => h("option", { value: d.name, selected: d.name === q.dataset }, `${d.name} (${fmt(d.n)} records)`)));
  const eps = h("input", { class: "dni-input", type: "number", step: "0.005", min: "0", size: 6,
    value: q.eps ?? "", placeholder: "all", title: "early stopping: empty reads every record",
    onchange: () => { q.eps = eps.value === "" ? null : Number(eps.value); push(); } });
  const block = h("input", { class: "dni-input", type: "number", min: "1", size: 6, value: q.block_size,
    onchange: () => { q.block_size = Number(block.value); push(); } });

  const sql = h("pre", { class: "dni-sql" });
  const error = h("div", { class: "dni-error" });
  const runBtn = h("button", { class: "dni-btn dni-run", onclick: () => model.send({ type: "run" }) }, "▶ Run");
  const stopBtn = h("button", { class: "dni-btn dni-stop", onclick: () => model.send({ type: "stop" }) }, "Stop");
  const copyBtn = h("button", { class: "dni-btn", title: "copy the query", onclick: () => navigator.clipboard?.writeText(model.get("_sql")) }, "copy");

  root.append(
    h("div", { class: "dni-bar" }, h("span", { class: "dni-title" }, "Inspect")),
    h("div", { class: "dni-form" },
      h("label", {}, "models"), models,
      h("label", {}, "units"), unitsBox,
      h("label", {}, "hypotheses"), h("div", {}, search, hypList),
      h("label", {}, "measures"), measures,
      h("label", {}, "data"), dataset,
      h("label", {}, "eps / block"), h("span", { class: "dni-bar" }, eps, block)),
    sql, error, h("div", { class: "dni-bar" }, runBtn, stopBtn, copyBtn),
  );

  function drawState() {
    sql.textContent = model.get("_sql");
    error.textContent = model.get("_error");
    const running = model.get("_running");
    runBtn.disabled = running || !!model.get("_error");
    stopBtn.disabled = !running;
  }
  drawUnits();
  drawHyps();
  drawState();
  for (const t of ["_sql", "_error", "_running"]) model.on(`change:${t}`, drawState);
  return () => { for (const t of ["_sql", "_error", "_running"]) model.off(`change:${t}`, drawState); };
}

export default { render };
