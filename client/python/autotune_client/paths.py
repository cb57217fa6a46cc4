"""Default locations, the same rules as the C++ side.

Server:      $AUTOTUNE_SERVER, else unix://$XDG_RUNTIME_DIR/autotune.sock,
             else unix:///tmp/autotune-<uid>.sock (base/paths.cc)
Local cache: $AUTOTUNE_LOCAL_CACHE, else $XDG_CACHE_HOME/autotune,
             else ~/.cache/autotune (client/local_cache.cc)

An environment variable that is set but empty counts as unset.
"""

from __future__ import annotations

import os


def default_server_address() -> str:
    """The socket the daemon listens on without --listen."""
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime_dir:
        return f"unix://{runtime_dir}/autotune.sock"
    return f"unix:///tmp/autotune-{os.getuid()}.sock"


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
