"""Attachments as stored, as read from files and as sent: what the CLI tests do not reach."""

from __future__ import annotations

import base64

import pytest

from runner.llm import ImagePart, LLMRequest, Message, OpenAICompatibleLLM, TextPart
from runner.session.attachments import AttachmentError, image_type, read_attachments
from runner.session.prompt import content_part
from runner.state import Attachment, Session, UserTurn


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (b"\x89PNG\r\n\x1a\n....", "image/png"),
        (b"\xff\xd8\xff\xe0....", "image/jpeg"),
        (b"GIF87a....", "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x10\x00\x00\x00WAVEfmt ", None),
        (b"plain text", None),
    ],
)
def test_images_are_known_by_their_bytes(data, mime):
    assert image_type(data) == mime


def test_files_become_attachments_in_order(tmp_path):
    (tmp_path / "photo.JPG").write_bytes(b"\xff\xd8\xff\xe0 jpeg")
    (tmp_path / "notes.txt").write_text("héllo", encoding="utf-8")
    image, text = read_attachments([tmp_path / "photo.JPG", tmp_path / "notes.txt"])
    assert (image.kind, image.name, image.mime_type) == ("image", "photo.JPG", "image/jpeg")
    assert base64.b64decode(image.data) == b"\xff\xd8\xff\xe0 jpeg"
    assert (text.kind, text.data) == ("text", "héllo")


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"", "the file is empty"), (b"a\x00b", "it holds NUL bytes")],
)
def test_empty_and_nul_files_are_refused(tmp_path, data, message):
    (tmp_path / "f").write_bytes(data)
    with pytest.raises(AttachmentError, match=message):
        read_attachments([tmp_path / "f"])


def test_a_directory_is_not_an_attachment(tmp_path):
    with pytest.raises(AttachmentError, match="it is not a regular file"):
        read_attachments([tmp_path])


def test_a_user_turn_written_before_attachments_still_loads():
    session = Session.start("a", "h", "hi")
    document = session.model_dump(mode="json")
    del document["turns"][0]["attachments"]
    loaded = Session.model_validate(document)
    assert isinstance(loaded.turns[0], UserTurn) and loaded.turns[0].attachments == []


def test_attachments_become_parts_and_the_openai_body_lists_them_after_the_text():
    image = Attachment(kind="image", name="p.png", mime_type="image/png", data="iVBO")
    text = Attachment(kind="text", name="n.txt", mime_type="text/plain", data="words")
    parts = (content_part(image), content_part(text))
    assert parts == (ImagePart("image/png", "iVBO"), TextPart("Attached file n.txt:\nwords"))
    llm = OpenAICompatibleLLM("http://127.0.0.1:9", "m")
    body = llm.body(LLMRequest("", (Message("user", "look", parts=parts), Message("user", "x"))))
    assert body["messages"] == [
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            {"type": "text", "text": "Attached file n.txt:\nwords"}]},
        {"role": "user", "content": "x"},
    ]  # fmt: skip
