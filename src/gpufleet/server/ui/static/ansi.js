// A log line's ANSI colours as spans: SGR sequences (ESC [ … m) set classes, every other
// escape sequence is dropped. Text goes in as text nodes only, never as HTML, so a line
// holding markup shows that markup as typed.
const ESCAPE = /\x1b(?:\[([0-?]*)[ -\/]*([@-~])|[@-Z\\-_])/g;

function applySgr(style, params) {
  const codes = params === "" ? [0] : params.split(/[;:]/).map(Number);
  for (let i = 0; i < codes.length; i += 1) {
    const c = codes[i];
    if (c === 0) Object.assign(style, { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false });
    else if (c === 1) style.bold = true;
    else if (c === 2) style.dim = true;
    else if (c === 3) style.italic = true;
    else if (c === 4) style.underline = true;
    else if (c === 22) style.bold = style.dim = false;
    else if (c === 23) style.italic = false;
    else if (c === 24) style.underline = false;
    else if (c >= 30 && c <= 37) style.fg = c - 30;
    else if (c >= 90 && c <= 97) style.fg = c - 90 + 8;
    else if (c === 39) style.fg = null;
    else if (c >= 40 && c <= 47) style.bg = c - 40;
    else if (c >= 100 && c <= 107) style.bg = c - 100 + 8;
    else if (c === 49) style.bg = null;
    else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
      const n = codes[i + 2];
      if (n >= 0 && n < 16) style[c === 38 ? "fg" : "bg"] = n; // the 16 named colours
      i += 2;
    } else if ((c === 38 || c === 48) && codes[i + 1] === 2) i += 4; // true colour: not drawn
  }
}

function classes(style) {
  const out = [];
  if (style.fg !== null) out.push(`ansi-fg-${style.fg}`);
  if (style.bg !== null) out.push(`ansi-bg-${style.bg}`);
  for (const name of ["bold", "dim", "italic", "underline"]) if (style[name]) out.push(`ansi-${name}`);
  return out.join(" ");
}

// The line's text as nodes: plain text as it is, coloured runs in <span class="ansi-…">.
export function ansiNodes(text) {
  if (!text.includes("\x1b")) return [text];
  const nodes = [];
  const style = { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false };
  let at = 0;
  const push = (part) => {
    if (!part) return;
    const cls = classes(style);
    if (!cls) return nodes.push(document.createTextNode(part));
    const el = document.createElement("span");
    el.className = cls;
    el.textContent = part;
    nodes.push(el);
  };
  for (const m of text.matchAll(ESCAPE)) {
    push(text.slice(at, m.index));
    if (m[2] === "m" && /^[0-9;:]*$/.test(m[1])) applySgr(style, m[1]);
    at = m.index + m[0].length;
  }
  push(text.slice(at));
  return nodes;
}
