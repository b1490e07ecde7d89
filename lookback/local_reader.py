"""Where this user's reader listens, and how a client knows it reached *its* reader.

By default ``lookback serve`` listens on a Unix socket, private to its user the way
tmux's and ssh-agent's are: in a directory only that user may enter
(``$XDG_RUNTIME_DIR/lookback/`` when that variable names a directory the user owns, else
``${TMPDIR:-/tmp}/lookback-<uid>/``, created 0700), named after the data home
(``fingerprint``: a short hash of its real path), so readers of two data homes are never
taken for each other. That directory depends on the environment, so the reader also records
its socket's path in the data home (``reader.socket``, beside the index; the home is the
user's, 0700): a client that knows the home tries the recorded socket first, then the one its
own environment gives (``socket_candidates``), and finds the reader from cron, ``sudo -u`` or
another shell alike. Every candidate passes every check below. The reader checks every
connection's peer uid; a client, before it sends a byte, checks the directory (its owner and
mode), the socket's owner, the reader's peer uid and then the ``identity``
``GET /v1/health`` answers (the fingerprint of the data home it expects). Anything else is
not its reader (``NotOurReader``): nothing is sent.

Only the standard library: the agent hooks load this file beside them as a plain script
under ``python -S -I`` (``lookback.hook_client``).
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import struct
import sys
from collections.abc import Mapping

#: How an address names a Unix socket: ``unix:/run/user/1000/lookback/0123abcd.sock``.
UNIX_PREFIX = "unix:"
#: The bytes a socket path may have (``sun_path``, its terminating NUL excluded).
MAX_SOCKET_PATH_BYTES = (104 if sys.platform == "darwin" else 108) - 1
#: The file in the data home that names the socket its reader listens on.
ADDRESS_FILE = "reader.socket"


class NotOurReader(Exception):
    """Something is at the reader's address, but it is not this user's reader of this
    data home (or its directory is not private): nothing may be sent to it."""


class NoReader(Exception):
    """Nothing listens at the reader's address: one may be started."""


def fingerprint(home: str | os.PathLike[str]) -> str:
    """The data home's identity: a short hash of its real path (nothing secret)."""
    real = os.path.realpath(os.path.expanduser(os.fspath(home)))
    return hashlib.sha256(os.fsencode(real)).hexdigest()[:16]


def socket_dirs(environ: Mapping[str, str] | None = None) -> list[str]:
    """The per-user directories a socket may live in, preferred first."""
    environ = os.environ if environ is None else environ
    uid = os.getuid()
    found = []
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        try:
            info = os.stat(runtime)
        except OSError:
            info = None
        if info is not None and stat.S_ISDIR(info.st_mode) and info.st_uid == uid:
            found.append(os.path.join(runtime, "lookback"))
    for temporary in (environ.get("TMPDIR", ""), "/tmp"):
        if os.path.isabs(temporary):
            folder = os.path.join(temporary, f"lookback-{uid}")
            if folder not in found:
                found.append(folder)
    return found


