// SQL highlighting for dni_lab's %%inspect cells (and %inspect lines starting a cell).
// JupyterLab highlights a notebook's cells in the kernel's language (Python); a cell that
// starts with %%inspect holds the magic's options and an SQL query. This editor extension
// gives such a cell the %%inspect language (./inspect_sql.js: the options line, then SQL
// with dni_lab's keywords), with a higher precedence than the notebook's, and switches
// back when the first line changes.
import { IEditorExtensionRegistry, EditorExtensionRegistry } from "@jupyterlab/codemirror";
import { Compartment, Prec } from "@codemirror/state";
import { ViewPlugin } from "@codemirror/view";
import { IRenderMimeRegistry } from "@jupyterlab/rendermime";
import { MAGIC, inspectSql } from "./inspect_sql";
import { patchRegistry } from "./snapshots";

function isInspect(doc) {
  return MAGIC.test(doc.line(1).text);
}

function inspectCells() {
  const slot = new Compartment();
  const plugin = ViewPlugin.fromClass(class {
    constructor(view) {
      this.on = false;
      this.sync(view);
    }
    update(update) {
      if (update.docChanged) this.sync(update.view);
    }
    sync(view) {
      const want = isInspect(view.state.doc);
      if (want === this.on) return;
      this.on = want;
      // after the current update: a view may not be reconfigured while it updates
      queueMicrotask(() => view.dispatch({ effects: slot.reconfigure(want ? Prec.highest(inspectSql()) : []) }));
    }
  });
  return [slot.of([]), plugin];
}

const plugin = {
  id: "dni-lab-inspect-sql:plugin",
  description: "SQL highlighting for %%inspect cells",
  autoStart: true,
  requires: [IEditorExtensionRegistry],
  activate: (app, extensions) => {
    extensions.addExtension({
      name: "dni-lab:inspect-sql",
      factory: () => EditorExtensionRegistry.createImmutableExtension(inspectCells()),
    });
  },
};

// dni_lab panels of a saved notebook show their snapshot where the widget cannot be drawn
const snapshots = {
  id: "dni-lab-inspect-sql:snapshots",
  description: "Static snapshots for dni_lab panels whose widget model is gone",
  autoStart: true,
  requires: [IRenderMimeRegistry],
  activate: (app, rendermime) => patchRegistry(rendermime),
};

export default [plugin, snapshots];
