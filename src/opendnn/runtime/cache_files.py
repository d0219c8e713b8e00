"""Files of the on-disk cache, written and read so that threads, processes, a killed
writer or a broken file system can neither corrupt the cache nor stop the library.

Writing (``atomic_write``): every file is written under a temporary name of its own
beside the final one (``<name>.<pid>.<thread id>.<random>.tmp``: no two writers, threads
or processes, share one), then renamed over the final name with ``os.replace``, which
is atomic on POSIX. A reader sees the old file or the new one, never part of one. A
writer killed mid-write leaves only its temporary, which ``sweep_temporaries`` removes
once it is older than ``SWEEP_AGE_S`` (a live writer finishes in far less).

Reading (``read_regular``): the file is opened with ``O_NONBLOCK`` and must be a regular
file by ``fstat`` before anything is read, so a FIFO or a device left at a cache path
cannot block the process; anything else (a directory, a permission error, a file too
large to be ours) is an ``OSError`` the caller turns into a warning.

Merging (``JsonStore``): a JSON document ``{"format": ..., "entries": {key: record}}``
that several processes update. ``update`` takes an exclusive ``flock`` on a side file
(``<path>.lock``: the document itself is replaced, so it cannot carry the lock),
re-reads the document, merges its entries into what it finds, writes a temporary,
fsyncs it and renames it over the document. Eight processes storing at once therefore
keep every entry, and a writer killed at any moment leaves the last complete document.
``get`` re-reads the document whenever its (mtime, size, inode) changed, so it sees what
other processes stored since. A document that does not parse (truncated, random bytes,
nested too deep for the parser, the wrong shape) is ignored with a warning; a record
that fails the store's check is dropped with a warning, the others kept.

Bounds (``trim``): the generated kernels are deleted least recently used first (by the
later of access and modification time; ``touch`` marks a file that is used again) until
none is older than the age limit and they fit the byte limit.

Standard library only: a test loads this file by path into a bare interpreter.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import threading
import time
import warnings

try:
    import fcntl
except ImportError:  # not POSIX: processes do not lock each other out
    fcntl = None

SWEEP_AGE_S = 600.0  # a temporary older than this is an orphan of a dead writer
MAX_READ_BYTES = 64 << 20  # a cache document beyond this is not one of ours


def warn(message: str, stacklevel: int = 3) -> None:
    warnings.warn(f"opendnn: {message}", RuntimeWarning, stacklevel=stacklevel)


def temporary_name(path: str) -> str:
    """A name beside ``path`` that no other thread or process writes."""
    return f"{path}.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}.tmp"


def atomic_write(path: str, data: bytes, durable: bool = True) -> None:
    """``path`` holds ``data`` afterwards, or is unchanged if this raises (``OSError``).
    ``durable`` fsyncs the data before the rename (a crash of the machine then cannot
    leave an empty file under the final name)."""
    tmp = temporary_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_regular(path: str, limit: int = MAX_READ_BYTES) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes.
    Raises ``FileNotFoundError`` when there is none, another ``OSError`` otherwise; never
    blocks on a FIFO."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"{st.st_size} bytes, more than {limit}", path)
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def same_content(path: str, data: bytes) -> bool:
    """Whether ``path`` is a regular file holding exactly ``data`` (False when missing;
    ``OSError`` when it cannot be read)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(st.st_mode) and st.st_size != len(data):
        return False
    return read_regular(path, limit=len(data)) == data


def touch(path: str) -> None:
    """Mark ``path`` as used now (for ``trim``'s least-recently-used order)."""
    try:
        os.utime(path)
    except OSError:
        pass


