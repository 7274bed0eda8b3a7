"""One writer per run folder: :class:`RunLock` on ``run.lock``."""
from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time

from argtca.run_folder.errors import RunLockedError
from argtca.utils.io import os_error

LOCK_NAME = "run.lock"


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):   # someone else's process: alive
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class RunLock:
    """``with RunLock(out_dir):`` — an exclusive lock (``filelock``) on ``out_dir/run.lock`` while a
    run writes the folder. The file holds the owner's pid, host, start time and command, which the
    error of a second run names.

    The lock belongs to the run's main process: filelock closes its descriptor in forked
    children (loader workers fork after the lock is taken), so the lock ends with the main
    process even while its workers linger. A lock still held although the pid it names is dead
    (on this host) is taken over, saying so: its holder is an orphan of that run. The file itself
    stays (removing it would race with a new owner)."""

    def __init__(self, out_dir: str):
        self.path = os.path.join(out_dir, LOCK_NAME)
        self.lock = None

    def _try(self):
        from filelock import FileLock, Timeout
        lock = FileLock(self.path, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return None
        except OSError as e:
            if e.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP):   # some network mounts
                print(f"warning: cannot lock {self.path} ({e.strerror}): one writer per folder "
                      f"is not enforced on this file system", file=sys.stderr)
                return False
            raise os_error(e, self.path) from None
        return lock

    def acquire(self) -> "RunLock":
        lock = self._try()
        if lock is None:
            info = self._owner()
            pid = info.get("pid")
            if (isinstance(pid, int) and info.get("host") == socket.gethostname()
                    and pid != os.getpid() and not _pid_alive(pid)):
                # the named run is dead and something it started holds the lock: a new file
                print(f"argtca: {os.path.dirname(self.path) or '.'}: the run that held it (pid "
                      f"{pid}, started {info.get('started', '?')}) is no longer running; "
                      f"taking over its lock", file=sys.stderr, flush=True)
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    raise os_error(e, self.path) from None
                lock = self._try()
            if lock is None:
                raise RunLockedError(self._locked_message())
        if lock is False:
            return self
        self.lock = lock
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
        try:   # another descriptor on the file: writing it leaves the lock as it is
            with open(self.path, "w") as f:
                f.write(json.dumps(info) + "\n")
        except OSError as e:
            self.release()
            raise os_error(e, self.path) from None
        return self

    def _owner(self) -> dict:
        try:
            with open(self.path) as f:
                info = json.loads(f.read() or "{}")
        except (OSError, ValueError):
            info = {}
        return info if isinstance(info, dict) else {}

    def _locked_message(self) -> str:
        info = self._owner()
        who = (f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
               f"{info.get('started', '?')}: {info.get('command', '?')}") if info else \
            "another process (it has not recorded its details yet)"
        return (f"{os.path.dirname(self.path) or '.'} is being written by another run ({who}); "
                f"one run per output folder: wait for it to finish (then this command resumes "
                f"or reuses its records) or pass another --output-dir")

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
