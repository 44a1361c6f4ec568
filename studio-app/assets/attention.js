// Studio cockpit: the attention page, rendered from /api/app/attention. The app owns the
// queue, the dispositions and their history (docs/ATTENTION.md); this module lists the
// items, sets a disposition (a snooze included) or clears it, shows an item's history,
// and on request the items a disposition hides. Only the attention page loads it.
const DECISION_KEY = "studio.decision_token";
const API = "/api/app/attention";

// The dispositions one click sets; a snooze also needs its "until" (its own form).
const DISPOSE = [
  ["acknowledged", "Acknowledge", "attention-ack"],
  ["resolved", "Resolve", "attention-resolve"],
  ["expected", "Expected", "attention-expected"],
];

// Snooze presets: they fill the "until" field, the operator still confirms.
const PRESETS = [
  ["in 1 hour", 60 * 60 * 1000, "attention-snooze-1h"],
  ["in 1 day", 24 * 60 * 60 * 1000, "attention-snooze-1d"],
  ["in 1 week", 7 * 24 * 60 * 60 * 1000, "attention-snooze-1w"],
];

const LOCAL = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "2-digit", day: "2-digit",
  hour: "2-digit", minute: "2-digit", second: "2-digit",
});
const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";

// The same JSON request as cockpit.js: JSON on unsafe methods is the CSRF defence.
async function call(method, url, body) {
  const headers = { Accept: "application/json", "Content-Type": "application/json" };
  const decision = sessionStorage.getItem(DECISION_KEY);
  if (decision) headers["x-studio-decision-token"] = decision;
  const res = await fetch(url, {
    method, headers, credentials: "same-origin", cache: "no-store",
    body: method === "GET" ? undefined : JSON.stringify(body === undefined ? {} : body),
  });
  let data = null;
  try { data = await res.json(); } catch (_) { data = null; }
  return { ok: res.ok, status: res.status, data };
}

async function load(url) {
  const r = await call("GET", url);
  if (!r.ok) throw new Error((r.data && r.data.message) || "HTTP " + r.status);
  return r.data;
}

function failure(r) {
  return (r.data && r.data.message) || "failed (HTTP " + r.status + ")";
}

// `testid`, `role`, `aria-*` and `data-*` become attributes, everything else a property.
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null) continue;
    if (k === "testid") e.dataset.testid = v;
    else if (k === "role" || k.startsWith("aria-") || k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  e.append(...children);
  return e;
}

// An instant in the viewer's zone with UTC in the title, as on the server-rendered pages.
function stamp(iso, testid) {
  const d = new Date(iso);
  if (!iso || isNaN(d)) return el("span", { testid }, iso || "—");
  const utc = d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  return el("time", { dateTime: iso, title: utc, testid }, LOCAL.format(d));
}

// A datetime-local value is the viewer's wall clock without a zone ("2026-05-01T09:30").
function toLocalInput(ms) {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, "0");
  return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) +
    "T" + p(d.getHours()) + ":" + p(d.getMinutes());
}

// ...and back: Date reads a zoneless date-time as local time; the API wants an offset.
// Anything unparsable goes as typed, so that the API names the problem.
function fromLocalInput(value) {
  const d = new Date(value);
  return isNaN(d) ? value : d.toISOString();
}

// "snoozed until <t> · by <who> at <t> — reason": what a disposition says.
function dispositionParts(d) {
  const parts = [d.state];
  if (d.until) parts.push(" until ", stamp(d.until, "attention-until"));
  parts.push(" · by ", el("code", {}, d.by || "—"), " at ", stamp(d.at));
  if (d.reason) parts.push(" — ", d.reason);
  return parts;
}

function dispositionView(d, hidden) {
  const p = el("p", { className: hidden ? "att-disposition" : "muted", testid: "attention-disposition", "data-state": d.state });
  if (hidden) {
    p.append("Hidden: ", ...dispositionParts(d));
  } else {
    // Listed but not hidden: the disposition no longer holds.
    const why = d.state === "snoozed" ? " (the snooze ended)" : " (a newer failure brought it back)";
    p.append("Earlier: ", ...dispositionParts(d), why);
  }
  return p;
}

