// Runs one of the UI's pages in node with a stub DOM and fetch: prints what the page shows and how many
// requests it made. argv: page file, JSON answer ("hang": a request never answered), timer ticks to run.
"use strict";
const fs = require("fs");
const path = require("path");
const vm = require("vm");
const [page, answer, ticks] = process.argv.slice(2);
const statics = path.join(__dirname, "../../../airflow_provider_disttrain/ui/static");
const html = fs.readFileSync(path.join(statics, page), "utf8");
const elements = {};
const element = (id) => (elements[id] ??= { id, innerHTML: "", textContent: "", className: "", addEventListener() {} });
const timers = [];
let requests = 0;
const context = {
  document: { getElementById: element, addEventListener() {} },
  window: {},
  location: { pathname: "/disttrain/task-instance/etl/r1/train/-1" },
  URLSearchParams,
  FormData: class { [Symbol.iterator]() { return [][Symbol.iterator](); } },
  AbortController,
  setTimeout: (callback) => timers.push(callback),
  clearTimeout() {},
  setInterval: (callback) => timers.push(callback, callback, callback),
  fetch: () => {
    requests += 1;
    if (answer === "hang") return new Promise(() => {});
    return Promise.resolve({ ok: true, json: () => Promise.resolve(JSON.parse(answer)) });
  },
  console,
};
vm.createContext(context);
// The page's own scripts (common.js, chart.js, table.js), then its inline one.
for (const [, src] of html.matchAll(/<script src="([^"]+)"><\/script>/g)) {
  vm.runInContext(fs.readFileSync(path.join(statics, path.basename(src)), "utf8"), context);
}
for (const [, script] of html.matchAll(/<script>([\s\S]*?)<\/script>/g)) vm.runInContext(script, context);
(async () => {
  for (let tick = 0; tick < Number(ticks); tick += 1) {
    await new Promise((resolve) => setImmediate(resolve));
    const due = timers.splice(0);
    due.forEach((callback) => callback());
  }
  await new Promise((resolve) => setImmediate(resolve));
  process.stdout.write(JSON.stringify({ requests, content: element("content").innerHTML, totals: element("totals").innerHTML }));
})();
