// The language of a %%inspect cell: the magic's options line, then SQL with dni_lab's
// keywords. A plain SQL mode read the options line as SQL ("--eps none" became a comment)
// and left INSPECT, OVER and FDR plain. Here an outer parse splits the cell as the magic
// does (dni_lab.magic.split_options): the magic, its flags and their values, then the
// query, which is parsed by an SQL dialect that knows the parser's keywords.
import { NodeSet, NodeType, Parser, Tree, parseMixed } from "@lezer/common";
import { styleTags, tags as t } from "@lezer/highlight";
import { Language, LanguageSupport, defineLanguageFacet, languageDataProp } from "@codemirror/language";
import { SQLDialect, StandardSQL } from "@codemirror/lang-sql";
import { KEYWORDS, VALUED_OPTIONS } from "./keywords";

// a first line that starts with the magic (as a cell, %%inspect, or a line, %inspect)
export const MAGIC = /^(\s*)(%%?inspect)\b/;
const VALUED = new Set(VALUED_OPTIONS.split(" "));

// StandardSQL's words keep their kind (true/false/null stay literals); the parser's other
// keywords are added to them. (`dialect.words` maps each known word to its token.)
function dniDialect() {
  const words = (StandardSQL.dialect && StandardSQL.dialect.words) || {};
  const kind = (k) => Object.keys(words).filter((w) => words[w] === words[k]);
  const keywords = [...kind("select"), ...KEYWORDS.split(" ").filter((w) => !(w in words))];
  return SQLDialect.define({ keywords: keywords.join(" "), types: kind("int").join(" ") });
}

const data = defineLanguageFacet({ commentTokens: { line: "--", block: { open: "/*", close: "*/" } } });
const NAMES = ["InspectCell", "Magic", "Flag", "Value", "Number", "Query"];
const TYPES = NAMES.map((name, id) => NodeType.define({
  id, name, top: id === 0, props: id === 0 ? [[languageDataProp, data]] : [],
}));
const NODES = new NodeSet(TYPES).extend(styleTags({
  Magic: t.meta, Flag: t.attributeName, Value: t.attributeValue, Number: t.number,
}));
const type = Object.fromEntries(NODES.types.map((ty) => [ty.name, ty]));  // with their styles

// The cell's outer tree: the first line's magic, flags and values, and the query (the
// first other word of that line on, or the second line on).
export function cellTree(text) {
  const nl = text.indexOf("\n");
  const line = nl < 0 ? text : text.slice(0, nl);
  const children = [];
  const positions = [];
  const add = (ty, from, to) => { children.push(new Tree(ty, [], [], to - from)); positions.push(from); };
  let query = nl < 0 ? text.length : nl + 1;
  const m = MAGIC.exec(line);
  if (m) {
    add(type.Magic, m[1].length, m[0].length);
    const word = /\S+/g;
    word.lastIndex = m[0].length;
    let valued = false;
    for (let w; (w = word.exec(line)); ) {
      const [from, to] = [w.index, w.index + w[0].length];
      if (valued) add(/^[-+]?\d*\.?\d+(e[-+]?\d+)?$/i.test(w[0]) ? type.Number : type.Value, from, to);
      else if (w[0].startsWith("-")) add(type.Flag, from, to);
      else { query = from; break; }
      valued = !valued && VALUED.has(w[0]);
    }
  } else query = 0;
  if (query < text.length) add(type.Query, query, text.length);
  return new Tree(type.InspectCell, children, positions, text.length);
}

class CellParser extends Parser {
  constructor(sql) {
    super();
    this.mount = parseMixed((node) => (node.type === type.Query ? { parser: sql } : null));
  }

  createParse(input, fragments, ranges) {
    // the outer tree is a few nodes: built whole, in one step
    const outer = {
      parsedPos: 0,
      stoppedAt: null,
      advance() { this.parsedPos = input.length; return cellTree(input.read(0, input.length)); },
      stopAt(pos) { this.stoppedAt = pos; },
    };
    return this.mount(outer, input, fragments, ranges);
  }
}

let support = null;

// The LanguageSupport of %%inspect cells (made once).
export function inspectSql() {
  if (!support) {
    const sql = dniDialect().language;
    support = new LanguageSupport(new Language(data, new CellParser(sql.parser), [], "inspect-sql"));
  }
  return support;
}
