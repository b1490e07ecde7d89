// Lookback's read-only page: plain JavaScript, no build step, nothing fetched from elsewhere.
// Every value from the server is put on the page as text (textContent), never as markup.
"use strict";

const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");

// -- small helpers ------------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(name, body) {
  const answer = await fetch("/api/" + name, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body || {}), credentials: "same-origin", cache: "no-store",
  });
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) {
    const message = (data.error && data.error.message) || answer.statusText;
    throw new Error(answer.status + ": " + message);
  }
  return data;
}

const enc = encodeURIComponent;
const link = (href, text, cls) => el("a", { href, class: cls || "" }, text);
const sessionHash = (kind, project, session) => `#/${kind}/${enc(project)}/${enc(session)}`;
const badge = (text, cls) => el("span", { class: "badge " + (cls || "") }, text);
const when = (value) => (value ? String(value).replace("T", " ").replace(/\.\d+Z?$/, "") : "");
const shortId = (id) => (id && id.length > 14 ? id.slice(0, 8) + "…" : id || "");

function withheld(reason, classification) {
  return el("span", { class: "withheld" },
    `withheld (${classification || "sensitive"}): ${reason || "the privacy gate"}`);
}

function setCrumbs(...parts) {
  crumbs.replaceChildren(...parts.flatMap((part, i) => (i ? [" › ", part] : [part])));
}

function tabs(project, session, on) {
  const names = [["session", "Tree"], ["search", "Search"], ["requests", "Requests"]];
  return el("div", { class: "tabs" }, ...names.map(([kind, label]) =>
    link(sessionHash(kind, project, session), label, kind === on ? "on" : "")));
}

function show(...nodes) { view.replaceChildren(...nodes); }

// -- views ---------------------------------------------------------------------------

async function projectsView() {
  setCrumbs(el("span", {}, "projects"));
  const { projects } = await api("projects");
  const rows = [];
  for (const project of projects) {
    const name = project.project;
    const sessions = await api("sessions", { project: name }).catch(() => ({ sessions: [] }));
    rows.push(el("tr", {},
      el("td", {}, el("strong", {}, project.cwd || name), el("div", { class: "muted mono" }, name)),
      el("td", {}, String(project.entries ?? "")),
      el("td", {}, el("ul", { class: "removedlist" }, ...sessions.sessions.map((s) =>
        el("li", {}, link(sessionHash("session", name, s.session_id), s.session_id, "mono"),
          ` · ${s.entries} entries`,
          s.compactions ? el("span", {}, " · ", badge(`${s.compactions} compaction${s.compactions > 1 ? "s" : ""}`, "warn")) : "",
          el("span", { class: "muted" }, " · " + when(s.started_at))))))));
  }
  show(el("h1", {}, "Projects"),
    projects.length ? el("table", {}, el("tr", {}, el("th", {}, "project"), el("th", {}, "entries"),
      el("th", {}, "sessions (latest first)")), ...rows)
      : el("p", { class: "muted" }, "Nothing indexed yet."));
}

function nodeRow(entry, project, session, compactions) {
  const classes = ["node"];
  if (entry.on_branch) classes.push("branch");
  if (entry.removed_by) classes.push("removed");
  if (entry.type === "compaction") classes.push("compaction");
  const marks = [];
  if (entry.type === "compaction") marks.push(badge("compaction", "warn"));
  if (entry.removed_by) marks.push(badge("removed by " + shortId(entry.removed_by), "cut"));
  if (entry.in_context) marks.push(badge("in context", "ctx"));
  const text = entry.excerpt !== null && entry.excerpt !== undefined
    ? el("span", { class: "excerpt" }, entry.excerpt)
    : entry.withheld ? withheld(entry.withheld_reason, entry.withheld)
      : el("span", { class: "muted" }, "(no text)");
  const body = el("div", {}, ...marks, text);
  const found = compactions.get(entry.entry_id);
  if (found) {
    body.append(el("div", { class: "muted" },
      `removed ${found.removed.length} entr${found.removed.length === 1 ? "y" : "ies"} ` +
      `(${found.removed_tokens} tokens) from the model's context; kept ${found.kept.length}`),
    el("ul", { class: "removedlist" }, ...found.removed.map((id) =>
      el("li", {}, link(`#/entry/${enc(project)}/${enc(session)}/${enc(id)}`, id, "mono")))));
  }
  return el("li", { class: classes.join(" "), "data-entry": entry.entry_id },
    link(`#/entry/${enc(project)}/${enc(session)}/${enc(entry.entry_id)}`, shortId(entry.entry_id), "mono"),
    el("span", {}, entry.role || entry.type),
    el("span", { class: "muted" }, `${entry.tokens} tok`), body);
}

