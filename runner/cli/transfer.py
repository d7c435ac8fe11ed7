"""Files in and out of `agents-runner isolate`, and its live events (envelope 1.1).

- `--file LOCAL[:REMOTE]` reads a host file into the request's `files` (REMOTE: the
  path in the worker's workspace, the file's name by default; text stays text, anything
  else goes as base64; the permission bits go along).
- `--collect GLOB` asks the worker for the workspace files matching GLOB; `--out DIR`
  writes the files that come back (media parts with a `path`, else a `filename`) under
  DIR with envelopes.files' writer, but only those whose name matches a `--collect`
  pattern (by the rule `collect` itself uses: a worker may return anything, such as
  `.bashrc` or `.git/config`), never outside DIR, never through a symlink, and never over
  a file already there unless `--overwrite` (which replaces a link itself, never its
  target). A name that fails is refused and named on stderr (escaped); the others are
  still written.
- `--stream` prints each event on stderr as it arrives, one line each, escaped.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envelopes import codec
from envelopes.controls import escape_controls
from envelopes.files import (
    FilesError,
    fold,
    glob_problem,
    matches_any,
    path_problem,
    write_files,
)
from envelopes.rules import LATEST_VERSION
from envelopes.v1 import ToolCallRequest, media_parts
from runner.cli.app import fail
from runner.isolation import CallOutcome, WorkerEvent


def read_file_option(spec: str) -> dict[str, Any]:
    """One `--file LOCAL[:REMOTE]` as a request's `files` entry (exit 2 when unusable)."""
    local, sep, remote = spec.partition(":")
    if not local:
        fail(f"--file {spec!r}: expected LOCAL[:REMOTE]")
    remote = remote if sep else os.path.basename(local)
    problem = path_problem(remote)
    if problem is not None:
        fail(f"--file {spec!r}: the path in the workspace {problem}")
    try:
        data = Path(local).read_bytes()
        mode = os.stat(local).st_mode & 0o777
    except OSError as exc:
        fail(f"--file {spec!r}: cannot read {local}: {exc.strerror}")
    try:
        return {"path": remote, "content": data.decode("utf-8"), "mode": mode}
    except UnicodeDecodeError:
        content = base64.b64encode(data).decode("ascii")
        return {"path": remote, "content": content, "encoding": "base64", "mode": mode}


def with_files(
    request: ToolCallRequest, files: list[str], patterns: list[str], out: Path | None
) -> ToolCallRequest:
    """The request with the `--file` and `--collect` options added (a 1.1 request)."""
    if patterns and out is None:
        fail("--collect needs --out DIR: the directory the collected files are written to")
    if out is not None and not patterns:
        fail("--out needs --collect GLOB: only the returned files a pattern asks for are"
             " written")  # fmt: skip
    for pattern in patterns:
        if (problem := glob_problem(pattern)) is not None:
            fail(f"--collect {pattern!r}: the pattern {problem}")
    if not files and not patterns:
        return request
    doc = request.to_wire()
    doc["version"] = LATEST_VERSION  # a 1.0 request would ignore the 1.1 fields
    doc["files"] = [*doc.get("files", []), *(read_file_option(spec) for spec in files)]
    if patterns:
        doc["collect"] = {**doc.get("collect", {}), "patterns": patterns}
    try:
        return ToolCallRequest.model_validate(doc)
    except ValidationError as exc:
        fail(f"request with --file/--collect: {codec.describe_validation_error(exc)}")


def print_event(event: WorkerEvent) -> None:
    """One event as one line on stderr (its text is escaped already; line ends too)."""
    if event.type == "log":
        label = f"{event.type} {event.stream}"
    elif event.type == "progress":
        label = f"progress {100 * (event.fraction or 0.0):.0f}%"
    else:
        label = event.type
    sys.stderr.write(f"[{event.seq}] {label}: {escape_controls(event.text)}\n")
    sys.stderr.flush()


def write_returned(
    outcome: CallOutcome, out: Path, patterns: list[str], overwrite: bool = False
) -> bool:
    """Write the files the result carries that a pattern of `patterns` asked for under
    `out` (an existing file only when `overwrite`); False when any was refused (each
    refusal is named on stderr, each file written too)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--out {out}: cannot create it: {exc.strerror}", 1)
    if outcome.result.output is None:
        return True
    written: dict[str, str] = {}
    refused = 0
    for where, part in media_parts(outcome.result.output):
        name = part.path if part.path is not None else part.filename
        if name is None:
            continue
        shown = f"'{escape_controls(name)}'"  # the name as data, never interpreted
        problem = path_problem(name)
        if problem is None and not matches_any(name, patterns):
            problem = "no --collect pattern asks for it (not written)"
        if problem is None and fold(name) in written:
            problem = f"the same path as {written[fold(name)]} (compared case-folded)"
        if problem is None:
            try:
                data = base64.b64decode(part.base64_data, validate=True)
                write_files(str(out), [(name, data, 0o644)], replace=overwrite)
            except FilesError as exc:
                problem = exc.reason
                if not overwrite and problem.startswith("already exists"):
                    problem += "; --overwrite replaces it"
            except ValueError:
                problem = "its base64_data does not decode"
        if problem is not None:
            refused += 1
            sys.stderr.write(f"agents-runner: refused {where} {shown}: {problem}\n")
            continue
        written[fold(name)] = where
        sys.stderr.write(f"wrote {escape_controls(str(out / name))} ({len(data)} bytes)\n")
    return refused == 0
