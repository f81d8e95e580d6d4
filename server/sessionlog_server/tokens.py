"""Bearer tokens: configured as sha256 hashes, each mapped to a namespace and a kind.

The configuration never holds a token itself, only its hash, so a leaked tokens file grants
nothing. A tokens file is JSON Lines (or a JSON array) of
`{"name": "ci", "namespace": "team-a", "sha256": "<hex>", "readOnly": false}`;
`sessionlog token new` makes a token and prints its line. `SESSIONLOG_TOKENS` may carry the
same JSON array inline.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any

from sessionlog_server.config import read_setting_file
from sessionlog_server.service.access import Principal, namespace_problem

TOKEN_PREFIX = "slt_"


def hash_token(token: str) -> str:
    """The hex sha256 of a token, as stored in the configuration."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class TokenStore:
    """Token hash -> principal."""

    principals: dict[str, Principal]

    @property
    def enabled(self) -> bool:
        return bool(self.principals)

    def lookup(self, token: str) -> Principal | None:
        return self.principals.get(hash_token(token))

    @classmethod
    def empty(cls) -> TokenStore:
        return cls({})

    @classmethod
    def load(cls, file: str | None, inline: str | None) -> TokenStore:
        """Tokens from a file and/or an inline JSON array; an invalid entry is an error.

        A token hash listed twice is refused (naming both places): which entry would win is
        not something an operator should have to guess.
        """
        entries: list[tuple[str, Any]] = []  # (where it was read, the entry)
        if file:
            text = read_setting_file(file, "SESSIONLOG_TOKENS_FILE").decode("utf-8")
            if text.lstrip().startswith("["):
                entries.extend((f"{file} entry {i + 1}", e) for i, e in enumerate(_parse(text, file)))
            else:
                for number, line in enumerate(text.splitlines(), 1):
                    if line.strip():
                        entries.append((f"{file} line {number}", _parse(line, f"{file} line {number}")))
        if inline:
            entries.extend((f"SESSIONLOG_TOKENS entry {i + 1}", e) for i, e in enumerate(_parse(inline, "tokens")))
        principals: dict[str, Principal] = {}
        first_seen: dict[str, str] = {}
        for where, entry in entries:
            digest, principal = _entry(entry, where)
            if digest in first_seen:
                raise ValueError(
                    f"{where} repeats the sha256 of {first_seen[digest]}: list each token once "
                    "(remove one of the two entries)"
                )
            first_seen[digest] = where
            principals[digest] = principal
        return cls(principals)


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None


def _entry(entry: Any, where: str) -> tuple[str, Principal]:
    if not isinstance(entry, dict):
        raise ValueError(f"token entry at {where} is not an object")
    digest, namespace = entry.get("sha256"), entry.get("namespace")
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"token entry at {where}: sha256 must be 64 lowercase hex characters")
    if not isinstance(namespace, str):
        raise ValueError(f"token entry at {where}: namespace must be a non-empty string")
    problem = namespace_problem(namespace)
    if problem is not None:
        raise ValueError(f"token entry at {where}: {problem}")
    read_only = entry.get("readOnly", False)
    if not isinstance(read_only, bool):
        raise ValueError(f"token entry at {where}: readOnly must be true or false")
    return digest, Principal(namespace, not read_only, str(entry.get("name", "")))


def config_line(token: str, namespace: str, *, read_only: bool, name: str) -> str:
    """The tokens-file line for `token`; without a name, none (`"name":""` labelled nothing)."""
    entry: dict[str, Any] = {"name": name} if name else {}
    entry.update(namespace=namespace, sha256=hash_token(token), readOnly=read_only)
    return json.dumps(entry, separators=(",", ":"))
