"""schemathesis against a real uvicorn: every operation of the served OpenAPI document,
with data that fits it and data that does not, must answer without a server error and
as the document says (status code, content type, body schema). Deterministic
(derandomized) and bounded; routes added to the app are fuzzed as soon as they are in
the document."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.server.conftest import TOKENS, Served
from tests.server.test_flow import start

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]  # fmt: skip
#: Examples per operation, per generation mode and per set of path parameters.
EXAMPLES = 25
#: Server-Sent Events never end by themselves: such operations are called with known
#: parameters only when the stream can end; see `streams`.
EVENT_STREAM = "text/event-stream"


def streams(operation: Any) -> bool:
    answers = operation.definition.raw.get("responses", {})
    return any(EVENT_STREAM in (entry.get("content") or {}) for entry in answers.values())


def test_the_api_answers_every_operation_as_documented(served: Served) -> None:
    session_id, tokens = start(served)
    known = {"session_id": session_id, "token": tokens["fetch_remote_a"]}
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json",
                                           config=schemathesis.Config())  # fmt: skip
    auth = {"Authorization": f"Bearer {TOKENS['operator']}"}
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 12
    for operation in operations:
        if streams(operation):
            continue  # an open stream would hold the test: the events tests cover these
        names = {p.name for p in operation.path_parameters}
        fixed = {name: known[name] for name in names if name in known}
        variants = [None, fixed] if fixed else [None]
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for path_parameters in variants:
                strategy = operation.as_strategy(generation_mode=mode,
                                                 path_parameters=path_parameters)  # fmt: skip
                strategy = strategy.map(no_long_poll)
                try:
                    _fuzz(strategy, served.url, auth)
                except Unsatisfiable:
                    assert mode is GenerationMode.NEGATIVE, operation.label
                    # nothing in the operation can be made invalid (no parameters, no body)
                except AssertionError as exc:
                    label = f"{operation.label} ({mode.value}, {path_parameters or 'generated'})"
                    failures.append(f"{label}: {exc}")
    assert not failures, "\n\n".join(failures)


def no_long_poll(case: Case) -> Case:
    """A long poll (`x-long-poll` names its wait field) told not to wait, so that each
    example answers at once; the claims tests cover waiting."""
    field = case.operation.definition.raw.get("x-long-poll")
    value = case.body.get(field) if field and isinstance(case.body, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 60:
        case.body[field] = 0
    return case


def _fuzz(strategy: st.SearchStrategy[Case], url: str, auth: dict[str, str]) -> None:
    # No shrinking: a failure is reported as found (shrinking a slow one takes minutes).
    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
              print_blob=False)  # fmt: skip
    @given(case=strategy)
    def run(case: Case) -> None:
        case.call_and_validate(base_url=url, headers=auth, checks=CHECKS, timeout=20)

    try:
        run()
    except Unsatisfiable:
        raise
    except Exception as exc:  # schemathesis raises its own failure groups
        raise AssertionError(str(exc)[:4000]) from exc


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json"])
def test_the_probes_and_the_document_need_no_token(served: Served, path: str) -> None:
    with served.client(None) as http:
        assert http.get(path).status_code == 200
