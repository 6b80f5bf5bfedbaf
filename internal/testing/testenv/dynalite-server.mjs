// Starts the pinned dynalite DynamoDB emulator, in memory, on 127.0.0.1:DYNALITE_PORT (0 = any free
// port) with tables that become ACTIVE at once, and prints one line, "dynalite listening on port N",
// once it accepts requests; a port already taken is one line on stderr and exit status 3, as for
// fauxqs-server.mjs. DYNALITE_TABLES may hold a JSON array of CreateTable requests (as the
// DynamoDB API takes them) to create at start; each is announced as "table NAME" after the first
// line. Used by scripts/local-sqs, scripts/demo-mapreduce and by the Go test environment
// (dynamo.go, beside it). Exits when stdin closes or on SIGTERM, so a parent that dies never
// leaves it behind: dynalite's own cli.js has no such exit, and it keeps everything in memory,
// so there is nothing to flush.
import dynalite from "dynalite";

const port = Number.parseInt(process.env.DYNALITE_PORT ?? "0", 10);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`dynalite-server: DYNALITE_PORT must be a port number, got ${process.env.DYNALITE_PORT}`);
  process.exit(2);
}
const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
try {
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
} catch (err) {
  if (err?.code !== "EADDRINUSE") throw err;
  console.error(`dynalite-server: port ${port} on 127.0.0.1 is taken (another emulator?): ` +
    `pick another with DYNALITE_PORT, such as make emulator DYNALITE_PORT=4568, or DYNALITE_PORT=0 for any free port`);
  process.exit(3);
}
const endpoint = `http://127.0.0.1:${server.address().port}`;
console.log(`dynalite listening on port ${server.address().port}`);

// dynalite checks that a request is signed but not the signature, so a well-formed header will do.
async function call(target, body) {
  const now = new Date().toISOString().replace(/[-:]/g, "").replace(/\.\d+/, "");
  const res = await fetch(endpoint, {
    method: "POST",
    headers: {
      "Content-Type": "application/x-amz-json-1.0",
      "X-Amz-Target": `DynamoDB_20120810.${target}`,
      "X-Amz-Date": now,
      Authorization: `AWS4-HMAC-SHA256 Credential=local/${now.slice(0, 8)}/us-east-1/dynamodb/aws4_request, SignedHeaders=host;x-amz-date, Signature=0`,
    },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${target} ${body.TableName}: ${res.status} ${text}`);
  return JSON.parse(text);
}

try {
  for (const table of JSON.parse(process.env.DYNALITE_TABLES ?? "[]")) {
    await call("CreateTable", table);
    console.log(`table ${table.TableName}`);
  }
} catch (err) {
  console.error(`dynalite-server: ${err.message}`);
  process.exit(1);
}

const stop = () => process.exit(0);
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
if (process.env.DYNALITE_EXIT_ON_STDIN_CLOSE === "1") {
  process.stdin.on("end", stop);
  process.stdin.resume();
}
