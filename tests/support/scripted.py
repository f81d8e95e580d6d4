"""A scripted session for the session page, the request diff and the OTLP export (issue 14).

Four turns with: a tool error, a header change (a tool added) whose next request misses the
prompt cache, a compaction (a `compaction/summary` and the replace that lands it) whose next
request misses too, a request whose cache read falls with nothing changed in the request, and a
fourth turn left open with a started tool call, which crash repair (or `with_repair`) closes.
The tests fork it as well. `SCRIPT` holds SPEC §2 envelopes; the seqs in the comments are
their positions (the first event is a surface-less header, then node 0 is a real prompt, so
the service inserts nothing).
"""

from __future__ import annotations

from typing import Any

from sessionlog.core.events import Event, NewEvent
from tests.support.events import step_end, step_start, system, tool_call, tool_result, turn_end, turn_start, user

READ = {"name": "read", "description": "Read a file", "parameters": {"type": "object"}}
BASH = {"name": "bash", "description": "Run a command", "parameters": {"type": "object"}}
SCRIPT_LIKE = "def stats(): ... # </script><!--<script>document.title='owned'</script>"
HEADER_1 = {"config": {"provider": "acme", "model": "m-1", "temperature": 0}, "tools": [READ]}
HEADER_2 = {"config": {"provider": "acme", "model": "m-1", "temperature": 0}, "tools": [READ, BASH]}


def usage(input_tokens: int, cache_read: int, output: int) -> dict[str, Any]:
    """A Pi-shaped usage whose cost is 1e-6 USD per uncached input token and per output token
    and 1e-7 per cached one (integers of micro-dollars keep float sums exact enough)."""
    cost = input_tokens * 1e-6 + cache_read * 1e-7 + output * 1e-6
    return {
        "input": input_tokens,
        "output": output,
        "cacheRead": cache_read,
        "cacheWrite": 0,
        "totalTokens": input_tokens + cache_read + output,
        "cost": {"total": cost},
    }


def answer(turn: int, step: int, tokens: dict[str, Any], *calls: tuple[str, str], text: str = "") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    content += [{"type": "toolCall", "id": cid, "name": name, "arguments": {"path": "x"}} for cid, name in calls]
    message = {"role": "assistant", "content": content, "provider": "acme", "model": "m-1"}
    data = {"turn": turn, "step": step, "message": message, "usage": tokens}
    return {"type": "assistant/message", "data": data, "surfaceOp": "append"}


def header(value: dict[str, Any], reason: str, **extra: Any) -> dict[str, Any]:
    return {"type": "request/header", "data": {"header": value, "reason": reason, **extra}}


