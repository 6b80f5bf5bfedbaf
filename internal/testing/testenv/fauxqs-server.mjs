// Starts the pinned fauxqs SQS emulator quietly on 127.0.0.1:FAUXQS_PORT (0 = any free port) and
// prints one line, "fauxqs listening on port N", once it accepts requests. A port already taken
// is one line on stderr saying how to pick another, and exit status 3. FAUXQS_QUEUES may hold a
// JSON array of {"name": ..., "attributes": {...}, "deadLetter": {"name": ..., "maxReceiveCount": N,
// "attributes": {...}}} to create at start (a FIFO queue's DLQ needs "FifoQueue": "true" too);
// each is announced as "queue NAME URL" after the first line. FAUXQS_BUCKETS may hold a JSON array
// of S3 bucket names to create (fauxqs serves S3 on the same port), each announced as
// "bucket NAME" after the queues. Used by scripts/local-sqs, scripts/demo and by the Go test
// environment (testenv.go, beside it). Exits when stdin closes or on SIGTERM, so a parent that
// dies never leaves it behind.
import net from "node:net";
import { startFauxqs } from "fauxqs";

// fauxqs listens on every interface (0.0.0.0), and neither its options nor its environment
// change that; an emulator of a developer's machine has no business on the network. Every
// listen of this process that asks for every interface gets the loopback address instead.
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args[0] !== null && typeof args[0] === "object" && args[0].host === "0.0.0.0") {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};

const port = Number.parseInt(process.env.FAUXQS_PORT ?? "0", 10);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`fauxqs-server: FAUXQS_PORT must be a port number, got ${process.env.FAUXQS_PORT}`);
  process.exit(2);
}
let server;
try {
  server = await startFauxqs({ port, logger: false });
} catch (err) {
  if (err?.code !== "EADDRINUSE") throw err;
  console.error(`fauxqs-server: port ${port} on 127.0.0.1 is taken (another emulator? LocalStack uses 4566 too): ` +
    `pick another with FAUXQS_PORT, such as make emulator FAUXQS_PORT=4567, or FAUXQS_PORT=0 for any free port`);
  process.exit(3);
}
console.log(`fauxqs listening on port ${server.port}`);
for (const q of JSON.parse(process.env.FAUXQS_QUEUES ?? "[]")) {
  const attributes = { ...(q.attributes ?? {}) };
  if (q.deadLetter) {
    const dlq = server.createQueue(q.deadLetter.name, { attributes: { MessageRetentionPeriod: "1209600", ...(q.deadLetter.attributes ?? {}) } });
    console.log(`queue ${dlq.queueName} ${dlq.queueUrl}`);
    attributes.RedrivePolicy = JSON.stringify({ deadLetterTargetArn: dlq.queueArn, maxReceiveCount: String(q.deadLetter.maxReceiveCount) });
  }
  const created = server.createQueue(q.name, { attributes });
  console.log(`queue ${created.queueName} ${created.queueUrl}`);
}
for (const name of JSON.parse(process.env.FAUXQS_BUCKETS ?? "[]")) {
  console.log(`bucket ${server.createBucket(name).bucketName}`);
}

const stop = async () => {
  try { await server.stop(); } finally { process.exit(0); }
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
if (process.env.FAUXQS_EXIT_ON_STDIN_CLOSE === "1") {
  process.stdin.on("end", stop);
  process.stdin.resume();
}
