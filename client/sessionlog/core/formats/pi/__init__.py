"""Pi coding-agent session files and event streams (docs/pi-format.md), read without a server.

- `entries`: the header and entries of a session file, unknown fields and types kept;
- `migrate`: Pi's v1 → v2 → v3 upgrades;
- `load`: read a file through the strict JSONL reader, then migrate;
- `tree`: the `id`/`parentId` tree, its leaves and the path to a leaf;
- `context`: Pi's `buildSessionContext` for a leaf;
- `metrics`: the `sessionlog replay` metrics of a branch;
- `stream`: the `pi --mode json` event stream, messages rebuilt from their deltas.
"""
