"""What the commands share: option types, the store a command opens and what it needs of
it, the agent a session runs with, and one way to turn expected failures into a line on
stderr (exit 2 for bad input, 1 for the rest).

The store is an SQLite file (leases: any number of commands and workers may share it), or
a directory for the file-based store. The file store has no leases, so the session
commands run on it in single-process mode: only one command at a time may advance its
sessions, and commands that need leases (`worker`) refuse it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import typer
from rich.console import Console

from envelopes import controls
from runner.cli.app import fail
from runner.cli.pooling import with_pool
from runner.cli.settings import DEFAULT_STORE as DEFAULT_STORE  # the commands import it here
from runner.cli.settings import CommandSettings, EngineSettings, WorkerSettings, current, env_name
from runner.isolation.audit import AuditError
from runner.isolation.docker import RUNTIME_NAME
from runner.llm import LLMError
from runner.llm.keys import AGENTS_EXE_KEYS_FILE, ApiKeys, KeysError, read_keys_file
from runner.session import (
    Agent,
    AgentError,
    Engine,
    LeaseBusy,
    SessionError,
    StoreCapabilityError,
    load_agent,
    require_durable,
)
from runner.session.attachments import AttachmentError, read_attachments
from runner.session.audit import AUDIT_FORMS, AuditSetting, AuditSettingError, parse_audit
from runner.session.runtime import RunnerFactory
from runner.state import Attachment
from runner.stores import DurableStore, SessionStore, StoreError, StoreUnavailable
from runner.stores import open_store as open_location
from runner.stores.locations import missing_paths

#: The store of every command not given --store or AGENTS_RUNNER_STORE (DEFAULT_STORE, from
#: runner.cli.settings): under the current directory. Said on stderr whenever it is used.
STORE_VARIABLE = env_name("store")

log = logging.getLogger("runner.cli")


StoreOption = Annotated[
    str,
    typer.Option("--store", envvar=STORE_VARIABLE,
                 help="the store: PATH or sqlite:PATH (SQLite), an existing directory or"
                      " file:DIR (the file store: one command at a time may advance its"
                      " sessions), postgresql://USER@HOST/DB (PostgreSQL: workers on many"
                      " hosts), or LOC,LOC (a composite whose first store takes the"
                      " writes)"),
]  # fmt: skip


JsonOption = Annotated[bool, typer.Option("--json", help="print JSON for machines")]


# The options of the commands that advance due sessions (`worker`, `serve`).
DEFAULT_CONCURRENCY = 4
DEFAULT_POLL_SECONDS = 0.5

ConcurrencyOption = Annotated[
    int, typer.Option("--concurrency", min=1, max=256, help="sessions advanced at once")
]


PollSecondsOption = Annotated[
    float, typer.Option("--poll-seconds", min=0.01, help="pause when nothing is due")
]


#: What `--pool-size` and `--pool-idle-seconds` read when not given (runner/cli/pooling.py).
POOL_SIZE_VARIABLE = env_name("pool_size")
POOL_IDLE_VARIABLE = env_name("pool_idle_seconds")

PoolSizeOption = Annotated[
    int | None,
    typer.Option("--pool-size", min=0, max=64, envvar=POOL_SIZE_VARIABLE,
                 help="warm containers kept ready for Docker-isolated calls, per image and"
                      " limits (0: each call starts its own container; unset: each docker"
                      " spec's `pool` setting)"),
]  # fmt: skip


PoolIdleOption = Annotated[
    float | None,
    typer.Option("--pool-idle-seconds", min=0.1, envvar=POOL_IDLE_VARIABLE,
                 help="a warm pool's shelf no call used for this long gives back its idle"
                      " containers (default 180)"),
]  # fmt: skip


#: What `--runtime` reads when not given (runner/cli/pooling.py).
RUNTIME_VARIABLE = env_name("runtime")


def _runtime_name(value: str | None) -> str | None:
    if value is not None and not RUNTIME_NAME.fullmatch(value):
        raise typer.BadParameter(f"{value!r} is not a runtime name (runc, runsc)")
    return value


RuntimeOption = Annotated[
    str | None,
    typer.Option("--runtime", envvar=RUNTIME_VARIABLE, callback=_runtime_name,
                 help="the engine's runtime for every Docker-isolated call, whatever the"
                      " agent file says: runc or runsc (gVisor; scripts/lib/engine.sh"
                      " registers it); unset: each docker spec's `runtime` (default runc)"),
]  # fmt: skip


def parse_audit_option(text: str) -> AuditSetting:
    try:
        return parse_audit(text, where="--audit")
    except AuditSettingError as exc:
        raise typer.BadParameter(str(exc)) from None


def _engine_fail_mode(value: AuditSetting | None) -> AuditSetting | None:
    """`--audit`'s setting, failing closed when AGENTS_RUNNER_AUDIT_FAIL says so."""
    if value is None:
        return None
    return replace(value, fail_closed=current(EngineSettings).fail_closed)