function historyView(entries) {
  if (entries.length === 0) return el("p", { className: "muted" }, "No decisions recorded yet.");
  const ol = el("ol", { className: "att-history" });
  for (const e of entries) {
    const what = e.op === "delete" ? ["cleared"] : [e.state || e.op];
    if (e.until) what.push(" until ", stamp(e.until));
    const li = el("li", { testid: "attention-history-entry", "data-op": e.op, "data-state": e.state || "" },
      stamp(e.at), " · ", el("code", {}, e.by || "—"), " · ", el("strong", {}, ...what));
    if (e.reason) li.append(" — ", e.reason);
    ol.append(li);
  }
  return ol;
}

// A button that shows and hides a panel, and says which (aria-expanded).
function disclosure(label, testid, name, panel, onOpen) {
  const b = el("button", { type: "button", testid, "aria-expanded": "false", "aria-controls": panel.id, "aria-label": label + ": " + name }, label);
  b.addEventListener("click", () => {
    const open = panel.hidden;
    b.setAttribute("aria-expanded", String(open));
    panel.hidden = !open;
    if (open) onOpen();
  });
  return b;
}

// Kind, title, since, detail and, when there is one, the disposition.
function itemHead(it) {
  const title = it.link ? el("a", { href: it.link }, it.title) : el("strong", {}, it.title);
  const head = el("p", {}, el("span", { className: "badge" }, it.kind || "item"), " ");
  if (it.hidden) head.append(el("span", { className: "badge", testid: "attention-hidden-badge" }, "hidden"), " ");
  head.append(title);
  if (it.since) head.append(" · since ", stamp(it.since));
  const parts = [head, el("p", { className: "muted" }, it.detail || "")];
  if (it.disposition) parts.push(dispositionView(it.disposition, it.hidden));
  return parts;
}

// The API's field errors next to their controls (`fields`: path → input); any other
// refusal in the item's result line.
function fieldErrors(fields, out) {
  return {
    clear() {
      for (const input of Object.values(fields)) {
        const p = document.getElementById(input.id + "-error");
        if (p) p.remove();
        input.removeAttribute("aria-invalid");
        const described = (input.getAttribute("aria-describedby") || "").split(" ")
          .filter((id) => id && id !== input.id + "-error").join(" ");
        if (described) input.setAttribute("aria-describedby", described);
        else input.removeAttribute("aria-describedby");
      }
      out.textContent = "";
    },
    show(r) {
      let first = null;
      for (const e of (r.data && r.data.errors) || []) {
        const input = fields[e.path];
        if (!input) continue;
        const p = el("p", { className: "field-error", id: input.id + "-error", role: "alert", testid: "attention-error-" + e.path }, e.reason);
        input.closest(".actions").append(p);
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", ((input.getAttribute("aria-describedby") || "") + " " + p.id).trim());
        first = first || input;
      }
      if (first) first.focus();
      else out.textContent = failure(r);
    },
  };
}

// The snooze form: an "until" in the viewer's zone, presets, and the confirming button.
function snoozePanel(key, it, submit) {
  const until = el("input", { type: "datetime-local", id: key + "-until", name: "until", testid: "attention-snooze-until", "aria-describedby": key + "-zone" });
  const presets = el("span", { className: "actions", role: "group", "aria-label": "Quick picks" });
  for (const [label, ms, testid] of PRESETS) {
    const b = el("button", { type: "button", testid }, label);
    b.addEventListener("click", () => {
      // Rounded up to the minute, since datetime-local shows minutes.
      until.value = toLocalInput(Math.ceil((Date.now() + ms) / 60000) * 60000);
      until.focus();
    });
    presets.append(b);
  }
  const go = el("button", { type: "submit", testid: "attention-snooze", "aria-label": "Snooze: " + it.title }, "Snooze");
  const form = el("form", { id: key + "-snooze", className: "att-panel", noValidate: true, "aria-label": "Snooze " + it.title },
    el("div", { className: "actions" },
      el("label", { htmlFor: until.id }, "Until"), until,
      el("span", { id: key + "-zone", className: "help" }, "your time (" + ZONE + ")")),
    el("div", { className: "actions" }, presets, go));
  form.hidden = true;
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    // Empty: sent without one, so that the API says it is required.
    const instant = until.value ? fromLocalInput(until.value) : undefined;
    submit(go, instant, until.value ? LOCAL.format(new Date(until.value)) : "");
  });
  const toggle = disclosure("Snooze…", "attention-snooze-toggle", it.title, form, () => until.focus());
  return { toggle, form, until };
}

