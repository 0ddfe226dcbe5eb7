// Pieces every view uses: the tooltip, the message box, canvases at the screen's pixel
// ratio, legends, horizontal bars and key-value lists. The page's own elements (#tooltip,
// #lens, #message) are looked up when first used, so that importing this draws nothing.

import { opColor } from "./colors.js";
import { h, setChildren } from "./dom.js";

export const tooltip = {
  get el() {
    return document.getElementById("tooltip");
  },
  // `arrow`: a tooltip below (x, y) pointing up at it, for segments on a strip.
  show(x, y, title, lines = [], arrow = false) {
    const el = this.el;
    setChildren(el, h("div", { class: "t-title", text: title }), ...lines.map((line) => h("div", { text: line })));
    el.classList.toggle("arrow", arrow);
    el.hidden = false;
    const { left, top } = tooltipPlace(x, y, el.offsetWidth, el.offsetHeight, innerWidth, innerHeight, arrow);
    el.style.left = left + "px";
    el.style.top = top + "px";
  },
  hide() {
    this.el.hidden = true;
  },
};

// Where a width x height tooltip for (x, y) goes in a viewWidth x viewHeight window: beside
// the cursor (or below it, with an arrow), kept inside the window.
export function tooltipPlace(x, y, width, height, viewWidth, viewHeight, arrow = false) {
  let left = arrow ? x - 18 : x + 14,
    top = y + 14;
  if (left + width > viewWidth - 4) left = viewWidth - width - 4;
  if (top + height > viewHeight - 4) top = y - height - 10;
  return { left: Math.max(4, left), top: Math.max(4, top) };
}

export function lens() {
  return document.getElementById("lens");
}

export function showMessage(text, seconds = 4) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.hidden = false;
  clearTimeout(showMessage.timer);
  showMessage.timer = setTimeout(() => (box.hidden = true), seconds * 1000);
}

// The one base of every canvas: its backing store sized to its CSS box at the screen's pixel
// ratio, and a context that draws in CSS pixels.
export function setupCanvas(canvas) {
  const ratio = devicePixelRatio || 1;
  const rect = canvas.getBoundingClientRect();
  const width = Math.max(1, Math.round(rect.width)),
    height = Math.max(1, Math.round(rect.height));
  if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
    canvas.width = width * ratio;
    canvas.height = height * ratio;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return { ctx, width, height };
}

// A canvas element of a CSS size ("100%", "140px").
export function sizedCanvas(testid, width, height) {
  const canvas = h("canvas", { "data-testid": testid });
  canvas.style.width = width;
  canvas.style.height = height;
  return canvas;
}

export function swatch(color) {
  const el = h("span", { class: "swatch" });
  el.style.background = color;
  return el;
}

export function legend(ops) {
  return h(
    "div",
    { class: "legend", "data-testid": "legend" },
    ops.map((op) => h("span", {}, swatch(opColor(op, ops)), op))
  );
}

export function hbar(label, fraction, value, color) {
  const fill = h("div", { class: "fill" });
  fill.style.width = Math.max(0.5, 100 * fraction) + "%";
  fill.style.background = color;
  return h(
    "div",
    { class: "hbar" },
    h("span", { class: "label", title: label, text: label }),
    h("div", { class: "track" }, fill),
    h("span", { class: "value", text: value })
  );
}

// A <dl> entry: key and value (undefined: "—").
export const kv = (key, value) => [
  h("dt", { text: key }),
  h("dd", { text: value === undefined ? "—" : String(value) }),
];