AuditOption = Annotated[
    AuditSetting | None,
    typer.Option("--audit", envvar=env_name("audit"), parser=parse_audit_option,
                 callback=_engine_fail_mode, metavar="WHERE",
                 help=f"where each isolated call's audit record goes: {AUDIT_FORMS}"
                      " (default: the store; off logs a warning)"),
]  # fmt: skip


AgentFileOption = Annotated[
    Path | None, typer.Option("--agent-file", help="the agent definition (JSON)")
]


ApiKeysOption = Annotated[
    Path | None,
    typer.Option("--api-keys", metavar="FILE", help="agents-exe's keys file, where an agent"
                 " file's apiKeyId is looked up (default: AGENTS_RUNNER_API_KEYS, else"
                 " ~/.config/agents-exe/secret-keys if it exists)"),
]  # fmt: skip


SessionId = Annotated[str, typer.Argument(help="the session id")]


AttachOption = Annotated[
    list[Path] | None,
    typer.Option("--attach", help="attach FILE to the prompt (repeatable): an image (PNG,"
                 " JPEG, GIF, WebP; 5 MiB) or a UTF-8 text file (1 MiB); 20 MiB in all"),
]  # fmt: skip


ResumeOption = Annotated[
    bool, typer.Option("--resume", help="then continue the session here, unless a live"
                       " process holds it (which then continues it)"),
]  # fmt: skip


def stdout_console() -> Console:
    """A rich Console on the current stdout (long ids stay on one line). A new one for each
    thing printed: it is cheap, and holds only what it detected of the stream."""
    return Console(highlight=False, soft_wrap=True)


T = TypeVar("T")


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn every expected failure into one line on stderr (2: bad input, 1: the rest)."""
    try:
        yield
    except (AgentError, AttachmentError, SessionError, StoreCapabilityError) as exc:
        fail(str(exc), 2)
    except (StoreError, LLMError, LeaseBusy, AuditError) as exc:
        fail(str(exc), 1)


def store_is_default(location: str) -> bool:
    """Whether a command's store is the default one (given neither by --store nor by
    AGENTS_RUNNER_STORE, or given as the default's own name)."""
    return location == DEFAULT_STORE


def _missing_store(location: str, missing: list[str]) -> str:
    """Why a command that needs an existing store refuses `location`, and what to do."""
    default = store_is_default(location)
    where = " (the default store: --store LOCATION or AGENTS_RUNNER_STORE names another)"
    message = (f"there is no store at {missing[0]}{where if default else ''}; nothing was"
               " created: a command that starts a session (`run`, `session start`)"
               " creates its store")  # fmt: skip
    folder = Path(DEFAULT_STORE).parent
    others = sorted(p.as_posix() for p in folder.glob("*.db")) if default else []
    if others:
        message += "; stores here: " + ", ".join(f"--store {name}" for name in others)
    return message


@contextmanager
def open_sessions(
    location: str, wait_s: float = 0.0, *, create: bool = False
) -> Iterator[SessionStore]:
    """The store at `location` for the session commands, closed when the command is done
    with it: a DurableStore, or a file store (then single-process: see the module doc).
    A store that does not exist is refused (nothing is created) unless `create` (the
    commands that start sessions, workers and servers). The default store is named on
    stderr. With `wait_s`, a store whose server does not answer yet is tried again."""
    if not create and (missing := missing_paths(location)):
        fail(_missing_store(location, missing))
    if store_is_default(location):
        typer.echo(f"agents-runner: store: {location} (the default; --store LOCATION or"
                   f" {STORE_VARIABLE} names another)", err=True)  # fmt: skip
    with user_errors():
        store = _open_waiting(location, wait_s)
    try:
        yield store
    finally:
        store.close()


def _open_waiting(location: str, wait_s: float) -> SessionStore:
    """open_location, trying again (with backoff) while the store's server is unavailable,
    up to `wait_s`: a worker may start before its database, or during its restart."""
    give_up, pause = time.monotonic() + wait_s, 0.5
    while True:
        try:
            return open_location(location)
        except StoreUnavailable as exc:
            left = give_up - time.monotonic()
            if left <= 0:
                raise
            log.warning("waiting for the store (%.0f s left): %s", left, exc)
            time.sleep(min(pause, left))
            pause = min(pause * 2, 5.0)


