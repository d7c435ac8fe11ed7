"""A call's result from what a worker hands back, as agents-exe reads it: a
UserToolResponse (agents-exe's camelCase or the envelope's snake_case), a v1
ToolCallResult envelope, or any other JSON value (a JSON result); from text, as
agents-exe reads a result file, anything that is not JSON is the text itself. Shared by
`session complete` (a file), the server (a request body) and the console (the editor)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from envelopes import codec
from envelopes.agents_exe import (
    UserToolResponseError,
    looks_like_user_tool_response,
    parse_user_tool_response,
)
from envelopes.v1 import ToolCallResult
from runner.session.execute import from_envelope, from_output
from runner.state import ToolResult


class ResultError(ValueError):
    """A value that claims to be a UserToolResponse or an envelope and is not a valid one;
    the message says where and why."""


def result_from_value(value: Any, where: str) -> ToolResult:
    """The result `value` (parsed JSON) stands for; `where` names it in errors."""
    if looks_like_user_tool_response(value):
        try:
            return from_output(parse_user_tool_response(value, where))
        except UserToolResponseError as exc:
            raise ResultError(f"{where}: not a valid UserToolResponse: {exc}") from exc
        except ValidationError as exc:
            raise ResultError(f"{where}: not a valid UserToolResponse:"
                              f" {codec.describe_validation_error(exc)}") from exc  # fmt: skip
    if isinstance(value, dict) and value.get("kind") == "ToolCallResult":
        try:
            return from_envelope(ToolCallResult.model_validate(value))
        except ValidationError as exc:
            raise ResultError(f"{where}: not a valid ToolCallResult:"
                              f" {codec.describe_validation_error(exc)}") from exc  # fmt: skip
    return ToolResult.ok(value)


def value_from_text(text: str) -> Any:
    """What text stands for: its JSON value, or else the text (stripped), as agents-exe
    reads a result file (`echo 42 > r.txt` gives 42; `echo done > r.txt` gives "done")."""
    stripped = text.strip()
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        return stripped


def result_from_text(text: str, where: str) -> ToolResult:
    """The result text stands for (see value_from_text and result_from_value)."""
    return result_from_value(value_from_text(text), where)
