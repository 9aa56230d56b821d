// Charts as inline SVG, drawn here: horizontal bars (spend per group) and a sparkline (a rate over time).

import { svg } from './dom.js';

/** Horizontal bars `width` pixels wide: `items` are {label, value}; `format` writes a value. Drawn at the
 * size shown (not scaled), so text keeps the page's size on any screen. */
export function bars(items, format, width = 640) {
  const rowH = 30;
  const labelW = Math.min(170, Math.round(width * 0.32));
  const valueW = 80;
  const height = Math.max(1, items.length) * rowH + 4;
  const max = Math.max(0, ...items.map((i) => i.value)) || 1;
  const plot = width - labelW - valueW;
  const root = svg('svg', { class: 'bars', width, height, viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': 'chart' });
  items.forEach((item, i) => {
    const y = i * rowH + 4;
    const w = Math.max(2, (item.value / max) * (plot - 10));
    const room = Math.max(6, Math.floor(labelW / 7.5));
    const label = item.label.length > room ? `${item.label.slice(0, room - 1)}…` : item.label;
    root.append(
      svg('text', { x: 0, y: y + 16 }, label),
      svg('rect', { class: 'track', x: labelW, y: y + 4, width: plot - 10, height: 16, rx: 4 }),
      svg('rect', { class: 'bar', x: labelW, y: y + 4, width: w.toFixed(1), height: 16, rx: 4 }, svg('title', null, `${item.label}: ${format(item.value)}`)),
      svg('text', { class: 'value', x: width, y: y + 16, 'text-anchor': 'end' }, format(item.value)),
    );
  });
  return root;
}

/** A sparkline of `values` (oldest first), scaled to its own maximum. */
export function sparkline(values) {
  const width = 160;
  const height = 28;
  const root = svg('svg', { class: 'spark', viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: 'none', 'aria-hidden': 'true' });
  if (values.length < 2) return root;
  const max = Math.max(...values) || 1;
  const step = width / (values.length - 1);
  const points = values.map((v, i) => [i * step, height - 2 - (v / max) * (height - 4)]);
  const line = points.map(([x, y], i) => `${i ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
  root.append(svg('path', { class: 'area', d: `${line} L${width},${height} L0,${height} Z` }), svg('path', { class: 'line', d: line }));
  return root;
}
