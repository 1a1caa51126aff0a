// SQL highlighting for dni_lab's %%inspect cells (and %inspect lines starting a cell).
// JupyterLab highlights a notebook's cells in the kernel's language (Python); a cell that
// starts with %%inspect holds an SQL query. This editor extension gives such a cell the
// SQL language from JupyterLab's own language registry (nothing bundled here), with a
// higher precedence than the notebook's, and switches back when the first line changes.
import { IEditorExtensionRegistry, IEditorLanguageRegistry, EditorExtensionRegistry } from "@jupyterlab/codemirror";
import { Compartment, Prec } from "@codemirror/state";
import { ViewPlugin } from "@codemirror/view";
import { IRenderMimeRegistry } from "@jupyterlab/rendermime";
import { patchRegistry } from "./snapshots";

const MAGIC = /^\s*%%?inspect\b/;

function isInspect(doc) {
  return MAGIC.test(doc.line(1).text);
}

function inspectSql(languages) {
  const slot = new Compartment();
  let sql = null; // the SQL LanguageSupport, loaded once
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
      const apply = () => {
        // after the current update: a view may not be reconfigured while it updates
        queueMicrotask(() => view.dispatch({ effects: slot.reconfigure(want && sql ? Prec.highest(sql) : []) }));
      };
      if (!want || sql) return apply();
      const lang = languages.findByName("sql") || languages.findByMIME("text/x-sql");
      if (!lang) return;
      languages.getLanguage(lang.name).then((found) => {
        sql = found && found.support ? found.support : null;
        if (this.on) apply();
      });
    }
  });
  return [slot.of([]), plugin];
}

const plugin = {
  id: "dni-lab-inspect-sql:plugin",
  description: "SQL highlighting for %%inspect cells",
  autoStart: true,
  requires: [IEditorExtensionRegistry, IEditorLanguageRegistry],
  activate: (app, extensions, languages) => {
    extensions.addExtension({
      name: "dni-lab:inspect-sql",
      factory: () => EditorExtensionRegistry.createImmutableExtension(inspectSql(languages)),
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
