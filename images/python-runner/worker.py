"""python-runner: the default worker of the agents-runner/python-runner image.

The image is meant as a base for Python workers: `FROM agents-runner/python-runner`, copy
your worker over /opt/agents-runner/worker.py (and any modules it needs into
/opt/agents-runner/lib), `pip install` what else it needs (the venv's pip is on PATH), and
keep the ENTRYPOINT. This default is a small example with one tool, `python`, which runs
`{"code": ...}` as `python -I -c CODE` (the worker's own interpreter) in a child process
and answers like bash-runner: exit code, stdout, stderr, byte counts, truncated.

Envelope 1.1 as in bash-runner: the program runs in the call's workspace (input files,
`collect`), and its stdout and stderr lines are streamed as `log` events when the request
asks for events. A worker of your own gets the workspace and `request.emit` from the SDK.

From a source checkout:

    PYTHONPATH=. python3 images/python-runner/worker.py < request.json
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

worker = Worker("python-runner", "0.1.0")


@worker.tool(
    "python",
    description=(
        "Run Python 3 code in a throwaway sandbox (`python -I -c CODE`) and return its"
        " exit code, stdout and stderr. Print what you want to see. The code starts in a"
        " fresh, writable working directory holding the call's input files. Nothing"
        " persists between calls; the network is off unless the operator turned it on."
        " Output past the result size limit is cut (truncated: true)."
    ),
    effects="contained",
    input_schema={
        "type": "object",
        "properties": {
            "code": {"type": "string", "maxLength": MAX_TEXT, "description": "Python source."},
            "stdin": {
                "type": "string",
                "maxLength": MAX_TEXT,
                "description": "Text for the program's standard input (default: empty).",
            },
        },
        "required": ["code"],
        "additionalProperties": False,
    },
)
def python(arguments: dict[str, Any], request: ToolCallRequest) -> dict[str, Any]:
    # Code too long for a command line runs as the script /dev/fd/3 (`-c` is the same
    # interpreter; tracebacks then name /dev/fd/3 instead of <string>).
    return run_child.run_for_request(
        [sys.executable, "-I", "-c"],
        arguments.get("stdin"),
        request,
        "python",
        code=arguments["code"],
        code_on_fd_argv=[sys.executable, "-I", f"/dev/fd/{run_child.CODE_FD}"],
    )


if __name__ == "__main__":
    worker.serve()
