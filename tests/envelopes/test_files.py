"""envelopes.files: the path rules, input files checked and written, `collect`, against
hostile names and symlink attacks on a real file system (tmp_path)."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from envelopes import files
from envelopes.files import (
    CollectLimitExceeded,
    FilesError,
    check_files,
    collect,
    glob_problem,
    matches_any,
    path_problem,
    write_files,
)
from envelopes.v1 import Collect, InputFile

GOOD_PATHS = [
    "a",
    "a/b.txt",
    "data/in.csv",
    ".hidden",
    "..a",
    "a..",
    "a.",
    "a b/c d",
    "ünïcode/名前.txt",
    "x" * 255,
    "é" * 127,  # 254 bytes
    "/".join(["a"] * 512)[:1023],
    "*",  # a literal name; only patterns give it a meaning
]
BAD_PATHS = {
    "": "is empty",
    "/etc/passwd": "absolute",
    "a//b": "empty component",
    "a/": "empty component",
    "./a": "'.' component",
    "a/./b": "'.' component",
    "..": "'..' component",
    "../x": "'..' component",
    "a/../../x": "'..' component",
    "a\x00b": "control character (U+0000)",
    "a\nb": "control character (U+000A)",
    "a\tb": "control character (U+0009)",
    "a\x1b[31m": "control character (U+001B)",
    "a\x7f": "control character (U+007F)",
    "a\x85": "control character (U+0085)",
    "a\\b": "backslash",
    "..\\..\\windows": "backslash",
    "evil\u202etxt.exe": "bidirectional-text control (U+202E)",
    "a\u2066b": "bidirectional-text control (U+2066)",
    "a\u061c": "bidirectional-text control (U+061C)",
    "a\u200f": "bidirectional-text control (U+200F)",
    "x" * 256: "component 1 is 256 bytes of UTF-8, over 255 bytes",
    "ok/" + "é" * 128: "component 2 is 256 bytes of UTF-8, over 255 bytes",
    "a/" * 512 + "b": "over 1024",
    "\udc80": "not valid UTF-8",
}


@pytest.mark.parametrize("path", GOOD_PATHS, ids=lambda p: repr(p)[:30])
def test_good_paths_obey_the_rules(path: str) -> None:
    assert path_problem(path) is None


@pytest.mark.parametrize(("path", "why"), BAD_PATHS.items(), ids=lambda p: repr(p)[:30])
def test_bad_paths_are_refused_with_the_reason(path: str, why: str) -> None:
    problem = path_problem(path)
    assert problem is not None and why in problem
    assert path not in problem or len(path) < 3  # the name is not echoed back


@pytest.mark.parametrize("value", [None, 5, b"a", ["a"]])
def test_a_path_must_be_a_string(value: object) -> None:
    assert path_problem(value) == "expected a string"


@pytest.mark.parametrize("path", GOOD_PATHS + list(BAD_PATHS), ids=lambda p: repr(p)[:30])
def test_the_models_give_the_same_verdict(path: str) -> None:
    """The pydantic models (the slow path, the runner) and this module agree on every
    name, so the worker's fast path never accepts what the model refuses."""
    try:
        InputFile(path=path, content="")
        model_ok = True
    except ValidationError:
        model_ok = False
    assert model_ok == (path_problem(path) is None)


GOOD_GLOBS = ["out/*.png", "**/*.txt", "report.txt", "a?c", "**", "out/**", "*/x/**/y*"]
BAD_GLOBS = ["[ab].txt", "a]", "/out/*", "../*", "out//*", "a\\*", "*\n"]


@pytest.mark.parametrize("pattern", GOOD_GLOBS + BAD_GLOBS)
def test_globs_follow_the_path_rules_plus_wildcards(pattern: str) -> None:
    problem = glob_problem(pattern)
    assert (problem is None) == (pattern in GOOD_GLOBS)
    try:
        Collect(patterns=[pattern])
        model_ok = True
    except ValidationError:
        model_ok = False
    assert model_ok == (problem is None)


# --- check_files ---------------------------------------------------------------------


def entry(path: str, content: str = "x", **more: object) -> dict:
    return {"path": path, "content": content, **more}