def socket_path(home: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> str:
    """The socket of the reader of ``home``: in the first directory of ``socket_dirs``
    where the whole path fits ``sun_path``."""
    name = fingerprint(home) + ".sock"
    for folder in socket_dirs(environ):
        path = os.path.join(folder, name)
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES:
            return path
    raise NotOurReader("no directory for the reader's socket is short enough "
                       f"(at most {MAX_SOCKET_PATH_BYTES} bytes): set TMPDIR to a short path")


def recorded_path(home: str | os.PathLike[str]) -> str:
    """The file in the data home where its reader records the socket it listens on."""
    return os.path.join(os.path.expanduser(os.fspath(home)), ADDRESS_FILE)


def recorded_socket(home: str | os.PathLike[str]) -> str | None:
    """The socket the reader of ``home`` recorded (None: none, or not a socket path). Only a
    hint: whatever is there is checked as any candidate is."""
    try:
        with open(recorded_path(home), "rb") as file:
            text = os.fsdecode(file.read(MAX_SOCKET_PATH_BYTES + 2)).strip()
    except (OSError, ValueError):
        return None
    if not os.path.isabs(text) or len(os.fsencode(text)) > MAX_SOCKET_PATH_BYTES \
            or "\0" in text or "\n" in text:
        return None
    return text


def socket_candidates(home: str | os.PathLike[str],
                      environ: Mapping[str, str] | None = None) -> list[str]:
    """Where to look for the reader of ``home``, first first: the socket it recorded, then
    ``socket_path`` (``NotOurReader`` when there is neither)."""
    found = [recorded] if (recorded := recorded_socket(home)) else []
    try:
        computed = socket_path(home, environ)
    except NotOurReader:
        if not found:
            raise
    else:
        if computed not in found:
            found.append(computed)
    return found


def find_socket(home: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> str:
    """The first candidate that is a socket of this user's in a private directory, else
    ``socket_path`` (where a reader started now would listen); checked again before use."""
    candidates = socket_candidates(home, environ)
    uid = os.getuid()
    for path in candidates:
        try:
            check_dir(os.path.dirname(path))
            info = os.lstat(path)
        except (OSError, NoReader, NotOurReader):
            continue
        if stat.S_ISSOCK(info.st_mode) and info.st_uid == uid:
            return path
    return candidates[-1]


def record_socket(home: str | os.PathLike[str], path: str) -> None:
    """Record in the data home that its reader listens at ``path`` (atomically, 0600)."""
    target = recorded_path(home)
    temporary = f"{target}.{os.getpid()}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(os.fsencode(path) + b"\n")
    os.replace(temporary, target)


def forget_socket(home: str | os.PathLike[str], path: str) -> None:
    """Remove the record, if it still names ``path`` (a newer reader may have replaced it)."""
    if recorded_socket(home) == path:
        try:
            os.unlink(recorded_path(home))
        except OSError:
            pass


def address(home: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> str:
    """``unix:<socket_path>``."""
    return UNIX_PREFIX + socket_path(home, environ)


def check_dir(folder: str, *, create: bool = False) -> None:
    """The socket's directory is this user's and no one else may enter it; with ``create``,
    made (0700) when missing. Raises ``NotOurReader`` saying what to do."""
    if create:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as error:
            raise NotOurReader(f"cannot create the reader's directory {folder}: "
                               f"{error.strerror or error}") from None
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        raise NoReader(f"{folder} does not exist") from None
    except OSError as error:
        raise NotOurReader(f"cannot read {folder}: {error.strerror or error}") from None
    uid = os.getuid()
    if not stat.S_ISDIR(info.st_mode):
        raise NotOurReader(f"{folder} is not a directory: remove it; the reader creates "
                           "its own")
    if info.st_uid != uid:
        raise NotOurReader(f"{folder} belongs to uid {info.st_uid}, not to you (uid {uid}): "
                           "another user may be posing as your reader. Have it removed "
                           "(it is not yours), or set XDG_RUNTIME_DIR or TMPDIR to a "
                           "directory of your own")
    if info.st_mode & 0o077:
        raise NotOurReader(f"{folder} is open to other users (mode "
                           f"{stat.S_IMODE(info.st_mode):o}): run `chmod 700 {folder}`")


def peer_uid(connection: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (None: not known here)."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid, uid, gid}
        data = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                     struct.calcsize("3i"))
        return int(struct.unpack("3i", data)[1])
    if sys.platform == "darwin":  # LOCAL_PEERCRED: struct xucred {version, uid, ...}
        data = connection.getsockopt(0, 0x001, 76)
        return int(struct.unpack_from("=II", data)[1])
    return None


def connect(path: str, timeout: float) -> socket.socket:
    """A connection to the socket at ``path``, made only after checking its directory,
    its owner and the peer's uid. ``NoReader`` when nothing listens there,
    ``NotOurReader`` when something that is not this user's does."""
    check_dir(os.path.dirname(path))
    uid = os.getuid()
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise NoReader(f"no reader at {path}") from None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid:
        raise NotOurReader(f"{path} is not a socket of yours")
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.settimeout(timeout)
        try:
            connection.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            raise NoReader(f"no reader listens at {path}") from None
        peer = peer_uid(connection)
        if peer != uid:
            raise NotOurReader(f"the process at {path} runs as uid {peer}, not as you")
    except BaseException:
        connection.close()
        raise
    return connection


def check_identity(health: object, home: str | os.PathLike[str]) -> None:
    """``NotOurReader`` unless a ``/v1/health`` answer names the data home ``home``."""
    identity = health.get("identity") if isinstance(health, dict) else None
    if identity != fingerprint(home):
        raise NotOurReader("the reader there serves another data home" if
                           isinstance(identity, str) else "what answers there is no reader")
