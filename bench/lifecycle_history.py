"""Lifecycle conditions 3 and 4: resume, and the model history (cold, after one more append,
and incremental), each in fresh server processes and again in the same one."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.lifecycle_common import (
    RESUME_WRITER,
    RPC_TIMEOUT,
    Running,
    info_server,
    ms,
    parse_seconds,
    raw_history,
    rpc_latencies,
    summary,
)
from bench.workload import user_message
from sessionlog.client import SessionLogClient


def resume_condition(
    db: str, session_id: str, events: int, cold_runs: int, warm_runs: int, shared: Running | None = None
) -> dict[str, Any]:
    """`resume` plus the first `model_history`, in fresh server processes (cold) and again in
    the same process (warm).

    Between two resumes one user message is appended under the resumed lease (the harness
    wrote something, then stopped), so every resume really appends its `session/end-seed`.
    With `shared` (--quick) there is one cold run, in a running server that has not touched
    this session yet.
    """
    cold: list[dict[str, float]] = []
    warm: list[dict[str, float]] = []
    end_seeds: list[bool] = []
    body = b""
    cold_runs = 1 if shared is not None else cold_runs
    for run in range(cold_runs):
        with info_server(db, shared) as (server, client):
            client.get_session(session_id)  # connect the channel; does not fold the log
            cold.append(_resume_once(client, session_id, end_seeds))
            if run == cold_runs - 1:
                for _ in range(warm_runs):
                    warm.append(_resume_once(client, session_id, end_seeds))
                body, _ = raw_history(client, session_id)
            stderr = server.stderr()
        server_resume = rpc_latencies(stderr, "ResumeSession", session_id)
        server_history = rpc_latencies(stderr, "GetModelHistory", session_id)
        cold[-1]["server_resume_ms"] = server_resume[0]
        cold[-1]["server_history_ms"] = server_history[0]
        if run == cold_runs - 1:
            for index, entry in enumerate(warm):
                entry["server_resume_ms"] = server_resume[index + 1]
                entry["server_history_ms"] = server_history[index + 1]
    messages, parse_s = parse_seconds(body)
    return {
        "events": events,
        "history_bytes": len(body),
        "messages": messages,
        "client_parse_ms": ms(parse_s),
        "every_resume_appended_end_seed": all(end_seeds),
        "cold": _resume_summary(cold),
        "warm": _resume_summary(warm),
    }


def _resume_once(client: SessionLogClient, session_id: str, end_seeds: list[bool]) -> dict[str, float]:
    before = client.get_session(session_id).next_seq
    start = time.perf_counter()
    info = client.resume(session_id, writer_id=RESUME_WRITER)
    resumed = time.perf_counter()
    body, _ = raw_history(client, session_id)
    done = time.perf_counter()
    end_seeds.append(info.end_seed_seq == before and info.next_seq == before + 1)
    client.append(session_id, info.lease, [user_message(f"resumed at {before}")])
    client.release_lease(info.lease)  # the harness stops; the next resume is a new process's
    return {
        "resume_ms": ms(resumed - start),
        "history_ms": ms(done - resumed),
        "total_ms": ms(done - start),
        "bytes": float(len(body)),
    }


def _resume_summary(runs: list[dict[str, float]]) -> dict[str, Any]:
    return {
        key: summary([r[key] for r in runs])
        for key in ("resume_ms", "history_ms", "total_ms", "server_resume_ms", "server_history_ms")
    }


def history_condition(
    db: str,
    session_id: str,
    events: int,
    cold_runs: int,
    after_runs: int,
    parse_runs: int = 3,
    shared: Running | None = None,
) -> dict[str, Any]:
    """Model history cold (first call in a fresh server process), and after one more append
    (a user message; median of `after_runs`).

    Reports the RPC time (JSON bytes received, not parsed), the server's handler time from its
    log, the client's parse time (`jsonvalue.loads`, measured on `parse_runs` bodies), and the
    bytes. End to end, as `SessionLogClient.model_history` does it, is RPC + parse. With
    `shared` (--quick) there is one cold run, in a running server that has not touched this
    session yet.
    """
    cold_rpc: list[float] = []
    cold_server: list[float] = []
    after_rpc: list[float] = []
    parses: list[float] = []
    grew_by_one = True
    sizes: list[int] = []
    stderr = ""
    count = 0
    cold_runs = 1 if shared is not None else cold_runs
    for run in range(cold_runs):
        with info_server(db, shared) as (server, client):
            client.get_session(session_id)  # connect the channel; does not fold the log
            body, seconds = raw_history(client, session_id)
            cold_rpc.append(ms(seconds))
            sizes.append(len(body))
            if run == cold_runs - 1:
                count, parse_s = parse_seconds(body)
                parses.append(ms(parse_s))
                with client.writer(session_id) as writer:
                    for index in range(after_runs):
                        marker = f"one more question {index}-{time.time_ns()}"
                        writer.append([user_message(marker)]).result(timeout=RPC_TIMEOUT)
                        body, seconds = raw_history(client, session_id)
                        after_rpc.append(ms(seconds))
                        grew_by_one = grew_by_one and marker.encode() in body[-400:]
                        if index < parse_runs:
                            now_count, parse_s = parse_seconds(body)
                            parses.append(ms(parse_s))
                            grew_by_one = grew_by_one and now_count == count + index + 1
                incremental = _incremental(client, session_id, after_runs)
                stderr = server.stderr()
            else:
                cold_server.append(rpc_latencies(server.stderr(), "GetModelHistory", session_id)[0])
    server_all = rpc_latencies(stderr, "GetModelHistory", session_id)
    cold_server.append(server_all[0])
    after_server = server_all[1 : 1 + after_runs]
    incremental["server"] = summary(server_all[2 + after_runs :])  # after the copy's first, full read
    parse_ms = statistics.median(parses)
    return {
        "events": events,
        "messages": count,
        "bytes": sizes[-1],
        "bytes_after": len(body),
        "cold": {"rpc": summary(cold_rpc), "server": summary(cold_server), "e2e_median_ms": _plus(cold_rpc, parse_ms)},
        "after_append": {
            "rpc": summary(after_rpc),
            "server": summary(after_server),
            "e2e_median_ms": _plus(after_rpc, parse_ms),
            "history_grew_by_the_appended_message": grew_by_one,
        },
        "client_parse": summary(parses),
        "incremental_after_append": incremental,
    }


def _incremental(client: SessionLogClient, session_id: str, runs: int) -> dict[str, Any]:
    """After one more append, the reader's copy brought up to date with only the new message
    (`SessionLogClient.refresh_history`: GetModelHistory from_index/if_generation).

    One full refresh fills the copy first (not counted); each timed refresh is end to end
    (RPC and parse of the tail), and must leave the copy equal in length to the history plus
    the appended message.
    """
    copy = client.history_copy(session_id)
    client.refresh_history(copy)
    times: list[float] = []
    ok = True
    with client.writer(session_id) as writer:
        for index in range(runs):
            marker = f"incremental {index}-{time.time_ns()}"
            before = len(copy.messages)
            writer.append([user_message(marker)]).result(timeout=RPC_TIMEOUT)
            start = time.perf_counter()
            messages = client.refresh_history(copy)
            times.append(ms(time.perf_counter() - start))
            ok = ok and len(messages) == before + 1 and messages[-1]["content"] == marker
    return {"e2e": summary(times), "copy_grew_by_the_appended_message": ok}


def _plus(values: list[float], extra: float) -> float:
    return round(statistics.median(values) + extra, 3)
