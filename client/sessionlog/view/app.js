// The session page's script: lays out the numbers that page.py computed from the log (it
// computes none of them), pages the long lists so a 100k-event session stays responsive, and
// composes the per-request surface deltas for a diff between two requests exactly as
// SurfaceDelta.merge does in client/sessionlog/core/request_diff.py. The chart is uPlot.
//
// A long session's page is windowed (D.windows, page.py `windowed`): it holds the first window
// of each list and the chart bucketed per D.chart.width seqs, and the script fetches any other
// window (a page of a list, the transcript page of a seq, what a diff is composed from) as JSON
// from the page's own path when it is shown, so the browser never holds the whole session.
(function () {
  "use strict";
  const D = assemble();
  const PAGE_ROWS = D.pageRows;
  const PAGE_TURNS = D.pageTurns;
  const WINDOWED = Boolean(D.windows);
  // Header changes are marked by reason (SPEC §6); the other markers by kind.
  const MARKER_KINDS = [
    ["header:initial", "header: initial", "#845ef7"],
    ["header:resume", "header: resume", "#5f3dc4"],
    ["header:change", "header: change", "#ae3ec9"],
    ["header:series", "header: series", "#e64980"],
    ["compaction", "compaction", "#d9480f"],
    ["replace", "surface replace", "#e8590c"],
    ["repair", "repair", "#c92a2a"],
    ["fork", "fork point", "#1971c2"],
    ["resume", "resume", "#2f9e44"],
  ];

  // The data comes in parts (page.py's PageFold, so the server renders a page of any length in
  // bounded memory): lists are appended in order, turns, steps and tool calls come as
  // [index, record], and the rows a replace took off are named as [seq, replacer] pairs (the
  // first replacer of a seq names it). The summary (#sessionlog-data) is the last part.
  function assemble() {
    const summary = JSON.parse(document.getElementById("sessionlog-data").textContent);
    if (summary.windows) return summary; // windowed: the summary holds the first windows
    const data = Object.assign({}, summary, { requests: [], markers: [], transcript: [], turns: [], steps: [], toolCalls: [], headerPairs: {} });
    delete data.replacedBy;
    const replaced = [];
    const add = (part) => {
      for (const key of ["requests", "markers", "transcript"]) for (const item of part[key]) data[key].push(item);
      for (const key of ["turns", "steps", "toolCalls"]) for (const [i, record] of part[key]) data[key][i] = record;
      Object.assign(data.headerPairs, part.headerPairs);
      for (const pair of part.replacedBy) replaced.push(pair);
    };
    for (const node of document.querySelectorAll("script.sessionlog-part")) add(JSON.parse(node.textContent));
    add(summary);
    const rows = new Map(data.transcript.map((row) => [row.seq, row]));
    for (const [seq, by] of replaced) {
      const row = rows.get(seq);
      if (row && row.replacedBy === null) row.replacedBy = by;
    }
    return data;
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const num = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
  const usd = (n) => "$" + Number(n || 0).toFixed(6);
  // A cost that leaves out calls with no price (the stats' unpricedEvents) is a lower bound,
  // marked as `sessionlog costs` and `replay` mark it (cli.common.cost_cell); a call with no
  // price has cost null (timeline.usage_view), which $0 (a free model's) would not say.
  const lowerBound = (cost, unpriced) => (unpriced ? "≥" : "") + usd(cost);
  const callCost = (cost) => (cost === null ? "unpriced" : usd(cost));
  const pct = (x) => (100 * x).toFixed(1) + "%";
  // A duration is null while its record is open, and also once it is closed when one of its two
  // ends has no time on the other's clock (an imported turn the service closed): then "unknown".
  const secs = (ms, open = false) =>
    ms === null || ms === undefined ? (open ? "open" : "unknown") : (ms / 1000).toFixed(ms < 10000 ? 2 : 0) + " s";

  // Tool calls without a result: still `pending`, `dropped` by a replace, or `unanswered` (step ended).
  const UNANSWERED = new Set(["pending", "dropped", "unanswered"]);
  const markerKey = (m) => (m.kind === "header" ? `header:${m.reason}` : m.kind);
  const requestBySeq = new Map(D.requests.map((r) => [r.seq, r]));
  const rowBySeq = new Map(D.transcript.map((r, i) => [r.seq, i]));

  // --- windows (a windowed page) -------------------------------------------------------
  // One window as JSON from the page's path, at the seq the page shows (the log is
  // append-only, so the window is of the same prefix as the page).
  function fetchWindow(query) {
    const params = new URLSearchParams(Object.assign({ at: D.session.atSeq }, query));
    return fetch(`${location.pathname}?${params}`, { credentials: "same-origin" }).then((response) => {
      if (!response.ok) return response.text().then((text) => Promise.reject(new Error(text.trim() || response.statusText)));
      return response.json();
    });
  }
  // The items of page `page` of list `name`: sliced from `all` on a short page; on a windowed
  // page the first window is `all` and the others are fetched.
  function pageItems(name, all, perPage) {
    if (!WINDOWED) return (page) => all.slice(page * perPage, (page + 1) * perPage);
    return (page) => (page === 0 ? all : fetchWindow({ list: name, page }).then((w) => w.items));
  }

  // --- header: the session, its fork relations, the counts ---------------------------
  function renderSession() {
    const box = document.getElementById("session");
    const s = D.session;
    box.append(el("span", { "data-session-id": s.id }, s.events ? `${num(s.events)} events, at seq ${s.atSeq}` : "no events yet"));
    if (s.parent) {
      box.append(" · forked from ",
        el("a", { href: s.parentHref, "data-parent-session": s.parent, "data-fork-seq": s.forkSeq }, s.parent),
        ` after seq ${s.forkSeq} (seqs 0–${s.forkSeq} are inherited)`);
    }
    if (s.children.length) {
      box.append(" · forks: ");
      s.children.forEach((c, i) => {
        if (i) box.append(", ");
        box.append(el("a", { href: c.href, "data-child-session": c.id, "data-fork-seq": c.forkSeq }, `${c.id} (after ${c.forkSeq})`));
      });
    }
    // Stats figures under their stats keys and the labels `sessionlog replay` prints (D.labels);
    // the page's own counts (repairs, cache-read drops) under theirs.
    const st = D.stats;
    const text = (v) => (v === null || v === undefined ? "–" : String(v));
    const figure = (key, show) => [key, D.labels[key], show(st[key])];
    const items = [
      figure("turns", num), figure("modelCalls", num), figure("steps", num),
      figure("toolCalls", num), figure("toolErrors", num),
      ["repairs", "repaired calls", num(D.counts.repairs)], figure("compactions", num),
      figure("replaces", num), ["cacheDrops", "cache-read drops", num(D.counts.cacheDrops)],
      figure("messages", num), figure("inputTokens", num), figure("cacheReadTokens", num),
      figure("cacheWriteTokens", num), figure("outputTokens", num),
      figure("costUsd", (cost) => lowerBound(cost, st.unpricedEvents)), figure("unpricedEvents", num),
      figure("model", text), figure("provider", text), figure("thinkingLevel", text),
    ];
    const dl = document.getElementById("summary");
    for (const [key, label, value] of items) dl.append(el("div", {}, el("dt", {}, label), el("dd", { "data-count": key }, value)));
  }

  // --- the chart: one point per request, markers on the same seq axis -----------------
  function renderChart() {
    const box = document.getElementById("chart");
    // A windowed page's chart: one point per bucket of D.chart.width seqs (page.py chart.py).
    const points = WINDOWED ? D.chart.points : D.requests;
    const markers = WINDOWED ? D.chart.markers : D.markers;
    if (WINDOWED) {
      box.setAttribute("data-bucket-width", D.chart.width);
      document.getElementById("markers-legend").append(el("p", { class: "chart-note" },
        `${num(D.counts.requests)} requests, drawn per ${num(D.chart.width)} seqs: each point shows the largest context and output, the smallest cache read and share, and the cost at its end.`));
    }
    const withUsage = points.filter((r) => r.usage);
    if (!withUsage.length || typeof uPlot === "undefined") {
      box.append(el("p", {}, "No request carries usage."));
      return;
    }
    const xs = new Set(withUsage.map((r) => r.seq));
    for (const m of markers) xs.add(m.seq);
    const x = Array.from(xs).sort((a, b) => a - b);
    const at = new Map(x.map((seq, i) => [seq, i]));
    const column = () => new Array(x.length).fill(null);
    const context = column(), cacheRead = column(), output = column(), share = column(), cost = column();
    for (const r of withUsage) {
      const i = at.get(r.seq);
      context[i] = r.usage.context; cacheRead[i] = r.usage.cacheRead; output[i] = r.usage.output;
      share[i] = r.usage.cacheShare; cost[i] = r.cumulativeCost;
    }
    const markerColumns = MARKER_KINDS.map(([kind], k) => {
      const col = column();
      for (const m of markers) if (markerKey(m) === kind) col[at.get(m.seq)] = 0.97 - 0.05 * k;
      return col;
    });
    // The legend shows each series' value at the cursor as the tables do (uPlot's default
    // rounded the cost to 3 decimals, a share to 0.968, and gave a marker its drawing height).
    const shown = (format) => (u, v) => (v === null || v === undefined ? "–" : format(v));
    const line = (label, stroke, scale, format, extra) => Object.assign({ label, stroke, scale, width: 2, spanGaps: true, points: { show: x.length < 400 }, value: shown(format) }, extra || {});
    const series = [
      { label: "seq" },
      line("context tokens", "#1c7ed6", "tokens", num),
      line("cache read", "#f59f00", "tokens", num, { fill: "rgba(245,159,0,0.15)" }),
      line("output tokens", "#37b24d", "tokens", num),
      line("cache-read share", "#ae3ec9", "share", pct, { dash: [4, 3] }),
      line("cumulative cost (USD)", "#495057", "usd", usd),
      ...MARKER_KINDS.map(([, label, color]) => ({ label, stroke: color, scale: "share", paths: () => null, points: { show: true, size: 9, fill: color, stroke: color }, value: (u, v) => (v === null || v === undefined ? "" : "here") })),
    ];
    const opts = {
      width: Math.max(600, Math.min(1200, box.clientWidth || 1100)),
      height: 340,
      series,
      scales: { x: { time: false }, share: { range: [0, 1] }, usd: {} },
      axes: [
        { label: "seq" },
        { scale: "tokens", label: "tokens" },
        // Sized for their widest tick label: at uPlot's default width the USD title overlapped "$0.0050".
        { scale: "share", side: 1, label: "cache-read share", size: 70, values: (u, v) => v.map((t) => pct(t)), grid: { show: false } },
        { scale: "usd", side: 1, label: "USD", size: 80, values: (u, v) => v.map((t) => "$" + t.toPrecision(2)), grid: { show: false } },
      ],
    };
    new uPlot(opts, [x, context, cacheRead, output, share, cost, ...markerColumns], box);
  }

  // --- paging ------------------------------------------------------------------------
  // `items(page)` gives a page's items, or a promise of them (a fetched window); `draw(items,
  // body)` lays them out. `show` returns a promise that settles once the page is drawn.
  function pager(container, total, perPage, items, draw, label) {
    const nav = el("nav", { class: "pager" });
    const body = el("div", { class: "page-body" });
    container.append(nav, body);
    const pages = Math.max(1, Math.ceil(total / perPage));
    let current = 0;
    const info = el("span", { class: "page-info" });
    const goto = el("input", { type: "number", min: 1, max: pages, class: "page-input", title: "page" });
    goto.addEventListener("change", () => show(Number(goto.value) - 1));
    const paint = (page, list) => {
      if (page !== current) return; // a later page was asked for while this one was fetched
      body.replaceChildren();
      draw(list, body);
      container.setAttribute("data-page", page);
    };
    const show = (page) => {
      current = Math.max(0, Math.min(pages - 1, page));
      goto.value = current + 1;
      info.textContent = ` of ${pages} (${num(total)} ${label})`;
      const asked = current;
      const got = items(asked);
      if (!(got instanceof Promise)) return Promise.resolve(paint(asked, got));
      container.setAttribute("data-loading", asked);
      return got.then((list) => paint(asked, list), (error) => {
        if (asked === current) body.replaceChildren(el("p", { class: "error" }, `This page could not be read: ${error.message}`));
      }).finally(() => container.removeAttribute("data-loading"));
    };
    nav.append(
      el("button", { type: "button", onclick: () => show(0) }, "«"),
      el("button", { type: "button", onclick: () => show(current - 1) }, "‹"),
      "page ",
      goto,
      info,
      el("button", { type: "button", onclick: () => show(current + 1) }, "›"),
      el("button", { type: "button", onclick: () => show(pages - 1) }, "»"),
    );
    show(0);
    return { show, page: () => current };
  }

  // --- requests and cache drops ------------------------------------------------------
  function causeText(r) {
    const d = r.drop;
    const parts = [];
    for (const cause of d.causes) {
      if (cause === "header") parts.push(`header change (${d.diff.header.fields.join(", ")})`);
      else if (cause === "replace") {
        for (const rep of d.diff.messages.replaces) {
          parts.push(`surface replace of seqs ${rep.startSeq}–${rep.endSeq} by seq ${rep.seq} (${rep.sourceKind || rep.type}), ${rep.replaced.length} node(s)`);
        }
      } else parts.push(`nothing in the request changed: the prompt cache expired or was cold (${d.gapMs === null ? "how long after the previous request is unknown" : secs(d.gapMs) + " since the previous request"})`);
    }
    return parts.join("; ");
  }

  let diffPick = 0;
  function pick(seq) {
    const input = document.getElementById(diffPick % 2 === 0 ? "diff-from" : "diff-to");
    input.value = seq;
    diffPick += 1;
  }

  function renderRequests() {
    const box = document.getElementById("requests");
    const head = el("tr", {}, ...["seq", "turn.step", "kind", "context", "cache read", "share", "output", "cost", "cumulative", "cache drop"].map((h) => el("th", {}, h)));
    const total = WINDOWED ? D.windows.requests : D.requests.length;
    pager(box, total, PAGE_ROWS, pageItems("requests", D.requests, PAGE_ROWS), (list, body) => {
      const table = el("table", { class: "requests" }, el("thead", {}, head.cloneNode(true)));
      const tbody = el("tbody");
      for (const r of list) {
        const u = r.usage || {};
        const paidCall = r.kind === "summary" || r.kind === "other"; // a call outside the conversation (timeline.py)
        const title = paidCall ? "a call that is no request of the conversation (a compaction's summariser), counted in the cost; click: pick for the diff" : "click: pick for the diff";
        tbody.append(el("tr", { "data-request-seq": r.seq, "data-turn": r.turn, "data-kind": r.kind, class: r.drop ? "drop" : null, title, onclick: () => pick(r.seq) },
          el("td", {}, r.seq), el("td", {}, `${r.turn ?? "–"}.${r.step ?? "–"}`), el("td", {}, r.kind + (r.error ? " (error)" : "")),
          el("td", {}, num(u.context)), el("td", {}, num(u.cacheRead)), el("td", {}, u.context ? pct(u.cacheShare) : "–"),
          el("td", {}, num(u.output)), el("td", {}, r.usage ? callCost(u.cost) : "–"), el("td", {}, lowerBound(r.cumulativeCost, r.cumulativeUnpriced)),
          el("td", { "data-cause": r.drop ? r.drop.causes.join(" ") : null }, r.drop ? r.drop.causes.join(", ") : "")));
      }
      table.append(tbody);
      body.append(table);
    }, "rows");
    const drops = document.getElementById("drops");
    const dropList = WINDOWED ? D.drops : D.requests.filter((r) => r.drop);
    const dropTotal = WINDOWED ? D.windows.drops : dropList.length;
    if (!dropTotal) drops.append(el("p", {}, "No request read fewer cached tokens than the one before it."));
    pager(drops, dropTotal, PAGE_ROWS, pageItems("drops", dropList, PAGE_ROWS), (list, body) => {
      for (const r of list) {
        const show = () => {
          document.getElementById("diff-from").value = r.drop.previousSeq;
          document.getElementById("diff-to").value = r.seq;
          runDiff(r.drop.previousSeq, r.seq);
          document.getElementById("diff-section").scrollIntoView();
        };
        body.append(el("div", { class: "drop", "data-request-seq": r.seq, "data-cause": r.drop.causes.join(" "), "data-previous-seq": r.drop.previousSeq, title: "click: diff with the previous request", onclick: show },
          el("strong", {}, `request ${r.seq} (turn ${r.turn ?? "–"}, step ${r.step ?? "–"})`),
          `: cache read ${num(r.drop.cacheReadBefore)} → ${num(r.drop.cacheReadAfter)} tokens. Cause: ${causeText(r)}.`));
      }
    }, "drops");
  }

  // --- the diff between two requests -------------------------------------------------
  // `src`: the requests the diff is composed over, by seq, and the header pairs (the page's
  // own on a short page, a fetched `list=diff` window on a windowed one).
  const pageSource = { requests: D.requests, requestBySeq, headerPairs: D.headerPairs, rowText };
  function composeDiff(fromSeq, toSeq, src) {
    let added = [];
    const replaced = new Map();
    let firstChanged = null;
    const headers = [];
    const leave = (seqs, by) => {
      const gone = new Set(seqs);
      const fresh = added.filter((s) => gone.has(s));
      if (fresh.length) {
        added = added.filter((s) => !gone.has(s));
        fresh.forEach((s) => gone.delete(s));
      }
      for (const s of seqs) if (gone.has(s) && !replaced.has(s)) replaced.set(s, by);
    };
    for (const r of src.requests) {
      if (r.seq <= fromSeq || r.seq > toSeq) continue;
      for (const [seq, by] of r.delta.replaced) leave([seq], by);
      added.push(...r.delta.added);
      if (r.delta.firstChanged !== null && (firstChanged === null || r.delta.firstChanged < firstChanged)) firstChanged = r.delta.firstChanged;
      headers.push(...r.delta.headers);
    }
    const a = src.requestBySeq.get(fromSeq).headerSeq, b = src.requestBySeq.get(toSeq).headerSeq;
    let fields = [];
    if (a === null && b === null) fields = [];
    else if (a === null || b === null) fields = ["header"];
    else if (a !== b) fields = src.headerPairs[`${a}:${b}`] || null;
    return { added, replaced, firstChanged, headers, fields };
  }

  function rowText(seq) {
    const i = rowBySeq.get(seq);
    if (i === undefined) return `seq ${seq}`;
    const row = D.transcript[i];
    return `seq ${seq} ${row.role || row.type}: ${row.text}`;
  }

  // The diff's source: the page's own lists, or on a windowed page the `list=diff` window.
  function diffSource(fromSeq, toSeq) {
    if (!WINDOWED) return Promise.resolve(pageSource);
    if (!(fromSeq < toSeq)) return Promise.resolve({ requestBySeq: new Map() });
    return fetchWindow({ list: "diff", from: fromSeq, to: toSeq }).then((w) => {
      const rows = new Map(w.rows.map((r) => [r.seq, r]));
      const text = (seq) => (rows.has(seq) ? `seq ${seq} ${rows.get(seq).role || rows.get(seq).type}: ${rows.get(seq).text}` : `seq ${seq}`);
      return { requests: w.requests, requestBySeq: new Map(w.requests.map((r) => [r.seq, r])), headerPairs: w.headerPairs, rowText: text };
    });
  }

  function runDiff(fromSeq, toSeq) {
    const box = document.getElementById("diff");
    if (!WINDOWED) return drawDiff(box, fromSeq, toSeq, pageSource);
    box.setAttribute("data-loading", "true");
    return diffSource(fromSeq, toSeq).then((src) => drawDiff(box, fromSeq, toSeq, src),
      (error) => box.replaceChildren(el("p", { class: "error" }, `The diff could not be read: ${error.message}`)))
      .finally(() => box.removeAttribute("data-loading"));
  }

  function drawDiff(box, fromSeq, toSeq, src) {
    box.replaceChildren();
    if (!src.requestBySeq.has(fromSeq) || !src.requestBySeq.has(toSeq) || fromSeq >= toSeq) {
      box.append(el("p", { class: "error" }, "Pick two requests (their seqs, the earlier first) from the request list."));
      return;
    }
    const d = composeDiff(fromSeq, toSeq, src);
    const kept = d.fields !== null && d.fields.length === 0 && d.replaced.size === 0;
    box.setAttribute("data-from-seq", fromSeq);
    box.setAttribute("data-to-seq", toSeq);
    box.setAttribute("data-prefix-kept", kept);
    box.append(el("p", {}, kept
      ? `The request at ${toSeq} starts with the request at ${fromSeq}: a prompt cache can reuse it.`
      : `The request at ${toSeq} does not start with the request at ${fromSeq}: a prompt cache misses from the first change on.`));
    // A request is named by its answer's seq; what was sent is the log before it, which the CLI
    // names by its last seq: the same diff there is one seq earlier at each end (timeline.py).
    box.append(el("p", { class: "diff-cli", "data-cli": `sessionlog diff ${D.session.id} --from ${fromSeq - 1} --to ${toSeq - 1}` },
      `Each request is the log before its answer (the request at ${toSeq} is the log through seq ${toSeq - 1}); in the CLI: `,
      el("code", {}, `sessionlog diff ${D.session.id} --from ${fromSeq - 1} --to ${toSeq - 1}`)));
    const fields = el("ul", { class: "diff-fields" });
    if (d.fields === null) fields.append(el("li", {}, "header differs (fields not precomputed for this many headers)"));
    else for (const f of d.fields) fields.append(el("li", { "data-diff-field": f }, f));
    box.append(el("h3", {}, `Header fields changed (${d.fields === null ? "?" : d.fields.length})`), fields);
    if (d.headers.length) box.append(el("p", {}, `Headers logged in between: seqs ${d.headers.join(", ")}`));
    const replaced = el("ul", { class: "diff-replaced" });
    for (const [seq, by] of Array.from(d.replaced.entries()).sort((p, q) => p[0] - q[0])) {
      replaced.append(el("li", { "data-diff-replaced": seq, "data-replaced-by": by }, `${src.rowText(seq)} — replaced by seq ${by}`));
    }
    box.append(el("h3", {}, `Messages replaced (${d.replaced.size})` + (d.firstChanged !== null ? `, from surface position ${d.firstChanged}` : "")), replaced);
    const added = el("ul", { class: "diff-added" });
    for (const seq of d.added) added.append(el("li", { "data-diff-added": seq }, src.rowText(seq)));
    box.append(el("h3", {}, `Messages added (${d.added.length})`), added);
  }

  function setupDiff() {
    const form = document.getElementById("diff-form");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      runDiff(Number(document.getElementById("diff-from").value), Number(document.getElementById("diff-to").value));
    });
    const first = (WINDOWED ? D.drops : D.requests).find((r) => r.drop);
    if (first) {
      document.getElementById("diff-from").value = first.drop.previousSeq;
      document.getElementById("diff-to").value = first.seq;
      runDiff(first.drop.previousSeq, first.seq);
    }
  }

  // --- turns, steps and tool calls ---------------------------------------------------
  // The steps by turn and the tool calls by turn.step, of the whole page or of one window.
  function grouped(steps, toolCalls) {
    const stepsOf = new Map();
    for (const s of steps) {
      if (!stepsOf.has(s.turn)) stepsOf.set(s.turn, []);
      stepsOf.get(s.turn).push(s);
    }
    const callsOf = new Map();
    for (const c of toolCalls) {
      const key = `${c.turn}.${c.step}`;
      if (!callsOf.has(key)) callsOf.set(key, []);
      callsOf.get(key).push(c);
    }
    return { stepsOf, callsOf };
  }

  function renderTurns() {
    const box = document.getElementById("turns");
    const whole = grouped(D.steps, D.toolCalls);
    const first = { turns: D.turns, groups: whole };
    const items = !WINDOWED
      ? (page) => ({ turns: D.turns.slice(page * PAGE_TURNS, (page + 1) * PAGE_TURNS), groups: whole })
      : (page) => (page === 0 ? first : fetchWindow({ list: "turns", page }).then((w) => ({ turns: w.items, groups: grouped(w.steps, w.toolCalls) })));
    const total = WINDOWED ? D.windows.turns : D.turns.length;
    pager(box, total, PAGE_TURNS, items, (shown, body) => {
      const { stepsOf, callsOf } = shown.groups;
      for (const t of shown.turns) {
        const kind = t.endKind || "open";
        const turn = el("div", { class: `turn end-${kind}`, "data-turn": t.turn, "data-seq": t.startSeq, "data-end-kind": kind },
          el("h3", {}, `Turn ${t.turn}`, el("span", { class: `badge end-${kind}` }, kind), ` ${t.steps} step(s), ${t.requests} request(s), ${secs(t.durationMs, t.endKind === null)}`));
        for (const s of stepsOf.get(t.turn) || []) {
          const step = el("div", { class: "step", "data-turn": t.turn, "data-step": s.step, "data-seq": s.startSeq },
            el("span", { class: "step-label" }, `step ${s.step} · ${secs(s.durationMs, s.endSeq === null)} · requests ${s.requests.join(", ") || "–"}`));
          for (const c of callsOf.get(`${t.turn}.${s.step}`) || []) {
            step.append(el("span", { class: `tool outcome-${c.outcome}`, "data-tool-call-id": c.callId, "data-seq": c.blockSeq, "data-outcome": c.outcome, title: c.errorCode || c.outcome },
              `${c.name} ${UNANSWERED.has(c.outcome) ? c.outcome : secs(c.durationMs)}${c.errorCode ? " " + c.errorCode : ""}`));
          }
          turn.append(step);
        }
        body.append(turn);
      }
    }, "turns");
  }

  // --- the transcript, replaced rows marked and linked -------------------------------
  let transcriptPager = null;
  function goToSeq(seq) {
    if (!transcriptPager) return;
    const said = document.querySelector("#transcript .jump-note");
    said.textContent = "";
    // The transcript page of the seq: from the page's rows, or asked of a windowed page's server.
    const found = WINDOWED
      ? fetchWindow({ list: "transcript", seq }).then((w) => w.page)
      : Promise.resolve(rowBySeq.has(seq) ? Math.floor(rowBySeq.get(seq) / PAGE_ROWS) : null);
    found.then((page) => (page === null ? null : transcriptPager.show(page))).then(() => {
      const row = document.querySelector(`#transcript [data-seq="${seq}"]`);
      if (row) {
        row.classList.add("flash");
        row.scrollIntoView({ block: "center" });
      } else {
        // It did nothing, silently: an event with no row (a header, a turn's start), or no seq of the page.
        said.textContent = Number.isInteger(seq) && seq >= 0 && seq <= D.session.atSeq
          ? `seq ${seq} has no transcript row (the transcript shows messages; its events: sessionlog events ${D.session.id} --from ${seq} --to ${seq})`
          : `seq ${seq} is not on this page (seqs 0–${D.session.atSeq ?? "none"})`;
      }
    }, (error) => { said.textContent = `seq ${seq}: ${error.message}`; });
  }

  function renderTranscript() {
    const box = document.getElementById("transcript");
    const jump = el("form", { class: "jump", onsubmit: (e) => { e.preventDefault(); goToSeq(Number(jump.querySelector("input").value)); } },
      el("label", {}, "go to seq ", el("input", { type: "number", min: 0 })), el("span", { class: "jump-note", role: "status" }));
    box.append(jump);
    const total = WINDOWED ? D.windows.transcript : D.transcript.length;
    transcriptPager = pager(box, total, PAGE_ROWS, pageItems("transcript", D.transcript, PAGE_ROWS), (list, body) => {
      for (const r of list) {
        const classes = ["row", `kind-${r.kind}`];
        if (r.replacedBy !== null) classes.push("replaced");
        if (r.isError) classes.push("error");
        if (r.interrupted) classes.push("interrupted");
        const row = el("div", { class: classes.join(" "), "data-seq": r.seq, "data-kind": r.kind, "data-replaced-by": r.replacedBy, "data-replaces": r.replaces ? r.replaces.join(",") : null, "data-interrupted": r.interrupted ? "true" : null },
          el("span", { class: "seq" }, r.seq), el("span", { class: "type" }, r.kind === "replace" ? `⤷ ${r.type} replaces ${r.replaces.length} node(s)` : (r.role || r.type)),
          el("span", { class: "text" }, r.interrupted ? el("span", { class: "badge interrupted" }, "interrupted") : null, r.text));
        if (r.replacedBy !== null) {
          row.append(el("a", { href: `#seq-${r.replacedBy}`, class: "replaced-by", onclick: (e) => { e.preventDefault(); goToSeq(r.replacedBy); } }, `replaced by ${r.replacedBy}`));
        }
        body.append(row);
      }
    }, "rows");
  }

  renderSession();
  renderChart();
  renderRequests();
  setupDiff();
  renderTurns();
  renderTranscript();
  // For the browser tests and for people at the console: the diff of any two request seqs.
  window.sessionlog = {
    // On a windowed page, a promise of it (its requests are fetched).
    diff: (fromSeq, toSeq) => {
      const shown = (d) => ({ added: d.added, replaced: Array.from(d.replaced.keys()).sort((p, q) => p - q), firstChanged: d.firstChanged, fields: d.fields, headers: d.headers });
      if (!WINDOWED) return shown(composeDiff(fromSeq, toSeq, pageSource));
      return diffSource(fromSeq, toSeq).then((src) => shown(composeDiff(fromSeq, toSeq, src)));
    },
  };
  document.body.setAttribute("data-ready", "true");
  if (window.performance && performance.mark) performance.mark("sessionlog-ready");
})();
