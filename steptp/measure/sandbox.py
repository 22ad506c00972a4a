"""Contain a worker process that runs untrusted Python (problem files of ``steptp extract
--problems``): no network, no writes outside its own scratch space, not as root.

``enter()`` runs first thing in a worker (``steptp.measure.worker`` calls it when the parent
sets ``STEPTP_WORKER_SANDBOX=1``), while the process is still single-threaded. Each step is
taken where the operating system allows it and said otherwise, never silently skipped:

1. **network**: a new, empty network namespace (``unshare(CLONE_NEWNET)``: no interface but a
   loopback that is down, so every connection fails, to other hosts and to servers on this
   machine's loopback alike). Without the privilege for it (not root), an unprivileged user
   namespace with its own network namespace is tried; without either, Python's ``socket``
   connections are refused in the worker (best effort: ctypes can get around it).
2. **files**: a new mount namespace in which every mount but ``/proc``, ``/sys`` and ``/dev``
   (``/dev/shm`` included) is read-only, and a private tmpfs, owned by the worker's user, at
   the scratch folder the parent gives (``STEPTP_WORKER_SCRATCH``); ``TMPDIR`` and ``HOME``
   point there. It vanishes with the worker.
3. **user**: when running as root, the worker switches to ``nobody`` (no supplementary groups)
   and keeps one capability, ``CAP_DAC_READ_SEARCH``, to read the interpreter, the packages and
   the problem files wherever they are installed (under ``/root`` here). It cannot write any
   file of the invoking user, regain root (``PR_SET_NO_NEW_PRIVS``) or signal the parent. It can
   still *read* what root can: with the network gone, there is nowhere to send it.

``state()`` says what was achieved (``network``, ``files``, ``user``, ``uid``): extraction records
it in its summary and log.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import pwd

__all__ = ["enter", "state", "ENV_FLAG", "ENV_SCRATCH"]

ENV_FLAG = "STEPTP_WORKER_SANDBOX"
ENV_SCRATCH = "STEPTP_WORKER_SCRATCH"
_ENV_STATE = "STEPTP_WORKER_SANDBOX_STATE"

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_PR_SET_KEEPCAPS, _PR_SET_NO_NEW_PRIVS = 8, 38
_CAP_DAC_READ_SEARCH = 2
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _call(name: str, *args) -> None:
    """A libc call that fails with OSError, also where libc lacks it (not Linux)."""
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (AttributeError, OSError):
        raise OSError(errno.ENOSYS, f"{name}: not available on this system") from None
    if fn(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{name}: {os.strerror(e)}")


def _unshare(flags: int) -> None:
    _call("unshare", flags)


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _call("mount", enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))


def _block_sockets() -> None:
    """The fallback without namespaces: Python-level connections fail in this process."""
    import socket

    def refused(*_a, **_k):
        raise OSError(101, "network access is disabled in steptp's problem workers")

    for name in ("connect", "connect_ex", "sendto", "sendmsg", "bind"):
        setattr(socket.socket, name, refused)
    socket.create_connection = refused  # type: ignore[assignment]
    socket.getaddrinfo = refused  # type: ignore[assignment]


def _network() -> str:
    try:
        _unshare(_CLONE_NEWNET)
        return "namespace"
    except OSError as e:
        first = e
    try:
        # an unprivileged user namespace may create its own network namespace
        _unshare(_CLONE_NEWUSER | _CLONE_NEWNET)
        return "user-namespace"
    except OSError:
        pass
    _block_sockets()
    return f"python-sockets-blocked (no network namespace: {first.strerror})"


def _mount_points() -> list[str]:
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            out.append(mp)
    return out


def _files(scratch: str | None, uid: int, gid: int) -> str:
    """Read-only mounts but /proc, /sys, /dev; a private tmpfs at ``scratch``."""
    try:
        _unshare(_CLONE_NEWNS)
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing propagates to the host
    except OSError as e:
        return f"unchanged (no mount namespace: {e.strerror})"
    kept = []
    for mp in sorted(set(_mount_points()), key=len):
        if mp in ("/proc", "/sys", "/dev") or mp.startswith(("/proc/", "/sys/")) or \
                (mp.startswith("/dev/") and mp != "/dev/shm"):
            continue
        try:
            _mount(None, mp, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID)
        except OSError:
            try:
                _mount(mp, mp, None, _MS_BIND)
                _mount(None, mp, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID)
            except OSError:
                kept.append(mp)
    if scratch:
        try:
            _mount("steptp-scratch", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV,
                   f"mode=0700,uid={uid},gid={gid},size=1g")
        except OSError as e:
            return f"read-only, no scratch tmpfs ({e.strerror})"
    return "read-only" + (f" except {', '.join(kept)}" if kept else "") + \
        (f", scratch tmpfs {scratch}" if scratch else "")


def _drop_to(uid: int, gid: int) -> None:
    _call("prctl", _PR_SET_KEEPCAPS, 1, 0, 0, 0)
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    hdr = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    bit = 1 << _CAP_DAC_READ_SEARCH
    data[0].effective = data[0].permitted = bit
    _call("capset", ctypes.byref(hdr), data)
    _call("prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def enter() -> dict:
    """Contain this process (see the module docstring); returns what was achieved."""
    st: dict = {}
    st["network"] = _network()
    uid = gid = None
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("nobody")
            uid, gid = pw.pw_uid, pw.pw_gid
        except KeyError:
            st["user"] = "root (no user 'nobody' to switch to)"
    scratch = os.environ.get(ENV_SCRATCH) or None
    st["files"] = _files(scratch, uid if uid is not None else os.getuid(),
                         gid if gid is not None else os.getgid())
    if uid is not None:
        try:
            _drop_to(uid, gid)
            st["user"] = "nobody"
        except OSError as e:
            st["user"] = (f"root (could not switch to nobody: {e})" if os.getuid() == 0 else
                          f"nobody, without the capability to read root's files: {e}")
    else:
        st.setdefault("user", "the invoking user (not root: no user to switch to)")
    if scratch and "scratch tmpfs" in st["files"]:
        os.environ["TMPDIR"] = scratch
        os.environ["HOME"] = scratch
        import tempfile

        tempfile.tempdir = None
    st["uid"] = os.getuid()
    os.environ[_ENV_STATE] = json.dumps(st, sort_keys=True)
    return st


def state() -> dict | None:
    """What ``enter`` achieved in this process, or None outside a sandboxed worker."""
    raw = os.environ.get(_ENV_STATE)
    return json.loads(raw) if raw else None
