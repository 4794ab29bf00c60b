// ForgeVM's code runtime for JavaScript: one Node process per code context, the code run in one
// persistent vm context, so variables and functions persist between executions. The protocol is
// the Python runtime's (python.py): JSON requests on stdin, output as printed, messages on stdout
// after the host's marker, a sync line on stderr before each end. SIGINT interrupts running code.
"use strict";
const vm = require("node:vm");
const util = require("node:util");
const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const MARK = process.env.FVM_RUNTIME_MARK || "";
delete process.env.FVM_RUNTIME_MARK;

const write = (fd, text) => {
  const buf = Buffer.from(text);
  for (let off = 0; off < buf.length; ) {
    try {
      off += fs.writeSync(fd, buf, off);
    } catch (e) {
      if (e.code !== "EAGAIN") throw e;
    }
  }
};
const send = (msg) => write(1, `${MARK} ${JSON.stringify(msg)}\n`);
const show = (args) => `${args.map((a) => (typeof a === "string" ? a : util.inspect(a, { depth: 4 }))).join(" ")}\n`;
const con = {
  log: (...a) => write(1, show(a)),
  info: (...a) => write(1, show(a)),
  debug: (...a) => write(1, show(a)),
  error: (...a) => write(2, show(a)),
  warn: (...a) => write(2, show(a)),
  dir: (o) => write(1, `${util.inspect(o)}\n`),
  table: (o) => write(1, `${util.inspect(o)}\n`),
};

const sandbox = { console: con, process, Buffer, setTimeout, setInterval, clearTimeout, clearInterval, setImmediate, queueMicrotask, URL, TextEncoder, TextDecoder, fetch: globalThis.fetch };
sandbox.require = createRequire(path.join(process.cwd(), "__cell__.js"));
sandbox.module = { exports: {} };
sandbox.exports = sandbox.module.exports;
sandbox.globalThis = sandbox;
const context = vm.createContext(sandbox);
let count = 0;

async function execute(code) {
  count++;
  try {
    let value = vm.runInContext(code, context, { filename: "<cell>", breakOnSigint: true });
    if (value && typeof value.then === "function") value = await value;
    if (value !== undefined) {
      sandbox._ = value;
      send({ type: "result", is_main_result: true, text: typeof value === "string" ? `'${value}'` : util.inspect(value, { depth: 4 }) });
    }
  } catch (e) {
    const err = e instanceof Error || (e && typeof e === "object" && "stack" in e) ? e : { name: "Error", message: String(e), stack: String(e) };
    send({ type: "error", name: err.name || "Error", value: err.message || String(e), traceback: String(err.stack || err.message) });
  }
  send({ type: "number_of_executions", execution_count: count });
}

// Between executions SIGINT must not end the context.
process.on("SIGINT", () => {});

let buffered = "";
let queue = Promise.resolve();
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffered += chunk;
  for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
    const line = buffered.slice(0, nl);
    buffered = buffered.slice(nl + 1);
    let req;
    try {
      req = JSON.parse(line);
    } catch {
      continue;
    }
    queue = queue.then(async () => {
      const env = req.env || {};
      const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
      Object.assign(process.env, env);
      try {
        await execute(String(req.code ?? ""));
      } finally {
        for (const [k, v] of Object.entries(saved)) {
          if (v === undefined) delete process.env[k];
          else process.env[k] = v;
        }
      }
      write(2, `${MARK} sync\n`);
      send({ type: "end" });
    });
  }
});
send({ type: "ready", language: "javascript", pid: process.pid });
