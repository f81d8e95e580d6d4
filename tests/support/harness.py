"""A tiny harness process for fault-injection tests: it opens a turn, records a tool call as
started, then waits to be killed (it never writes the tool's result).

usage: python -m tests.support.harness TARGET SESSION_ID
"""

from __future__ import annotations

import sys
import time

from sessionlog.client import SessionLogClient
from tests.support.events import assistant, step_start, system, tool_call, turn_start, user


def main() -> None:
    target, session_id = sys.argv[1], sys.argv[2]
    client = SessionLogClient(target)
    writer = client.writer(session_id, create_if_missing=True)
    writer.append(
        [
            system("you are a harness"),
            user("list the files, then delete the temp ones"),
            turn_start(1),
            step_start(1, 1),
            assistant(1, 1, "", calls=(("call-ls", "ls"), ("call-rm", "rm"))),
            tool_call(1, 1, "call-ls", "ls"),  # started: its side effects may have happened
        ]
    ).result()
    print("ready", flush=True)
    time.sleep(600)  # killed long before this


if __name__ == "__main__":
    main()
