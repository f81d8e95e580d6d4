"""The session page in a real headless Chromium (issue 14): the page of a scripted session with
a compaction, a header change, a repair and a fork shows the stats projection's counts, marks
the replaced rows, names the cache-drop causes, and diffs two chosen requests exactly as the
core's `request_diff` does. A screenshot is saved under the test's tmp dir."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from sessionlog.client import SessionLogClient
from sessionlog.core.formats.replay import LABELS
from sessionlog.core.projections.stats import STATS_KEYS, figure_label
from sessionlog.core.projections.timeline import timeline
from sessionlog.core.request_diff import request_diff
from sessionlog.view import page, windows
from tests.support.browser import chromium
from tests.support.events import (
    assistant,
    priced_and_unpriced,
    step_end,
    step_start,
    system,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    user,
)
from tests.support.scripted import COMPACTION_REPLACE_SEQ, REQUEST_SEQS, SCRIPT_LIKE, SUMMARY_SEQ, write_scripted
from tests.support.servers import ServerThread

ROOT = Path(__file__).resolve().parents[2]


def write_page(server: ServerThread, session_id: str, page: Path) -> None:
    """`sessionlog view` writes the session's page to `page`, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "sessionlog", "--server", server.target, "view", session_id, "-o", str(page)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def wait_ready(driver: Any) -> None:
    """Until the page's script says it has drawn the first screen (`body[data-ready]`)."""
    WebDriverWait(driver, 20).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))


def numbers(driver: object, selector: str, attribute: str) -> list[int]:
    return [int(e.get_attribute(attribute)) for e in driver.find_elements(By.CSS_SELECTOR, selector)]  # type: ignore[attr-defined]


def numbers_now(driver: object, selector: str, attribute: str) -> list[int]:
    """`numbers` read in one script run: a page being redrawn has no stale elements then."""
    script = "return Array.from(document.querySelectorAll(arguments[0]), (e) => Number(e.getAttribute(arguments[1])))"
    return list(driver.execute_script(script, selector, attribute))  # type: ignore[attr-defined]