async function sessionView(project, session) {
  setCrumbs(link("#/", "projects"), el("span", { class: "mono" }, session));
  const tree = await api("tree", { project, session_id: session });
  const byId = new Map(tree.entries.map((e) => [e.entry_id, e]));
  const children = new Map();
  const roots = [];
  for (const entry of tree.entries) {
    if (entry.parent_id && byId.has(entry.parent_id)) {
      if (!children.has(entry.parent_id)) children.set(entry.parent_id, []);
      children.get(entry.parent_id).push(entry);
    } else roots.push(entry);
  }
  const compactions = new Map(tree.compactions.map((c) => [c.entry_id, c]));
  const list = el("ul", { class: "tree" });
  // A chain is drawn flat; at a fork the branch holding the current leaf continues in
  // line and every other branch is drawn indented beneath the fork.
  const pending = roots.map((root) => [root, list]);
  while (pending.length) {
    let [entry, into] = pending.shift();
    while (entry) {
      into.append(nodeRow(entry, project, session, compactions));
      const next = children.get(entry.entry_id) || [];
      const main = next.find((e) => e.on_branch) || next[next.length - 1];
      for (const other of next) {
        if (other === main) continue;
        const fork = el("ul", { class: "tree fork" });
        into.append(el("li", {}, el("div", { class: "muted" }, "other branch from " + shortId(entry.entry_id) + ":"), fork));
        pending.push([other, fork]);
      }
      entry = main;
    }
  }
  const removed = tree.compactions.reduce((n, c) => n + c.removed.length, 0);
  show(el("h1", {}, "Session ", el("span", { class: "mono" }, session)),
    tabs(project, session, "session"),
    el("p", { class: "muted" }, `${tree.entries.length} entries · ${tree.compactions.length} compaction(s) · ` +
      `${removed} entries removed from context · current leaf ${shortId(tree.leaf_id)} · ` +
      "blue edge: current branch; red: removed by a compaction"),
    tree.truncated ? el("p", { class: "withheld" }, "Only the first entries are listed.") : "",
    list);
}

function resultCard(item, project, session, extra) {
  const href = `#/entry/${enc(project)}/${enc(item.session_id || session)}/${enc(item.entry_id)}`;
  return el("div", { class: "card" },
    el("div", { class: "meta" }, link(href, item.entry_id, "mono"), " · ", item.role || "",
      item.tier ? " · tier " + item.tier : "",
      item.score !== undefined && item.score !== null ? " · score " + Number(item.score).toFixed(2) : "",
      item.on_branch ? " · on the current branch" : "", extra || ""),
    item.reasons ? el("div", { class: "meta" }, "why: " + item.reasons.join("; ")) : "",
    item.excerpt !== null && item.excerpt !== undefined ? el("pre", { class: "text" }, item.excerpt)
      : withheld(item.withheld_reason, item.withheld));
}

function excludedList(excluded, title) {
  if (!excluded || !excluded.length) return "";
  return el("div", {}, el("h2", {}, title),
    el("table", { class: "excluded" }, el("tr", {}, el("th", {}, "entry"), el("th", {}, "classification"),
      el("th", {}, "stage"), el("th", {}, "reason")),
    ...excluded.map((e) => el("tr", {}, el("td", { class: "mono" }, e.entry_id || e.source || ""),
      el("td", {}, e.classification || ""), el("td", {}, e.stage || "privacy"),
      el("td", {}, e.reason || "")))));
}

async function searchView(project, session) {
  setCrumbs(link("#/", "projects"), link(sessionHash("session", project, session), session, "mono"),
    el("span", {}, "search"));
  const results = el("div", { id: "results" });
  const input = el("input", { type: "search", name: "text", placeholder: "identifiers, phrases, words", "aria-label": "search" });
  const scope = el("select", { name: "scope", "aria-label": "scope" },
    ...["branch", "session", "project"].map((s) => el("option", { value: s }, s)));
  const form = el("form", { class: "search", onsubmit: async (event) => {
    event.preventDefault();
    results.replaceChildren(el("p", { class: "muted" }, "Searching…"));
    try {
      const answer = await api("search", { text: input.value, project, session_id: session, scope: scope.value });
      const found = answer.results || [];
      results.replaceChildren(
        el("p", { class: "muted", id: "search-status" }, `${answer.status}: ${found.length} result(s)` +
          (answer.excluded && answer.excluded.length ? `, ${answer.excluded.length} withheld` : "")),
        ...found.map((item) => resultCard(item, project, session)),
        excludedList(answer.excluded, "Withheld by the privacy gate"));
    } catch (error) { results.replaceChildren(el("p", { class: "error" }, error.message)); }
  } }, input, scope, el("button", { type: "submit" }, "Search"));
  show(el("h1", {}, "Search the history"), tabs(project, session, "search"),
    el("p", { class: "muted" }, "The history search of `lookback search`: the same pipeline and the same privacy gate."),
    form, results);
  input.focus();
}

