"""The tokens file's roles: "claimer", and "worker", its old name, still read as
"claimer" so that a tokens file written before the rename keeps its meaning."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import httpx
import pytest

from runner.server import create_app
from runner.server.auth import AuthError, load_tokens
from runner.stores import SQLiteStore
from tests.server.conftest import agents_dir, serving

SECRET = "old-name-secret"


def tokens_file(tmp_path: Path, role: str) -> Path:
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps([{"name": "ci", "role": role, "sha256": digest,
                                 "tools": ["fetch_remote_a"]}]))  # fmt: skip
    return path


@pytest.mark.parametrize("role", ["claimer", "worker"])
def test_the_claimer_role_is_read_under_its_name_and_its_old_one(tmp_path: Path, role: str):
    [grant] = load_tokens(tokens_file(tmp_path, role))
    assert grant.role == "claimer"
    assert grant.may_use("fetch_remote_a") and not grant.may_use("fetch_remote_b")


def test_an_old_tokens_file_still_lets_its_claimer_claim(tmp_path: Path):
    grants = load_tokens(tokens_file(tmp_path, "worker"))
    with SQLiteStore(tmp_path / "state.db") as store, \
            serving(create_app(store, agents_dir(tmp_path), grants)) as url, \
            httpx.Client(base_url=url, headers={"Authorization": f"Bearer {SECRET}"},
                         timeout=30) as http:  # fmt: skip
        assert http.post("/v1/claims", json={"tools": ["fetch_remote_a"]}).json() == {"claims": []}
        refused = http.post("/v1/claims", json={"tools": ["fetch_remote_b"]})
        assert refused.status_code == 403, refused.text
        assert "the claimer token 'ci' is not granted" in refused.json()["detail"]


def test_an_unknown_role_names_the_ones_there_are(tmp_path: Path):
    with pytest.raises(AuthError, match="'operator', 'claimer' or 'viewer'"):
        load_tokens(tokens_file(tmp_path, "god"))
