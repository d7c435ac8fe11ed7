"""agents-exe's bash toolboxes: scripts that describe themselves and run sandboxed.

A toolbox is a directory of executables (`{"tag": "FileSystemDirectory", "contents":
{"path", "basenameFilter"?}}`) or one (`{"tag": "SingleTool", "contents": {"path"}}`);
relative paths are resolved against the current directory, as agents-exe does. Each
executable is asked `describe` when the agent file is loaded (on this host, as agents-exe
does: the file's own scripts) and its JSON becomes a tool named `bash_<slug>`, its
arguments mapped as agents-exe maps them (`describe_toolboxes`): every argument a
property whose JSON-schema type is its `backing_type`, required when its arity is
`single`. A script whose `describe` fails or answers something else is reported and
left out, never fatal.

A call runs `SCRIPT run ARGS...` where the policy says, by default in the hardened
bash-runner container (agents-runner/bash-runner, through the same runner as every
isolated call): the script is shipped with the call (`request_arguments`), run with the
arguments flattened by their modes (`positional`: the value; `dashdashspace`: `--name
value`; `dashdashequal`: `--name=value`; `stdin`: a line of standard input) and
AGENT_SESSION_ID, AGENT_CONVERSATION_ID and AGENT_TURN_ID set. Its standard output is the
result (`result_of`): media of the `output-media-type` it declares, else text (or
application/octet-stream when it is not UTF-8), `empty-result`'s message for an empty
one; a non-zero exit is a TOOL_FAILED error with its standard error.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import shlex
import subprocess
import uuid
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envelopes.agents_exe import as_uuid
from envelopes.codec import describe_validation_error
from envelopes.v1 import MediaOutput
from runner.state import ToolResult

logger = logging.getLogger(__name__)

#: The image bash tools run in unless the policy says otherwise.
BASH_RUNNER_IMAGE = "agents-runner/bash-runner"
#: How long `describe` may take.
DESCRIBE_TIMEOUT_S = 10.0
#: JSON-schema types a `backing_type` may name.
SCHEMA_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")
_HEREDOC = "END_OF_THE_AGENTS_EXE_TOOL"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ScriptArg(_Spec):
    """One argument of a script's `describe`, as agents-exe reads it."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")]
    description: str
    type: str
    backing_type: Literal[SCHEMA_TYPES]  # type: ignore[valid-type]
    arity: Literal["single", "optional"]
    mode: Literal["stdin", "positional", "dashdashspace", "dashdashequal"]


class EmptyResult(_Spec):
    tag: Literal["DoNothing", "AddMessage"]
    contents: str | None = None


