// Image overlay: each image drawn at a pixel-exact scale, the unit's map blended on
// top with the diverging colour map, the hypothesis mask's boundary outlined.
// Pixels arrive as bytes: _images (RGB uint8), _maps (float32), _masks (uint8).

const CELL = 168; // target cell width in CSS pixels

function drawCell(canvas, cell, rgbBytes, rgbOff, map, mapOff, mask, maskOff, scale, alpha) {
  const { h: H, w: W } = cell;
  const s = Math.max(1, Math.floor(CELL / Math.max(W, H)));
  canvas.width = W * s;
  canvas.height = H * s;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(W, H);
  for (let p = 0; p < W * H; p++) {
    let r = rgbBytes[rgbOff + 3 * p], g = rgbBytes[rgbOff + 3 * p + 1], b = rgbBytes[rgbOff + 3 * p + 2];
    if (map) {
      // Tint by strength: a pixel where the unit is quiet keeps the image's own colour,
      // a strong one takes the map's colour fully (a uniform blend washed everything out).
      const t = map[mapOff + p] / scale;
      const c = diverging(t);
      const a = Number.isFinite(t) ? alpha * Math.min(1, Math.sqrt(Math.abs(t))) : 0;
      r = r * (1 - a) + c[0] * a; g = g * (1 - a) + c[1] * a; b = b * (1 - a) + c[2] * a;
    }
    img.data.set([r, g, b, 255], 4 * p);
  }
  // draw at 1:1 on a scratch canvas, then scale without smoothing: crisp grid cells
  const tmp = document.createElement("canvas");
  tmp.width = W; tmp.height = H;
  tmp.getContext("2d").putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, 0, 0, W * s, H * s);
  if (!mask) return;
  // outline: an edge between a mask pixel and a non-mask neighbour (or the border)
  const inside = (y, x) => y >= 0 && x >= 0 && y < H && x < W && mask[maskOff + y * W + x] > 0;
  ctx.strokeStyle = "#111";
  ctx.lineWidth = Math.max(1.5, s / 6);
  ctx.beginPath();
  for (let y = 0; y < H; y++) for (let x = 0; x < W; x++) {
    if (!inside(y, x)) continue;
    if (!inside(y - 1, x)) { ctx.moveTo(x * s, y * s); ctx.lineTo((x + 1) * s, y * s); }
    if (!inside(y + 1, x)) { ctx.moveTo(x * s, (y + 1) * s); ctx.lineTo((x + 1) * s, (y + 1) * s); }
    if (!inside(y, x - 1)) { ctx.moveTo(x * s, y * s); ctx.lineTo(x * s, (y + 1) * s); }
    if (!inside(y, x + 1)) { ctx.moveTo((x + 1) * s, y * s); ctx.lineTo((x + 1) * s, (y + 1) * s); }
  }
  ctx.stroke();
}

function render({ model, el }) {
  const root = h("div", { class: "dni-panel dni-image-overlay" });
  el.append(root);
  const bar = h("div", { class: "dni-bar" });
  const grid = h("div", { class: "dni-grid" });
  const foot = h("div", { class: "dni-bar" });
  root.append(bar, grid, foot);

  function setOrder(o) { setTraits(model, { _order: o, _page_index: 0 }); }

  function draw() {
    const lay = model.get("_layout") || {};
    const order = lay.order || "index";
    const ob = (o, label) => h("button", { class: "dni-btn" + (order === o ? " dni-on" : ""),
      "data-order": o, onclick: () => setOrder(o) }, label);
    const opacity = h("input", { type: "range", min: 0, max: 1, step: 0.05, value: model.get("opacity"),
      title: "map opacity", oninput: () => setTraits(model, { opacity: Number(opacity.value) }) });
    bar.replaceChildren(
      h("span", { class: "dni-title" }, "Unit map"),
      h("span", { class: "dni-unit-label" }, lay.unit || "no unit selected"),
      lay.hid ? h("span", { class: "dni-muted" }, `mask: ${lay.hid}`) : null,
      lay.has_map ? legend(lay.scale, "") : null,
      ob("index", "record order"), ob("top", "top activating"), opacity,
    );
    if (lay.error) bar.append(h("div", { class: "dni-error", style: { flexBasis: "100%" } }, lay.error));
    drawGrid();
    foot.replaceChildren(
      pager(lay.page || 0, lay.n_pages || 1, (i) => setTraits(model, { _page_index: i })),
      h("span", { class: "dni-muted" }, `${fmt(lay.n_records || 0)} images`),
    );
    stamp(root, lay.sent_at);
  }

  // Separate from draw(): dragging the opacity slider redraws the images only.
  function drawGrid() {
    const lay = model.get("_layout") || {};
    const rgbBytes = bytes(model.get("_images"));
    const map = lay.has_map ? floats(model.get("_maps")) : null;
    const mask = lay.has_mask ? bytes(model.get("_masks")) : null;
    let rgbOff = 0, pxOff = 0;
    grid.replaceChildren(...(lay.cells || []).map((cell) => {
      const canvas = h("canvas", { "data-index": cell.index });
      drawCell(canvas, cell, rgbBytes, rgbOff, map, pxOff, mask, pxOff, lay.scale || 1, model.get("opacity"));
      rgbOff += 3 * cell.w * cell.h;
      pxOff += cell.w * cell.h;
      return h("div", { class: "dni-cell" }, canvas,
        h("span", { class: "dni-muted" }, `#${cell.index}` + (cell.peak !== undefined ? ` · max ${fmt(cell.peak, 2)}` : "")));
    }));
  }

  model.on("change:_layout", draw);
  model.on("change:opacity", drawGrid);
  draw();
  return () => { model.off("change:_layout", draw); model.off("change:opacity", drawGrid); };
}

export default { render };