SCRIPT: list[dict[str, Any]] = [
    header(HEADER_1, "initial"),  # 0
    system("You are a careful coding agent."),  # 1
    user("Add a stats endpoint."),  # 2
    turn_start(1),  # 3
    step_start(1, 1),  # 4
    answer(1, 1, usage(1000, 0, 50), ("c1", "read")),  # 5  request 1: cold cache
    tool_call(1, 1, "c1", "read"),  # 6
    tool_result(1, 1, "c1", SCRIPT_LIKE),  # 7 content that must stay text on the page
    step_end(1, 1),  # 8
    step_start(1, 2),  # 9
    answer(1, 2, usage(200, 1000, 40), ("c2", "read")),  # 10 request 2: warm
    tool_call(1, 2, "c2", "read"),  # 11
    tool_result(1, 2, "c2", "no such file", is_error=True),  # 12 a tool error
    step_end(1, 2),  # 13
    step_start(1, 3),  # 14
    answer(1, 3, usage(150, 1200, 30), text="Done."),  # 15 request 3
    step_end(1, 3),  # 16
    turn_end(1),  # 17
    user("Now run the checks."),  # 18
    header(HEADER_2, "change"),  # 19 the tool list changes
    turn_start(2),  # 20
    step_start(2, 1),  # 21
    answer(2, 1, usage(1500, 0, 20), ("c3", "bash")),  # 22 request 4: cache drop, cause header [tools]
    tool_call(2, 1, "c3", "bash"),  # 23
    tool_result(2, 1, "c3", "6 checks passed"),  # 24
    step_end(2, 1),  # 25
    step_start(2, 2),  # 26
    answer(2, 2, usage(100, 1500, 10), text="All green."),  # 27 request 5: warm
    step_end(2, 2),  # 28
    turn_end(2),  # 29
    {"type": "compaction/start", "data": {}},  # 30
    {
        "type": "compaction/summary",
        "data": {
            "summary": "Added the endpoint; checks pass.",
            "provider": "acme",
            "model": "m-1",
            "usage": usage(1700, 0, 60),
            "tokensBefore": 1700,
        },
    },  # 31
    {
        "type": "user/message",
        "data": {
            "message": {"role": "user", "content": "Summary: added the endpoint; checks pass."},
            "source": {"kind": "compaction"},
        },
        "surfaceOp": {"op": "replace", "startSeq": 2, "endSeq": 27},
        "sourceEventSeqs": [2, 5, 7, 10, 12, 15, 18, 22, 24, 27],
    },  # 32 the compaction lands: nodes 2..27 replaced
    {"type": "compaction/end", "data": {}},  # 33
    header(HEADER_2, "series"),  # 34 same header, new request series
    user("Also document it."),  # 35
    turn_start(3),  # 36
    step_start(3, 1),  # 37
    answer(3, 1, usage(400, 0, 25), ("c4", "read")),  # 38 request 6: cache drop, cause replace
    tool_call(3, 1, "c4", "read"),  # 39
    tool_result(3, 1, "c4", "README contents"),  # 40
    step_end(3, 1),  # 41
    step_start(3, 2),  # 42
    answer(3, 2, usage(500, 300, 15), text="Documented."),  # 43 request 7: warm
    step_end(3, 2),  # 44
    turn_end(3),  # 45
    user("Deploy it."),  # 46
    turn_start(4),  # 47
    step_start(4, 1),  # 48
    answer(4, 1, usage(900, 0, 12), ("c5", "bash"), ("c6", "bash")),  # 49 request 8: drop, cause none
    tool_call(4, 1, "c5", "bash"),  # 50 started, then the harness crashed
]
"""Turn 4 is left open: repair adds error results for c5 (outcome unknown) and c6 (not
started), `step/end` and `turn/end {interrupted}` at seqs 51..54."""

REQUEST_SEQS = [5, 10, 15, 22, 27, 38, 43, 49]
SUMMARY_SEQ = 31
"""The compaction's summariser call (`compaction/summary` with usage): a row of the timeline's
request list of kind `summary`, though no request."""
DROPS = {22: ["header"], 38: ["replace"], 49: ["none"]}
COMPACTION_REPLACE_SEQ = 32


def committed(script: list[dict[str, Any]] = SCRIPT, *, start: int = 1_700_000_000_000) -> list[Event]:
    """The script as a committed log (seq = position, one second between events)."""
    return [NewEvent.from_json(envelope).committed(seq, start + 1000 * seq) for seq, envelope in enumerate(script)]


def write_scripted(client: Any, session_id: str) -> str:
    """Write the script to a real server, let crash repair close turn 4 (a resume after the
    writer left), and fork the result; returns the fork's id (its page shows all four)."""
    client.create_session(session_id, cwd="/home/me/demo")
    lease = client.acquire_lease(session_id)
    client.append(session_id, lease, SCRIPT, expected_next_seq=0)
    client.release_lease(lease)
    resumed = client.resume(session_id)
    assert resumed.repair_seqs == [51, 52, 53, 54], resumed.repair_seqs  # c5, c6, step/end, turn/end
    client.release_lease(resumed.lease)
    last = client.get_session(session_id).next_seq - 1
    return str(client.fork(session_id, last, f"{session_id}-fork").id)