class ScriptInfo(_Spec):
    """A script's `describe` answer (agents-exe's ScriptInfo)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    slug: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,57}$")]
    description: str
    args: list[ScriptArg]
    empty_result: Annotated[EmptyResult | None, Field(alias="empty-result")] = None
    output_media_type: Annotated[
        str | None, Field(alias="output-media-type", pattern=r"^[\w.+-]+/[\w.+-]+$")
    ] = None


class BashScript(_Spec):
    """What a bash tool runs: the script (an absolute path) and what its `describe` said."""

    path: str
    args: list[ScriptArg]
    empty_result: Annotated[EmptyResult | None, Field(alias="emptyResult")] = None
    output_media_type: Annotated[str | None, Field(alias="outputMediaType")] = None


class ToolboxError(ValueError):
    """A toolbox entry that cannot be read (not a script's failure: those are skipped)."""


def _entries(toolboxes: Any, where: str) -> list[tuple[Path, str | None, bool]]:
    """(path, basename filter, is a directory) of each toolbox entry."""
    if not isinstance(toolboxes, list):
        raise ToolboxError(f"{where}: expected a list of toolboxes")
    out = []
    for i, entry in enumerate(toolboxes):
        at = f"{where}[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"tag", "contents"}:
            raise ToolboxError(f'{at}: expected {{"tag": ..., "contents": {{...}}}}')
        tag, contents = entry["tag"], entry["contents"]
        if tag not in ("FileSystemDirectory", "SingleTool"):
            raise ToolboxError(f"{at}.tag: expected 'FileSystemDirectory' or 'SingleTool'")
        allowed = {"path", "activation"} | (
            {"basenameFilter", "root"} if tag == "FileSystemDirectory" else set()
        )
        if not isinstance(contents, dict) or not isinstance(contents.get("path"), str):
            raise ToolboxError(f"{at}.contents.path: expected a string")
        extra = sorted(set(contents) - allowed)
        if extra:
            raise ToolboxError(f"{at}.contents.{extra[0]}: not a field of a {tag} toolbox")
        if contents.get("activation") not in (None, "always"):
            raise ToolboxError(f"{at}.contents.activation: only 'always' is supported yet")
        name_filter = contents.get("basenameFilter")
        if name_filter is not None and not isinstance(name_filter, str):
            raise ToolboxError(f"{at}.contents.basenameFilter: expected a string")
        out.append((Path(contents["path"]).absolute(), name_filter, tag == "FileSystemDirectory"))
    return out


def _executables(directory: Path, name_filter: str | None, where: str) -> list[Path]:
    if not directory.is_dir():
        raise ToolboxError(f"{where}: {directory} is not a directory")
    found = []
    for path in sorted(directory.iterdir()):
        if name_filter is not None and name_filter not in path.name:
            continue
        if path.is_file() and os.access(path, os.X_OK):
            found.append(path)
    return found


def describe_script(path: Path) -> ScriptInfo:
    """`path describe`, read as agents-exe reads it; ValueError saying why not."""
    try:
        done = subprocess.run([str(path), "describe"], capture_output=True,
                              timeout=DESCRIBE_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ValueError(f"`describe` took over {DESCRIBE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise ValueError(f"`describe` could not start: {exc.strerror}") from None
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise ValueError(f"`describe` exited with {done.returncode}: {err or '(no stderr)'}")
    try:
        return ScriptInfo.model_validate(json.loads(done.stdout))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"`describe` did not answer JSON: {exc}") from None
    except ValidationError as exc:
        raise ValueError(f"`describe`: {describe_validation_error(exc)}") from None


def tool_document(path: Path, info: ScriptInfo) -> dict[str, Any]:
    """The ToolSpec of a described script (kind `bash`, its script kept with it)."""
    properties = {a.name: {"type": a.backing_type, "description": a.description}
                  for a in info.args}  # fmt: skip
    script = BashScript(path=str(path), args=info.args, empty_result=info.empty_result,
                        output_media_type=info.output_media_type)  # fmt: skip
    return {
        "name": f"bash_{info.slug}",
        "kind": "bash",
        "description": info.description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": [a.name for a in info.args if a.arity == "single"],
        },
        "script": script.model_dump(mode="json", by_alias=True),
    }


def describe_toolboxes(toolboxes: Any, where: str) -> list[dict[str, Any]]:
    """The tools of agents-exe's `bashToolboxes`; a script whose `describe` fails is
    logged (WARNING, naming it and why) and left out. ToolboxError for a bad entry."""
    tools: list[dict[str, Any]] = []
    for i, (path, name_filter, is_dir) in enumerate(_entries(toolboxes, where)):
        at = f"{where}[{i}]"
        if is_dir:
            scripts = _executables(path, name_filter, at)
        elif path.is_file() and os.access(path, os.X_OK):
            scripts = [path]
        else:
            raise ToolboxError(f"{at}: {path} is not an executable file")
        for script in scripts:
            try:
                info = describe_script(script)
            except ValueError as exc:
                logger.warning("%s: %s is not a tool, left out: %s", at, script, exc)
                continue
            tools.append(tool_document(script, info))
    return tools


# --- a call ----------------------------------------------------------------------------


def _text(value: Any, name: str) -> str | None:
    """An argument as agents-exe passes it: text (a number or boolean as its JSON)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    raise ValueError(f"argument {name!r}: expected a string, number or boolean")


def command_line(script: BashScript, arguments: dict[str, Any]) -> tuple[list[str], str]:
    """`run`'s arguments and the standard input, flattened as agents-exe flattens them."""
    argv: list[str] = ["run"]
    lines: list[str] = []
    for arg in script.args:
        text = _text(arguments.get(arg.name), arg.name)
        if text is None:
            continue
        if arg.mode == "positional":
            argv.append(text)
        elif arg.mode == "dashdashequal":
            argv.append(f"--{arg.name}={text}")
        elif arg.mode == "dashdashspace":
            argv += [f"--{arg.name}", text]
        else:
            lines.append(text)
    return argv, "".join(f"{line}\n" for line in lines)


def context_environment(session_id: str, turn: int | None) -> dict[str, str]:
    """AGENT_SESSION_ID, AGENT_CONVERSATION_ID and AGENT_TURN_ID, as UUIDs."""
    session = as_uuid(session_id)
    turn_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"agents-runner:{session}/turn/{turn or 0}"))
    return {"AGENT_SESSION_ID": session, "AGENT_CONVERSATION_ID": session,
            "AGENT_TURN_ID": turn_id}  # fmt: skip


