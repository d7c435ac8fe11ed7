"""Files in and out of a call's workspace (envelope 1.1), standard library only.

- `path_problem(path)`: the path rules every file name on the wire obeys (input files,
  collected files, names the host writes); `glob_problem(pattern)` the same for `collect`
  patterns, which may also hold `*`, `?` and `**` components. Both are envelopes.rules',
  re-exported here.
- `check_files(files)`: a request's `files` array checked (paths, duplicates after case
  folding, a path under another file's path, base64, caps) and decoded.
- `write_files(root, files)`: writes decoded files under `root` and nowhere else: every
  directory is opened relative to its parent with O_NOFOLLOW, every file is created with
  O_CREAT|O_EXCL|O_NOFOLLOW, so a symlink planted anywhere on the way is refused, not
  followed. The worker SDK writes input files with it; `agents-runner isolate --out DIR`
  writes the files a worker sent back.
- `collect(root, patterns)`: the regular files under `root` matching the patterns, read the
  same way (never following a symlink, skipping devices, fifos, other filesystems).
- `guess_mime(path)`, `remove_tree(path)`.

Imports stay within what a bare interpreter has loaded: a worker pays for this module at
every start. unicodedata and binascii load only when a request carries files.
"""

from __future__ import annotations

import os
import stat
from types import MappingProxyType

from envelopes import rules
from envelopes.rules import glob_problem as glob_problem
from envelopes.rules import path_problem as path_problem

TYPE_CHECKING = False  # typing costs a fresh process milliseconds; mypy reads it as typing's
if TYPE_CHECKING:
    from collections.abc import Iterable

FILES_MAX_COUNT = rules.FILES_MAX_COUNT
FILES_MAX_BYTES = rules.FILES_MAX_BYTES
COLLECT_MAX_FILES = rules.COLLECT_DEFAULT_MAX_FILES
COLLECT_MAX_BYTES = rules.COLLECT_DEFAULT_MAX_BYTES
MAX_PATH_BYTES = rules.MAX_PATH_BYTES
MAX_COMPONENT_BYTES = rules.MAX_COMPONENT_BYTES
DEFAULT_MODE = rules.FILE_MODE_DEFAULT
#: How many directory entries collect() looks at before it gives up (a tool that made a
#: million files must not make the worker walk them all).
COLLECT_MAX_ENTRIES = 100_000

#: Bidirectional-text controls: they make a name display differently from what it is.
_BIDI = frozenset(rules.BIDI_CONTROLS)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MIME = MappingProxyType(
    {
        "bin": "application/octet-stream",
        "bmp": "image/bmp",
        "c": "text/x-c",
        "css": "text/css",
        "csv": "text/csv",
        "gif": "image/gif",
        "gz": "application/gzip",
        "h": "text/x-c",
        "htm": "text/html",
        "html": "text/html",
        "ico": "image/vnd.microsoft.icon",
        "ipynb": "application/x-ipynb+json",
        "jpeg": "image/jpeg",
        "jpg": "image/jpeg",
        "js": "text/javascript",
        "json": "application/json",
        "jsonl": "application/jsonl",
        "log": "text/plain",
        "md": "text/markdown",
        "mp3": "audio/mpeg",
        "mp4": "video/mp4",
        "ndjson": "application/x-ndjson",
        "parquet": "application/vnd.apache.parquet",
        "pdf": "application/pdf",
        "png": "image/png",
        "py": "text/x-python",
        "sh": "application/x-sh",
        "svg": "image/svg+xml",
        "tar": "application/x-tar",
        "tsv": "text/tab-separated-values",
        "txt": "text/plain",
        "wasm": "application/wasm",
        "wav": "audio/wav",
        "webm": "video/webm",
        "webp": "image/webp",
        "xml": "application/xml",
        "yaml": "application/yaml",
        "yml": "application/yaml",
        "zip": "application/zip",
    }
)


