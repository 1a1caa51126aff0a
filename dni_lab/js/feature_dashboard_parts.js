// The latent dashboard's further parts (features/dashboard_panel.py prepends the base
// panel, js/feature_dashboard.js, without its export): the explanation, nearest latents
// by decoder cosine (a click shows one), the logit-weight histogram over the vocabulary
// and each top example's per-token loss change when the latent is ablated.

function renderParts({ model, el }) {
  const stop = render({ model, el });
  // inside the base panel (its styles apply), appended again after each of its redraws,
  // which empty it: its listener was added first, so it runs first
  const root = h("div", { class: "dni-fd-parts" });

  function weights(bins) {
    // as the density histogram (barHistogram); blue below 0, red above
    const svg = barHistogram(bins, "dni-fd-weights",
      (b) => ((b.lo + b.hi) / 2 < 0 ? "#4393c3" : "#d6604d"),
      (b) => `${fmt(b.lo)} to ${fmt(b.hi)}: ${b.count} tokens`);
    svg.style.display = "block"; svg.style.margin = "2px 0 6px";
    return svg;
  }

  function ablated(ex, scale) {
    // each symbol on the colour of its loss change: red where the latent helped predict it
    const text = h("div", { class: "dni-fd-text" });
    ex.symbols.forEach((s, i) => {
      const c = ex.change[i];
      const bg = c === null ? "transparent" : rgb(diverging(scale > 0 ? c / scale : 0));
      text.append(h("span", { class: "dni-fd-sym", title: `loss change ${fmt(c)}`, style: { background: bg } },
        s === "" ? "\u00a0" : s));
    });
    return h("div", { class: "dni-fd-example" }, h("span", { class: "dni-muted" }, `#${ex.record} `), text);
  }

  function draw() {
    const p = model.get("_payload") || {};
    root.replaceChildren();
    if (!p.title) return;
    el.querySelector(".dni-feature-dashboard").append(root);
    for (const e of p.explanation || []) {
      root.append(h("div", { class: "dni-fd-explanation" }, h("b", {}, "explanation "), `“${e.explanation}”`,
        h("span", { class: "dni-muted" }, ` score ${fmt(e.score)}`)));
    }
    const side = h("div", { class: "dni-fd-side" });
    if (p.logit_weights) {
      side.append(h("div", {}, h("b", {}, "logit weights (all tokens)"), weights(p.logit_weights)));
    }
    if ((p.nearest || []).length) {
      const rows = p.nearest.map((r) => h("tr", { class: "dni-click", onclick: () => model.send({ type: "latent", latent: r.latent }) },
        h("td", {}, fmt(r.latent)), h("td", {}, fmt(r.cosine))));
      side.append(h("div", {}, h("b", {}, "nearest latents (decoder cosine)"), h("table", { class: "dni-fd-table" }, rows)));
    }
    const main = h("div", { class: "dni-fd-main" });
    if (p.ablation) {
      const all = p.ablation.flatMap((ex) => ex.change.filter((c) => c !== null).map(Math.abs));
      const scale = Math.max(0, ...all);
      main.append(h("b", {}, "loss change when ablated"), legend(scale, "red: the latent helped"),
                  p.ablation.map((ex) => ablated(ex, scale)));
    }
    root.append(h("div", { class: "dni-fd-body", style: { display: "flex", gap: "16px" } }, main, side));
  }

  model.on("change:_payload", draw);
  draw();
  return () => { model.off("change:_payload", draw); if (stop) stop(); };
}

export default { render: renderParts };