def test_session_page_in_chromium(server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path) -> None:
    child = write_scripted(client, sid)
    page = tmp_path / f"{child}.html"
    write_page(server, child, page)
    stats = client.stats(child)
    events = list(client.read_events(child))
    rows = client.transcript(child)
    with chromium() as driver:
        driver.get(page.as_uri())
        wait_ready(driver)
        count = {e.get_attribute("data-count"): e.text for e in driver.find_elements(By.CSS_SELECTOR, "[data-count]")}
        assert int(count["turns"]) == stats["turns"] == 4
        assert int(count["toolCalls"]) == stats["toolCalls"] == 6
        assert int(count["steps"]) == stats["steps"] == 8
        assert int(count["compactions"]) == stats["compactions"] == 1
        # One row per request (model call), and one for the compaction's summariser call, which
        # was paid for (its cost was on no row, and the cumulative cost jumped past it); one
        # element per turn and tool call.
        assert numbers(driver, "table.requests tr[data-request-seq]", "data-request-seq") == sorted(
            [*REQUEST_SEQS, SUMMARY_SEQ]
        )
        kinds = [e.get_attribute("data-kind") for e in driver.find_elements(By.CSS_SELECTOR, "table.requests tr")[1:]]
        assert kinds.count("summary") == 1 and len(kinds) == stats["modelCalls"] + 1
        assert int(count["modelCalls"]) == stats["modelCalls"] == 8
        labels = {
            e.find_element(By.XPATH, "preceding-sibling::dt").text: e.get_attribute("data-count")
            for e in driver.find_elements(By.CSS_SELECTOR, "#summary dd[data-count]")
        }
        assert labels["model calls"] == "modelCalls"  # the stats' name, not the page's own "requests"
        # Every stats figure shown is labelled as `sessionlog replay` labels it ("cache read" and
        # "cost" were the page's own), cache writes included, and the model apart from its provider.
        shown = {key: label for label, key in labels.items() if key in STATS_KEYS}
        assert shown == {key: LABELS.get(key, figure_label(key)) for key in shown}
        assert {"cacheReadTokens", "cacheWriteTokens", "costUsd", "model", "provider", "thinkingLevel"} <= set(shown)
        assert (count["model"], count["provider"]) == (stats["model"], stats["provider"]) == ("m-1", "acme")
        assert int(count["cacheWriteTokens"]) == stats["cacheWriteTokens"]
        assert len(driver.find_elements(By.CSS_SELECTOR, ".turn[data-turn]")) == stats["turns"]
        tools = driver.find_elements(By.CSS_SELECTOR, ".tool[data-tool-call-id]")
        assert len(tools) == stats["toolCalls"]
        outcomes = {t.get_attribute("data-tool-call-id"): t.get_attribute("data-outcome") for t in tools}
        assert outcomes == {"c1": "ok", "c2": "error", "c3": "ok", "c4": "ok", "c5": "repaired", "c6": "repaired"}
        assert (
            driver.find_element(By.CSS_SELECTOR, '.turn[data-turn="4"]').get_attribute("data-end-kind") == "interrupted"
        )
        # Replaced rows are marked and point at the compaction that replaced them.
        replaced = {row["seq"] for row in rows if row["replacedBy"] is not None}
        marked = driver.find_elements(By.CSS_SELECTOR, "#transcript .row.replaced")
        assert {int(e.get_attribute("data-seq")) for e in marked} == replaced and replaced
        assert {e.get_attribute("data-replaced-by") for e in marked} == {str(COMPACTION_REPLACE_SEQ)}
        landing = driver.find_element(
            By.CSS_SELECTOR, f'#transcript .row.kind-replace[data-seq="{COMPACTION_REPLACE_SEQ}"]'
        )
        assert sorted(map(int, landing.get_attribute("data-replaces").split(","))) == sorted(replaced)
        # Session content is text: a tool result holding </script><!--<script> changed nothing.
        row = driver.find_element(By.CSS_SELECTOR, '#transcript .row[data-seq="7"] .text')
        assert row.text == SCRIPT_LIKE and driver.title == f"sessionlog · {child}"
        # Every cache-read drop names its cause.
        causes = {
            e.get_attribute("data-request-seq"): e.get_attribute("data-cause")
            for e in driver.find_elements(By.CSS_SELECTOR, "#drops .drop")
        }
        assert causes == {"22": "header", "38": "replace", "49": "none"}
        # The fork: the parent and the cut.
        parent = driver.find_element(By.CSS_SELECTOR, "[data-parent-session]")
        assert parent.get_attribute("data-parent-session") == sid
        assert int(parent.get_attribute("data-fork-seq")) == len(events) - 2  # then the inherited end-seed
        # The diff between two chosen steps (request 15: turn 1 step 3; request 43: turn 3 step 2).
        for field, value in (("diff-from", "15"), ("diff-to", "43")):
            box = driver.find_element(By.ID, field)
            box.clear()
            box.send_keys(value)
        driver.find_element(By.ID, "diff-run").click()
        WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "diff").get_attribute("data-to-seq") == "43")
        expected = request_diff(events, 14, 42)
        fields = [
            e.get_attribute("data-diff-field") for e in driver.find_elements(By.CSS_SELECTOR, "#diff [data-diff-field]")
        ]
        assert fields == expected["header"]["fields"] == ["tools"]
        assert numbers(driver, "#diff [data-diff-replaced]", "data-diff-replaced") == expected["messages"]["replaced"]
        assert numbers(driver, "#diff [data-diff-added]", "data-diff-added") == expected["messages"]["added"]
        assert expected["messages"]["added"] == [COMPACTION_REPLACE_SEQ, 35, 38, 40]
        assert driver.find_element(By.ID, "diff").get_attribute("data-prefix-kept") == "false"
        # Requests are named by their answer's seq, the CLI's by the log's last seq (what an
        # auditor ran from the page's numbers diffed other prefixes): the page says the command.
        shown_id = driver.find_element(By.CSS_SELECTOR, "[data-session-id]").get_attribute("data-session-id")
        cli = driver.find_element(By.CSS_SELECTOR, "#diff .diff-cli").get_attribute("data-cli")
        assert cli == f"sessionlog diff {shown_id} --from 14 --to 42"  # request_diff(events, 14, 42) above
        # A jump to a seq with no row, or past the page, says so (it did nothing).
        jump = driver.find_element(By.CSS_SELECTOR, "#transcript form.jump input")
        note = driver.find_element(By.CSS_SELECTOR, "#transcript .jump-note")
        jump.send_keys("999999", Keys.ENTER)
        WebDriverWait(driver, 10).until(lambda d: "is not on this page" in note.text)
        driver.execute_script("arguments[0].value = ''", jump)
        jump.send_keys("2", Keys.ENTER)  # a row: shown, and nothing said
        WebDriverWait(driver, 10).until(lambda d: note.text == "", f"{note.text!r}")
        # Clicking a drop shows its diff: the compaction that replaced the cached prefix.
        driver.find_element(By.CSS_SELECTOR, '#drops .drop[data-request-seq="38"]').click()
        WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "diff").get_attribute("data-to-seq") == "38")
        assert driver.find_element(By.ID, "diff").get_attribute("data-from-seq") == "27"
        replacers = {
            e.get_attribute("data-replaced-by")
            for e in driver.find_elements(By.CSS_SELECTOR, "#diff [data-diff-replaced]")
        }
        assert replacers == {str(COMPACTION_REPLACE_SEQ)}
        # The page composes every other pair the same way as the core does.
        seqs = numbers(driver, "table.requests tr[data-request-seq]", "data-request-seq")
        for i, a in enumerate(seqs):
            for b in seqs[i + 1 :]:
                want = request_diff(events, a - 1, b - 1)
                got = driver.execute_script("return window.sessionlog.diff(arguments[0], arguments[1])", a, b)
                assert got["added"] == want["messages"]["added"], (a, b)
                assert got["replaced"] == want["messages"]["replaced"], (a, b)
                assert got["firstChanged"] == want["messages"]["firstChanged"], (a, b)
                assert got["fields"] == want["header"]["fields"] and got["headers"] == want["header"]["logged"], (a, b)
        # The chart drew (uPlot's canvas), and nothing was fetched from the network.
        assert driver.find_elements(By.CSS_SELECTOR, "#chart canvas")
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        assert driver.save_screenshot(str(tmp_path / "session-page.png"))
    assert (tmp_path / "session-page.png").stat().st_size > 10_000