class FilesError(Exception):
    """A file could not be written or read safely; `path` names it, `reason` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.path = path
        self.reason = reason


class CollectLimitExceeded(FilesError):
    """What `collect` matched is over `max_files` or `max_bytes` (LIMIT_EXCEEDED)."""


# --- rules -----------------------------------------------------------------------------


def fold(path: str) -> str:
    """The form two paths are compared in for duplicates: Unicode NFC of the case fold
    (so `A.txt`/`a.txt` and a composed/decomposed `é` collide, as on macOS or Windows)."""
    if path.isascii():
        return path.lower()
    import unicodedata

    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", path).casefold())


def check_files(
    files: object, max_count: int = FILES_MAX_COUNT, max_bytes: int = FILES_MAX_BYTES
) -> str | list[tuple[str, bytes, int]]:
    """A request's `files` (the JSON array) as `(path, content, mode)` tuples, or a
    problem naming the entry (`files[3].path: has a '..' component`). Unknown members of
    an entry are ignored (requests are must-ignore)."""
    if type(files) is not list:
        return "files: expected an array"
    if len(files) > max_count:
        return f"files: {len(files)} files, over the limit of {max_count}"
    decoded: list[tuple[str, bytes, int]] = []
    seen: dict[str, int] = {}
    total = 0
    for index, entry in enumerate(files):
        where = f"files[{index}]"
        if type(entry) is not dict:
            return f"{where}: expected an object"
        path, content = entry.get("path"), entry.get("content")
        encoding = entry.get("encoding", "utf-8")
        mode = entry.get("mode", DEFAULT_MODE)
        problem = path_problem(path)
        if problem is not None:
            return f"{where}.path: {problem}"
        if type(content) is not str:
            return f"{where}.content: expected a string"
        if type(mode) is not int or not 0 <= mode <= rules.FILE_MODE_MAX:
            return f"{where}.mode: expected an integer from 0 to 511 (0o777)"
        if encoding == "utf-8":
            try:
                data = content.encode("utf-8")
            except UnicodeEncodeError:
                return f"{where}.content: not valid UTF-8 (a lone surrogate)"
        elif encoding == "base64":
            data_or_problem = _base64(content)
            if isinstance(data_or_problem, str):
                return f"{where}.content: {data_or_problem}"
            data = data_or_problem
        else:
            return f"{where}.encoding: expected 'utf-8' or 'base64'"
        total += len(data)
        if total > max_bytes:
            return f"files: over {max_bytes} bytes decoded in total (at {where})"
        key = fold(path)  # type: ignore[arg-type]
        if key in seen:
            first = seen[key]
            how = "" if files[first]["path"] == path else " once case-folded and NFC-normalized"
            return f"{where}.path: the same path as files[{first}].path{how}"
        seen[key] = index
        decoded.append((path, data, mode))  # type: ignore[arg-type]
    for index, (path, _, _) in enumerate(decoded):
        parts = fold(path).split("/")
        for end in range(1, len(parts)):
            parent = seen.get("/".join(parts[:end]))
            if parent is not None:
                return (
                    f"files[{parent}].path: is a parent directory of files[{index}].path;"
                    " it cannot be a file too"
                )
    return decoded


def _base64(content: str) -> bytes | str:
    problem = rules.base64_problem(content)
    if problem is not None:
        return problem
    import binascii

    try:
        return binascii.a2b_base64(content.encode("ascii"), strict_mode=True)
    except binascii.Error as exc:  # what the rule admits decodes; never swallow it silently
        return f"not base64 ({exc})"


# --- writing ---------------------------------------------------------------------------


def write_files(
    root: str, files: Iterable[tuple[str, bytes, int]], *, replace: bool = False
) -> None:
    """Write each `(path, content, mode)` under the directory `root`, creating parent
    directories, never following a symlink and never writing outside `root`.

    `root` itself is trusted (opened as given). Below it, an existing file is refused
    (FilesError) unless `replace`, which replaces a regular file or a symlink (the link,
    never its target). Modes are masked to 0o777 and set exactly (not through the umask).
    """
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for path, content, mode in files:
            problem = path_problem(path)
            if problem is not None:
                raise FilesError(repr(path)[:200], f"the path {problem}")
            _write_one(root_fd, path, content, mode & 0o777, replace)
    finally:
        os.close(root_fd)


def _write_one(root_fd: int, path: str, content: bytes, mode: int, replace: bool) -> None:
    *parents, name = path.split("/")
    dir_fd = os.dup(root_fd)
    try:
        for depth, part in enumerate(parents):
            try:
                os.mkdir(part, 0o755, dir_fd=dir_fd)  # mkdir never follows a symlink
            except FileExistsError:
                pass
            except OSError as exc:
                raise FilesError(path, f"cannot create directory {_prefix(parents, depth)}: "
                                 f"{exc.strerror}") from None  # fmt: skip
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                why = _not_a_dir(exc, dir_fd, part)
                raise FilesError(path, f"{_prefix(parents, depth)} is {why}") from None
            os.close(dir_fd)
            dir_fd = child
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            if not replace:
                raise FilesError(path, "already exists (not overwritten)") from None
            try:
                os.unlink(name, dir_fd=dir_fd)  # unlinks a symlink itself, not its target
                fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
            except OSError as exc:
                raise FilesError(path, f"cannot replace it: {exc.strerror}") from None
        except OSError as exc:
            raise FilesError(path, f"cannot create it: {exc.strerror}") from None
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        except OSError as exc:
            raise FilesError(path, f"cannot write it: {exc.strerror}") from None
        finally:
            os.close(fd)
    finally:
        os.close(dir_fd)


def _prefix(parts: list[str], depth: int) -> str:
    return "/".join(parts[: depth + 1])


def _not_a_dir(exc: OSError, dir_fd: int, name: str) -> str:
    """Why `name` could not be opened as a directory (Linux says ENOTDIR, not ELOOP, for
    a symlink opened with O_DIRECTORY|O_NOFOLLOW: look at the entry itself)."""
    try:
        if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            return "a symbolic link (not followed)"
    except OSError:
        pass  # gone meanwhile: the open's own error says enough
    if isinstance(exc, NotADirectoryError):
        return "not a directory"
    return f"not usable as a directory: {exc.strerror}"


# --- collecting ------------------------------------------------------------------------


def collect(
    root: str,
    patterns: list[str],
    max_files: int = COLLECT_MAX_FILES,
    max_bytes: int = COLLECT_MAX_BYTES,
) -> tuple[list[tuple[str, bytes, int]], list[tuple[str, str]]]:
    """The regular files under `root` whose relative path matches any pattern, sorted by
    path, as `(path, content, mode)`, and what matched but was skipped, as `(path, why)`
    (a symlink, a device or fifo, another filesystem, a name the path rules refuse).

    Raises CollectLimitExceeded past `max_files` files or `max_bytes` bytes, and
    FilesError when a pattern is invalid. Nothing is followed: each directory is opened
    relative to its parent with O_NOFOLLOW, each file with O_NOFOLLOW|O_NONBLOCK and
    checked with fstat, so a link swapped in during the walk is refused too.
    """
    compiled: list[list[str]] = []
    for index, pattern in enumerate(patterns):
        problem = glob_problem(pattern)
        if problem is not None:
            raise FilesError(f"collect.patterns[{index}]", problem)
        compiled.append(pattern.split("/"))
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        walk = _Walk(compiled, os.fstat(root_fd).st_dev, max_files, max_bytes)
        walk.visit(root_fd, "", [(p, 0) for p in range(len(compiled))])
    finally:
        os.close(root_fd)
    walk.files.sort(key=lambda item: item[0])
    walk.skipped.sort()
    return walk.files, walk.skipped


def matches_any(path: str, patterns: list[str]) -> bool:
    """Whether the relative `path` is one `collect` would return for `patterns`: the
    same component-by-component match as the walk (`*`, `?`, `**`). An invalid pattern
    matches nothing."""
    compiled = [p.split("/") for p in patterns if glob_problem(p) is None]
    states = [(index, 0) for index in range(len(compiled))]
    *parents, name = path.split("/")
    for part in parents:
        _, states = _step(compiled, states, part)
        if not states:
            return False
    return _step(compiled, states, name)[0]


class _Walk:
    """A depth-first walk that descends only into directories some pattern can still
    match below, reading matching files as it meets them (within the caps)."""

    def __init__(
        self, patterns: list[list[str]], device: int, max_files: int, max_bytes: int
    ) -> None:
        self.patterns = patterns
        self.device = device
        self.max_files = max_files
        self.room = max_bytes
        self.max_bytes = max_bytes
        self.files: list[tuple[str, bytes, int]] = []
        self.skipped: list[tuple[str, str]] = []
        self.entries = 0

    def visit(self, dir_fd: int, prefix: str, states: list[tuple[int, int]]) -> None:
        try:
            entries = sorted(os.scandir(dir_fd), key=lambda e: e.name)
        except OSError as exc:
            self.skipped.append((_shown(prefix.rstrip("/")), f"cannot list: {exc.strerror}"))
            return
        for entry in entries:
            self.entries += 1
            if self.entries > COLLECT_MAX_ENTRIES:
                raise CollectLimitExceeded(
                    "collect", f"the workspace holds over {COLLECT_MAX_ENTRIES} entries"
                )
            name = entry.name
            path = prefix + name
            file_match, below = _step(self.patterns, states, name)
            if not file_match and not below:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                self.skipped.append((_shown(path), f"cannot stat: {exc.strerror}"))
                continue
            mode = info.st_mode
            if stat.S_ISDIR(mode):
                if below:
                    self._descend(dir_fd, path, name, below, info.st_dev)
            elif file_match:
                self._take(dir_fd, path, name, mode)
            elif stat.S_ISLNK(mode):
                self.skipped.append((_shown(path), "a symbolic link (not followed)"))

    def _descend(
        self, dir_fd: int, path: str, name: str, states: list[tuple[int, int]], device: int
    ) -> None:
        if device != self.device:
            self.skipped.append((_shown(path), "on another filesystem (not followed)"))
            return
        if len((path + "/").encode("utf-8", "surrogateescape")) >= MAX_PATH_BYTES:
            return  # nothing below could have a valid path
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            self.skipped.append((_shown(path), f"cannot open: {exc.strerror}"))
            return
        try:
            self.visit(child, path + "/", states)
        finally:
            os.close(child)

    def _take(self, dir_fd: int, path: str, name: str, mode: int) -> None:
        why = _why_not(path, mode)
        if why is not None:
            self.skipped.append((_shown(path), why))
            return
        if len(self.files) >= self.max_files:
            raise CollectLimitExceeded(
                "collect", f"more than max_files={self.max_files} files match"
            )
        read = _read_regular(dir_fd, name, self.room)
        if isinstance(read, str):
            self.skipped.append((path, read))
            return
        data, file_mode = read
        if len(data) > self.room:
            raise CollectLimitExceeded(
                "collect", f"the matching files hold more than max_bytes={self.max_bytes} bytes"
            )
        self.room -= len(data)
        self.files.append((path, data, file_mode))


def _why_not(path: str, mode: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "a symbolic link (not followed)"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    problem = path_problem(path)
    return None if problem is None else f"the name {problem}"


def _shown(path: str) -> str:
    """A path fit for a message: undecodable bytes and control characters escaped."""
    if path.isascii() and path.isprintable():
        return path
    out = []
    for char in path:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif rules.is_control(code) or char in _BIDI or char == "\\":
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def _read_regular(dir_fd: int, name: str, room: int) -> tuple[bytes, int] | str:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        return f"cannot open: {exc.strerror}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file"
        chunks = []
        size = 0
        while size <= room:
            chunk = os.read(fd, min(1 << 20, room + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), stat.S_IMODE(info.st_mode)
    except OSError as exc:
        return f"cannot read: {exc.strerror}"
    finally:
        os.close(fd)


def _step(
    patterns: list[list[str]], states: list[tuple[int, int]], name: str
) -> tuple[bool, list[tuple[int, int]]]:
    """Match one path component against each (pattern, position) state: whether a file
    called `name` here matches some pattern, and the states to continue with below a
    directory called `name`. A `**` component matches zero or more directories; a
    trailing `**` matches every file below (as in .gitignore)."""
    file_match = False
    below: list[tuple[int, int]] = []
    for state in _closure(patterns, states):
        which, at = state
        parts = patterns[which]
        part = parts[at]
        if part == "**":
            below.append(state)  # `**` eats this directory and may eat more
            if at == len(parts) - 1:
                file_match = True
            continue
        if _match(part, name):
            if at == len(parts) - 1:
                file_match = True
            else:
                below.append((which, at + 1))
    return file_match, sorted(set(below))


def _closure(patterns: list[list[str]], states: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`states` plus the positions after any `**` matching zero directories."""
    out: list[tuple[int, int]] = []
    for which, at in states:
        parts = patterns[which]
        out.append((which, at))
        while parts[at] == "**" and at + 1 < len(parts):
            at += 1
            out.append((which, at))
    return out


