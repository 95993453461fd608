// Building the page from API data, safely: every string becomes a text node or an attribute
// value set through the DOM, never parsed as markup (no HTML-string APIs anywhere in the console).

const SVG = "http://www.w3.org/2000/svg";

// h("td", {class: "num"}, "42", otherNode): an element; string and number children are text.
export function h(tag, attrs = {}, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

export function s(tag, attrs = {}, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(element, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      element.addEventListener(name.slice(2), value);
    } else if (name.startsWith("on")) {
      throw new Error(`event handler ${name} must be a function`);
    } else {
      element.setAttribute(name, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

export function $(id) {
  return document.getElementById(id);
}

export function clear(element) {
  element.replaceChildren();
}

// A message region (role=alert or status): its text, or nothing.
export function say(element, text) {
  element.textContent = text || "";
}

// A table body from rows of cells; `empty` when there are none.
export function fillTable(tbody, rows, empty, columns) {
  clear(tbody);
  if (!rows.length) {
    tbody.append(h("tr", {}, h("td", {class: "empty", colspan: columns}, empty)));
    return;
  }
  for (const cells of rows) tbody.append(h("tr", {}, cells));
}

// An inline confirmation in place of `anchor`'s children: the question, then Yes and Cancel.
export function confirmInline(anchor, question, yesLabel, onYes) {
  const previous = [...anchor.childNodes];
  const restore = () => { anchor.replaceChildren(...previous); previous[0]?.focus?.(); };
  const yes = h("button", {type: "button", class: "danger", onclick: () => { restore(); onYes(); }}, yesLabel);
  const no = h("button", {type: "button", class: "secondary", onclick: restore}, "Cancel");
  anchor.replaceChildren(h("span", {class: "confirm", role: "group", "aria-label": question}, question, yes, no));
  yes.focus();
}

export function formatNumber(value, digits = 0) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return Number(value).toLocaleString("en-US", {maximumFractionDigits: digits, minimumFractionDigits: 0});
}

export function formatDuration(seconds) {
  if (!Number.isFinite(seconds) || seconds < 0) return "–";
  const d = Math.floor(seconds / 86400), hr = Math.floor(seconds % 86400 / 3600);
  const m = Math.floor(seconds % 3600 / 60), sec = Math.floor(seconds % 60);
  if (d) return `${d}d ${hr}h ${m}m`;
  if (hr) return `${hr}h ${m}m ${sec}s`;
  if (m) return `${m}m ${sec}s`;
  return `${sec}s`;
}
