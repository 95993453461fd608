// A small line chart in SVG, drawn with DOM calls (no library, nothing inline to allow).
//
// lineChart(container, {series: [{name, points: [[x, y or null], ...]}], xFormat, yFormat, label})
// x and y are numbers; a null y leaves a gap. The container gets the <svg> (role=img, its
// aria-label a short summary) and a legend naming each series in text.

import {h, s} from "./dom.js";

const WIDTH = 640, HEIGHT = 240;
const PAD = {left: 56, right: 16, top: 12, bottom: 28};
const COLORS = 8;  // .s0 ... .s7 in console.css

export function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 4, 6, 8, 10]) {  // a quarter of each is round too
    if (value <= step * power) return step * power;
  }
  return 10 * power;
}

export function lineChart(container, {series, xFormat = String, yFormat = String, label = "chart", xDomain}) {
  const xs = series.flatMap((one) => one.points.map(([x]) => x));
  const ys = series.flatMap((one) => one.points.map(([, y]) => y)).filter((y) => y !== null && Number.isFinite(y));
  const svg = s("svg", {viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": summary(label, series, yFormat),
                        preserveAspectRatio: "xMidYMid meet"});
  const legend = h("ul", {class: "legend"});
  container.replaceChildren(svg, legend);
  const plotW = WIDTH - PAD.left - PAD.right, plotH = HEIGHT - PAD.top - PAD.bottom;
  svg.append(s("line", {class: "axis", x1: PAD.left, y1: PAD.top + plotH, x2: PAD.left + plotW, y2: PAD.top + plotH}));
  if (!xs.length || !ys.length) {
    svg.append(s("text", {class: "empty", x: WIDTH / 2, y: HEIGHT / 2, "text-anchor": "middle"}, "no data yet"));
    return svg;
  }
  const [x0, x1] = xDomain || [Math.min(...xs), Math.max(...xs)];
  const yMax = niceMax(Math.max(...ys));
  const px = (x) => PAD.left + (x1 === x0 ? plotW / 2 : ((x - x0) / (x1 - x0)) * plotW);
  const py = (y) => PAD.top + plotH - (y / yMax) * plotH;
  for (let i = 0; i <= 4; i++) {
    const value = (yMax * i) / 4;
    svg.append(s("line", {class: "grid-line", x1: PAD.left, x2: PAD.left + plotW, y1: py(value), y2: py(value)}));
    svg.append(s("text", {x: PAD.left - 6, y: py(value) + 4, "text-anchor": "end"}, yFormat(value)));
  }
  const ticks = x1 === x0 ? [x0] : [0, 1, 2, 3, 4].map((i) => x0 + ((x1 - x0) * i) / 4);
  ticks.forEach((x, i) => {
    const anchor = ticks.length === 1 ? "middle" : i === 0 ? "start" : i === ticks.length - 1 ? "end" : "middle";
    svg.append(s("text", {x: px(x), y: HEIGHT - 8, "text-anchor": anchor}, xFormat(x)));
  });
  series.forEach((one, index) => {
    const color = `s${index % COLORS}`;
    let path = "", pen = false, drawn = 0;
    for (const [x, y] of one.points) {
      if (y === null || !Number.isFinite(y)) { pen = false; continue; }
      path += `${pen ? "L" : "M"}${px(x).toFixed(1)},${py(y).toFixed(1)} `;
      pen = true;
      drawn += 1;
    }
    if (path) svg.append(s("path", {class: `line ${color}`, d: path.trim(), "data-series": one.name}));
    if (drawn === 1 || one.points.length <= 40) {  // a lone point (or a few) shows as dots
      for (const [x, y] of one.points) {
        if (y !== null && Number.isFinite(y)) svg.append(s("circle", {class: `dot ${color}`, cx: px(x), cy: py(y), r: 3}));
      }
    }
    legend.append(h("li", {}, h("span", {class: `swatch ${color}`, "aria-hidden": "true"}), one.name));
  });
  return svg;
}

function summary(label, series, yFormat) {
  const parts = series.map((one) => {
    const values = one.points.map(([, y]) => y).filter((y) => y !== null && Number.isFinite(y));
    if (!values.length) return `${one.name}: no data`;
    return `${one.name}: latest ${yFormat(values[values.length - 1])}, highest ${yFormat(Math.max(...values))}`;
  });
  return `${label}. ${parts.join("; ") || "no data"}`;
}
