// Calls one function of the UI's static scripts in node: argv: the script files (loaded in order, as a
// page loads them), then the function's name and its arguments as a JSON array. Prints the JSON result.
"use strict";
const fs = require("fs");
const path = require("path");
const vm = require("vm");
const statics = path.join(__dirname, "../../../airflow_provider_disttrain/ui/static");
const args = process.argv.slice(2);
const [name, json] = args.slice(-2);
const context = { document: { addEventListener() {} }, window: {}, URLSearchParams, console };
vm.createContext(context);
for (const file of args.slice(0, -2)) vm.runInContext(fs.readFileSync(path.join(statics, file), "utf8"), context);
context.__args = JSON.parse(json);
process.stdout.write(JSON.stringify(vm.runInContext(`${name}(...__args)`, context)));
