// Shared by the two pages: fetch JSON from the plugin's API (the browser sends Airflow's session cookie),
// escape text, and refresh on a timer: the next request only once the last one answered (or gave up).
"use strict";
const DISTTRAIN_REFRESH_MS = 5000;
// The server answers within its own bound ([disttrain] ui_request_timeout); this one is the browser's.
const DISTTRAIN_FETCH_TIMEOUT_MS = 60000;

async function disttrainFetch(path) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), DISTTRAIN_FETCH_TIMEOUT_MS);
  let response;
  try {
    response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" }, signal: abort.signal });
  } catch (error) {
    throw new Error(abort.signal.aborted ? "no answer within 60 s" : String(error.message || error));
  } finally {
    clearTimeout(timer);
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error(typeof body.detail === "string" ? body.detail : `HTTP ${response.status}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function seconds(value) {
  if (value === null || value === undefined) return "";
  const s = Math.round(value);
  return s >= 3600 ? `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min` : s >= 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s} s`;
}

function stateBadge(state) {
  return `<span class="state state-${esc(state)}" data-testid="state">${esc(state)}</span>`;
}

// Airflow shows these pages in a sandboxed frame, which may not navigate the window: a link to a page of
// Airflow's UI (data-airflow-route) is followed by the (same-origin) window's own router, through its history.
document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-airflow-route]");
  if (!link || window.top === window) return;
  event.preventDefault();
  window.top.history.pushState(null, "", link.getAttribute("href"));
  window.top.dispatchEvent(new PopStateEvent("popstate"));
});

function taskInstanceHref(dagId, runId, taskId, mapIndex, regionId, regionIndex) {
  const mapped = mapIndex >= 0 ? `/mapped/${mapIndex}` : "";
  // Airflow 3.4 names an iteration of a Task Loop by region_id and region_index in the query string.
  const region = regionId ? `?${new URLSearchParams({region_id: regionId, region_index: String(regionIndex)})}` : "";
  return `/dags/${encodeURIComponent(dagId)}/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(taskId)}${mapped}${region}`;
}

// The Task Loop iteration (Airflow 3.4) of the task instance page this tab is framed in: its URL's
// region_id and region_index, which the tab's URL template cannot carry. None outside a loop.
function framingRegion() {
  let search = "";
  try { search = window.top.location.search; } catch (error) { return null; }  // framed elsewhere
  const params = new URLSearchParams(search);
  const regionId = params.get("region_id"), regionIndex = params.get("region_index");
  return regionId && /^\d+$/.test(regionIndex || "") ? {regionId, regionIndex} : null;
}

function gpuHours(gpuSeconds) {
  return typeof gpuSeconds === "number" ? (gpuSeconds / 3600).toFixed(2) : "";
}

// A queued job's wait ({position, estimate_seconds, explanation}), as one short line.
function waitText(wait) {
  if (!wait) return "";
  const position = wait.position !== null && wait.position !== undefined ? `position ${wait.position}` : "position unknown";
  const estimate = typeof wait.estimate_seconds === "number" ? `starts in about ${seconds(wait.estimate_seconds)}` : "no estimate";
  return `${position}, ${estimate}`;
}

// Airflow 3's UI keeps its colour mode as the class "light" or "dark" of its <html> (next-themes), and
// frames these pages same-origin: follow that class (and its changes), else the system's preference.
function airflowColorMode() {
  try {
    if (window.top === window) return null;
    const classes = window.top.document.documentElement.classList;
    return classes.contains("dark") ? "dark" : classes.contains("light") ? "light" : null;
  } catch (error) {
    return null;  // framed by another origin
  }
}

function followTheme() {
  const root = document.documentElement;
  if (!root) return;
  const system = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  const apply = () => { root.dataset.theme = airflowColorMode() || (system && system.matches ? "dark" : "light"); };
  apply();
  if (system && system.addEventListener) system.addEventListener("change", apply);
  if (airflowColorMode()) new MutationObserver(apply).observe(window.top.document.documentElement, { attributes: true, attributeFilter: ["class"] });
}
followTheme();
