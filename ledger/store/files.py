"""Files users name: reading their inputs (pricing TOML, rate CSVs; hostfiles, configs and mapping files through
:func:`read_bounded`, with a size limit and ``FILE:LINE`` errors for bad bytes) and writing outputs (``report monthly -o``,
``db backup --out``, ...): whole or not at all, never through a planted link.

:func:`write_output` is the one way a command writes a file a user named:

1. an existing output (a file, a directory, or a link, even a dangling one) is
   refused unless ``force``: "--output: X exists; pass --force to replace it";
2. the bytes go to a new temporary file that ``tempfile.mkstemp`` creates with
   ``O_CREAT | O_EXCL`` and a random name, mode 0600, in the target's own
   directory (so nobody can plant ``X.part`` as a link to somewhere else), and
   are fsync'd;
3. the temporary file takes the target's name: without ``force`` by a hard link
   that fails if the name appeared meanwhile (no window between the check and
   the write), with ``force`` by ``os.replace`` (a link at the target is
   replaced, never followed); then the directory is fsync'd.

Whatever fails, the temporary file is removed and the target is untouched.

The name ``-`` (:data:`STDOUT`, ``-o -``) means standard output instead: the same bytes, written to
``sys.stdout.buffer`` (a ``writer`` fills a private temporary file first, which is then copied and removed);
none of the steps above apply, and ``force`` is not needed. Binary output (``binary=True``: XLSX, Parquet, a
backup) is refused when standard output is a terminal (:func:`check_stdout`).
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

from trainledger.errors import LedgerInputError

#: hard links unsupported here: fall back to check-then-rename (still never following a link)
_NO_LINK = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}


#: the output name that means standard output (``-o -``)
STDOUT = "-"


def is_stdout(path: Path | str | None) -> bool:
    """Is ``path`` the name ``-`` (standard output)?"""
    return path is not None and str(path) == STDOUT


def check_stdout(binary: bool, flag: str = "--output") -> None:
    """Refuse binary output (XLSX, Parquet, a backup) on a terminal: one line naming the fix."""
    try:
        terminal = sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        terminal = False
    if binary and terminal:
        raise LedgerInputError(f"{flag}: the output is binary and standard output is a terminal; redirect it "
                               f"(`{flag} - > FILE` or `| CMD`) or give a file name")


def _write_stdout(data: Optional[bytes], writer: Optional[Callable[[Path], None]], binary: bool, flag: str) -> Path:
    """``data`` (or what ``writer`` writes to a private temporary file) on standard output, as bytes."""
    check_stdout(binary, flag)
    sys.stdout.flush()  # text printed before goes first
    out = sys.stdout.buffer
    if writer is None:
        out.write(data or b"")
    else:
        with tempfile.TemporaryDirectory(prefix="trainledger-out-") as folder:  # mode 0700: nobody else reads it
            tmp = Path(folder) / "output"
            tmp.touch(mode=0o600)
            if data is not None:
                tmp.write_bytes(data)
            writer(tmp)
            with open(tmp, "rb") as fh:
                shutil.copyfileobj(fh, out)
    out.flush()
    return Path(STDOUT)


def _exists_error(flag: str, path: Path) -> LedgerInputError:
    return LedgerInputError(f"{flag}: {path} exists; pass --force to replace it, or choose a new file name")


def _os_error(flag: str, path: Path, exc: OSError) -> LedgerInputError:
    return LedgerInputError(f"{flag}: cannot write {path}: {exc.strerror or exc}")


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def check_output(path: Path | str, *, force: bool = False, flag: str = "--output", binary: bool = False) -> Path:
    """The output path, checked before any work: not a directory, and not existing unless ``force``.
    ``-`` (standard output) only checks :func:`check_stdout` (``binary``: XLSX, Parquet, a backup)."""
    if is_stdout(path):
        check_stdout(binary, flag)
        return Path(STDOUT)
    path = Path(path)
    if path.is_dir():
        raise LedgerInputError(f"{flag}: {path} is a directory; give a file name")
    if os.path.lexists(path) and not force:
        raise _exists_error(flag, path)
    if not path.parent.is_dir():
        raise LedgerInputError(f"{flag}: the folder {path.parent} does not exist")
    return path


def _publish(tmp: Path, path: Path, force: bool, flag: str) -> None:
    if force:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)  # atomic "create if absent": fails if the name exists, whatever it is
    except FileExistsError:
        raise _exists_error(flag, path) from None
    except OSError as exc:
        if exc.errno not in _NO_LINK:
            raise
        if os.path.lexists(path):
            raise _exists_error(flag, path) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_output(path: Path | str, data: Optional[bytes] = None, *, force: bool = False, flag: str = "--output",
                 writer: Optional[Callable[[Path], None]] = None, mode: Optional[int] = None,
                 binary: bool = False) -> Path:
    """Write ``data`` (or let ``writer(temp_path)`` fill the file) to ``path`` as described in the module docstring.

    ``writer`` is for tools that write a path themselves (SQLite's backup API,
    ``pg_dump --file``); it gets the new, empty temporary file. ``mode``: the
    file's permissions (default 0666 minus the umask). ``path`` ``-``: standard
    output (``binary``: refused on a terminal). Returns ``path``.
    """
    if is_stdout(path):
        return _write_stdout(data, writer, binary, flag)
    path = check_output(path, force=force, flag=flag)
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    except OSError as exc:
        raise _os_error(flag, path, exc) from None
    tmp = Path(name)
    try:
        try:
            if data is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            os.fchmod(fd, _default_mode() if mode is None else mode)
        finally:
            os.close(fd)
        if writer is not None:
            writer(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        _publish(tmp, path, force, flag)
    except OSError as exc:
        raise _os_error(flag, path, exc) from None
    finally:
        if os.path.lexists(tmp):
            tmp.unlink()
    _fsync_dir(path.parent)
    return path


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd``, fsync it and close it (closed whatever fails)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_folder(folder: Path | str, files: dict[str, bytes], *, force: bool = False,
                 flag: str = "--output") -> Path:
    """Write a set of files into ``folder``, whole set or none (issue 37): they are written into a new temporary
    folder beside it (``.<name>.<random>.part``; files of an existing ``folder`` that are not replaced are
    hard-linked in), which then takes ``folder``'s name by rename. A kill at any point leaves either the old
    folder or the new one, never a partial set; what an earlier kill left (``.part`` folders, a ``.old`` folder,
    ``.part`` files inside the folder) is cleaned first. A file of the set that exists is refused unless ``force``."""
    folder = Path(folder)
    _clean_leftovers(folder)
    if folder.exists():
        for name in files:
            check_output(folder / name, force=force, flag=flag)
    try:
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".part"))
    except OSError as exc:
        raise _os_error(flag, folder, exc) from None
    try:
        _fill(tmp, folder, files)
        _swap(tmp, folder)
    except OSError as exc:
        raise _os_error(flag, folder, exc) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    _fsync_dir(folder.parent)
    return folder


def _fill(tmp: Path, folder: Path, files: dict[str, bytes]) -> None:
    """The new set in ``tmp``: ``files`` written and fsync'd, and the kept files of ``folder`` hard-linked."""
    mode = _default_mode()
    os.chmod(tmp, mode | ((mode & 0o444) >> 2))  # as mkdir would make it: x wherever r (0755 under umask 022)
    for name, data in files.items():
        write_all(os.open(tmp / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), data)
    if folder.is_dir():
        for entry in os.scandir(folder):
            if entry.name not in files and not (entry.name.startswith(".") and entry.name.endswith(".part")):
                _keep(Path(entry.path), tmp / entry.name)
    _fsync_dir(tmp)


