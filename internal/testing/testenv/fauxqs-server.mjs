// Starts the pinned fauxqs SQS emulator quietly on FAUXQS_PORT (0 = any free port) and prints
// one line, "fauxqs listening on port N", once it accepts requests. FAUXQS_QUEUES may hold a
// JSON array of {"name": ..., "attributes": {...}, "deadLetter": {"name": ..., "maxReceiveCount": N,
// "attributes": {...}}} to create at start (a FIFO queue's DLQ needs "FifoQueue": "true" too);
// each is announced as "queue NAME URL" after the first line. Used by scripts/local-sqs, scripts/demo
// and by the Go test environment (testenv.go, beside it). Exits when stdin closes or on SIGTERM, so
// a parent that dies never leaves it behind.
import { startFauxqs } from "fauxqs";

const port = Number.parseInt(process.env.FAUXQS_PORT ?? "0", 10);
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`fauxqs-server: FAUXQS_PORT must be a port number, got ${process.env.FAUXQS_PORT}`);
  process.exit(2);
}
const server = await startFauxqs({ port, logger: false });
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

const stop = async () => {
  try { await server.stop(); } finally { process.exit(0); }
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
if (process.env.FAUXQS_EXIT_ON_STDIN_CLOSE === "1") {
  process.stdin.on("end", stop);
  process.stdin.resume();
}
