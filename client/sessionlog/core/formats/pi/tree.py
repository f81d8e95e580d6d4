"""The `id`/`parentId` tree of a Pi session (pi-format.md §1.4, §13.3).

Pi never stores the leaf: on open it is the last entry in file order. Roots are entries whose
`parentId` is null, names no entry (an orphan), or names the entry itself; that is how Pi's
`getTree` treats them. Children are ordered by entry `timestamp` (as `getTree` sorts them), ties
in file order. A longer parent cycle cannot be walked (Pi would loop forever) and is an error.
"""

from __future__ import annotations

from sessionlog.core.errors import ValidationError
from sessionlog.core.formats.pi.entries import JsonObject


class PiTree:
    """An index over a file's entries (in file order): by id, children, leaves, paths."""

    __slots__ = ("_children", "_parent", "by_id", "entries", "position")

    def __init__(self, entries: list[JsonObject]) -> None:
        self.entries = entries
        self.by_id: dict[str, JsonObject] = {}
        self.position: dict[str, int] = {}
        for index, entry in enumerate(entries):
            key = entry.get("id")
            if not isinstance(key, str):
                raise ValidationError("BAD_PI_ENTRY", f"entry {index} has no string id (migrate v1 files first)")
            self.by_id[key] = entry
            self.position[key] = index
        self._parent: dict[str, str | None] = {}
        self._children: dict[str, list[str]] = {}
        for entry in entries:
            entry_id = str(entry["id"])
            parent = entry.get("parentId")
            if not isinstance(parent, str) or parent == entry_id or parent not in self.by_id:
                self._parent[entry_id] = None
            else:
                self._parent[entry_id] = parent
                self._children.setdefault(parent, []).append(entry_id)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.by_id

    def parent_of(self, entry_id: str) -> str | None:
        """The parent's id, or None for a root (null, orphan or self parent)."""
        return self._parent[self._require(entry_id)]

    def children_of(self, entry_id: str) -> list[str]:
        """Child ids ordered by entry timestamp, ties in file order (Pi's `getTree`)."""
        kids = self._children.get(self._require(entry_id), [])
        return sorted(kids, key=lambda k: (str(self.by_id[k].get("timestamp", "")), self.position[k]))

    def roots(self) -> list[str]:
        """Ids of root entries, in file order."""
        return [e["id"] for e in self.entries if self._parent[e["id"]] is None]

    def leaves(self) -> list[str]:
        """Ids of entries without children, in file order."""
        return [e["id"] for e in self.entries if e["id"] not in self._children]

    def default_leaf(self) -> str | None:
        """The leaf Pi uses when it opens the file: the last entry in file order (None if empty)."""
        return self.entries[-1]["id"] if self.entries else None

    def path_ids(self, leaf_id: str) -> list[str]:
        """Ids from the root down to `leaf_id`, inclusive."""
        path: list[str] = []
        seen: set[str] = set()
        current: str | None = self._require(leaf_id)
        while current is not None:
            if current in seen:
                raise ValidationError("PARENT_CYCLE", f"entry {current!r} is its own ancestor; the tree has a cycle")
            seen.add(current)
            path.append(current)
            current = self._parent[current]
        path.reverse()
        return path

    def path(self, leaf_id: str) -> list[JsonObject]:
        """Entries from the root down to `leaf_id`, inclusive."""
        return [self.by_id[i] for i in self.path_ids(leaf_id)]

    def _require(self, entry_id: str) -> str:
        if entry_id not in self.by_id:
            raise ValidationError("UNKNOWN_ENTRY", f"no entry with id {entry_id!r} in this session")
        return entry_id