async function entryView(project, session, entryId) {
  setCrumbs(link("#/", "projects"), link(sessionHash("session", project, session), session, "mono"),
    el("span", { class: "mono" }, entryId));
  const answer = await api("entry", { project, session_id: session, entry_id: entryId, before: 2, after: 2 });
  const card = (entry, cls) => el("div", { class: "card " + (cls || "") },
    el("div", { class: "meta" }, link(`#/entry/${enc(project)}/${enc(session)}/${enc(entry.entry_id)}`, entry.entry_id, "mono"),
      ` · ${entry.role || entry.type} · ${when(entry.timestamp)} · ${entry.classification || ""}`),
    el("pre", { class: "text" }, entry.excerpt || ""));
  const own = answer.entry ? card(answer.entry, "own")
    : el("div", { class: "card own" }, answer.status === "withheld"
      ? withheld(((answer.excluded || []).find((e) => e.entry_id === entryId) || {}).reason, "sensitive")
      : el("span", { class: "error" }, "No such entry: " + answer.status));
  show(el("h1", {}, "Entry ", el("span", { class: "mono" }, entryId)), tabs(project, session, ""),
    ...(answer.before || []).map((e) => card(e, "neighbour")), own,
    ...(answer.after || []).map((e) => card(e, "neighbour")),
    excludedList((answer.excluded || []).filter((e) => e.entry_id !== entryId), "Neighbours withheld"));
}

async function requestsView(project, session) {
  setCrumbs(link("#/", "projects"), link(sessionHash("session", project, session), session, "mono"),
    el("span", {}, "requests"));
  const { records } = await api("requests", { session_id: session });
  const cards = records.map((record) => {
    const items = record.items || [];
    return el("div", { class: "card request" },
      el("h2", {}, `${new Date(record.at * 1000).toISOString().replace("T", " ").slice(0, 19)} · ${record.kind} · ${record.status}`),
      el("div", { class: "meta" }, `${items.length} item(s) came back · ${record.tokens ?? 0} tokens · ` +
        `${record.latency_ms ?? "?"} ms${record.cached ? " · cached" : ""}` +
        (record.planner ? ` · planner included ${record.planner.included}, excluded ${record.planner.excluded}` : "")),
      items.length ? el("table", { class: "items" }, el("tr", {}, el("th", {}, "entry"), el("th", {}, "tier"),
        el("th", {}, "tokens"), el("th", {}, "why"), el("th", {}, "text (re-read through the gate)")),
      ...items.map((item) => el("tr", {},
        el("td", {}, link(`#/entry/${enc(project)}/${enc(item.session_id || session)}/${enc(item.entry_id)}`, item.entry_id, "mono"),
          el("div", { class: "muted" }, item.role || ""), item.included === false ? badge("planner left out", "cut") : ""),
        el("td", {}, item.tier || ""), el("td", {}, String(item.tokens ?? "")),
        el("td", {}, item.reason || ""),
        el("td", {}, item.excerpt ? el("span", {}, item.excerpt) : withheld(item.withheld_reason, item.withheld)))))
        : el("p", { class: "muted" }, "Nothing came back."),
      excludedList(record.excluded, "Withheld (privacy) or left out (planner)"));
  });
  show(el("h1", {}, "Answered requests"), tabs(project, session, "requests"),
    el("p", { class: "muted" }, "The Context Manifest keeps ids, reasons and counts, never text: each excerpt is re-read from the index through the privacy gate."),
    ...(cards.length ? cards : [el("p", { class: "muted" }, "No request answered for this session yet.")]));
}

// -- routing -------------------------------------------------------------------------

async function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  document.body.dataset.view = "loading";
  try {
    if (parts[0] === "session" && parts.length >= 3) await sessionView(parts[1], parts[2]);
    else if (parts[0] === "search" && parts.length >= 3) await searchView(parts[1], parts[2]);
    else if (parts[0] === "requests" && parts.length >= 3) await requestsView(parts[1], parts[2]);
    else if (parts[0] === "entry" && parts.length >= 4) await entryView(parts[1], parts[2], parts[3]);
    else await projectsView();
    document.body.dataset.view = parts[0] || "projects";
  } catch (error) {
    show(el("p", { class: "error" }, error.message));
    document.body.dataset.view = "error";
  }
}

window.addEventListener("hashchange", route);
route();
