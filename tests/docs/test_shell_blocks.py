"""Every shell block of README.md and docs/*.md is run by a test, or exempt here with the
reason (issue 25, item 8). A block is named by its page, the heading it sits under and
its index among the shell blocks there; a new block fails this test until it is placed."""

from __future__ import annotations

import pytest

from tests.docs.blocks import ROOT, Block, pages, shell_blocks

#: (page, heading, index) -> the test module that runs that block as written.
RUN: dict[tuple[str, str, int], str] = {
    ("README.md", "## A five-minute tour", 0): "tests/docs/test_readme.py",
    ("README.md", "## A five-minute tour", 1): "tests/docs/test_readme.py",
    ("README.md", "## Coming from agents-exe", 0): "tests/docs/test_readme.py",
    ("docs/isolation.md", "## Run one call", 0): "tests/docs/test_run_one_call.py",
    ("docs/isolation.md", "## Run one call", 1): "tests/docs/test_run_one_call.py",
    ("docs/isolation.md", "## Run one call", 2): "tests/docs/test_run_one_call.py",
    ("docs/agents-exe.md", "## The walkthrough", 0): "tests/docs/test_coming_from_agents_exe.py",
    ("docs/server.md", "## The walkthrough", 0): "tests/docs/test_server_walkthrough.py",
    ("docs/workers.md", "### A worker in any language", 0): "tests/conformance/test_examples.py",
    ("docs/workers.md", "### A worker in any language", 1): "tests/conformance/test_examples.py",
}

OPERATIONS = (
    "each command is checked against the CLI as written (command path, options,"
    " argument count) by tests/durability/test_operations_doc.py; SESSION_ID,"
    " TOKEN and STORE are placeholders; the crash matrix runs the commands"
)
#: (page, heading, index) -> why no test runs the block; (page, "", -1): the whole page.
EXEMPT: dict[tuple[str, str, int], str] = {
    ("README.md", "## Two commands", 0): "scripts/test is the test command itself;"
    " tests/docs/test_demo_script.py runs scripts/demo",
    ("docs/getting-started.md", "## Two commands", 0): "as the README's two commands",
    ("README.md", "## A five-minute tour", 2): "a server left running and an interactive"
    " console; docs/server.md's walkthrough runs serve end to end, tests/tui the console",
    ("docs/getting-started.md", "## The documentation site", 0): "a server for reading the"
    " docs; scripts/test builds the same site with --strict",
    ("docs/operations.md", "", -1): OPERATIONS,
    ("docs/sessions.md", "# Durable sessions", 0): "placeholders (SESSION_ID, TOKEN) a reader"
    " fills in; the same commands run as written in docs/agents-exe.md's walkthrough",
    ("docs/claims.md", "## Claiming: `POST /v1/claims`", 0): "a curl fragment against a"
    " running server and a claimer token; tests/server/test_claims.py drives the same API",
    ("docs/claims.md", "## Heartbeat: `POST /v1/claims/{claim}/heartbeat`", 0): "as the"
    " claiming fragment ($CLAIM comes from a claim)",
    (
        "docs/claims.md",
        "## Complete and fail: `POST /v1/claims/{claim}/complete`, `/fail`",
        0,
    ): "as the claiming fragment",
    ("docs/claims.md", "## A claimer in bash", 0): "starts examples/workers/claim-worker.sh"
    " against a server; tests/server/test_bash_worker.py runs that script",
    ("docs/envelope-v1.md", "## 9. Conformance: `agents-runner worker-check`", 0): "the"
    " battery on the example workers: tests/conformance/test_examples.py runs it on each",
    ("docs/envelope-v1.md", "## 9. Conformance: `agents-runner worker-check`", 1): "the"
    " battery's image against a worker image of the reader's (my/worker)",
    ("docs/envelope-v1.md", "## 9. Conformance: `agents-runner worker-check`", 2): "as"
    " block 0, with --strict (tests/conformance covers the strict level)",
    ("docs/workers.md", "## Writing a worker", 0): "the battery on the example workers:"
    " tests/conformance/test_examples.py runs it on each, locally and in Docker",
    ("docs/workers.md", "## Writing a worker", 1): "the battery's image against a worker"
    " image of the reader's (my/worker)",
    ("docs/performance.md", "# Performance", 0): "the bench takes minutes and loads the"
    " machine; tests/docs/test_performance.py checks the tables it produces",
    ("docs/performance.md", "# Performance", 1): "a bench run, then the generator on its"
    " file: tests/docs/test_performance.py runs gen-performance --add on a bench JSON",
    ("docs/scale-out.md", "## Topology", 0): "needs PostgreSQL on other hosts"
    " (db.internal); tests/multihost runs session workers on several hosts",
    ("docs/security.md", "## Runtime tier: gVisor (runsc)", 0): "installs runsc and reloads"
    " dockerd as root; tests/docker and tests/abuse run their runsc variants",
    ("docs/security.md", "## Egress with an allow-list", 0): "needs a reachable package"
    " index; tests/docker/test_egress.py runs the gateway against a local upstream",
    (
        "docs/security.md",
        "## Audit trail",
        0,
    ): "writes under /var/log; tests/runner/test_cli_audit.py"
    " runs the audit command on files and stores",
}


def every_block() -> list[Block]:
    return [block for page in pages() for block in shell_blocks(page)]


def key(block: Block) -> tuple[str, str, int]:
    return (block.page, block.heading, block.index)


@pytest.mark.parametrize("block", every_block(), ids=lambda b: f"{b.page}|{b.heading}|{b.index}")
def test_every_shell_block_is_run_or_exempt_with_a_reason(block: Block) -> None:
    exempt = EXEMPT.get(key(block)) or EXEMPT.get((block.page, "", -1))
    assert (key(block) in RUN) != bool(exempt), f"place this block in RUN or EXEMPT:\n{block.text}"


def test_the_lists_name_only_blocks_that_exist_and_tests_that_read_their_page() -> None:
    keys = {key(b) for b in every_block()}
    pages_with_blocks = {b.page for b in every_block()}
    for entry in EXEMPT:
        assert entry in keys or (entry[2] == -1 and entry[0] in pages_with_blocks), entry
    for (page, heading, _index), module in RUN.items():
        assert (page, heading, _index) in keys
        source = (ROOT / module).read_text(encoding="utf-8")
        # the module reads the block from where it lives, through tests/docs/blocks.py
        assert "blocks." in source and (page in source or heading in source), (module, page)
