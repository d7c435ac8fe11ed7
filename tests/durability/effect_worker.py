"""A worker with an external effect the tests can count: it appends the request's
idempotency key to LOG (argv[1]) and answers ok. With argv[2] = SECONDS it first writes
LOG.started and sleeps, so a test can kill its runner while it runs. Standard library
only (run with -S), so a call costs little more than a process start. It answers
describe (a 1.0 worker with no capabilities), which the runner may send first."""

import json
import os
import sys
import time

request = json.loads(sys.stdin.read())
if request.get("kind") == "DescribeRequest":  # the runner may ask (envelope 1.1 negotiation)
    tool = {
        "name": "charge",
        "description": "Append the idempotency key to the log.",
        "input_schema": {"type": "object", "maxProperties": 16},
        "effects": "external",
    }
    sys.stdout.write(
        json.dumps(
            {
                "kind": "DescribeResult",
                "version": "1.0",
                "worker": {"name": "effect-worker", "version": "1.0.0"},
                "supported_versions": ["1.0"],
                "tools": [tool],
            }
        )
    )
    sys.exit(0)
log = sys.argv[1]
if len(sys.argv) > 2:
    with open(log + ".started", "a") as marker:
        marker.write(f"{os.getpid()}\n")
    time.sleep(float(sys.argv[2]))
with open(log, "a") as effects:
    effects.write(request["context"]["idempotency_key"] + "\n")
answer = {"kind": "ToolCallResult", "version": "1.0", "id": request["id"], "status": "ok",
          "output": {"type": "text", "content": f"charged {request['arguments']}"}}  # fmt: skip
sys.stdout.write(json.dumps(answer))