def request_arguments(
    script: BashScript, arguments: dict[str, Any], environment: dict[str, str]
) -> dict[str, Any]:
    """The bash-runner call that runs `script` with `arguments`: the script shipped in
    it (written to a fresh directory and made executable), its output base64-encoded so
    that binary output survives. ValueError for an argument agents-exe could not pass."""
    argv, stdin = command_line(script, arguments)
    try:
        code = Path(script.path).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read the script {script.path}: {exc.strerror}") from None
    name = shlex.quote(Path(script.path).name)
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in environment.items())
    encoded = base64.encodebytes(code).decode("ascii")
    # The sandbox's only writable place is mounted noexec: the script is run by the
    # interpreter its #! line names (bash without one), as the kernel would run it.
    interpreter = " ".join(shlex.quote(part) for part in _interpreter(code))
    arguments_text = " ".join(shlex.quote(a) for a in argv)
    wrapper = (
        "set -o pipefail\n"
        "d=$(mktemp -d) || exit 125\n"
        f"base64 -d > \"$d\"/{name} <<'{_HEREDOC}'\n{encoded}{_HEREDOC}\n"
        f"export {exports}\n"
        f'{interpreter} "$d"/{name} {arguments_text} | base64 -w0\n'
    )
    return {"script": wrapper, "stdin": stdin} if stdin else {"script": wrapper}


def _interpreter(code: bytes) -> list[str]:
    """The #! line's interpreter and its argument, or bash."""
    first = code.split(b"\n", 1)[0]
    if not first.startswith(b"#!"):
        return ["bash"]
    parts = first[2:].decode("utf-8", "replace").strip().split(maxsplit=1)
    return parts or ["bash"]


def result_of(script: BashScript, content: Any) -> ToolResult:
    """What the model sees of a bash-runner answer to `request_arguments`' call."""
    if not isinstance(content, dict) or not isinstance(content.get("exit_code"), int):
        return ToolResult.error("INTERNAL", "the bash runner's answer has no exit_code")
    stderr = str(content.get("stderr") or "")
    if content["exit_code"] != 0:
        return ToolResult.error("TOOL_FAILED", f"{Path(script.path).name} exited with"
                                f" {content['exit_code']}: {stderr.strip()[-2000:]}")  # fmt: skip
    if content.get("truncated"):
        return ToolResult.error("RESULT_TOO_LARGE", "the script's output was cut at the"
                                " result size limit")  # fmt: skip
    try:
        data = base64.b64decode(str(content.get("stdout") or ""), validate=True)
    except (binascii.Error, ValueError):
        return ToolResult.error("INTERNAL", "the script's output came back garbled")
    return output_result(script, data)


def output_result(script: BashScript, data: bytes) -> ToolResult:
    """A script's standard output as agents-exe hands it to the model."""
    if script.output_media_type is not None:
        media = MediaOutput(mime_type=script.output_media_type,
                            base64_data=base64.b64encode(data).decode("ascii"))  # fmt: skip
        return ToolResult.ok(media.to_wire())
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        media = MediaOutput(mime_type="application/octet-stream",
                            base64_data=base64.b64encode(data).decode("ascii"))  # fmt: skip
        return ToolResult.ok(media.to_wire())
    empty = script.empty_result
    if text == "" and empty is not None and empty.tag == "AddMessage":
        text = empty.contents or ""
    return ToolResult.ok(text)


__all__ = [
    "BASH_RUNNER_IMAGE",
    "BashScript",
    "ScriptArg",
    "ScriptInfo",
    "ToolboxError",
    "command_line",
    "context_environment",
    "describe_script",
    "describe_toolboxes",
    "output_result",
    "request_arguments",
    "result_of",
    "tool_document",
]
