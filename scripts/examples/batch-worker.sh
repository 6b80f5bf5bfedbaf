#!/bin/sh
# Each line of stdin is one message: {"id","body","attributes","attempt",...}.
set -eu
while IFS= read -r line; do
  id=$(printf '%s' "$line" | jq -r .id)
  body=$(printf '%s' "$line" | jq -r .body)
  if printf '%s' "$body" | jq -e . >/dev/null 2>&1; then
    echo "processing $id"                                  # your work here
    jq -nc --arg id "$id" '{id: $id, action: "ack"}' >> "$WATCHBOT_RESULT_FILE"
  else
    jq -nc --arg id "$id" '{id: $id, action: "dead-letter", reason: "body is not JSON"}' >> "$WATCHBOT_RESULT_FILE"
  fi
done
