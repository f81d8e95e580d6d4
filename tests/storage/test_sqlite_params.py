"""The identity adapters bind an event row's bytes, booleans and NULLs as pysqlite always did."""

from __future__ import annotations

import sqlite3

from sessionlog_server.storage.sqlite_params import bind_common_types_directly


def test_adapted_values_are_stored_as_before_as_blob_integer_and_null() -> None:
    bind_common_types_directly()
    assert sqlite3.adapters[(bytes, sqlite3.PrepareProtocol)] is bytes
    with sqlite3.connect(":memory:") as db:
        db.execute("CREATE TABLE t (data, flag, absent, text)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(b'{"a":1}', True, None, "x"), (b"", False, None, "")])
        rows = db.execute("SELECT typeof(data), data, typeof(flag), flag, typeof(absent), text FROM t").fetchall()
    assert rows == [("blob", b'{"a":1}', "integer", 1, "null", "x"), ("blob", b"", "integer", 0, "null", "")]
