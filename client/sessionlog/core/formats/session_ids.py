"""The ids `sessionlog import` gives the sessions of a file: named by the file, so that importing
the same file again finds them (docs/formats.md, "Importing again").

- The main session is named by `--id`, else by the file: Pi's header `id`, an export's
  `session.id`.
- The fork of another Pi leaf is `<main>.<leafId>`, whichever way the main session was named.

A name that is not a valid session id (`validate.check_session_id`: 1 to 128 URL-safe characters;
a Pi header may hold anything) is replaced by `import-` and the first 32 hex digits of its
SHA-256: still derived from the file alone, so a re-import finds the session again, where a
random id would give it a second copy.
"""

from __future__ import annotations

import hashlib

from sessionlog.core import validate
from sessionlog.core.errors import SessionLogError

DERIVED_PREFIX = "import-"


def session_id_for(name: str) -> str:
    """`name` when it is a valid session id, else the id derived from it."""
    try:
        validate.check_session_id(name)
    except SessionLogError:
        return DERIVED_PREFIX + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return name


def fork_session_id(main_id: str, leaf_id: str) -> str:
    """The id of the fork for Pi leaf `leaf_id` of the session `main_id`."""
    return session_id_for(f"{main_id}.{leaf_id}")


__all__ = ["DERIVED_PREFIX", "fork_session_id", "session_id_for"]
