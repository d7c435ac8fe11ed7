"""bash-runner: one `bash` tool call per process, answered with one envelope.

The image runs it as `/opt/agents-runner/venv/bin/python -I -B /opt/agents-runner/worker.py`
(read one request on stdin, write one result on stdout). From a source checkout:

    PYTHONPATH=. python3 images/bash-runner/worker.py < request.json

The script runs as `bash -c SCRIPT` in its own process group with the optional `stdin`
text on its standard input; see images/common/run_child.py for how output, deadlines and
left-over processes are handled. A script longer than a command line can carry (over
96 KiB of UTF-8; the kernel's limit is 128 KiB) is read from descriptor 3 instead, as
`bash -c '. /dev/fd/3'`: the same shell, but error messages name /dev/fd/3 and a
top-level `return` ends the script. A non-zero exit code is still an `ok` result: the
exit code is part of the answer. Only the deadline turns into an error (DEADLINE_EXCEEDED).

Envelope 1.1 (the SDK declares `files` and `events`): the script's working directory is
the call's workspace, a fresh directory under $TMPDIR or /tmp (in the image, /tmp is the
only writable place) holding the request's input files, from which `collect` gathers
after the script ran; with `events`, each line the script writes on stdout or stderr is
streamed as a `log` event while it runs (the result still has the whole output).

Startup matters (one process per call): nothing beyond envelopes.worker and run_child is
imported, and both keep to what a bare interpreter has loaded.
"""

from __future__ import annotations

import os
import sys

from envelopes.worker import Worker

try:
    import run_child
except ModuleNotFoundError:  # a source checkout: the module lives in images/common
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
    import run_child

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from envelopes.v1 import ToolCallRequest

MAX_TEXT = 1024 * 1024

worker = Worker("bash-runner", "0.1.0")


@worker.tool(
    "bash",
    description=(
        "Run a bash script in a throwaway sandbox and return its exit code, stdout and"
        " stderr. The script starts in a fresh, writable working directory holding the"
        " call's input files. Nothing persists between calls; the network is off unless"
        " the operator turned it on. Output past the result size limit is cut"
        " (truncated: true), and stdout_bytes/stderr_bytes give the full sizes."
    ),
    effects="contained",
    input_schema={
        "type": "object",
        "properties": {
            "script": {
                "type": "string",
                "maxLength": MAX_TEXT,
                "description": "The bash script, run as `bash -c SCRIPT`.",
            },
            "stdin": {
                "type": "string",
                "maxLength": MAX_TEXT,
                "description": "Text for the script's standard input (default: empty).",
            },
        },
        "required": ["script"],
        "additionalProperties": False,
    },
)
def bash(arguments: dict[str, Any], request: ToolCallRequest) -> dict[str, Any]:
    return run_child.run_for_request(
        ["bash", "-c"],
        arguments.get("stdin"),
        request,
        "bash",
        code=arguments["script"],
        code_on_fd_argv=["bash", "-c", f". /dev/fd/{run_child.CODE_FD}"],
    )


if __name__ == "__main__":
    worker.serve()