// The item's ledger, read again at every opening (it only grows).
function historyPanel(key, it, api) {
  const panel = el("div", { id: key + "-history", className: "att-panel", role: "region", "aria-label": "History of " + it.title, testid: "attention-history" });
  panel.hidden = true;
  const toggle = disclosure("History", "attention-history-toggle", it.title, panel, async () => {
    panel.dataset.state = "loading";
    panel.textContent = "Loading…";
    try {
      const data = await load(api + "/history");
      panel.textContent = "";
      panel.append(historyView(data.history || []));
      panel.dataset.state = "loaded";
    } catch (e) {
      panel.textContent = "Could not load the history: " + e.message;
      panel.dataset.state = "failed";
    }
  });
  return { toggle, panel };
}

// Whether this session may decide on items (an operator's); a viewer reads the queue
// and each item's history (the app refuses a viewer's decision anyway).
function decides() {
  return document.getElementById("attention")?.dataset.decides === "true";
}

function itemView(it, page) {
  const key = "att-" + it.id.replace(/[^A-Za-z0-9_-]/g, "_");
  const api = API + "/" + encodeURIComponent(it.id);
  const li = el("li", {
    className: "att-item" + (it.hidden ? " att-hidden" : ""), tabIndex: -1,
    testid: "attention-item", "data-id": it.id, "data-hidden": String(Boolean(it.hidden)),
  }, ...itemHead(it));
  const out = el("p", { className: "action-result", role: "status", testid: "attention-result" });
  const reason = el("input", { id: key + "-reason", name: "reason", placeholder: "why, for the history", testid: "attention-reason", maxLength: 2000 });

  // One write, then the list again (it changes what is hidden, and every revision).
  let errors = null;
  async function write(button, method, body, done) {
    errors.clear();
    button.disabled = true;
    try {
      const r = await call(method, api, body);
      if (!r.ok) return errors.show(r);
      page.say(done);
      await page.reload(it.id);
    } catch (_) {
      out.textContent = "the app could not be reached";
    } finally {
      button.disabled = false;
    }
  }
  function decision(state) {
    const body = { state, reason: reason.value.trim() || state + " in the cockpit" };
    if (it.revision) body.revision = it.revision;
    return body;
  }

  const ledger = historyPanel(key, it, api);
  if (!decides()) {
    li.append(el("div", { className: "actions" }, ledger.toggle), ledger.panel);
    return li;
  }
  const buttons = el("div", { className: "actions" });
  for (const [state, label, testid] of DISPOSE) {
    // Every item has the same buttons: name the item for screen readers.
    const b = el("button", { type: "button", testid, "aria-label": label + ": " + it.title }, label);
    b.addEventListener("click", () => write(b, "PUT", decision(state), state + ": " + it.title));
    buttons.append(b);
  }
  const snooze = snoozePanel(key, it, (button, until, local) => {
    const body = decision("snoozed");
    if (until !== undefined) body.until = until;
    write(button, "PUT", body, "snoozed: " + it.title + (local ? " until " + local : ""));
  });
  errors = fieldErrors({ reason, until: snooze.until }, out);
  buttons.append(snooze.toggle, ledger.toggle);
  if (it.hidden) {
    // Clearing returns the item to the queue; a typed reason goes into the ledger.
    const clear = el("button", { type: "button", className: "danger", testid: "attention-clear", "aria-label": "Clear the disposition: " + it.title }, "Clear");
    clear.addEventListener("click", () => {
      const body = reason.value.trim() ? { reason: reason.value.trim() } : {};
      write(clear, "DELETE", body, "cleared: " + it.title + " is back in the queue");
    });
    buttons.append(clear);
  }
  li.append(el("div", { className: "actions" }, el("label", { htmlFor: reason.id }, "Reason ", el("span", { className: "muted" }, "(optional)")), reason),
    buttons, snooze.form, ledger.panel, out);
  return li;
}

// The list, the empty state and the hidden count from one answer of the API.
function render(box, count, data, all, page) {
  const listed = data.items || [];
  box.textContent = "";
  if (!listed.some((it) => !it.hidden)) {
    const words = all && listed.length === 0 ? "Nothing needs attention, and nothing is hidden." : "Nothing needs attention.";
    box.append(el("p", { className: "empty", testid: "attention-empty" }, words));
  }
  const views = [];
  for (const group of groupsOf(listed)) {
    const list = el("ul", { className: "attention" });
    for (const it of group.items) {
      const view = itemView(it, page);
      list.append(view);
      views.push(view);
    }
    box.append(groupView(group, list, page));
  }
  document.dispatchEvent(new CustomEvent("studio:attention-count", { detail: listed.filter((it) => !it.hidden).length }));
  const hidden = data.hidden || 0;
  count.textContent = hidden === 0 ? "Nothing hidden" : hidden + " hidden";
  count.dataset.count = String(hidden);
  return views;
}

