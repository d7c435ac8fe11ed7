"""Files given with a prompt (`--attach FILE`): images go to the model as image parts,
UTF-8 text files as text parts, within size caps.

An image is recognised by its bytes (the PNG, JPEG, GIF and WebP signatures), whatever
its name says; a file named like an image whose bytes are not one is refused, and so is
any other file that is not UTF-8 text (the model could not read it). Each refusal names
the file and the rule or the limit it broke.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path

from runner.state import Attachment

MIB = 1024 * 1024
#: Largest image, largest text file, and all the files of one prompt together (bytes).
MAX_IMAGE_BYTES = 5 * MIB
MAX_TEXT_BYTES = 1 * MIB
MAX_TOTAL_BYTES = 20 * MIB
#: Extensions that promise an image (checked against the bytes).
IMAGE_EXTENSIONS = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                    ".gif": "image/gif", ".webp": "image/webp"}  # fmt: skip


class AttachmentError(ValueError):
    """A file that cannot be attached; the message names it and says why."""


def read_attachments(paths: Iterable[Path | str]) -> list[Attachment]:
    """The files as attachments, in order; AttachmentError for the first one refused."""
    attachments: list[Attachment] = []
    total = 0
    for path in map(Path, paths):
        attachment, size = _read(path)
        total += size
        if total > MAX_TOTAL_BYTES:
            raise AttachmentError(
                f"attachment {path}: the attachments come to {_mib(total)} with it, over the"
                f" {_mib(MAX_TOTAL_BYTES)} limit for all the files of one prompt"
            )
        attachments.append(attachment)
    return attachments


def image_type(data: bytes) -> str | None:
    """The MIME type of an image the model accepts, from its signature; None otherwise."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _read(path: Path) -> tuple[Attachment, int]:
    if not path.is_file():
        why = "it does not exist" if not path.exists() else "it is not a regular file"
        raise AttachmentError(f"attachment {path}: cannot attach it: {why}")
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_IMAGE_BYTES + 1)
    except OSError as exc:
        raise AttachmentError(f"attachment {path}: cannot read it: {exc.strerror}") from None
    if not data:
        raise AttachmentError(f"attachment {path}: the file is empty")
    mime = image_type(data)
    if mime is not None:
        if len(data) > MAX_IMAGE_BYTES:
            raise _too_large(path, "an image", MAX_IMAGE_BYTES)
        encoded = base64.b64encode(data).decode("ascii")
        return Attachment(kind="image", name=path.name, mime_type=mime, data=encoded), len(data)
    named = IMAGE_EXTENSIONS.get(path.suffix.lower())
    if named is not None:
        raise AttachmentError(f"attachment {path}: named like {named} but its bytes are not"
                              " a PNG, JPEG, GIF or WebP image")  # fmt: skip
    if len(data) > MAX_TEXT_BYTES:
        raise _too_large(path, "a text file", MAX_TEXT_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AttachmentError(
            f"attachment {path}: neither an image (PNG, JPEG, GIF, WebP) nor UTF-8 text"
            f" (byte {exc.start} is not UTF-8); binary files cannot be attached"
        ) from None
    if "\x00" in text:
        raise AttachmentError(f"attachment {path}: neither an image nor text (it holds NUL"
                              " bytes); binary files cannot be attached")  # fmt: skip
    attachment = Attachment(kind="text", name=path.name, mime_type="text/plain", data=text)
    return attachment, len(data)


def _too_large(path: Path, what: str, limit: int) -> AttachmentError:
    size = path.stat().st_size
    return AttachmentError(f"attachment {path}: {_mib(size)} is over the {_mib(limit)} limit"
                           f" for {what}")  # fmt: skip


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"
