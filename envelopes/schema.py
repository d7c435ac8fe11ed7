"""The published JSON Schemas: generated from the models, committed, loaded by name.

`build()` makes the schemas from the pydantic models (what `scripts/gen-schemas` writes);
`load()` reads the committed files. A test keeps the two identical, so what a security
team reads under `envelopes/schemas/1.0/` is exactly what the code enforces.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

from envelopes.v1 import (
    JSON_VALUE_DEF,
    JSON_VALUE_MARKER,
    SCHEMA_BASE_ID,
    SCHEMA_MODELS,
    VERSION,
)

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_JSON_VALUE_REF = {"$ref": "#/$defs/JsonValue"}


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


def build(name: str) -> dict[str, Any]:
    """The schema of envelope `name` (a key of SCHEMA_MODELS), ready to publish."""
    generated = SCHEMA_MODELS[name].model_json_schema(mode="validation")
    body = _publishable(generated)
    defs = body.pop("$defs", {})
    if "#/$defs/JsonValue" in json.dumps(body) + json.dumps(defs):
        defs["JsonValue"] = _publishable(JSON_VALUE_DEF)
    schema = {"$schema": DIALECT, "$id": f"{SCHEMA_BASE_ID}/{VERSION}/{name}.json", **body}
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    return schema


def build_all() -> dict[str, dict[str, Any]]:
    return {name: build(name) for name in SCHEMA_MODELS}


def dump(schema: dict[str, Any]) -> str:
    """The exact text committed for a schema (stable key order, trailing newline)."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def load(name: str, version: str = VERSION) -> dict[str, Any]:
    """The committed schema file `schemas/<version>/<name>.json`."""
    text = resources.files("envelopes").joinpath(f"schemas/{version}/{name}.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema
