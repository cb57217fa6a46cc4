"""Default locations, the same rules as the C++ side.

Server:      $AUTOTUNE_SERVER, else unix://$XDG_RUNTIME_DIR/autotune.sock,
             else unix:///tmp/autotune-<uid>/autotune.sock (base/paths.cc)
Local cache: $AUTOTUNE_LOCAL_CACHE, else $XDG_CACHE_HOME/autotune,
             else ~/.cache/autotune (client/local_cache.cc)

An environment variable that is set but empty counts as unset.
"""

from __future__ import annotations

import os
import pwd
import stat
from typing import Optional


def default_server_address() -> str:
    """The socket the daemon listens on without --listen."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime_dir:
        return f"unix://{runtime_dir}/autotune.sock"
    return f"unix:///tmp/autotune-{os.getuid()}/autotune.sock"


def socket_owner_from_environment() -> Optional[int]:
    """The uid AUTOTUNE_SOCKET_OWNER names (a user name or a number), or None.
    Raises ValueError for a name that is no user of this host."""
    owner = os.environ.get("AUTOTUNE_SOCKET_OWNER", "")
    if not owner:
        return None
    if owner.isdigit():
        return int(owner)
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise ValueError(f"AUTOTUNE_SOCKET_OWNER is '{owner}', which is no user of this host") from None


def socket_owner_problem(path: str, trusted_owner: Optional[int]) -> Optional[str]:
    """Why nothing may be sent to the unix socket `path`, or None: as the C++
    client's CheckSocketOwner (base/paths.h). The socket and its folder must
    belong to you, root or `trusted_owner`, and the folder may not be written
    by others unless it is sticky; nothing at `path` is no problem here."""
    me = os.getuid()

    def trusted(uid: int) -> bool:
        return uid in (me, 0) or (trusted_owner is not None and uid == trusted_owner)

    hint = "; if the daemon runs as that user, set AUTOTUNE_SOCKET_OWNER to it (user name or uid)"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket; nothing is sent to it"
    if not trusted(st.st_uid):
        return (
            f"the socket {path} belongs to uid {st.st_uid}, not to you (uid {me}) or root: "
            f"another user may be listening there, so nothing is sent to it{hint}"
        )
    folder = os.path.dirname(path) or "."
    st = os.stat(folder)
    if not trusted(st.st_uid):
        return (
            f"the socket's folder {folder} belongs to uid {st.st_uid}, not to you (uid {me}) "
            f"or root: its owner could put another socket there{hint}"
        )
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        return (
            f"the socket's folder {folder} may be written by other users and is not sticky: "
            "anyone could replace the socket, so nothing is sent to it"
        )
    return None


def client_server_address() -> str:
    """The address a client dials without one: $AUTOTUNE_SERVER, else the default socket."""
    return os.environ.get("AUTOTUNE_SERVER", "") or default_server_address()


def default_local_cache_directory() -> str:
    """The local cache's directory; empty when none can be found (no HOME)."""
    directory = os.environ.get("AUTOTUNE_LOCAL_CACHE", "")
    if directory:
        return directory
    cache_home = os.environ.get("XDG_CACHE_HOME", "")
    if cache_home:
        return f"{cache_home}/autotune"
    home = os.environ.get("HOME", "")
    if home:
        return f"{home}/.cache/autotune"
    return ""
