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
