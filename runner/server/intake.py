"""What `POST /v1/sessions` takes in: the agent (a file in --agents DIR, or an inline
definition for an operator, held to inline.py's rules) and the attachments (checked by
the rules of `session start --attach`, runner.session.attachments). Every refusal is a
422 naming its field (403 for what an inline agent may not do)."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runner.llm.keys import ApiKeys
from runner.server.auth import Grant
from runner.server.inline import InlineRules, check_inline
from runner.server.problems import Problem
from runner.session import Agent, AgentError, load_agent, parse_agent
from runner.session.agent import EnvironmentProvider, ScriptedProvider
from runner.session.attachments import AttachmentError, add_to_total, attachment_from_bytes
from runner.state import Attachment


class AttachmentBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=255, pattern=r"^[^/\\\x00]+$",
                      description="the file's name, without directories")  # fmt: skip
    data: str = Field(description="the file's bytes, base64 (RFC 4648, with padding)")
    mime_type: str | None = Field(
        None, description="if given, what the bytes must be: the image's type, or text/*"
    )


class MediaBody(BaseModel):
    """agents-server's attachment (`media` on create): the same checks as `attachments`."""

    model_config = ConfigDict(extra="forbid")
    mime: str = Field(min_length=1, max_length=255, description="the bytes' media type")
    base64: str = Field(description="the file's bytes, base64 (RFC 4648, with padding)")
    filename: str | None = Field(None, min_length=1, max_length=255,
                                 pattern=r"^[^/\\\x00]+$")  # fmt: skip


def as_attachments(media: list[MediaBody]) -> list[AttachmentBody]:
    """`media` as our attachments (one without a file name is called `attachment-<n>`)."""
    return [AttachmentBody(name=m.filename or f"attachment-{i}", data=m.base64,
                           mime_type=m.mime) for i, m in enumerate(media)]  # fmt: skip


#: The longest agent file name or slug looked up (a file system's name limit): a longer
#: one is no agent, not an error of the file system's (ENAMETOOLONG).
MAX_NAME = 255


class AgentFiles:
    """The agent files of --agents DIR as the loader read them, each kept while it is
    unchanged (its mtime and size): a create by name or slug reads a file, and asks its
    bash toolboxes' scripts to `describe` themselves on the host, once rather than on
    every request (an unknown slug would otherwise load the whole directory each time).
    At most `limit` files are kept; the oldest read goes first."""

    def __init__(self, keys: ApiKeys | None = None, limit: int = 256) -> None:
        self.keys, self.limit = keys, limit
        self._kept: dict[Path, tuple[tuple[int, int], Agent | AgentError]] = {}

    def load(self, path: Path) -> Agent:
        """`load_agent(path, keys)`, from the last read while the file is unchanged."""
        try:
            stat = path.stat()
        except OSError as exc:
            raise AgentError(f"cannot read agent file {path}: {exc.strerror}") from None
        stamp = (stat.st_mtime_ns, stat.st_size)
        kept = self._kept.get(path)
        if kept is None or kept[0] != stamp:
            try:
                read: Agent | AgentError = load_agent(path, self.keys)
            except AgentError as exc:
                read = exc
            self._kept.pop(path, None)
            while len(self._kept) >= self.limit:
                self._kept.pop(next(iter(self._kept)))
            kept = self._kept[path] = (stamp, read)
        if isinstance(kept[1], AgentError):
            raise kept[1]
        return kept[1]


def agent_of(agent: str | dict[str, Any], agents_dir: Path | None, who: Grant | None,
             inline: InlineRules | None = None,
             files: AgentFiles | None = None) -> Agent:  # fmt: skip
    """The agent a new session runs (blocking: it may read files): an inline definition,
    a file name in `agents_dir`, or the slug of an agent one of its files holds (as
    agents-server names its agents: {"agent": "weather"})."""
    if isinstance(agent, dict):
        return _inline(agent, who, inline or InlineRules())
    files = files or AgentFiles()
    if agents_dir is None:
        raise Problem(422, "no_agents", "body.agent: the server has no --agents DIR to take"
                      " agent files from")  # fmt: skip
    path = agents_dir / agent
    named = (0 < len(agent) <= MAX_NAME and "/" not in agent and "\\" not in agent
             and "\x00" not in agent and not agent.startswith("."))  # fmt: skip
    if named and path.is_file():
        try:
            return files.load(path)
        except AgentError as exc:  # the operator's file, not the caller's mistake, but named
            raise Problem(422, "invalid_agent", f"body.agent: {exc}") from exc
    found = by_slug(agents_dir, agent, files) if named else None
    if found is None:
        raise Problem(404, "unknown_agent", f"body.agent: no agent {agent[:120]!r}: neither"
                      " a file in the server's agents directory nor the slug of one")  # fmt: skip
    return found