@contextmanager
def open_store(location: str, purpose: str | None = None) -> Iterator[DurableStore]:
    """The store at `location`, for a command that needs leases (the worker): a store
    that cannot give them is refused, saying why (`purpose`: what needs them)."""
    purpose = (
        purpose or "a command that advances sessions beside other processes, such as `worker`,"
    )
    wait_s = current(WorkerSettings).store_wait_seconds  # AGENTS_RUNNER_STORE_WAIT_SECONDS
    with open_sessions(location, wait_s, create=True) as store:
        with user_errors():
            durable = require_durable(store, purpose)
        yield durable


def session_engine(
    store: SessionStore, runners: RunnerFactory | None = None, audit: AuditSetting | None = None
) -> Engine:
    """The Engine a command advances `store`'s sessions with: single-process when the
    store has no leases (a file store); its isolated calls made by `runners` (None: each
    call its own runner) and audited as `audit` says (`--audit`; None: AGENTS_RUNNER_AUDIT's
    setting, else the store), the rest as the command's settings say (lease length, egress
    network: runner/cli/settings.py)."""
    settings = current(EngineSettings).agent_settings(audit)
    return Engine(store, runners, settings.audit, lease_s=settings.lease_s,
                  egress_network=settings.egress_network,
                  single_process=not isinstance(store, DurableStore))  # fmt: skip


def run_engine(
    store: SessionStore,
    pool_size: int | None,
    action: Callable[[Engine], Awaitable[T]],
    audit: AuditSetting | None = None,
    runtime: str | None = None,
) -> T:
    """`action(engine)` with the command's one Engine (session_engine), its
    Docker-isolated calls served from a warm pool of `pool_size` (`--pool-size`; None:
    each docker spec's `pool`; 0: none), removed before this returns, under `runtime` when
    one is forced (`--runtime`)."""

    async def engine(runners: RunnerFactory | None) -> T:
        return await action(session_engine(store, runners, audit))

    async def pooled() -> T:
        return await with_pool(pool_size, engine, runtime)

    return run_async(pooled)


def api_keys(obj: Any = None) -> ApiKeys:
    """The keys an agent file's `apiKeyId` names: agents-exe's keys file (`--api-keys
    FILE`, which the app's callback keeps in `obj`, the root context's; else
    AGENTS_RUNNER_API_KEYS; else ~/.config/agents-exe/secret-keys if there is one), and
    the AGENTS_EXE_KEY_<ID> variables over it. A bad file fails the command."""
    given = obj.get("api_keys") if isinstance(obj, dict) else None
    chosen = given or current(CommandSettings).api_keys
    path = Path(chosen).expanduser() if chosen else Path.home() / AGENTS_EXE_KEYS_FILE
    keys = ApiKeys()
    if chosen or path.is_file():
        try:
            keys = read_keys_file(path)
        except KeysError as exc:
            fail(f"--api-keys: {exc}", 2)
    return keys.with_variables(os.environ)


def given_agent(path: Path | None, obj: Any = None) -> Agent | None:
    """The agent of `--agent-file`, if given, in asynchronous mode: it replaces the
    session's stored one (checked against it when the session advances)."""
    if path is None:
        return None
    keys = api_keys(obj)
    with user_errors():
        return load_agent(path, keys).with_mode("asynchronous")


def agent_from_file(path: Path | None, obj: Any = None) -> Agent:
    if path is None:
        fail("--agent-file is required (before or after the command name)")
    keys = api_keys(obj)
    with user_errors():
        return load_agent(path, keys)


def read_attached(paths: list[Path] | None) -> list[Attachment]:
    """The `--attach` files, read and checked before anything is stored."""
    with user_errors():
        return read_attachments(paths or [])


def run_async(function: Callable[..., Awaitable[T]], *args: Any) -> T:
    with user_errors():
        return anyio.run(function, *args)


def emit(document: dict[str, Any], as_json: bool, human: Callable[[], None]) -> None:
    """`document` as one line of JSON (`--json`; controls escaped: envelopes.controls),
    or what `human` prints."""
    if as_json:
        typer.echo(controls.dumps(document))
    else:
        human()


def read_prompt(prompt: str | None, file: Path | None) -> str:
    if (prompt is None) == (file is None):
        fail("give the user's message with exactly one of --prompt TEXT or --file FILE")
    if file is not None:
        try:
            prompt = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"--file: cannot read {file}: {exc}")
    assert prompt is not None
    if not prompt.strip():
        fail("the user's message is empty")
    return prompt
