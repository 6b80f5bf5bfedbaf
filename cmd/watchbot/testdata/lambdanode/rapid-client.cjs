// A stand-in for aws-lambda-ric's native addon, loaded with node --require before the runtime
// client. aws-lambda-ric 3.3.0 does not ship rapid-client.node prebuilt: its install scripts
// build it with cmake from curl and aws-lambda-cpp, which the tests install without
// (npm ci --ignore-scripts). Its RAPIDClient requires the addon in its constructor even when
// AWS_LAMBDA_NODEJS_USE_ALTERNATIVE_CLIENT_1=true moves the wait for the next invocation to
// Node's http module; an invocation's response and error still go through the addon's done
// and error. The stand-in therefore answers those two as aws-lambda-cpp does: one blocking
// POST to the Runtime API, the error with its type header. Its next is never
// called on the alternative path and throws if it is, so the test fails rather than passes.
"use strict";
const Module = require("node:module");
const { execFileSync } = require("node:child_process");

const api = `http://${process.env.AWS_LAMBDA_RUNTIME_API}/2018-06-01/runtime/invocation/`;

// post sends body to the Runtime API and returns once it has answered, as the addon's calls
// do: the runtime client asks for the next invocation right after done or error return.
function post(path, body, headers) {
  const script = `let body = "";
for await (const chunk of process.stdin) body += chunk;
const r = await fetch(process.argv[1], { method: "POST", body, headers: JSON.parse(process.argv[2]) });
if (!r.ok) { console.error("rapid-client stand-in: POST", process.argv[1], r.status, await r.text()); process.exit(1); }`;
  execFileSync(process.execPath, ["--input-type=module", "-e", script, api + path, JSON.stringify(headers)], {
    input: body,
    stdio: ["pipe", "inherit", "inherit"],
  });
}

const standIn = {
  next() {
    throw new Error("rapid-client stand-in: next was called; set AWS_LAMBDA_NODEJS_USE_ALTERNATIVE_CLIENT_1=true");
  },
  done(id, body) {
    post(`${id}/response`, body, { "Content-Type": "application/json" });
  },
  error(id, body) {
    const type = JSON.parse(body).errorType || "Runtime.Unknown";
    post(`${id}/error`, body, { "Content-Type": "application/json", "Lambda-Runtime-Function-Error-Type": type });
  },
};

const load = Module._load;
Module._load = function (request, parent, isMain) {
  if (request === "./rapid-client.node" && parent && parent.filename.includes("aws-lambda-ric")) {
    return standIn;
  }
  return load.apply(this, arguments);
};