def _keep(src: Path, dst: Path) -> None:
    """An existing entry of the folder, carried into the new set (a hard link; a copy across devices)."""
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True)
        return
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _swap(tmp: Path, folder: Path) -> None:
    """``tmp`` takes ``folder``'s name; the old folder (if any) is renamed aside first and removed after."""
    if not folder.exists():
        os.rename(tmp, folder)
        return
    old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".old"))
    os.rename(folder, old / "set")
    os.rename(tmp, folder)
    shutil.rmtree(old, ignore_errors=True)


def _clean_leftovers(folder: Path) -> None:
    """What a killed :func:`write_folder` (or an older per-file write) left: an old set renamed aside while no
    new one took its place goes back; temporary folders and ``.part`` files go."""
    parent = folder.parent
    if not parent.is_dir():
        return
    prefix = f".{folder.name}."
    for entry in sorted(os.scandir(parent), key=lambda e: e.name):
        if not entry.name.startswith(prefix):
            continue
        if entry.name.endswith(".old") and not folder.exists() and os.path.isdir(os.path.join(entry.path, "set")):
            os.rename(os.path.join(entry.path, "set"), folder)
        if entry.name.endswith((".part", ".old")):
            shutil.rmtree(entry.path, ignore_errors=True) if entry.is_dir() else os.unlink(entry.path)
    if folder.is_dir():
        for entry in os.scandir(folder):
            if entry.name.startswith(".") and entry.name.endswith(".part") and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """The text of ``path``, or a one-line error saying why it cannot be read (``FILE: …``)."""
    try:
        return Path(path).read_text(encoding=encoding)
    except OSError as exc:
        raise LedgerInputError(f"FILE: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise LedgerInputError(f"FILE: {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def line_of(data: bytes, offset: int) -> int:
    """The 1-based line of byte ``offset`` (linear time)."""
    return data.count(b"\n", 0, offset) + 1


def read_bounded(path: Path | str, limit: int, what: str = "file", flag: Optional[str] = None) -> str:
    """The UTF-8 text of a file a user named (a hostfile, a config, a mapping file), read with a size limit and
    checked in linear time; anything else is one :class:`LedgerInputError` line naming the file (``flag: `` first
    when given) and, for bad bytes, their line (issue 37, bounded inputs):

    * ``cannot read {what} FILE: <reason>`` (missing, a directory, no permission);
    * ``{what} FILE is larger than N KiB; is it a {what}?``: at most ``limit`` + 1 bytes are ever read, so
      ``/dev/zero`` or a huge file is refused, not read on;
    * ``FILE:LINE: a NUL byte; a {what} is text``;
    * ``FILE:LINE: not UTF-8 text (<reason>)``.
    """
    pre = f"{flag}: " if flag else ""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise LedgerInputError(f"{pre}cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise LedgerInputError(f"{pre}{what} {path} is larger than {limit // 1024} KiB; is it a {what}?")
    nul = data.find(b"\0")
    if nul >= 0:
        raise LedgerInputError(f"{pre}{path}:{line_of(data, nul)}: a NUL byte; a {what} is text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerInputError(f"{pre}{path}:{line_of(data, exc.start)}: not UTF-8 text ({exc.reason})") from None