def usable_dir(path: str) -> str | None:
    """None when ``path`` is (or could be made) a directory this process can write, else
    the reason it cannot be used. Writes and removes a probe file."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    if st is not None and not stat.S_ISDIR(st.st_mode):
        return "it exists and is not a folder"
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = _probe(path)
        os.close(fd)
        os.unlink(probe)
        return None
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"


def _probe(folder: str):
    name = os.path.join(
        folder, f".probe.{os.getpid()}.{threading.get_ident()}.{secrets.token_hex(4)}.tmp"
    )
    return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), name


class file_lock:
    """An exclusive ``flock`` on ``<path>.lock`` for the ``with`` block. Where no lock
    file can be made (read-only folder; no ``fcntl``) the block runs unlocked: what it
    then writes fails or is alone."""

    def __init__(self, path: str):
        self.path, self.fd = path + ".lock", None

    def __enter__(self):
        if fcntl is None:
            return self
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o644)
        except OSError:
            return self
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                fcntl.flock(fd, fcntl.LOCK_EX)
                self.fd, fd = fd, None
        except OSError:
            pass
        finally:
            if fd is not None:
                os.close(fd)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None
        return False


def _signature(path: str):
    """What changes when another process replaces ``path``; None when it is missing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:  # e.g. a path below a regular file
        return ("error", type(e).__name__)
    return (st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


class JsonStore:
    """Entries of one JSON document shared by threads and processes (see the module
    docstring). ``valid(record)`` says whether a record is usable."""

    def __init__(self, path: str, fmt: str, valid, what: str = "cache"):
        self.path, self.format, self.valid, self.what = path, fmt, valid, what
        self._lock = threading.Lock()
        self._entries: dict = {}
        self._signature = object()  # never equal: the first get reads the file
        self._unsaved: dict = {}  # stored here but not written (the write failed)
        self._warned: set = set()

    def get(self, key: str):
        with self._lock:
            self._refresh()
            return self._entries.get(key)

    def entries(self) -> dict:
        with self._lock:
            self._refresh()
            return dict(self._entries)

    def update(self, items: dict) -> bool:
        """Merge ``items`` into the document on disk. False (with a warning) when it could
        not be written: the entries are then kept for this process only."""
        try:  # the folder may have been cleared meanwhile
            os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        except OSError:
            pass  # the write below fails and says why
        with self._lock, file_lock(self.path):
            entries = self._read()
            entries.update(items)
            data = json.dumps({"format": self.format, "entries": entries}).encode()
            try:
                atomic_write(self.path, data)
            except OSError as e:
                self._unsaved.update(items)
                self._entries = {**entries, **self._unsaved}
                self._warn_once(
                    ("write", type(e).__name__),
                    f"could not write the {self.what} {self.path} "
                    f"({type(e).__name__}: {e.strerror or e}); results are kept "
                    "in this process only",
                )
                return False
            self._unsaved = {k: v for k, v in self._unsaved.items() if k not in items}
            self._entries = {**entries, **self._unsaved}
            self._signature = _signature(self.path)
            return True

    def _refresh(self) -> None:
        sig = _signature(self.path)
        if sig != self._signature:
            self._entries = {**self._read(sig), **self._unsaved}
            self._signature = sig

    def _read(self, sig=None) -> dict:
        """The valid entries on disk now; every problem is a warning, once per version of
        the file."""
        sig = _signature(self.path) if sig is None else sig
        if sig is None:
            return {}
        try:
            raw = json.loads(read_regular(self.path))
            if (
                not isinstance(raw, dict)
                or raw.get("format") != self.format
                or not isinstance(raw.get("entries"), dict)
            ):
                raise ValueError(f"not a document of format {self.format}")
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError, MemoryError) as e:
            reason = (
                f"{type(e).__name__}: {e.strerror or e}"
                if isinstance(e, OSError)
                else f"{type(e).__name__}: {str(e)[:200]}"
            )
            self._warn_once(
                ("read", sig), f"ignoring the unreadable {self.what} {self.path} ({reason})"
            )
            return {}
        good = {k: v for k, v in raw["entries"].items() if self.valid(v)}
        bad = len(raw["entries"]) - len(good)
        if bad:
            self._warn_once(
                ("records", sig),
                f"dropped {bad} malformed "
                f"entr{'y' if bad == 1 else 'ies'} of the "
                f"{self.what} {self.path}",
            )
        return good

    def _warn_once(self, key, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warn(message, stacklevel=5)


def sweep_temporaries(folders, max_age_s: float = SWEEP_AGE_S, now: float | None = None) -> int:
    """Remove the ``*.tmp`` files (orphans of killed writers) older than ``max_age_s`` in
    ``folders``; the number removed."""
    now = time.time() if now is None else now
    removed = 0
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            try:
                if (
                    e.name.endswith(".tmp")
                    and e.is_file(follow_symlinks=False)
                    and now - e.stat(follow_symlinks=False).st_mtime > max_age_s
                ):
                    os.unlink(e.path)
                    removed += 1
            except OSError:
                pass
    return removed


def kernel_files(folder: str) -> list:
    """(last use, bytes, path) of the files in a kernel folder (its ``__pycache__`` too),
    temporaries left out."""
    out = []
    for sub in (folder, os.path.join(folder, "__pycache__")):
        try:
            entries = list(os.scandir(sub))
        except OSError:
            continue
        for e in entries:
            try:
                if e.name.endswith((".tmp", ".lock")) or not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            out.append((max(st.st_atime, st.st_mtime), st.st_size, e.path))
    return out


def trim(
    folder: str, max_bytes: int | None, max_age_days: float | None, now: float | None = None
) -> tuple[int, int]:
    """Delete kernel files of ``folder`` least recently used first: every one unused for
    more than ``max_age_days``, then more until the rest fit ``max_bytes`` (None: no
    limit). (files removed, bytes removed)."""
    now = time.time() if now is None else now
    files = sorted(kernel_files(folder))
    total = sum(size for _, size, _ in files)
    removed = freed = 0
    for used, size, path in files:
        too_old = max_age_days is not None and now - used > max_age_days * 86400
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        total -= size
        removed, freed = removed + 1, freed + size
    return removed, freed
