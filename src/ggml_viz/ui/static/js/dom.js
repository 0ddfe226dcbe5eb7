// Building the page's small DOM trees. Every string from a run (tensor names, token text,
// paths) goes in as text, never as HTML.

// h("div", {class, text, onclick, dataset, ...attributes}, ...children): an element. A child
// or attribute that is null, undefined or false is left out.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

// An element's children set (setChildren) or added to (addChildren) as h() takes them: a part
// left out (`cond ? h(...) : null`) adds nothing, where the DOM's own replaceChildren and
// append would write the text "null" into the page.
const present = (children) =>
  children.flat().filter((child) => child !== null && child !== undefined && child !== false);
export function setChildren(el, ...children) {
  el.replaceChildren(...present(children));
}
export function addChildren(el, ...children) {
  el.append(...present(children));
}

const SVG_NS = "http://www.w3.org/2000/svg";

// s("rect", {...attributes}, ...children): an SVG element.
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs))
    if (value !== undefined && value !== null) el.setAttribute(key, String(value));
  for (const child of children.flat())
    if (child !== null && child !== undefined)
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}