def test_a_voice_sessions_cut_answer_and_dropped_calls_on_the_page(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    # The answer asks for a, b and c; the user barges in and the answer is cut to what was heard
    # (seq 7), keeping a and c and dropping b; a is answered, the step ends without c's result.
    heard = assistant(1, 1, "I'll", calls=(("a", "ls"), ("c", "cat")))
    heard["data"]["interrupted"] = True
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append(
            [
                system("sys"),
                user("go"),
                turn_start(1),
                step_start(1, 1),
                assistant(1, 1, "checking", calls=(("a", "ls"), ("b", "rm"), ("c", "cat"))),
                tool_call(1, 1, "a", "ls"),
                tool_result(1, 1, "a", "ok"),
                {**heard, "surfaceOp": {"op": "replace", "startSeq": 4, "endSeq": 4}, "sourceEventSeqs": [4]},
                step_end(1, 1),
                turn_end(1, "aborted"),
            ]
        ).result()
    assert [row.get("interrupted") for row in client.transcript(sid) if row["seq"] in (4, 7)] == [None, True]
    page = tmp_path / "voice.html"
    write_page(server, sid, page)
    with chromium() as driver:
        driver.get(page.as_uri())
        wait_ready(driver)
        tools = driver.find_elements(By.CSS_SELECTOR, ".tool[data-tool-call-id]")
        shown = {t.get_attribute("data-tool-call-id"): (t.get_attribute("data-outcome"), t.text) for t in tools}
        assert {call: outcome for call, (outcome, _) in shown.items()} == {"a": "ok", "b": "dropped", "c": "unanswered"}
        assert shown["b"][1] == "rm dropped" and shown["c"][1] == "cat unanswered"
        cut = driver.find_elements(By.CSS_SELECTOR, '#transcript .row[data-interrupted="true"]')
        assert [e.get_attribute("data-seq") for e in cut] == ["7"]
        assert cut[0].find_element(By.CSS_SELECTOR, ".badge.interrupted").text == "interrupted"


def test_a_cost_that_leaves_unpriced_calls_out_reads_as_a_lower_bound(
    server: ServerThread, client: SessionLogClient, sid: str, tmp_path: Path
) -> None:
    """A session with a call its model had no price for: the page shows the stats'
    `unpricedEvents` under their label, marks the cost `≥` (as `costs` and `replay` mark it), and
    the call's request row says `unpriced`, where the page showed $0.250000 and $0.000000, the
    figures of a session whose second call was free."""
    client.create_session(sid)
    with client.writer(sid) as writer:
        writer.append(priced_and_unpriced()).result()
    stats = client.stats(sid)
    assert (stats["costUsd"], stats["unpricedEvents"]) == (0.25, 1)
    page = tmp_path / "unpriced.html"
    write_page(server, sid, page)
    with chromium() as driver:
        driver.get(page.as_uri())
        wait_ready(driver)
        figures = {
            e.get_attribute("data-count"): (e.find_element(By.XPATH, "preceding-sibling::dt").text, e.text)
            for e in driver.find_elements(By.CSS_SELECTOR, "#summary dd[data-count]")
        }
        assert figures["costUsd"] == (figure_label("costUsd"), "≥$0.250000")
        assert figures["unpricedEvents"] == (figure_label("unpricedEvents"), "1")
        rows = driver.find_elements(By.CSS_SELECTOR, "table.requests tr[data-request-seq]")
        assert [row.find_elements(By.TAG_NAME, "td")[7].text for row in rows] == ["$0.250000", "unpriced"]
        # The cumulative cost leaves the unpriced call out: a lower bound from it on, as the summary's.
        assert [row.find_elements(By.TAG_NAME, "td")[8].text for row in rows] == ["$0.250000", "≥$0.250000"]


def test_a_long_sessions_page_fetches_its_windows_as_it_is_paged(
    db_url: str, sid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A windowed page (past WINDOW_EVENTS, here 20, in windows of 5 rows and 2 turns) served
    by `/sessions/ID` holds the first window of each list; paging to the end shows the session's
    last rows, requests and turns, fetched from the server as they are shown, and a diff and a
    jump to a seq read what they need the same way."""
    monkeypatch.setattr(page, "WINDOW_EVENTS", 20)
    monkeypatch.setattr(windows, "PAGE_ROWS", 5)
    monkeypatch.setattr(windows, "PAGE_TURNS", 2)
    with ServerThread(db_url, metrics_listen="127.0.0.1:0") as server, SessionLogClient(server.target) as client:
        child = write_scripted(client, sid)
        rows = client.transcript(child)
        events = list(client.read_events(child))
        stats = client.stats(child)
        admin = server.running.admin
        assert admin is not None
        with chromium() as driver:
            driver.get(f"http://127.0.0.1:{admin.port}/sessions/{child}")
            wait_ready(driver)
            shown = numbers(driver, "#transcript .row[data-seq]", "data-seq")
            assert shown == [row["seq"] for row in rows[:5]]
            # The first screen fetched one window: the first cache drop's diff (once it is drawn).
            WebDriverWait(driver, 20).until(lambda d: d.find_element(By.ID, "diff").get_attribute("data-to-seq"))
            assert driver.execute_script("return performance.getEntriesByType('resource').length") == 1
            # The last page of the transcript: the session's last rows, replaced ones marked.
            driver.find_element(By.CSS_SELECTOR, "#transcript nav.pager button:last-of-type").click()
            last = [row["seq"] for row in rows[(len(rows) - 1) // 5 * 5 :]]
            WebDriverWait(driver, 20).until(lambda d: numbers_now(d, "#transcript .row[data-seq]", "data-seq") == last)
            assert last[-1] == rows[-1]["seq"] and len(rows) > 20
            # The last page of requests and of turns (turn 4, its steps and tool calls).
            driver.find_element(By.CSS_SELECTOR, "#requests nav.pager button:last-of-type").click()
            requests = [r["seq"] for r in timeline(events)["requests"]]
            assert len(requests) == stats["modelCalls"] + 1 > 5  # and the compaction's summariser call
            last_requests = requests[(len(requests) - 1) // 5 * 5 :]
            WebDriverWait(driver, 20).until(
                lambda d: numbers_now(d, "table.requests tr[data-request-seq]", "data-request-seq") == last_requests
            )
            driver.find_element(By.CSS_SELECTOR, "#turns nav.pager button:last-of-type").click()
            WebDriverWait(driver, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, '.turn[data-turn="4"]'))
            assert driver.find_elements(By.CSS_SELECTOR, '.turn[data-turn="4"] .tool[data-tool-call-id]')
            # A jump to a seq on another page shows its page.
            jump = driver.find_element(By.CSS_SELECTOR, "#transcript form.jump input")
            jump.send_keys(str(rows[15]["seq"]), Keys.ENTER)
            WebDriverWait(driver, 20).until(
                lambda d: d.find_elements(By.CSS_SELECTOR, f'#transcript .row.flash[data-seq="{rows[15]["seq"]}"]')
            )
            # The diff of two requests, composed from the fetched window as the core does.
            for field, value in (("diff-from", "15"), ("diff-to", "43")):
                box = driver.find_element(By.ID, field)
                box.clear()
                box.send_keys(value)
            driver.find_element(By.ID, "diff-run").click()
            WebDriverWait(driver, 20).until(
                lambda d: (
                    d.find_element(By.ID, "diff").get_attribute("data-to-seq") == "43"
                    and not d.find_element(By.ID, "diff").get_attribute("data-loading")
                )
            )
            expected = request_diff(events, 14, 42)
            assert numbers(driver, "#diff [data-diff-added]", "data-diff-added") == expected["messages"]["added"]
            assert (
                numbers(driver, "#diff [data-diff-replaced]", "data-diff-replaced") == expected["messages"]["replaced"]
            )
            added = driver.find_element(By.CSS_SELECTOR, f'#diff [data-diff-added="{COMPACTION_REPLACE_SEQ}"]').text
            assert added.startswith(f"seq {COMPACTION_REPLACE_SEQ} ")  # the row's text, from the window
            # The chart is drawn from the page's buckets; every fetch was the page's own path.
            assert driver.find_elements(By.CSS_SELECTOR, "#chart canvas")
            assert driver.find_element(By.ID, "chart").get_attribute("data-bucket-width") == "1"
            fetched = driver.execute_script("return performance.getEntriesByType('resource').map((e) => e.name)")
            assert fetched and all(
                name.startswith(f"http://127.0.0.1:{admin.port}/sessions/{child}?") for name in fetched
            )
            assert driver.save_screenshot(str(tmp_path / "windowed-page.png"))