def agents_in(agents_dir: Path, files: AgentFiles) -> dict[str, list[tuple[Path, Agent]]]:
    """Every agent file (`*.json`) of the directory by its agent's slug, as the loader
    reads it (files that are not agents are passed over, as at startup)."""
    found: dict[str, list[tuple[Path, Agent]]] = {}
    for path in sorted(agents_dir.glob("*.json")):
        try:
            agent = files.load(path)
        except AgentError:
            continue
        found.setdefault(agent.slug, []).append((path, agent))
    return found


def by_slug(agents_dir: Path, slug: str, files: AgentFiles) -> Agent | None:
    """The agent whose slug is `slug`; a slug several files share is refused (409),
    naming them: agents-server's slugs are unique, ours are unique or named by file."""
    entries = agents_in(agents_dir, files).get(slug, [])
    if len(entries) > 1:
        names = ", ".join(path.name for path, _ in entries)
        raise Problem(409, "ambiguous_agent", f"body.agent: {slug[:120]!r} is the slug of"
                      f" several agent files ({names}); name the file")  # fmt: skip
    return entries[0][1] if entries else None


def _inline(document: dict[str, Any], who: Grant | None, rules: InlineRules) -> Agent:
    if who is not None and who.role != "operator":
        raise Problem(403, "forbidden", f"the {who.role} token {who.name!r} may not give an"
                      " inline agent definition; name a file in the agents directory")  # fmt: skip
    try:
        agent = parse_agent(document, "body.agent")
    except AgentError as exc:
        raise Problem(422, "invalid_agent", str(exc)) from exc
    provider = agent.provider
    if isinstance(provider, EnvironmentProvider) and provider.api_key_id is not None:
        # The keys are the operator's, for the agent files of --agents DIR: an inline
        # agent naming one could send it to a model URL of its own choosing.
        raise Problem(422, "invalid_agent", "body.agent: apiKeyId: an inline agent names no"
                      " key; name an agent file of the server's agents directory")  # fmt: skip
    scripted = [i for i, tool in enumerate(agent.tools) if tool.script is not None]
    if scripted:
        # The server would read the file a request names and ship it to the sandbox.
        raise Problem(422, "invalid_agent", f"body.agent: tools[{scripted[0]}].script: an"
                      " inline agent has no bash toolbox; name an agent file of the"
                      " server's agents directory")  # fmt: skip
    if isinstance(provider, ScriptedProvider) and provider.responses is None:
        # load_agent reads a script file beside the agent file; an inline one has none,
        # and the server reads no file a request names.
        raise Problem(422, "invalid_agent", "body.agent.provider.script: an inline agent"
                      " gives its script inline as `responses`")  # fmt: skip
    check_inline(agent, rules)
    return agent


def attachments_of(bodies: list[AttachmentBody]) -> list[Attachment]:
    """The attachments as stored, in order; a 422 naming the first one refused."""
    out: list[Attachment] = []
    total = 0
    for index, body in enumerate(bodies):
        where = f"body.attachments[{index}]"
        try:
            data = base64.b64decode(body.data, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise Problem(422, "invalid_attachment", f"{where}.data: not base64: {exc}") from exc
        label = f"{where} ({body.name[:80]})"
        try:
            attachment = attachment_from_bytes(body.name, data, label)
            total = add_to_total(total, len(data), label)
        except AttachmentError as exc:
            raise Problem(422, "invalid_attachment", str(exc)) from exc
        out.append(_with_declared_type(attachment, body.mime_type, where))
    return out


def _with_declared_type(attachment: Attachment, declared: str | None, where: str) -> Attachment:
    if declared is None:
        return attachment
    media = declared.split(";")[0].strip().lower()
    if attachment.kind == "text" and media.startswith("text/"):
        return attachment.model_copy(update={"mime_type": media})
    if media != attachment.mime_type:
        raise Problem(422, "invalid_attachment", f"{where}.mime_type: {declared[:80]!r}, but"
                      f" the bytes are {attachment.mime_type}")  # fmt: skip
    return attachment