def test_files_decode_with_their_defaults() -> None:
    decoded = check_files(
        [
            entry("a.txt", "hé\n"),
            entry("bin/blob", base64.b64encode(b"\x00\xff").decode(), encoding="base64"),
            entry("run.sh", "#!/bin/sh\n", mode=0o755, unknown_member=True),
        ]
    )
    assert decoded == [
        ("a.txt", "hé\n".encode(), 0o644),
        ("bin/blob", b"\x00\xff", 0o644),
        ("run.sh", b"#!/bin/sh\n", 0o755),
    ]


@pytest.mark.parametrize(
    ("batch", "why"),
    [
        ([entry("a"), entry("a")], "files[1].path: the same path as files[0].path"),
        ([entry("Report.TXT"), entry("report.txt")], "once case-folded"),
        ([entry("straße"), entry("STRASSE")], "once case-folded"),
        ([entry("caf\u00e9"), entry("cafe\u0301")], "once case-folded and NFC"),
        ([entry("a"), entry("a/b")], "files[0].path: is a parent directory of files[1].path"),
        ([entry("a/b/c"), entry("A/B")], "files[1].path: is a parent directory of files[0]"),
        ([entry("../../etc/cron.d/x")], "files[0].path: has a '..' component"),
        ([entry("/etc/passwd")], "files[0].path: is absolute"),
        ([entry("ok"), entry("a\x00")], "files[1].path: has a control character"),
        ([entry("a", "abc", encoding="base64")], "not base64 (padded: the length"),
        ([entry("a", "ab!=", encoding="base64")], "not base64 (standard alphabet"),
        ([entry("a", "YQ==YQ==", encoding="base64")], "not base64 (standard alphabet"),
        ([entry("a", "====", encoding="base64")], "not base64 (standard alphabet"),
        ([entry("a", "x", encoding="utf-16")], "files[0].encoding"),
        ([entry("a", 5)], "files[0].content: expected a string"),
        ([entry("a", mode=0o4755)], "files[0].mode"),
        ([entry("a", mode=512)], "files[0].mode"),
        ([entry("a", mode=-1)], "files[0].mode"),
        ([entry("a", mode=True)], "files[0].mode"),
        ([entry("a", mode="644")], "files[0].mode"),
        (["a"], "files[0]: expected an object"),
        ({"path": "a"}, "files: expected an array"),
        ([entry(f"f{i}") for i in range(65)], "65 files, over the limit of 64"),
    ],
)
def test_bad_files_are_refused_naming_the_entry(batch: object, why: str) -> None:
    problem = check_files(batch)
    assert isinstance(problem, str) and why in problem, problem


