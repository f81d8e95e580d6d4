"""Pi session → sessionlog events (SPEC §11): the pure mapping of a branch, and of the other leaves as forks.

Folding the events of a branch with `SessionFold` gives a model history equal, message for
message, to the context Pi builds for its leaf (`context.session_context`), and stats whose model
and thinking level are Pi's (once the branch sets a level: Pi's default, `off`, is not an entry,
and the stats of a branch without one have none). Every entry is kept (see `layout`), so `exporter` rebuilds the file.

**The log of a branch** (seqs are positions in the list):

- seq 0: a `system/message` with empty content, node 0, standing for the prompt Pi does not store
  (it projects to no message). The service would insert the same event before the first surface
  event; writing it explicitly keeps every seq predictable. Seq 1: ignorable `pi/session`, whose
  `data.pi` is the session header.
- `message`, role `assistant`: [`step/end` of an open step], [`turn/start`], `step/start`,
  `assistant/message {turn, step, message}`. The step and the turn end right away (`turn/end`, kind
  from `stopReason`, see `TURN_END_BY_STOP_REASON`) unless a tool call of it gets a result later on
  the branch.
- `message`, role `toolResult`: `tool/result {turn, step, message}` in the step of its call, then
  `step/end` once no pending call of the step gets a result later (the turn stays open for the
  next model call of the same agent run).
- `message`, role `user`: [`turn/start` when no turn is open: a prompt starts an agent run], then
  `user/message {message, source}`. Other roles (`bashExecution`, `custom`, …):
  `user/message {message, source}`; role `system` with content: `system/message`.
- `custom_message`: `user/message`, message role `custom` as Pi's context shows it.
  `branch_summary`: `user/message`, message role `branchSummary` (an empty summary shows nothing in
  Pi: then an ignorable `pi/branch_summary`).
- `compaction`: `compaction/summary {summary, firstKeptEntryId, tokensBefore, usage?}`, then the
  summary message (role `compactionSummary`) lands as a `user/message` with `source.kind`
  `"compaction"` (below).
- `model_change`, `thinking_level_change`, `custom`, `label`, `session_info`, `usage`,
  `context_edit` and unknown types: ignorable `pi/<type>` (`pi/entry` when the type is not a valid
  event type name). The stats fold reads `pi/model_change {provider, modelId}` and
  `pi/thinking_level_change {thinkingLevel}`, and the usage of `pi/usage` and `pi/branch_summary`.
- End of the branch: `step/end` and `turn/end` for what is still open.

`data.source.kind` of a user-side message: `user`, `bash` (bashExecution), `injection` (custom
messages), `branch-summary`, else the Pi role. Where each entry field lives: `layout`.

**Compaction.** Only the latest compaction on the path counts, and its `firstKeptEntryId` may lie
before an earlier compaction's cut, so entries the earlier summary replaced come back. When the
messages of the kept entries are exactly the tail of the surface, the summary replaces the nodes
between node 0 and them (nothing is copied). Otherwise it replaces everything after node 0 and the
kept entries' messages are appended again as model-only copies (`source.kind` `"copy"`, citing the
event that first carried the entry in `sourceEventSeqs`, same event type), which the transcript
does not show as new rows. A replace cites every node it replaces and the `compaction/summary`.

**Things Pi allows that the structure rules do not** fall back to a `user/message` carrying the
message unchanged (so the model history stays Pi's): a tool result whose call is not pending in the
open step (`source.kind` `"pi-unpaired-tool-result"`) and an assistant message whose `toolCall`
blocks lack ids or repeat one (`"pi-unstructured"`). Tool calls never answered on the branch
(aborted and errored messages, crashes mid-tool) are left without results, as in Pi: their step
simply ends. Such a `user/message` keeps its message's role, which the envelope rules allow for
these two source kinds and `"pi-forked-call"` (Forks, below) only (`vocabulary.KEPT_AS_SEEN`).

**Checks.** `import_pi` checks every event a session will be sent as the service checks an append:
the envelope rules (`validate.validate_proposal`, sizes within `limits`) and the fold's. A refusal
names the file's line of the entry (when the event stands for one), the seq in its session and the
entry id, and, in a fork's own part, the fork's leaf; what `fork` writes is the service's own.

**Forks.** The branch of the default leaf (the last entry) is the main session. Another leaf
becomes a fork of the branch that first imported the deepest entry it shares with the branches
before it in file order (the main one, or an earlier fork: two leaves that part after leaving the
main branch together share their common entries once, as in the file). The child shares that
branch's log up to the last event of the last shared entry, gets what the service writes into a
fork (`session/end-seed {inherited: true}`, then the closers of a turn open at the cut,
`turn/end {kind: forked}`), then its own entries. A cut while a tool call is pending makes the
service answer the call with an error result (SPEC §8), which Pi's context does not hold. When the
calls were asked for by the last assistant message on the surface and only results of its calls
follow it (the leaf parts right after it, or after some of its results), the child's first event
takes that message, those results and the error results off the surface together, a
`user/message` carrying the message unchanged (`source.kind` `"pi-forked-call"`, kept as seen),
followed by a model-only copy of each of those results: the child inherits the message and the
results, each imported and billed once, and its own results follow as unpaired results.
Otherwise the cut moves back to the last entry boundary where no call is pending or it could be
cut so, and the child re-imports the shared entries after it.

**Times.** The service stamps every event with its commit time, which for an import is one
instant; Pi's own times go into `data.recordedTime` (epoch ms, `clock.RECORDED_TIME`), from which
the projections measure durations. An event the importer writes for an entry carries the entry's
`timestamp`, except the events that open a model call (`step/start`, and the `turn/start` and
previous `step/end` before it): they carry the assistant message's `timestamp`, the time Pi sent
the request, so a step runs from the request to its last result and a model call's latency is
`step/start` to `assistant/message`. `pi/session` carries the header's. Events Pi recorded no
time for carry none, and a duration measured to or from them is unknown: the head (seq 0), the
closers at the end of a branch (a run Pi never saw end), what `fork` writes, and the events of an
entry whose time is missing or not a date.

**Event ids** are deterministic, so a re-sent batch is deduplicated and `import(export(import(f)))`
equals `import(f)`: `pi:<entryId>:<n>` for the n-th event of an entry, `pi:head:0`,
`pi:session:0`, `pi:end:<n>` for the closers at the end of a branch.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sessionlog.core import validate
from sessionlog.core.clock import RECORDED_TIME
from sessionlog.core.errors import SessionLogError, ValidationError
from sessionlog.core.events import APPEND, JsonObject, NewEvent, Replace
from sessionlog.core.fold import SessionFold
from sessionlog.core.formats.pi.context import compaction_summary_message, entry_message, js_date_ms
from sessionlog.core.formats.pi.entries import (
    BRANCH_SUMMARY,
    COMPACTION,
    CUSTOM_MESSAGE,
    MESSAGE,
    PiFile,
)
from sessionlog.core.formats.pi.layout import MESSAGE_KEYS, PI_KEY, PI_SESSION, split_entry
from sessionlog.core.formats.pi.tree import PiTree
from sessionlog.core.limits import DEFAULT_LIMITS, Limits
from sessionlog.core.messages import COMPACTION_SOURCE_KIND, COPY_SOURCE_KIND, empty_system_head, is_empty_content
from sessionlog.core.repair import fork_seed
from sessionlog.core.vocabulary import (
    ASSISTANT_MESSAGE,
    COMPACTION_SUMMARY,
    FORKED_CALL,
    STEP_END,
    STEP_START,
    SYSTEM_MESSAGE,
    TOOL_RESULT,
    TURN_END,
    TURN_START,
    UNPAIRED_TOOL_RESULT,
    UNSTRUCTURED,
    USER_MESSAGE,
)

PI_TYPE_PREFIX = "pi/"
FALLBACK_ENTRY_TYPE = "pi/entry"
SOURCE_BY_ROLE: dict[str, str] = {
    "user": "user",
    "bashExecution": "bash",
    "custom": "injection",
    "branchSummary": "branch-summary",
}
"""`data.source.kind` of a user-side message, by its Pi role (other roles: the role itself)."""

TURN_END_BY_STOP_REASON: dict[str, str] = {
    "stop": "completed",
    "length": "max-tokens",
    "error": "error",
    "aborted": "aborted",
    "toolUse": "aborted",
}
"""`turn/end` kind by the `stopReason` of the turn's last assistant message. `toolUse` means the
run stopped before the model answered its tool results (a crash or an abort); a turn with no
assistant message at all ends `aborted` too; any other reason (`deferred`, newer ones) `completed`."""

_TYPE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")
"""An entry type that names its event type, matched whole (`fullmatch`, as the door's rule)."""
MAX_EVENT_ID_CHARS = 128


def turn_end_kind(stop_reason: Any) -> str:
    """The `turn/end` kind for a turn whose last assistant message stopped with `stop_reason`."""
    if not isinstance(stop_reason, str) or not stop_reason:
        return "aborted"
    return TURN_END_BY_STOP_REASON.get(stop_reason, "completed")


def pi_event_type(entry_type: Any) -> str:
    """`pi/<type>` for an entry type that is a valid event type name, else `pi/entry`."""
    if isinstance(entry_type, str) and _TYPE_NAME.fullmatch(entry_type) and len(entry_type) <= 120:
        return PI_TYPE_PREFIX + entry_type
    return FALLBACK_ENTRY_TYPE


def event_id(owner: str, index: int) -> str:
    """`pi:<owner>:<index>`, with an over-long owner replaced by a hash (ids hold 128 chars)."""
    candidate = f"pi:{owner}:{index}"
    if len(candidate) <= MAX_EVENT_ID_CHARS:
        return candidate
    digest = hashlib.sha256(owner.encode("utf-8")).hexdigest()[:32]
    return f"pi:sha256-{digest}:{index}"


def pi_time(value: Any) -> int | None:
    """Epoch ms of a time Pi recorded (an entry's ISO `timestamp`, a message's ms `timestamp`), read
    as JavaScript's `Date` reads it; None when there is none or it is not a date: a missing time is
    unknown, never the epoch `new Date(null)` would give."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    ms = js_date_ms(value)
    return ms if isinstance(ms, int) else None


def _result_call_id(entry: JsonObject) -> str | None:
    if entry.get("type") != MESSAGE:
        return None
    message = entry["message"]
    if message.get("role") != "toolResult":
        return None
    call_id = message.get("toolCallId")
    return call_id if isinstance(call_id, str) else None


def tool_call_ids(message: JsonObject) -> list[str] | None:
    """Ids of the message's `toolCall` blocks, or None when the structure rules would refuse them
    (an id that is missing, empty or repeated, or a name that is not a string)."""
    content = message.get("content")
    if not isinstance(content, list):
        return []
    ids: list[str] = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "toolCall":
            continue
        call_id, name = block.get("id"), block.get("name")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or call_id in ids:
            return None
        ids.append(call_id)
    return ids


@dataclass(frozen=True, slots=True)
class _Saved:
    """A mapper's state at a fork point (`BranchMapper.save`), to return to after mapping a child."""

    mark: int
    events: int
    path: int
    origin: dict[str, _Origin]
    node: dict[str, int]
    future: Counter[str]
    stop_reason: Any
    time: int | None
    tail: _Tail | None
    forked: _ForkedCall | None


@dataclass(frozen=True, slots=True)
class _Tail:
    """Where the surface ends: the seq of the last `assistant/message` appended (no replace
    since) and how many nodes stand from it on, itself included."""

    node: int
    nodes: int


@dataclass(frozen=True, slots=True)
class _ForkedCall:
    """What `BranchMapper.fork` cut while calls were pending: the node of the assistant message
    that asked for them, the results of its calls already recorded after it (the surface's other
    nodes from it on, in order) and the error results the fork wrote for the pending ones."""

    node: int
    answered: tuple[int, ...]
    results: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Origin:
    """The event that first carried an entry's message: what a copy cites and repeats."""

    seq: int
    type: str
    message: JsonObject


class BranchMapper:
    """Maps entries, fed in path order, to events; a `SessionFold` of the events so far checks every
    event as the service will and answers the structural questions (open turn, pending calls).

    With `limits`, every event it writes is also checked by the envelope rules an append applies
    (`validate.validate_proposal`, sizes included). `entry_lines` (entry id → the file's line)
    lets a refusal name the line, and gives `lines`, the line of each event (None for the head,
    the session header's event, the closers and what `fork` writes)."""

    def __init__(
        self, header: JsonObject, *, limits: Limits | None = None, entry_lines: Mapping[str, int] | None = None
    ) -> None:
        self.fold = SessionFold()
        self.events: list[NewEvent] = []
        self.lines: list[int | None] = []
        self.limits = limits
        self._entry_lines: Mapping[str, int] = entry_lines or {}
        self._owner = "head"
        self._index = 0
        self._origin: dict[str, _Origin] = {}
        self._node: dict[str, int] = {}
        self._path: list[JsonObject] = []
        self._future: Counter[str] = Counter()
        self._stop_reason: Any = None
        self._time: int | None = None
        """The recorded time of the events written next (None: Pi recorded none)."""
        self._tail: _Tail | None = None
        """The last `assistant/message` on the surface and the nodes after it (`_commit` keeps it)."""
        self._forked: _ForkedCall | None = None
        self._emit(empty_system_head())
        self._owner, self._index, self._time = "session", 0, pi_time(header.get("timestamp"))
        self._emit(NewEvent(PI_SESSION, {PI_KEY: header}, ignorable=True))

    @property
    def next_seq(self) -> int:
        """The seq the next event will have."""
        return self.fold.next_seq

    # --- driving ---------------------------------------------------------------------------

    def expect(self, entries: Iterable[JsonObject]) -> None:
        """Declare the entries that will be fed next (in order): their tool results decide whether
        a step can end as soon as its assistant message or a result is in."""
        self._future = Counter(c for c in map(_result_call_id, entries) if c is not None)

    def feed(self, entry: JsonObject) -> None:
        """Map one entry (the next on the path)."""
        entry_id = entry.get("id")
        self._owner, self._index, self._time = str(entry_id), 0, pi_time(entry.get("timestamp"))
        call_id = _result_call_id(entry)
        if call_id is not None and self._future[call_id] > 0:
            self._future[call_id] -= 1
        kind = entry.get("type")
        if kind == MESSAGE:
            self._message(entry)
        elif kind == COMPACTION:
            self._compaction(entry)
        elif kind in (CUSTOM_MESSAGE, BRANCH_SUMMARY) and (message := entry_message(entry)) is not None:
            self._user_side(entry, message, in_message=MESSAGE_KEYS[str(kind)])
        else:
            self._ignorable(entry)
        self._path.append(entry)

    def finish(self) -> None:
        """End of the branch: close the step and turn still open."""
        self._owner, self._index, self._time = "end", 0, None
        self._end_turn()

    def save(self) -> _Saved:
        """Remember the state here (a fold checkpoint and copies of the maps) for `restore`."""
        return _Saved(
            self.fold.checkpoint(),
            len(self.events),
            len(self._path),
            dict(self._origin),
            dict(self._node),
            Counter(self._future),
            self._stop_reason,
            self._time,
            self._tail,
            self._forked,
        )

    def restore(self, saved: _Saved) -> None:
        """Go back to a saved state: everything mapped since is undone (O(events since))."""
        self.fold.rollback(saved.mark)
        del self.events[saved.events :]
        del self.lines[saved.events :]
        del self._path[saved.path :]
        self._origin, self._node = saved.origin, saved.node
        self._future, self._stop_reason, self._time = saved.future, saved.stop_reason, saved.time
        self._tail, self._forked = saved.tail, saved.forked

    def cut_is_safe(self) -> bool:
        """True when a fork cut here shows its model what Pi's context for the fork's leaf holds:
        no tool call is pending, or those pending can be taken off with the fork's error results
        (`pending_at_tail`). Any other cut moves back to the last safe one."""
        return not self.fold.pending_calls or self.pending_at_tail()

    def pending_at_tail(self) -> bool:
        """True when tool calls are pending and a fork cut here can take them off the surface
        with the error results the fork writes for them (`take_off_forked_call`): every call of
        the open step was asked for by the last assistant message on the surface, and each is
        pending or answered by one of the nodes after it, which are those results and nothing
        else (no other message, no replace since)."""
        return self._pending_tail() is not None

    def _pending_tail(self) -> tuple[int, tuple[int, ...]] | None:
        """For `pending_at_tail`: the seq of that assistant message and those of the results
        after it (in order), or None. O(calls of the open step)."""
        tail = self._tail
        if tail is None or not self.fold.pending_calls:
            return None
        calls = self.fold.structure.calls.values()
        answered = sorted(call.result_seq for call in calls if call.result_seq is not None)
        if any(call.block_seq != tail.node for call in calls):
            return None
        if len(self.fold.pending_calls) + len(answered) != len(calls) or tail.nodes != 1 + len(answered):
            return None
        return tail.node, tuple(answered)

    def fork(self) -> list[NewEvent]:
        """Write what the service writes into a fork cut at the current end of the log, and return
        it: `session/end-seed {inherited: true}`, then the closers of an open turn (an error
        result for each pending call, which `take_off_forked_call` then takes off the surface)."""
        at_tail = self._pending_tail()
        written = fork_seed(self.fold.structure, self.fold.repair_time)
        seqs = [self._commit(event) for event in written]
        results = tuple(seq for seq, event in zip(seqs, written, strict=True) if event.type == TOOL_RESULT)
        self._forked = _ForkedCall(*at_tail, results) if at_tail is not None and results else None
        self._stop_reason = None
        return written

    def take_off_forked_call(self) -> None:
        """The first events of a fork cut while calls were pending (`pending_at_tail`): a
        `user/message` (source `pi-forked-call`) replacing the assistant message that asked for
        them, the results of its calls recorded before the cut and the error results the fork
        wrote for the others, and carrying that message unchanged; then a model-only copy of
        each of those recorded results, in their order.

        The fork inherits the message, so its call is billed once, in the session that imported
        it, where re-importing it after an earlier cut billed it in both (`costs --family`); the
        copies bill nothing and count no tool error (`stats`). The service's error results say
        the calls' outcomes are unknown, which Pi's context does not hold: taken off, the model
        history is Pi's again, the message and its recorded results in their place, and the
        fork's own results come after them as the fallback `user/message`s of results whose call
        is not pending (`pi-unpaired-tool-result`). Nothing is written for any other fork."""
        forked, self._forked = self._forked, None
        if forked is None:
            return
        wanted = {forked.node, *forked.answered}
        entry_of_node = {
            node: str(e.get("id")) for e in self._path if (node := self._node.get(str(e.get("id")))) in wanted
        }
        entry_id = entry_of_node[forked.node]
        self._owner, self._index, self._time = f"fork:{entry_id}", 0, None
        data: JsonObject = {
            "message": self._origin[entry_id].message,
            "source": {"kind": FORKED_CALL, "entryId": entry_id},
        }
        op = Replace(forked.node, forked.results[-1])
        sources = (forked.node, *forked.answered, *forked.results)
        self._node[entry_id] = self._emit(NewEvent(USER_MESSAGE, data, surface_op=op, source_event_seqs=sources))
        for node in forked.answered:
            self._copy(entry_of_node[node])

    def _copy(self, entry_id: str) -> None:
        """A model-only copy of the message of `entry_id` (`data.source.kind` `copy`, citing the
        event that first carried it), which from now on stands for the entry on the surface."""
        origin = self._origin[entry_id]
        copy = {"message": origin.message, "source": {"kind": COPY_SOURCE_KIND, "entryId": entry_id}}
        self._node[entry_id] = self._emit(
            NewEvent(origin.type, copy, surface_op=APPEND, source_event_seqs=(origin.seq,))
        )

    # --- entries ---------------------------------------------------------------------------

    def _message(self, entry: JsonObject) -> None:
        message: JsonObject = entry["message"]
        role = message.get("role")
        if role == "assistant":
            self._assistant(entry, message)
        elif role == "toolResult":
            self._tool_result(entry, message)
        else:
            self._user_side(entry, message, in_message=("message",))

    def _assistant(self, entry: JsonObject, message: JsonObject) -> None:
        calls = tool_call_ids(message)
        if calls is None:
            self._user_side(entry, message, in_message=("message",), source=UNSTRUCTURED)
            return
        state = self.fold.structure
        answered, self._time = self._time, pi_time(message.get("timestamp"))  # the request went out
        if state.open_step is not None and state.open_turn is not None:
            self._emit(NewEvent(STEP_END, {"turn": state.open_turn, "step": state.open_step}))
        if state.open_turn is None:
            self._start_turn()
        turn = state.open_turn
        step = state.last_step + 1
        self._emit(NewEvent(STEP_START, {"turn": turn, "step": step}))
        self._time = answered
        self._surface(entry, ASSISTANT_MESSAGE, {"turn": turn, "step": step}, message, in_message=("message",))
        self._stop_reason = message.get("stopReason")
        if not any(self._future[c] > 0 for c in calls):
            self._end_turn()

    def _tool_result(self, entry: JsonObject, message: JsonObject) -> None:
        state = self.fold.structure
        call_id = message.get("toolCallId")
        call = state.calls.get(call_id) if isinstance(call_id, str) and state.open_step is not None else None
        if call is None or call.result_seq is not None:
            self._user_side(entry, message, in_message=("message",), source=UNPAIRED_TOOL_RESULT)
            return
        position = {"turn": state.open_turn, "step": state.open_step}
        self._surface(entry, TOOL_RESULT, position, message, in_message=("message",))
        if not any(self._future[c.call_id] > 0 for c in state.pending_calls):
            self._emit(NewEvent(STEP_END, position))

    def _user_side(
        self, entry: JsonObject, message: JsonObject, *, in_message: Sequence[str], source: str | None = None
    ) -> None:
        role = message.get("role")
        if role == "user" and self.fold.open_turn is None:
            self._start_turn()
        kind = source or SOURCE_BY_ROLE.get(str(role), str(role))
        event_type = USER_MESSAGE
        if role == "system" and source is None and not is_empty_content(message.get("content")):
            event_type = SYSTEM_MESSAGE
        self._surface(entry, event_type, {}, message, in_message=in_message, source={"kind": kind})

    def _ignorable(self, entry: JsonObject) -> None:
        lifted, pi = split_entry(entry)
        self._emit(NewEvent(pi_event_type(entry.get("type")), {**lifted, PI_KEY: pi}, ignorable=True))

    def _compaction(self, entry: JsonObject) -> None:
        lifted, pi = split_entry(entry)
        summary_seq = self._emit(NewEvent(COMPACTION_SUMMARY, {**lifted, PI_KEY: pi}))
        kept = self._kept(entry)
        kept_nodes = [self._node[str(e["id"])] for e in kept]
        body = self.fold.surface_view()["nodes"][1:]
        data: JsonObject = {
            "message": compaction_summary_message(entry),
            "source": {"kind": COMPACTION_SOURCE_KIND, "entryId": entry.get("id")},
        }
        if not body:
            self._emit(NewEvent(USER_MESSAGE, data, surface_op=APPEND, source_event_seqs=(summary_seq,)))
            return
        tail = len(body) - len(kept_nodes)
        if tail > 0 and body[tail:] == kept_nodes:
            # The kept entries end the surface: replace only what stands before them. Unless they
            # start at a tool result whose call that would cut (Pi does not cut there; an edited
            # file may): the surface refuses to leave a result without its call, so the whole
            # body is replaced and the kept entries copied, as for any other compaction.
            try:
                self._replace_by_summary(data, body[:tail], summary_seq)
                return
            except ValidationError as exc:
                if exc.reason != "REPLACE_ORPHANS_TOOL_RESULT":
                    raise
        self._replace_by_summary(data, body, summary_seq)
        for kept_entry in kept:
            self._copy(str(kept_entry["id"]))

    def _replace_by_summary(self, data: JsonObject, replaced: list[int], summary_seq: int) -> None:
        """The compaction's summary message, replacing the surface nodes `replaced`."""
        op = Replace(replaced[0], replaced[-1])
        sources = tuple(sorted({*replaced, summary_seq}))
        self._emit(NewEvent(USER_MESSAGE, data, surface_op=op, source_event_seqs=sources))

    def _kept(self, compaction: JsonObject) -> list[JsonObject]:
        """Entries before the compaction, from `firstKeptEntryId` on, that carry a message (Pi's
        rule: none when the id is missing or not on the path before it)."""
        if "firstKeptEntryId" not in compaction:
            return []
        first = compaction["firstKeptEntryId"]
        for index, entry in enumerate(self._path):
            if entry.get("id") == first:
                return [e for e in self._path[index:] if str(e.get("id")) in self._node]
        return []

    # --- events ----------------------------------------------------------------------------

    def _start_turn(self) -> None:
        self._emit(NewEvent(TURN_START, {"turn": self.fold.last_turn + 1}))
        self._stop_reason = None

    def _end_turn(self) -> None:
        state = self.fold.structure
        turn = state.open_turn
        if turn is None:
            return
        if state.open_step is not None:
            self._emit(NewEvent(STEP_END, {"turn": turn, "step": state.open_step}))
        self._emit(NewEvent(TURN_END, {"turn": turn, "reason": {"kind": turn_end_kind(self._stop_reason)}}))
        self._stop_reason = None

    def _surface(
        self,
        entry: JsonObject,
        event_type: str,
        position: JsonObject,
        message: JsonObject,
        *,
        in_message: Sequence[str],
        source: JsonObject | None = None,
    ) -> None:
        lifted, pi = split_entry(entry, in_message=in_message)
        data: JsonObject = {**position, "message": message}
        if source is not None:
            data["source"] = source
        data.update(lifted)
        data[PI_KEY] = pi
        seq = self._emit(NewEvent(event_type, data, surface_op=APPEND))
        entry_id = str(entry.get("id"))
        self._origin[entry_id] = _Origin(seq, event_type, message)
        self._node[entry_id] = seq

    def _emit(self, event: NewEvent) -> int:
        """Write the next event of the current entry: a proposal, as an append would send it,
        carrying the time Pi recorded for it when there is one."""
        data = event.data if self._time is None else {**event.data, RECORDED_TIME: self._time}
        return self._commit(replace(event, data=data, event_id=event_id(self._owner, self._index)), proposed=True)

    def _commit(self, event: NewEvent, *, proposed: bool = False) -> int:
        """Fold `event` and keep it. A proposal is checked first by the envelope rules when
        `limits` is set (what `fork` writes is the service's own, as the service writes it).
        A refusal names the file's line (when the event stands for an entry), the seq and the entry."""
        seq = self.fold.next_seq
        line = self._entry_lines.get(self._owner) if proposed else None
        try:
            if proposed and self.limits is not None:
                validate.validate_proposal(event, limits=self.limits)
            self.fold.apply(event.committed(seq, 0))
        except SessionLogError as exc:
            where = f"line {line} (seq {seq})" if line is not None else f"seq {seq}"
            raise exc.located(
                f"{where}: Pi entry {self._owner}: {event.type}", entry=self._owner, seq=seq, line=line
            ) from None
        if proposed:
            self._index += 1
        self._tail = _tail_after(self._tail, event, seq)
        self.events.append(event)
        self.lines.append(line)
        return seq


def _tail_after(tail: _Tail | None, event: NewEvent, seq: int) -> _Tail | None:
    """`BranchMapper._tail` once `event` is written at `seq`: an appended `assistant/message`
    starts it, another append adds a node to it, a replace ends it (the surface changed)."""
    if event.surface_op is None:
        return tail
    if isinstance(event.surface_op, Replace):
        return None
    if event.type == ASSISTANT_MESSAGE:
        return _Tail(seq, 1)
    return _Tail(tail.node, tail.nodes + 1) if tail is not None else None


# --- whole files -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ImportedBranch:
    """The events of one leaf's session.

    For the main branch (`fork_seq` None) `events` is the whole log from seq 0. For a fork,
    the child is the main log up to `fork_seq`, then `inherited` (what the service writes into a
    fork), then `events`, its own, starting at seq `first_seq`.
    """

    leaf_id: str | None
    path_ids: list[str]
    events: list[NewEvent]
    fork_seq: int | None = None
    inherited: list[NewEvent] = field(default_factory=list)
    first_own_entry: int = 0
    """Index in `path_ids` of the first entry whose events are in `events`."""
    lines: list[int | None] = field(default_factory=list)
    """The file's line of the entry each of `events` stands for (parallel to `events`; None for
    events of no entry: the head, the header's, the closers at the end)."""
    parent_leaf: str | None = None
    """For a fork: the leaf of the branch whose session it forks (the main one, or another fork)."""

    @property
    def first_seq(self) -> int:
        """The seq of `events[0]` in this branch's session."""
        if self.fork_seq is None:
            return 0
        return self.fork_seq + 1 + len(self.inherited)

    @property
    def next_seq(self) -> int:
        """The seq after the last event: where this branch's session ends once imported."""
        return self.first_seq + len(self.events)

    def line_of(self, seq: int) -> int | None:
        """The file's line of the event this branch appends at `seq` (None when unknown)."""
        index = seq - self.first_seq
        return self.lines[index] if 0 <= index < len(self.lines) else None


@dataclass(frozen=True, slots=True)
class PiImport:
    """A file mapped to sessions: the main branch (default leaf) first, then one fork per other leaf."""

    header: JsonObject
    branches: list[ImportedBranch]

    @property
    def main(self) -> ImportedBranch:
        return self.branches[0]

    def log(self, branch: ImportedBranch) -> list[NewEvent]:
        """The whole log of `branch`'s session as the service builds it: a fork's is its parent
        branch's log up to `fork_seq`, then what the service writes into a fork, then its own."""
        if branch.fork_seq is None:
            return list(branch.events)
        parent = next(other for other in self.branches if other.leaf_id == branch.parent_leaf)
        return [*self.log(parent)[: branch.fork_seq + 1], *branch.inherited, *branch.events]


def map_path(header: JsonObject, path: Sequence[JsonObject]) -> list[NewEvent]:
    """The whole log of one root → leaf path, as its own session (no fork)."""
    mapper = BranchMapper(header)
    mapper.expect(path)
    for entry in path:
        mapper.feed(entry)
    mapper.finish()
    return mapper.events


def branch_events(pi_file: PiFile, leaf_id: str | None = None) -> list[NewEvent]:
    """The whole log of the branch ending at `leaf_id` (default: Pi's leaf, the last entry)."""
    tree = PiTree(pi_file.entries)
    leaf = leaf_id if leaf_id is not None else tree.default_leaf()
    return map_path(pi_file.header, tree.path(leaf) if leaf is not None else [])


def import_pi(pi_file: PiFile, limits: Limits = DEFAULT_LIMITS) -> PiImport:
    """The main branch and one fork per other leaf (leaves in file order).

    Every event a session will be sent is checked as the service checks an append: the envelope
    rules (`validate.validate_proposal`, with `limits`) and the fold. A refusal names the file's
    line and the seq (and, in a fork, its leaf), so a bad file is refused before anything is created.

    Each branch is mapped twice by one walker: once whole (its own events, and where a cut in it
    is safe, `BranchMapper.cut_is_safe`), once more stopping at each child's cut, where the child is
    mapped the same way and rolled back. So a file costs O(entries + the children's own
    entries), not O(leaves × entries), and nesting is walked with a stack, not recursion.
    """
    tree = PiTree(pi_file.entries)
    header = pi_file.header
    main_leaf = tree.default_leaf()
    main_path = tree.path(main_leaf) if main_leaf is not None else []
    entry_lines = {str(entry.get("id")): line for entry, line in zip(pi_file.entries, pi_file.entry_lines, strict=True)}
    mapper = BranchMapper(header, limits=limits, entry_lines=entry_lines)
    mapper.expect(main_path)
    main = _Branch(main_leaf, main_path, None, 0)
    main.safe[0] = True
    for index, entry in enumerate(main_path, start=1):
        mapper.feed(entry)
        main.safe[index] = mapper.cut_is_safe()
    mapper.finish()
    main.mapped = ImportedBranch(main_leaf, main.ids, mapper.events, lines=mapper.lines)
    forks = _plan_forks(tree, main)
    walker = BranchMapper(header, entry_lines=entry_lines)  # the main path's events are checked above
    walks = [_walk(walker, main, limits)]
    while walks:
        child = next(walks[-1], None)
        if child is None:
            walks.pop()
        else:
            walks.append(_walk(walker, child, limits))
    return PiImport(header, [main.mapped, *(fork.result() for fork in forks)])


@dataclass(slots=True)
class _Branch:
    """One leaf's branch while the file is mapped: its path, the branch it forks (`parent`, None
    for the main one) after `shared` entries in common, and, once known, its cut, where a cut in
    it is safe (`safe[i]`: `BranchMapper.cut_is_safe` after its first i entries), its children and mapping."""

    leaf: str | None
    path: list[JsonObject]
    parent: _Branch | None
    shared: int
    cut: int = 0
    safe: list[bool] = field(default_factory=list)
    children: list[_Branch] = field(default_factory=list)
    mapped: ImportedBranch | None = None

    def __post_init__(self) -> None:
        self.safe = [False] * (len(self.path) + 1)

    @property
    def ids(self) -> list[str]:
        return [str(entry["id"]) for entry in self.path]

    def result(self) -> ImportedBranch:
        assert self.mapped is not None
        return self.mapped


def _plan_forks(tree: PiTree, main: _Branch) -> list[_Branch]:
    """One fork per leaf other than the main one, in file order, each of the branch that first
    imported the deepest entry it shares with the branches before it (the main one, else an
    earlier fork): every entry is then imported once, in the first branch on whose path it lies,
    so the forks' own events and costs add up to the file's (`sessionlog costs --family`), where
    forking every leaf off the main branch imported an entry that two other leaves share twice."""
    owner: dict[str, _Branch] = {str(entry["id"]): main for entry in main.path}
    forks: list[_Branch] = []
    for leaf in tree.leaves():
        if leaf == main.leaf:
            continue
        path = tree.path(leaf)
        shared = len(path)
        while shared > 0 and str(path[shared - 1]["id"]) not in owner:
            shared -= 1
        parent = owner[str(path[shared - 1]["id"])] if shared > 0 else main
        fork = _Branch(leaf, path, parent, shared)
        parent.children.append(fork)
        owner.update((str(entry["id"]), fork) for entry in path[shared:])
        forks.append(fork)
    return forks


def _walk(walker: BranchMapper, branch: _Branch, limits: Limits) -> Iterator[_Branch]:
    """Map `branch` from where `walker` stands (the head for the main branch, just after what
    `fork` writes for a fork), then walk its path again to each child's cut and yield the child
    with the walker forked there (the caller walks it, children included, before resuming this),
    rolling back after each. A child's cut is the last safe one (`BranchMapper.cut_is_safe`) at
    or before the entries it shares with the branch: where the service would answer a pending
    call with an error the child could not take off, the child re-imports the shared entries
    after it (back to the branch's own start at most, where nothing is pending)."""
    if branch.parent is not None:
        start = walker.save()
        _map_own(walker, branch, limits)
        walker.restore(start)
        walker.take_off_forked_call()  # the branch's own first event, as `_map_own` wrote it
    for child in branch.children:
        child.cut = max(i for i in range(branch.cut, child.shared + 1) if branch.safe[i] or i == branch.cut)
    walker.expect(branch.path[branch.cut :])
    position = branch.cut
    for child in sorted(branch.children, key=lambda child: child.cut):
        while position < child.cut:
            walker.feed(branch.path[position])
            position += 1
        saved = walker.save()
        fork_seq = walker.next_seq - 1
        inherited = walker.fork()
        child.mapped = ImportedBranch(
            child.leaf, child.ids, [], fork_seq, inherited, child.cut, parent_leaf=branch.leaf
        )
        yield child
        walker.restore(saved)


def _map_own(walker: BranchMapper, fork: _Branch, limits: Limits) -> None:
    """Map a fork's own entries (checked as its session will be sent), noting where a cut is safe."""
    assert fork.mapped is not None
    own_start = len(walker.events)
    walker.limits = limits  # the child's own events are what its session will be sent
    try:
        walker.take_off_forked_call()
        walker.expect(fork.path[fork.cut :])
        for index in range(fork.cut, len(fork.path)):
            walker.feed(fork.path[index])
            fork.safe[index + 1] = walker.cut_is_safe()
        walker.finish()
    except SessionLogError as exc:
        raise exc.located(f"the fork for leaf {fork.leaf}", leaf=fork.leaf) from None
    finally:
        walker.limits = None
    own = slice(own_start, None)
    fork.mapped = replace(fork.mapped, events=walker.events[own], lines=walker.lines[own])


__all__ = [
    "BranchMapper",
    "ImportedBranch",
    "PiImport",
    "branch_events",
    "event_id",
    "import_pi",
    "map_path",
    "pi_event_type",
    "pi_time",
    "tool_call_ids",
    "turn_end_kind",
]
