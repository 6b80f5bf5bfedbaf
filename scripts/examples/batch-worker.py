#!/usr/bin/env python3
import json, os, sys

def handle(body):                      # your work here; raise to retry the message
    return json.loads(body)

with open(os.environ["WATCHBOT_RESULT_FILE"], "a") as results:
    for line in sys.stdin:
        msg = json.loads(line)
        try:
            handle(msg["body"])
            result = {"id": msg["id"], "action": "ack"}
        except json.JSONDecodeError as e:
            result = {"id": msg["id"], "action": "dead-letter", "reason": str(e)}
        except Exception:
            result = {"id": msg["id"], "action": "retry", "delaySeconds": 30 * msg["attempt"]}
        results.write(json.dumps(result) + "\n")
