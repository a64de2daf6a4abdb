// The tab's chart of the trainer's metrics over time, drawn as inline SVG: one small chart per metric
// (loss and accuracy have scales of their own), each point a circle carrying its time and value.
// Inline SVG rather than a chart library: these ~80 lines draw what the tab needs (a line and its points
// per metric, two axis labels each) where uPlot, the smallest well-kept one, is ~50 kB minified to vendor,
// pin and update; the colours are the page's CSS variables, so the chart follows the theme like the rest.
"use strict";
const CHART_WIDTH = 360;
const CHART_HEIGHT = 150;
const CHART_PAD = { left: 56, right: 12, top: 12, bottom: 26 };

// The API's points ({t: epoch seconds, values: {name: number}}, oldest first) as one series per metric,
// in the order the metrics first appear: [{name, points: [[t, value], ...]}]. Non-numbers are left out.
function chartSeries(points) {
  const byName = new Map();
  for (const point of points || []) {
    if (typeof point.t !== "number" || !Number.isFinite(point.t)) continue;
    for (const [name, value] of Object.entries(point.values || {})) {
      if (typeof value !== "number" || !Number.isFinite(value)) continue;
      if (!byName.has(name)) byName.set(name, []);
      byName.get(name).push([point.t, value]);
    }
  }
  return [...byName].map(([name, series]) => ({ name, points: series.sort((a, b) => a[0] - b[0]) }));
}

// Where a series' points land in the chart's box: [[x, y], ...] in SVG units (y grows downwards), the
// time axis from t0 to t1 (every chart of the tab shares it, so they line up). One time or one value
// only: the points sit in the middle of that axis.
function chartLayout(points, t0, t1) {
  const values = points.map(([, v]) => v);
  const [v0, v1] = [Math.min(...values), Math.max(...values)];
  const width = CHART_WIDTH - CHART_PAD.left - CHART_PAD.right;
  const height = CHART_HEIGHT - CHART_PAD.top - CHART_PAD.bottom;
  const x = (t) => CHART_PAD.left + (t1 > t0 ? ((t - t0) / (t1 - t0)) * width : width / 2);
  const y = (v) => CHART_PAD.top + (v1 > v0 ? ((v1 - v) / (v1 - v0)) * height : height / 2);
  return { xy: points.map(([t, v]) => [x(t), y(v)]), t0, t1, v0, v1 };
}

function chartNumber(value) {
  return Number(value.toPrecision(4)).toString();
}

function chartSvg(series, t0, t1) {
  const { xy, v0, v1 } = chartLayout(series.points, t0, t1);
  const bottom = CHART_HEIGHT - CHART_PAD.bottom, right = CHART_WIDTH - CHART_PAD.right;
  const line = xy.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
  const dots = series.points.map(([t, v], i) => `<circle class="chart-point" r="3" cx="${xy[i][0].toFixed(1)}" cy="${xy[i][1].toFixed(1)}"
      data-t="${esc(t)}" data-value="${esc(v)}"><title>${esc(series.name)} ${esc(chartNumber(v))} at ${esc(new Date(t * 1000).toISOString())}</title></circle>`).join("");
  return `<figure class="chart" data-metric="${esc(series.name)}"><figcaption>${esc(series.name)}</figcaption>
    <svg viewBox="0 0 ${CHART_WIDTH} ${CHART_HEIGHT}" width="${CHART_WIDTH}" height="${CHART_HEIGHT}" role="img" aria-label="${esc(series.name)} over time">
    <line class="chart-axis" x1="${CHART_PAD.left}" y1="${CHART_PAD.top}" x2="${CHART_PAD.left}" y2="${bottom}"/>
    <line class="chart-axis" x1="${CHART_PAD.left}" y1="${bottom}" x2="${right}" y2="${bottom}"/>
    <text class="chart-label" x="${CHART_PAD.left - 4}" y="${CHART_PAD.top + 4}" text-anchor="end">${esc(chartNumber(v1))}</text>
    <text class="chart-label" x="${CHART_PAD.left - 4}" y="${bottom}" text-anchor="end">${esc(chartNumber(v0))}</text>
    <text class="chart-label" x="${CHART_PAD.left}" y="${CHART_HEIGHT - 8}">0 s</text>
    <text class="chart-label" x="${right}" y="${CHART_HEIGHT - 8}" text-anchor="end">${esc(seconds(t1 - t0) || "0 s")}</text>
    ${series.points.length > 1 ? `<polyline class="chart-line" points="${line}"/>` : ""}${dots}</svg></figure>`;
}

// The tab's "Metrics" section for the API's chart ({points, source}); "" when there is nothing to draw.
function renderChart(chart) {
  const series = chartSeries(chart && chart.points);
  if (!series.length) return "";
  const times = series.flatMap((s) => s.points.map(([t]) => t));
  const [t0, t1] = [Math.min(...times), Math.max(...times)];
  return `<h3>Metrics over time</h3><div class="charts" data-testid="chart">${series.map((s) => chartSvg(s, t0, t1)).join("")}</div>
    <p class="muted">${esc(chart.points.length)} report(s) from ${esc(chart.source)}; time since the first.</p>`;
}
