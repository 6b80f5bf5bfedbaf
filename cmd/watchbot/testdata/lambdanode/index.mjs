// An SQS handler on @aws-lambda-powertools/batch, unmodified, for the tests of listen --lambda
// on the Node.js runtime client (aws-lambda-ric). It appends each record it sees to
// $HANDLER_DIR/records-PID.jsonl and fails, through processPartialResponse's
// batchItemFailures, a record whose body starts with "fail-once" on its first receive.
import { appendFileSync } from "node:fs";
import { join } from "node:path";
import { BatchProcessor, EventType, processPartialResponse } from "@aws-lambda-powertools/batch";

const processor = new BatchProcessor(EventType.SQS);
const records = join(process.env.HANDLER_DIR, `records-${process.pid}.jsonl`);

const recordHandler = async (record) => {
  const { messageId, body, attributes, eventSource, eventSourceARN } = record;
  const receives = attributes.ApproximateReceiveCount;
  appendFileSync(records, JSON.stringify({ pid: process.pid, messageId, body, receives, eventSource, eventSourceARN }) + "\n");
  if (body.startsWith("fail-once") && receives === "1") {
    throw new Error(`${messageId} fails on its first receive`);
  }
};

export const handler = async (event, context) => processPartialResponse(event, recordHandler, processor, { context });