// Items by the schedule they are about, in the order the queue lists them (an item
// about no known schedule is a group of its own).
function groupsOf(items) {
  const groups = new Map();
  for (const it of items) {
    const s = it.schedule || {};
    const key = s.id || (s.name ? "name:" + s.name : it.id);
    if (!groups.has(key)) groups.set(key, { key, id: s.id, name: s.name || it.title, items: [] });
    groups.get(key).items.push(it);
  }
  return [...groups.values()];
}

// A schedule's items under its name, with one action that covers the ones still listed:
// acknowledge them all (each keeps its own buttons for anything else).
function groupView(group, list, page) {
  const open = group.items.filter((it) => !it.hidden);
  const name = group.id ? el("a", { href: "/schedules/" + encodeURIComponent(group.id) }, group.name) : group.name;
  const n = group.items.length;
  const head = el("div", { className: "att-group-head" },
    el("h2", {}, name, el("span", { className: "muted" }, " · " + n + (n === 1 ? " item" : " items"))));
  if (open.length > 1 && decides()) {
    const out = el("span", { className: "action-result", role: "status" });
    const all = el("button", { type: "button", testid: "attention-group-ack", "aria-label": "Acknowledge all " + open.length + ": " + group.name }, "Acknowledge all " + open.length);
    all.addEventListener("click", async () => {
      all.disabled = true;
      try {
        for (const it of open) {
          const body = { state: "acknowledged", reason: "acknowledged with its schedule's items in the cockpit" };
          if (it.revision) body.revision = it.revision;
          const r = await call("PUT", API + "/" + encodeURIComponent(it.id), body);
          if (!r.ok) { out.textContent = it.title + ": " + failure(r); return; }
        }
        page.say("acknowledged: " + open.length + " items of " + group.name);
        await page.reload();
      } catch (_) {
        out.textContent = "the app could not be reached";
      } finally {
        all.disabled = false;
      }
    });
    head.append(el("div", { className: "actions" }, all, out));
  }
  return el("section", { className: "att-group", testid: "attention-group", "data-key": group.key, "aria-label": group.name }, head, list);
}

function wireAttention() {
  const box = document.getElementById("attention");
  if (!box) return;
  const toggle = document.getElementById("attention-show-hidden");
  const count = document.getElementById("attention-hidden-count");
  const status = document.getElementById("attention-status");
  let all = new URLSearchParams(window.location.search).get("all") === "true";
  toggle.checked = all;
  document.getElementById("attention-bar").hidden = false;
  let seq = 0;

  const page = {
    say(text) { status.textContent = text; },

    // Loads and renders the queue. When focus was in the list it returns to the item it
    // was on, or to the one now in its place, so a keyboard user keeps their position.
    async reload(focusId) {
      const mine = ++seq;
      box.dataset.state = "loading";
      box.setAttribute("aria-busy", "true");
      const before = [...box.querySelectorAll("[data-testid=attention-item]")];
      const at = before.findIndex((li) => li.dataset.id === focusId || li.contains(document.activeElement));
      let data;
      try {
        data = await load(API + (all ? "?all=true" : ""));
      } catch (e) {
        data = e;
      }
      if (mine !== seq) return; // a newer reload owns the list
      box.removeAttribute("aria-busy");
      if (data instanceof Error) {
        box.dataset.state = "failed";
        box.textContent = "Could not load the attention queue: " + data.message;
        return;
      }
      const now = render(box, count, data, all, page);
      box.dataset.all = String(all);
      box.dataset.state = "loaded";
      if (at >= 0) {
        const target = now.find((li) => li.dataset.id === focusId) || now[Math.min(at, now.length - 1)];
        (target || document.getElementById("attention-title")).focus();
      }
    },
  };

  toggle.addEventListener("change", () => {
    all = toggle.checked;
    // The address keeps the choice, so that a reload shows the same view.
    const url = new URL(window.location.href);
    if (all) url.searchParams.set("all", "true");
    else url.searchParams.delete("all");
    window.history.replaceState(window.history.state, "", url);
    page.say(all ? "Showing hidden items." : "Hidden items are not shown.");
    page.reload();
  });
  page.reload();
}

wireAttention();
