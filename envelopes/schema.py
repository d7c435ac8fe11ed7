"""The published JSON Schemas: generated from the models, committed, loaded by name.

`build()` makes the schemas from the pydantic models (what `scripts/gen-schemas` writes);
`load()` reads the committed files. A test keeps the two identical, so what a security
team reads under `envelopes/schemas/<version>/` is exactly what the code enforces.

One model per document serves every version: a member added in 1.1 carries
SINCE_MARKER, and the schema of an earlier version leaves it out (so the 1.0 files, whose
`$id` is immutable, stay byte for byte what they were).
"""

from __future__ import annotations

import json
from importlib import resources
from types import MappingProxyType
from typing import Any

import jsonschema

from envelopes.rules import LINE_TERMINATOR_PATTERN
from envelopes.v1 import (
    JSON_VALUE_MARKER,
    SCHEMA_BASE_ID,
    SCHEMA_MODELS_BY_VERSION,
    SINCE_MARKER,
    VERSION,
    WORKER_ERROR_CODES,
    json_value_def,
    version_at_least,
    version_tuple,
)

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_JSON_VALUE_REF = MappingProxyType({"$ref": "#/$defs/JsonValue"})


#: Fields the Python models default for convenience but every document must carry.
_ALWAYS_SENT = ("kind", "version", "type")


def _publishable(node: Any) -> Any:
    """Pydantic's output made plain 2020-12: markers resolved, tags required."""
    if isinstance(node, list):
        return [_publishable(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get(JSON_VALUE_MARKER) is True:
        return dict(_JSON_VALUE_REF)
    # `discriminator` is an OpenAPI keyword; 2020-12 validators only see `oneOf`.
    out = {key: _publishable(value) for key, value in node.items() if key != "discriminator"}
    props = out.get("properties")
    if out.get("type") == "object" and isinstance(props, dict):
        for name in _ALWAYS_SENT:
            if name in props and "default" in props[name]:
                props[name] = {k: v for k, v in props[name].items() if k != "default"}
                out["required"] = [name, *[r for r in out.get("required", []) if r != name]]
    return out


#: Every version with published schema files, oldest first.
PUBLISHED_VERSIONS: tuple[str, ...] = tuple(SCHEMA_MODELS_BY_VERSION)


def _of_version(node: Any, version: str) -> Any:
    """`node` without the properties added after `version`, and without the markers."""
    if isinstance(node, list):
        return [_of_version(item, version) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _of_version(v, version) for k, v in node.items() if k != SINCE_MARKER}
    props = node.get("properties")
    if isinstance(props, dict):
        out["properties"] = {
            name: out["properties"][name]
            for name, prop in props.items()
            if not isinstance(prop, dict)
            or version_at_least(version, prop.get(SINCE_MARKER, "0.0"))
        }
    return out


def _referenced(body: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The definitions `body` reaches, through each other too."""
    kept: dict[str, Any] = {}
    pending = [body]
    while pending:
        text = json.dumps(pending.pop())
        for name, definition in defs.items():
            if name not in kept and f'"#/$defs/{name}"' in text:
                kept[name] = definition
                pending.append(definition)
    return kept


def _no_line_terminator(node: Any) -> Any:
    """Every anchored pattern also refuses a string holding a line terminator: Python's
    `re.search` (which jsonschema uses), PCRE and Java let `$` match before a final one,
    and none of these patterns admits one anywhere (path schemas say it in their `not`)."""
    if isinstance(node, list):
        return [_no_line_terminator(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _no_line_terminator(value) for key, value in node.items()}
    pattern = out.get("pattern")
    anchored = isinstance(pattern, str) and pattern.startswith("^") and pattern.endswith("$")
    if anchored and "not" not in out:
        out["not"] = {"pattern": LINE_TERMINATOR_PATTERN}
    return out


#: The result as a worker may send it: worker codes only, no runner-only member. What the
#: runner checks a worker's answer against; `tool-call-result` is every outcome the runner
#: reports (its own codes and `error.output_tail` included).
WORKER_RESULT = "worker-result"


def _as_worker_sends_it(schema: dict[str, Any]) -> dict[str, Any]:
    error = schema["$defs"]["ErrorInfo"]
    error["properties"]["code"]["enum"] = list(WORKER_ERROR_CODES)
    error["properties"].pop("output_tail", None)
    schema["title"] = "ToolCallResult (as a worker sends it)"
    return schema


def _as_runner_reports_it(schema: dict[str, Any]) -> dict[str, Any]:
    # A runner's outcome always carries its request's id, never the reserved one.
    schema["properties"]["id"] = next(
        branch for branch in schema["properties"]["id"]["anyOf"] if "pattern" in branch
    )
    return schema


def build(name: str, version: str = VERSION) -> dict[str, Any]:
    """The schema of envelope `name` in `version` (a key of SCHEMA_MODELS_BY_VERSION, or
    WORKER_RESULT)."""
    model_name = "tool-call-result" if name == WORKER_RESULT else name
    generated = SCHEMA_MODELS_BY_VERSION[version][model_name].model_json_schema(mode="validation")
    body = _no_line_terminator(_publishable(_of_version(generated, version)))
    defs = _referenced(body, body.pop("$defs", {}))
    if "#/$defs/JsonValue" in json.dumps(body) + json.dumps(defs):
        defs["JsonValue"] = _publishable(json_value_def())
    schema = {"$schema": DIALECT, "$id": f"{SCHEMA_BASE_ID}/{version}/{name}.json", **body}
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    if name == WORKER_RESULT:
        schema = _as_worker_sends_it(schema)
    elif name == "tool-call-result":
        schema = _as_runner_reports_it(schema)
    return schema


def names(version: str = VERSION) -> list[str]:
    """The published schema names of `version`."""
    return [*SCHEMA_MODELS_BY_VERSION[version], WORKER_RESULT]


def build_all(version: str = VERSION) -> dict[str, dict[str, Any]]:
    return {name: build(name, version) for name in names(version)}


def schema_version_for(version: object) -> str:
    """The published schema version a document carrying `version` is checked against: the
    newest one not after it (1.0 for 1.0, 1.1 for 1.1 and any later 1.x)."""
    if version_tuple(version) is None:
        return VERSION
    fitting = [v for v in PUBLISHED_VERSIONS if version_at_least(version, v)]
    return fitting[-1] if fitting else VERSION


def dump(schema: dict[str, Any]) -> str:
    """The exact text committed for a schema (stable key order, trailing newline)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def load(name: str, version: str = VERSION) -> dict[str, Any]:
    """The committed schema file `schemas/<version>/<name>.json`."""
    text = resources.files("envelopes").joinpath(f"schemas/{version}/{name}.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def _is_integer(_checker: object, instance: object) -> bool:
    # Section 1.1: an integer is written without fraction or exponent, so a parsed float
    # (4096.0, 4.096e3) is not one, although 2020-12's data model says it is.
    return isinstance(instance, int) and not isinstance(instance, bool)


#: 2020-12's type checker with the envelope's integer rule (section 1.1).
TYPE_CHECKER = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer)
_EnvelopeValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, type_checker=TYPE_CHECKER
)


def validator(name: str, version: str = VERSION) -> jsonschema.protocols.Validator:
    """A validator of the committed schema `name` that reads integers as section 1.1 does
    (a document parsed by envelopes.wire keeps 4096.0 a float, which this refuses)."""
    checker: jsonschema.protocols.Validator = _EnvelopeValidator(load(name, version))
    return checker