def test_a_size_bomb_is_refused_before_anything_is_written() -> None:
    big = base64.b64encode(bytes(files.FILES_MAX_BYTES // 2 + 1)).decode()
    problem = check_files([entry("a", big, encoding="base64"), entry("b", big, encoding="base64")])
    assert problem == f"files: over {files.FILES_MAX_BYTES} bytes decoded in total (at files[1])"
    assert check_files([entry("a", "xyz")], max_bytes=2) == (
        "files: over 2 bytes decoded in total (at files[0])"
    )


# --- write_files ---------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "outside").mkdir()
    return tmp_path / "ws"


def outside(root: Path) -> Path:
    return root.parent / "outside"


def test_files_are_written_with_parents_and_exact_modes(root: Path) -> None:
    old = os.umask(0o077)  # the mode is set exactly, not through the umask
    try:
        write_files(str(root), [("a/b/c.txt", b"hi", 0o664), ("run", b"", 0o4755), ("z", b"", 0)])
    finally:
        os.umask(old)
    assert (root / "a/b/c.txt").read_bytes() == b"hi"
    assert stat.S_IMODE((root / "a/b/c.txt").stat().st_mode) == 0o664
    assert stat.S_IMODE((root / "run").stat().st_mode) == 0o755  # setuid masked off
    assert stat.S_IMODE((root / "z").stat().st_mode) == 0


def test_a_symlinked_directory_on_the_way_is_not_followed(root: Path) -> None:
    (root / "out").symlink_to(outside(root))
    with pytest.raises(FilesError, match=r"out is a symbolic link \(not followed\)"):
        write_files(str(root), [("out/x", b"pwned", 0o644)])
    (root / "a").mkdir()
    (root / "a" / "b").symlink_to(outside(root))
    with pytest.raises(FilesError, match="a/b is a symbolic link"):
        write_files(str(root), [("a/b/c/d", b"pwned", 0o644)])
    assert list(outside(root).iterdir()) == []


def test_a_planted_symlink_as_the_file_is_never_written_through(root: Path) -> None:
    target = outside(root) / "target"
    target.write_text("original")
    (root / "x").symlink_to(target)
    (root / "dangling").symlink_to(outside(root) / "created-by-attack")
    for name in ("x", "dangling"):
        with pytest.raises(FilesError, match="already exists"):
            write_files(str(root), [(name, b"pwned", 0o644)])
    write_files(str(root), [("x", b"mine", 0o600), ("dangling", b"mine", 0o600)], replace=True)
    assert target.read_text() == "original"
    assert sorted(p.name for p in outside(root).iterdir()) == ["target"]
    assert not (root / "x").is_symlink() and (root / "x").read_bytes() == b"mine"


def test_a_file_where_a_directory_is_needed_is_refused(root: Path) -> None:
    (root / "a").write_text("file")
    with pytest.raises(FilesError, match="a is not a directory"):
        write_files(str(root), [("a/b", b"", 0o644)])
    with pytest.raises(FilesError, match="already exists"):
        write_files(str(root), [("a", b"", 0o644)])


@pytest.mark.parametrize("path", ["../escaped", "/tmp/escaped", "a/../../escaped", "a\\..\\x"])
def test_write_files_checks_names_itself(root: Path, path: str) -> None:
    # The host side (`isolate --out DIR`) hands it names a worker chose.
    with pytest.raises(FilesError, match="the path"):
        write_files(str(root), [(path, b"pwned", 0o644)])
    assert list(outside(root).iterdir()) == [] and list(root.iterdir()) == []


def test_a_fifo_in_the_way_is_not_opened(root: Path) -> None:
    os.mkfifo(root / "pipe")
    with pytest.raises(FilesError, match="already exists"):
        write_files(str(root), [("pipe", b"x", 0o644)])
    write_files(str(root), [("pipe", b"x", 0o644)], replace=True)
    assert (root / "pipe").read_bytes() == b"x"


# --- collect -------------------------------------------------------------------------


def tree(root: Path, names: dict[str, bytes]) -> None:
    for name, data in names.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_collect_matches_globs_sorted_by_path(root: Path) -> None:
    tree(root, {"out/b.png": b"B", "out/a.png": b"A", "out/deep/c.png": b"C", "report.txt": b"r",
                "x/y/z.txt": b"z", "abc": b"", "aXc": b"", "notes.md": b"n",
                ".hidden.txt": b"h"})  # fmt: skip
    (root / "out/a.png").chmod(0o600)
    found, skipped = collect(str(root), ["out/*.png", "**/*.txt", "a?c"])
    assert [(p, d) for p, d, _ in found] == [
        (".hidden.txt", b"h"),
        ("aXc", b""),
        ("abc", b""),
        ("out/a.png", b"A"),
        ("out/b.png", b"B"),
        ("report.txt", b"r"),
        ("x/y/z.txt", b"z"),
    ]
    assert dict((p, m) for p, _, m in found)["out/a.png"] == 0o600
    assert skipped == []
    everything, _ = collect(str(root), ["out/**"])
    assert [p for p, _, _ in everything] == ["out/a.png", "out/b.png", "out/deep/c.png"]


def test_collect_never_follows_a_symlink(root: Path) -> None:
    secret = outside(root) / "secret.txt"
    secret.write_text("secret")
    tree(root, {"out/real.txt": b"ok"})
    (root / "out" / "link.txt").symlink_to(secret)
    (root / "escape").symlink_to(outside(root))
    (root / "loop").symlink_to(root)
    found, skipped = collect(str(root), ["**/*.txt", "escape/*", "loop/**"])
    assert [p for p, _, _ in found] == ["out/real.txt"]
    assert skipped == [
        ("escape", "a symbolic link (not followed)"),
        ("loop", "a symbolic link (not followed)"),
        ("out/link.txt", "a symbolic link (not followed)"),
    ]


def test_collect_skips_what_is_not_a_regular_file(root: Path) -> None:
    os.mkfifo(root / "fifo.txt")  # opening it for reading would block
    (root / "dir.txt").mkdir()
    found, skipped = collect(str(root), ["*.txt"])
    assert found == []
    assert skipped == [("fifo.txt", "not a regular file")]


def test_collect_names_hostile_names_it_skips_escaped(root: Path) -> None:
    tree(root, {"ok.txt": b"", "bad\nname.txt": b"", "rtl\u202etxt.txt": b""})
    os.close(os.open(os.path.join(os.fsencode(root), b"\xff.txt"), os.O_CREAT | os.O_WRONLY))
    found, skipped = collect(str(root), ["*.txt"])
    assert [p for p, _, _ in found] == ["ok.txt"]
    shown = dict(skipped)
    assert set(shown) == {"bad\\x0aname.txt", "rtl\\u202etxt.txt", "\\xff.txt"}
    assert "control character" in shown["bad\\x0aname.txt"]
    assert "not valid UTF-8" in shown["\\xff.txt"]


def test_collect_caps_files_and_bytes(root: Path) -> None:
    tree(root, {f"f{i}.txt": b"12345" for i in range(5)})
    with pytest.raises(CollectLimitExceeded, match="more than max_files=4"):
        collect(str(root), ["*.txt"], max_files=4)
    with pytest.raises(CollectLimitExceeded, match="more than max_bytes=24"):
        collect(str(root), ["*.txt"], max_bytes=24)
    found, _ = collect(str(root), ["*.txt"], max_files=5, max_bytes=25)
    assert len(found) == 5


def test_a_sparse_size_bomb_is_not_read_whole(root: Path) -> None:
    with open(root / "bomb.bin", "wb") as bomb:
        bomb.truncate(1 << 40)  # a terabyte of holes
    with pytest.raises(CollectLimitExceeded, match="max_bytes=1024"):
        collect(str(root), ["*.bin"], max_bytes=1024)


def test_collect_refuses_bad_patterns(root: Path) -> None:
    with pytest.raises(FilesError, match=r"collect.patterns\[1\]: .*'\.\.' component"):
        collect(str(root), ["ok", "../*"])


def test_written_files_come_back_through_collect(root: Path) -> None:
    blob = entry("in/sub/b.bin", "AAE=", encoding="base64", mode=0o755)
    decoded = check_files([entry("in/a.csv", "a,b\n"), blob])
    assert not isinstance(decoded, str)
    write_files(str(root), decoded)
    found, _ = collect(str(root), ["in/**"])
    assert found == [("in/a.csv", b"a,b\n", 0o644), ("in/sub/b.bin", b"\x00\x01", 0o755)]


# --- workspace helpers ---------------------------------------------------------------


def test_a_workspace_is_private_and_removed_even_when_locked(root: Path) -> None:
    space = files.make_workspace(str(root))
    assert Path(space).parent == root and stat.S_IMODE(os.stat(space).st_mode) == 0o700
    assert files.make_workspace(str(root)) != space
    tree(Path(space), {"a/b/c": b"x"})
    (Path(space) / "link").symlink_to(outside(root))
    (outside(root) / "keep").write_text("keep")
    (Path(space) / "a" / "b").chmod(0)
    (Path(space) / "a").chmod(0o500)
    files.remove_tree(space)
    assert not os.path.lexists(space)
    assert (outside(root) / "keep").read_text() == "keep"


@pytest.mark.parametrize(
    ("path", "mime"),
    [("a.PNG", "image/png"), ("out/chart.svg", "image/svg+xml"), ("x.tar.gz", "application/gzip"),
     ("data.csv", "text/csv"), ("Makefile", "application/octet-stream"),
     (".bashrc", "application/octet-stream"), ("a.unknown", "application/octet-stream")],
)  # fmt: skip
def test_mime_types_come_from_the_extension(path: str, mime: str) -> None:
    assert files.guess_mime(path) == mime


def test_matches_any_is_the_collect_rule():
    """What `isolate --out` writes: a returned path some `--collect` pattern matches."""
    assert matches_any("report.txt", ["report.txt"])
    assert not matches_any(".bashrc", ["report.txt"])
    assert not matches_any(".git/config", ["*"])  # `*` stays in one component
    assert matches_any(".git/config", ["**"]) and matches_any("a/b/c.png", ["a/**/*.png"])
    assert matches_any("a/c.png", ["a/**/*.png"])  # `**` matches zero directories
    assert not matches_any("out/x.png", ["out/*.txt", "in/*.png"])
    assert matches_any("out/x.png", ["out/*.txt", "out/?.png"])
