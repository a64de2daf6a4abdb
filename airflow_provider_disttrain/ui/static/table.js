// The Training jobs page's table in the browser: sort by a column, filter, page. Client side, over the
// rows the (bounded) listing returned; pure functions, so node tests them without a DOM.
"use strict";
const JOB_COLUMNS = [
  { key: "kind", title: "Kind" },
  { key: "namespace", title: "Namespace" },
  { key: "name", title: "Name" },
  { key: "state", title: "State" },
  { key: "queue", title: "Queue" },
  { key: "gpus_held", title: "GPUs now" },
  { key: "gpu_seconds", title: "GPU-hours" },
  { key: "queued_seconds", title: "Queued" },
  { key: "running_seconds", title: "Running" },
  { key: "wait", title: "Wait" },
  { key: "task", title: "Task instance" },
];

// What a column sorts a row by: a number, a string, or null (no value: always last).
function sortValue(row, key) {
  if (key === "wait") return row.wait ? row.wait.estimate_seconds ?? null : null;
  if (key === "task") {
    const ti = row.task_instance || {};
    return `${ti.dag_id ?? ""} / ${ti.task_id ?? ""} ${String(ti.map_index ?? -1).padStart(6, "0")}`;
  }
  const value = row[key];
  return value === undefined || value === "" ? null : value;
}

function compareValues(a, b) {
  if (typeof a === "number" && typeof b === "number") return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

// The rows sorted by ``key`` (descending if asked), rows without a value last either way; ties keep
// the listing's order (by namespace and name), so a refresh does not shuffle them.
function sortRows(rows, key, descending) {
  return rows
    .map((row, index) => ({ row, index, value: sortValue(row, key) }))
    .sort((a, b) => {
      if (a.value === null || b.value === null) return (a.value === null) - (b.value === null) || a.index - b.index;
      return (descending ? -1 : 1) * compareValues(a.value, b.value) || a.index - b.index;
    })
    .map(({ row }) => row);
}

// The rows whose DAG id, task id, job name or namespace contain every word of ``text`` (any case),
// in ``state`` if one is given.
function filterRows(rows, text, state) {
  const words = String(text || "").toLowerCase().split(/\s+/).filter(Boolean);
  return rows.filter((row) => {
    if (state && row.state !== state) return false;
    const ti = row.task_instance || {};
    const haystack = [ti.dag_id, ti.task_id, row.name, row.namespace].map((v) => String(v ?? "").toLowerCase()).join("\n");
    return words.every((word) => haystack.includes(word));
  });
}

// Page ``page`` (0-based, clamped to the pages there are) of ``size`` rows.
function pageOf(rows, page, size) {
  const pages = Math.max(1, Math.ceil(rows.length / size));
  const current = Math.min(Math.max(0, page), pages - 1);
  return { rows: rows.slice(current * size, (current + 1) * size), page: current, pages, total: rows.length };
}