def _match(pattern: str, name: str) -> bool:
    """`*` matches any run of characters, `?` one character; everything else itself."""
    if "*" not in pattern and "?" not in pattern:
        return pattern == name
    p = n = 0
    star_p, star_n = -1, 0
    while n < len(name):
        if p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
            p += 1
            n += 1
        elif p < len(pattern) and pattern[p] == "*":
            star_p, star_n = p, n
            p += 1
        elif star_p >= 0:
            p = star_p + 1
            star_n += 1
            n = star_n
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


# --- small helpers -------------------------------------------------------------------------


def guess_mime(path: str) -> str:
    """A MIME type from the extension, `application/octet-stream` when unknown."""
    name = path.rpartition("/")[2]
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem:
        return "application/octet-stream"
    return _MIME.get(extension.lower(), "application/octet-stream")


def make_workspace(base: str | None = None) -> str:
    """A new empty directory (mode 0o700) under `base`, else $TMPDIR, else /tmp."""
    parent = os.path.abspath(base or os.environ.get("TMPDIR") or "/tmp")
    for _ in range(8):
        path = os.path.join(parent, f"agents-runner-ws-{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"no free workspace name under {parent}")


def remove_tree(path: str) -> None:
    """Remove the directory `path` and everything in it without following a symlink,
    even when the tool took the permissions off a directory it made. Raises OSError
    when something stays."""
    parent, _, name = path.rstrip("/").rpartition("/")
    parent_fd = os.open(parent or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _remove_in(parent_fd, name)
    finally:
        os.close(parent_fd)


def _remove_in(parent_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=parent_fd)
        return
    except FileNotFoundError:
        return
    except (IsADirectoryError, PermissionError):
        pass  # a directory (Linux says EISDIR, POSIX allows EPERM)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=parent_fd, follow_symlinks=False)
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        os.fchmod(fd, 0o700)  # a directory the tool made unwritable still empties
        for child in os.listdir(fd):
            _remove_in(fd, child)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)
