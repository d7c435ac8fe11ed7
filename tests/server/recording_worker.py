"""A v1 worker that records each start: it appends "KEY ATTEMPT PID" to LOG (argv[1])
before anything else, then, with argv[2] = SECONDS, sleeps that long on the first start
of a call (a later start of the same call does not sleep), and answers ok. Standard
library only (run with -S)."""

import json
import os
import sys
import time

request = json.loads(sys.stdin.read())
log, context = sys.argv[1], request["context"]
key = context["idempotency_key"]
with open(log, "a+") as starts:
    starts.seek(0)
    first = not any(line.split(" ")[0] == key for line in starts.read().splitlines())
    starts.write(f"{key} {context['attempt']} {os.getpid()}\n")
if len(sys.argv) > 2 and first:
    time.sleep(float(sys.argv[2]))
output = {"type": "text", "content": f"ran {request['tool']['name']} {key}"}
answer = {"kind": "ToolCallResult", "version": "1.0", "id": request["id"], "status": "ok",
          "output": output}  # fmt: skip
sys.stdout.write(json.dumps(answer))
