// Saved dni_lab panels show their static snapshot where their widget cannot be drawn.
//
// Every dni_lab panel's output holds two things: the widget view
// (application/vnd.jupyter.widget-view+json) and a static HTML snapshot (text/html, a
// <div class="dni-snapshot">). In a trusted notebook JupyterLab and Notebook 7 choose the
// widget view, and once the kernel that held the widget's model is gone (a saved notebook
// reopened) its renderer says "model not found". Here, in each notebook, the renderer made
// for a widget view is wrapped: when the output also holds a dni snapshot, the snapshot
// shows until the widget renderer has a view to show (a live model: it then replaces the
// snapshot); when it never gets one (no model, no kernel), the snapshot stays. Outputs
// without a dni snapshot (any other widget) get the widget renderer's behaviour unchanged.
import { Panel } from "@lumino/widgets";

export const WIDGET_VIEW = "application/vnd.jupyter.widget-view+json";

/** The output's dni snapshot (its text/html), or null when it has none. */
export function snapshotHtml(model) {
  const html = model.data["text/html"];
  const text = Array.isArray(html) ? html.join("") : html;
  return typeof text === "string" && text.includes("dni-snapshot") ? text : null;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Whether the output's widget model is missing for good from the manager behind
 * ``renderer`` (a WidgetRenderer of @jupyter-widgets/jupyterlab-manager, whose manager is
 * its private ``_manager`` promise): the kernel that held the model is gone. As the
 * manager's own get_model does, a model gets 2 s to arrive, here counted from the end of
 * the manager's restore (a kernel restoring its widgets may still send it). "live": the
 * model is there, or this cannot be told (another renderer); "disposed": the output went. */
async function modelState(renderer, model) {
  const id = model.data[WIDGET_VIEW]?.model_id;
  const delegate = renderer._manager;
  if (!id || !delegate || !delegate.promise) return "live";
  const manager = await delegate.promise;
  if (typeof manager.has_model !== "function") return "live";
  let since = manager.restoredStatus ? Date.now() : null;
  while (!(await manager.has_model(id))) {
    if (renderer.isDisposed) return "disposed";
    if (since === null && manager.restoredStatus) since = Date.now();
    if (since !== null && Date.now() - since >= 2000) return "gone";
    await sleep(since === null ? 500 : 100);
  }
  return "live";
}

class SnapshotOrWidget extends Panel {
  constructor(registry, create, wrappers) {
    super();
    this.addClass("dni-snapshot-or-widget");
    this._registry = registry;
    this._create = create; // a renderer from the registry's current widget-view factory
    this._wrappers = wrappers;
    this._snapshot = null;
    this._model = null;
    this._observer = new MutationObserver(() => this._sync());
    this._setWidget();
    wrappers.add(this);
  }

  /** Whether the widget renderer holds a view (it is a Panel; the view is its child). */
  get live() {
    return this._widget.widgets.length > 0;
  }

  async renderModel(model) {
    this._model = model;
    if (this.live || snapshotHtml(model) === null) {
      this._dropSnapshot();
      return this._widget.renderModel(model);
    }
    if (!this._snapshot) {
      this._snapshot = this._registry.createRenderer("text/html");
      // as the output area marks the text/html it draws itself: JupyterLab's rule for
      // rendered HTML centres tables, the output area's keeps them left under their title
      this._snapshot.addClass("jp-OutputArea-output");
      this.insertWidget(0, this._snapshot);
    }
    this._widget.hide();
    await this._snapshot.renderModel(model);
    // not awaited: without a kernel the widget renderer waits for its manager forever
    this._widget.renderModel(model).catch((err) => console.error(err));
  }

  /** The registry's widget-view factory changed (the widget manager registers its own
   * once the kernel is ready; outputs drawn before that got a placeholder renderer without
   * a manager, which the manager finds only as a direct child of an output): draw again
   * with the new factory's renderer. */
  rebind() {
    const factory = this._registry.getFactory(WIDGET_VIEW);
    if (!factory || factory === this._factory || this.live) return;
    const old = this._widget;
    this._setWidget();
    old.dispose();
    if (this._model) this.renderModel(this._model).catch((err) => console.error(err));
  }

  dispose() {
    if (this.isDisposed) return;
    this._observer.disconnect();
    this._wrappers.delete(this);
    super.dispose();
  }

  _setWidget() {
    this._factory = this._registry.getFactory(WIDGET_VIEW);
    this._widget = this._create();
    // The widget renderer logs "widget model not found" as an error once its manager is
    // restored without the model. Beside a snapshot that is the expected case, not an
    // error: ask the manager first, and leave the snapshot standing.
    const widget = this._widget;
    const render = widget.renderModel.bind(widget);
    widget.renderModel = async (model) => {
      if (snapshotHtml(model) !== null) {
        const state = await modelState(widget, model);
        if (state === "disposed") return;
        if (state === "gone") {
          this.node.dataset.widget = "gone"; // no live model: the snapshot stays
          return;
        }
      }
      return render(model);
    };
    this._observer.disconnect();
    this._observer.observe(this._widget.node, { childList: true });
    if (this._snapshot) this._widget.hide();
    this.addWidget(this._widget);
  }

  _sync() {
    if (this.live) this._dropSnapshot();
  }

  _dropSnapshot() {
    if (this._snapshot) {
      this._snapshot.dispose();
      this._snapshot = null;
    }
    this._widget.show();
  }
}

/** Wrap the widget-view renderers that ``registry`` creates, and those of its clones
 * (each notebook draws its outputs with a clone of the application's registry, made
 * before any output is drawn). */
export function patchRegistry(registry) {
  if (registry.__dniSnapshots) return;
  const wrappers = new Set();
  registry.__dniSnapshots = wrappers;
  const create = registry.createRenderer.bind(registry);
  const addFactory = registry.addFactory.bind(registry);
  const clone = registry.clone.bind(registry);
  registry.clone = (options) => {
    const copy = clone(options);
    patchRegistry(copy);
    return copy;
  };
  registry.createRenderer = (mimeType) =>
    mimeType === WIDGET_VIEW
      ? new SnapshotOrWidget(registry, () => create(WIDGET_VIEW), wrappers)
      : create(mimeType);
  registry.addFactory = (factory, rank) => {
    addFactory(factory, rank);
    if (factory.mimeTypes.includes(WIDGET_VIEW)) [...wrappers].forEach((w) => w.rebind());
  };
}
