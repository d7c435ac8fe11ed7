"""Files given with a prompt (`--attach FILE`): images go to the model as image parts,
UTF-8 text files as text parts, within size caps.

An image is recognised by its bytes (the PNG, JPEG, GIF and WebP signatures), whatever
its name says; a file named like an image whose bytes are not one is refused, and so is
any other file that is not UTF-8 text (the model could not read it). Each refusal names
the file and the rule or the limit it broke. The CLI reads files (`read_attachments`);
the server checks the bytes a request sends (`attachment_from_bytes`) by the same rules.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from runner.state import Attachment

MIB = 1024 * 1024
#: Largest image, largest text file, and all the files of one prompt together (bytes).
MAX_IMAGE_BYTES = 5 * MIB
MAX_TEXT_BYTES = 1 * MIB
MAX_TOTAL_BYTES = 20 * MIB
#: Extensions that promise an image (checked against the bytes).
IMAGE_EXTENSIONS: Mapping[str, str] = MappingProxyType(
    {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
     ".webp": "image/webp"}
)  # fmt: skip


class AttachmentError(ValueError):
    """A file that cannot be attached; the message names it and says why."""


def read_attachments(paths: Iterable[Path | str]) -> list[Attachment]:
    """The files as attachments, in order; AttachmentError for the first one refused."""
    attachments: list[Attachment] = []
    total = 0
    for path in map(Path, paths):
        attachment, size = _read(path)
        total = add_to_total(total, size, f"attachment {path}")
        attachments.append(attachment)
    return attachments


def add_to_total(total: int, size: int, label: str) -> int:
    """`total + size`, refused over the limit for all the files of one prompt."""
    total += size
    if total > MAX_TOTAL_BYTES:
        raise AttachmentError(
            f"{label}: the attachments come to {_mib(total)} with it, over the"
            f" {_mib(MAX_TOTAL_BYTES)} limit for all the files of one prompt"
        )
    return total


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
    # Only the first bytes past the largest limit are read; a refusal gives the real size.
    size = len(data) if len(data) <= MAX_IMAGE_BYTES else path.stat().st_size
    return attachment_from_bytes(path.name, data, f"attachment {path}", size), size


def attachment_from_bytes(
    name: str, data: bytes, label: str, size: int | None = None
) -> Attachment:
    """`data`, a file named `name`, checked and made an attachment; AttachmentError
    (its message starting with `label`) when it breaks a rule or a limit. `size`: the
    file's whole size when `data` holds only its first bytes."""
    size = len(data) if size is None else size
    if not data:
        raise AttachmentError(f"{label}: the file is empty")
    mime = image_type(data)
    if mime is not None:
        if size > MAX_IMAGE_BYTES:
            raise _too_large(label, size, "an image", MAX_IMAGE_BYTES)
        encoded = base64.b64encode(data).decode("ascii")
        return Attachment(kind="image", name=name, mime_type=mime, data=encoded)
    named = IMAGE_EXTENSIONS.get(Path(name).suffix.lower())
    if named is not None:
        raise AttachmentError(f"{label}: named like {named} but its bytes are not"
                              " a PNG, JPEG, GIF or WebP image")  # fmt: skip
    if size > MAX_TEXT_BYTES:
        raise _too_large(label, size, "a text file", MAX_TEXT_BYTES)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AttachmentError(
            f"{label}: neither an image (PNG, JPEG, GIF, WebP) nor UTF-8 text"
            f" (byte {exc.start} is not UTF-8); binary files cannot be attached"
        ) from None
    if "\x00" in text:
        raise AttachmentError(f"{label}: neither an image nor text (it holds NUL"
                              " bytes); binary files cannot be attached")  # fmt: skip
    return Attachment(kind="text", name=name, mime_type="text/plain", data=text)


def _too_large(label: str, size: int, what: str, limit: int) -> AttachmentError:
    return AttachmentError(f"{label}: {_mib(size)} is over the {_mib(limit)} limit"
                           f" for {what}")  # fmt: skip


def _mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"
