// Studio cockpit: the live parts of server-rendered pages. Every page works without this
// file except the actions (they need a JSON request, which is the CSRF defence) and the
// log view's live tail.
const DECISION_KEY = "studio.decision_token";
const CHUNK = 64 * 1024;
const POLL_MS = 2000;

// Times: the server prints UTC; show the viewer's zone, keep UTC in the title.
function localizeTimes(root) {
  const fmt = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit",
  });
  for (const t of root.querySelectorAll("time[data-local]")) {
    const d = new Date(t.getAttribute("datetime"));
    if (!isNaN(d)) t.textContent = fmt.format(d);
  }
}

async function call(method, url, body) {
  const headers = { Accept: "application/json", "Content-Type": "application/json" };
  const decision = sessionStorage.getItem(DECISION_KEY);
  if (decision) headers["x-studio-decision-token"] = decision;
  const res = await fetch(url, {
    method, headers, credentials: "same-origin", cache: "no-store",
    body: JSON.stringify(body === undefined ? {} : body),
  });
  let data = null;
  try { data = await res.json(); } catch (_) { data = null; }
  return { ok: res.ok, status: res.status, data };
}

// Buttons with data-action: a confirmed JSON request, then a reload or a new page.
// The daemon's event streams this page opened. A page left for another closes them (a
// page kept for the back button would otherwise hold its connection, and a browser
// allows few per host); one shown again from that cache reloads for fresh data.
const streams = [];
function stream() {
  const es = new EventSource("/api/events");
  streams.push(es);
  return es;
}
window.addEventListener("pagehide", () => { for (const es of streams) es.close(); });
window.addEventListener("pageshow", (e) => { if (e.persisted && streams.length) window.location.reload(); });

// After an action that ends a run, wait (up to 30 s) until its status says it ended.
async function settle(url) {
  for (let i = 0; i < 60; i++) {
    try {
      const res = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      const d = await res.json();
      if (res.ok && d.status && d.status !== "queued" && d.status !== "running") return;
    } catch (_) { /* tried again below */ }
    await new Promise((r) => setTimeout(r, 500));
  }
}

// One listener for every action button, those a live region brings in included.
function wireActions() {
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-action]");
    if (!b || b.disabled) return;
    if (b.dataset.confirm && !window.confirm(b.dataset.confirm)) return;
    const out = b.closest(".actions, main").querySelector(".action-result");
    b.disabled = true;
    try {
      const r = await call(b.dataset.action, b.dataset.url);
      if (!r.ok) {
        if (out) out.textContent = (r.data && r.data.message) || "failed (HTTP " + r.status + ")";
        return;
      }
      const then = b.dataset.then;
      if (then === "settle" && b.dataset.watch) {
        if (out) out.textContent = "stopping…";
        await settle(b.dataset.watch);
        window.location.reload();
      } else if (then === "run" && r.data && r.data.id) window.location.assign("/runs/" + encodeURIComponent(r.data.id));
      else if (then && then.startsWith("/")) window.location.assign(then);
      else window.location.reload();
    } catch (_) {
      if (out) out.textContent = "the app could not be reached";
    } finally {
      b.disabled = false;
    }
  });
}

// The log view: the last chunk first, "load earlier" for the rest, a tail while running.
function wireLog() {
  const view = document.getElementById("log");
  if (!view) return;
  const run = view.dataset.run;
  const text = document.getElementById("log-text");
  const earlier = document.getElementById("log-earlier");
  const state = document.getElementById("log-state");
  let active = view.dataset.active === "true";
  let s = null;

  async function range(stream, offset, limit) {
    const url = "/api/runs/" + encodeURIComponent(run) + "/log?stream=" + stream +
      "&offset=" + offset + "&limit=" + limit;
    const res = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    if (!res.ok) throw new Error("HTTP " + res.status);
    const size = Number(res.headers.get("x-studio-log-size") || "0");
    return { bytes: new Uint8Array(await res.arrayBuffer()), size };
  }

  // The log as numbered lines (`#L12` links to one); the unfinished last line waits in
  // `carry`. Numbers count from the first byte shown: from the log's start once it is
  // loaded (a log up to one chunk, or an address naming a line, loads from the start).
  const lines = { count: 0, carry: "", partial: null };
  function lineEl(body, n) {
    const line = document.createElement("span");
    line.className = "ln";
    line.id = "L" + n;
    line.dataset.n = String(n);
    line.textContent = body;
    return line;
  }
  function append(str) {
    const parts = (lines.carry + str).split("\n");
    lines.carry = parts.pop();
    const frag = document.createDocumentFragment();
    for (const p of parts) frag.append(lineEl(p + "\n", ++lines.count));
    if (lines.partial) lines.partial.remove();
    lines.partial = lines.carry ? lineEl(lines.carry, lines.count + 1) : null;
    if (lines.partial) frag.append(lines.partial);
    text.append(frag);
    if (find.value) highlight(false);
  }
  function reset(str) {
    text.textContent = "";
    Object.assign(lines, { count: 0, carry: "", partial: null });
    append(str);
  }
  // A line number is a link to that line: the address keeps it, the line is marked.
  text.addEventListener("click", (ev) => {
    const line = ev.target.closest && ev.target.closest(".ln");
    if (!line || ev.offsetX > (parseFloat(getComputedStyle(line).paddingLeft) || 0)) return;
    history.replaceState(null, "", "#" + line.id);
    mark(line);
  });
  function mark(line) {
    for (const m of text.querySelectorAll(".ln.marked")) m.classList.remove("marked");
    line.classList.add("marked");
    line.scrollIntoView({ block: "center" });
  }

  // Search: the lines that contain the text (any case) are marked, Enter goes to the
  // next one.
  const find = document.getElementById("log-find");
  const found = document.getElementById("log-found");
  let hitAt = -1;
  function highlight(jump) {
    const q = find.value.toLowerCase();
    const hits = [];
    for (const line of text.querySelectorAll(".ln")) {
      const hit = q !== "" && line.textContent.toLowerCase().includes(q);
      line.classList.toggle("hit", hit);
      if (hit) hits.push(line);
    }
    found.textContent = q === "" ? "" : hits.length === 1 ? "1 line" : hits.length + " lines";
    if (jump && hits.length) {
      hitAt = (hitAt + 1) % hits.length;
      hits[hitAt].scrollIntoView({ block: "center" });
    }
  }
  find.addEventListener("input", () => { hitAt = -1; highlight(true); });
  find.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter") { ev.preventDefault(); highlight(true); }
  });

  const newOutput = document.getElementById("log-new");
  const wrap = document.getElementById("log-wrap");
  const raw = document.getElementById("log-raw");
  const download = document.getElementById("log-download");
  // Whether the reader is at the end of the log (then new output keeps them there).
  const atBottom = () => text.scrollHeight - text.scrollTop - text.clientHeight < 8;

  async function open(stream) {
    for (const a of view.querySelectorAll("[data-stream]")) {
      a.setAttribute("aria-pressed", String(a.dataset.stream === stream));
    }
    // The stream is part of the page's address, so a link or a reload keeps it.
    const url = new URL(location.href);
    url.searchParams.set("stream", stream);
    history.replaceState(null, "", url);
    const rawUrl = "/api/runs/" + encodeURIComponent(run) + "/log?stream=" + stream;
    raw.href = rawUrl;
    download.href = rawUrl;
    download.setAttribute("download", run.slice(-8) + "-" + stream + ".log");
    const known = Number(view.dataset[stream + "Bytes"] || "0");
    const wanted = /^#L\d+$/.test(location.hash);
    const start = wanted ? 0 : Math.max(0, known - CHUNK);
    s = { stream, start, end: start, decoder: new TextDecoder() };
    reset("");
    newOutput.hidden = true;
    await more(s);
    const line = wanted && document.getElementById(location.hash.slice(1));
    if (line) mark(line);
    else text.scrollTop = text.scrollHeight;
  }

  async function more(cur) {
    try {
      const r = await range(cur.stream, cur.end, CHUNK * 4);
      if (cur !== s) return;
      if (r.bytes.length) {
        const follow = atBottom();
        append(cur.decoder.decode(r.bytes, { stream: active }));
        if (follow) text.scrollTop = text.scrollHeight;
        else newOutput.hidden = false;
      }
      cur.end += r.bytes.length;
      earlier.hidden = cur.start === 0;
      view.dataset[cur.stream + "Bytes"] = String(r.size);
      const tab = view.querySelector(`[data-stream="${cur.stream}"]`);
      if (tab) tab.textContent = cur.stream + " (" + r.size + " B)";
      state.textContent = (active ? "live · " : "") + cur.end + " of " + r.size + " bytes";
      if (r.size > cur.end) return more(cur);
    } catch (e) {
      state.textContent = "log unavailable: " + e.message;
    }
  }

  newOutput.addEventListener("click", () => {
    text.scrollTop = text.scrollHeight;
    newOutput.hidden = true;
  });
  text.addEventListener("scroll", () => { if (atBottom()) newOutput.hidden = true; });
  wrap.addEventListener("change", () => text.classList.toggle("nowrap", !wrap.checked));

  earlier.addEventListener("click", async () => {
    const cur = s;
    const from = Math.max(0, cur.start - CHUNK);
    const r = await range(cur.stream, from, cur.start - from);
    const shown = [...text.querySelectorAll(".ln")].map((l) => l.textContent).join("");
    reset(new TextDecoder().decode(r.bytes) + shown);
    cur.start = from;
    earlier.hidden = from === 0;
  });
  for (const a of view.querySelectorAll("[data-stream]")) {
    a.addEventListener("click", (ev) => { ev.preventDefault(); open(a.dataset.stream); });
  }
  // The address's stream, else (a failed run) the one that says why.
  const asked = new URL(location.href).searchParams.get("stream");
  open(asked === "stderr" || asked === "stdout" ? asked : (view.dataset.open === "stderr" ? "stderr" : "stdout"));

  if (!active) return;
  tickDuration();
  const ticking = setInterval(tickDuration, 1000);
  // The tail polls the log; the status polls too, in case the end came before the
  // event stream connected.
  const timer = setInterval(async () => {
    if (s) await more(s);
    try {
      const res = await fetch("/api/runs/" + encodeURIComponent(run), { credentials: "same-origin", cache: "no-store" });
      const d = await res.json();
      if (res.ok && d.status) finish(d.status);
    } catch (_) { /* the banner reports an unreachable app */ }
  }, POLL_MS);
  // Status over server-sent events: when the run ends, read the rest and reload once.
  const events = stream();
  events.addEventListener("run", async (ev) => {
    let d;
    try { d = JSON.parse(ev.data); } catch (_) { return; }
    const id = d.id || (d.run && d.run.id);
    const status = d.status || (d.run && d.run.status);
    if (id === run && status) finish(status);
  });
  let ended = false;
  async function finish(status) {
    document.getElementById("run-status").textContent = status;
    if (ended || status === "queued" || status === "running") return;
    ended = true;
    active = false;
    clearInterval(timer);
    clearInterval(ticking);
    events.close();
    await more(s);
    window.location.reload();
  }
}

// The schedule form: JSON out, field errors next to their fields, a live preview.
// Each entry maps an API `errors[].path` to the `data-field` of the box that shows it; a
// third `true` names the path in the message (an env key or a secret's variable, a step
// deeper in a chain).
const FIELD_OF = [
  [/^name/, "name"], [/^description/, "description"],
  [/^trigger\.cron\.timezone/, "timezone"], [/^trigger\.cron/, "cron"],
  [/^trigger\.every/, "every"], [/^trigger\.at/, "at"], [/^trigger/, "trigger"],
  [/^action\.executable/, "executable"], [/^action\.args/, "args"],
  [/^action\.prompt/, "prompt"], [/^action\.model/, "model"], [/^action\.profile/, "profile"], [/^action/, "action"], [/^cwd/, "cwd"], [/^target/, "target"], [/^enabled/, "enabled"],
  [/^env\./, "env", true], [/^env/, "env"],
  [/^secrets\./, "secrets", true], [/^secrets/, "secrets"],
  [/^policies\.approval\.expires_after/, "approval-expires-after"], [/^policies\.approval/, "approval-required"],
  [/^policies\.missed_fire/, "missed-fire"], [/^policies\.overlap/, "overlap"], [/^policies\.on_daemon_loss/, "on-daemon-loss"],
  [/^policies\.max_runs/, "max-runs"], [/^policies\.deadline/, "deadline"], [/^policies\.budget_usd/, "budget-usd"],
  [/^policies\.rate_limit\.window_seconds/, "window-seconds"], [/^policies\.rate_limit/, "max-fires"],
  ...["on_success", "on_fail"].flatMap((key) => {
    const slug = key.replace("_", "-");
    return [
      ...["executable", "args", "prompt", "model", "profile"]
        .map((f) => [new RegExp("^" + key + "\\.action\\." + f), slug + "-" + f]),
      [new RegExp("^" + key + "$"), slug], [new RegExp("^" + key), slug, true],
    ];
  }),
];

function fieldOf(path) {
  const hit = FIELD_OF.find(([re]) => re.test(path || ""));
  return hit ? { field: hit[1], named: hit[2] === true } : { field: "form", named: false };
}

// The keys the API replaces whole in a PATCH (each is exactly one variant).
const WHOLE = ["trigger", "action", "on_success", "on_fail"];

const isObject = (x) => x !== null && typeof x === "object" && !Array.isArray(x);

// An RFC 7396 merge patch from `before` to `after`: changed keys only, `null` for a
// removed one, nested objects patched key by key unless their key is in `whole`.
function mergePatch(before, after, whole) {
  const out = [];
  for (const k of Object.keys(before)) if (!Object.hasOwn(after, k)) out.push([k, null]);
  for (const [k, now] of Object.entries(after)) {
    const was = Object.hasOwn(before, k) ? before[k] : undefined;
    if (JSON.stringify(was) === JSON.stringify(now)) continue;
    out.push([k, isObject(was) && isObject(now) && !whole.includes(k) ? mergePatch(was, now, []) : now]);
  }
  // fromEntries, not assignment: an env key may be any name, `__proto__` included.
  return Object.fromEntries(out);
}

// A number when the text is one, else the text as it is, for the API to refuse at its path.
function numberOr(text) {
  return /^-?\d+(\.\d+)?([eE][-+]?\d+)?$/.test(text) ? Number(text) : text;
}

// `KEY=VALUE` lines (`shape` names them in a problem): the pairs, and the lines that are
// not one. A value is kept as typed unless `trim` (a secret's name has no spaces).
function pairLines(text, shape, trim) {
  const pairs = new Map();
  const problems = [];
  text.split("\n").forEach((line, i) => {
    const l = line.replace(/\r$/, "");
    if (l.trim() === "") return;
    const eq = l.indexOf("=");
    const key = eq < 0 ? "" : l.slice(0, eq).trim();
    if (key === "") problems.push("line " + (i + 1) + " is not " + shape);
    else if (pairs.has(key)) problems.push(key + " is given twice");
    else pairs.set(key, trim ? l.slice(eq + 1).trim() : l.slice(eq + 1));
  });
  return { pairs: Object.fromEntries(pairs), problems };
}
const envLines = (text) => pairLines(text, "KEY=VALUE", false);
// The secrets a job receives: its variable, and the name of the secret.
const secretLines = (text) => pairLines(text, "VARIABLE=secret-name", true);

// A control's value now, or as the server rendered it (the stored spec).
const NOW = (el) => el.value;
const RENDERED = (el) => (el.tagName === "SELECT"
  ? (Array.from(el.options).find((o) => o.defaultSelected) || el.options[0] || { value: "" }).value
  : el.defaultValue);
// Whether a checkbox is ticked now (`read` NOW), or was as the server rendered it.
const ticked = (read, el) => Boolean(el) && (read === RENDERED ? el.defaultChecked : el.checked);

// An instant on the wall clock of an IANA zone: "Wed 2 Dec 2026, 09:00" (seconds only
// when a fire has them).
function wallClock(date, zone) {
  const parts = {};
  for (const p of new Intl.DateTimeFormat("en-GB", {
    timeZone: zone, weekday: "short", day: "numeric", month: "short", year: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
  }).formatToParts(date)) parts[p.type] = p.value;
  const seconds = parts.second === "00" ? "" : ":" + parts.second;
  return parts.weekday + " " + parts.day + " " + parts.month + " " + parts.year + ", " +
    parts.hour + ":" + parts.minute + seconds;
}

// One previewed fire: in the schedule's zone, named, with the viewer's time beside it
// when that reads differently; a trigger without a zone (every, at) in the viewer's own,
// named too. `fire` is RFC 3339 with the zone's offset, as the daemon sends it.
function fireItem(fire, zone) {
  const date = new Date(fire);
  const viewer = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const li = document.createElement("li");
  const t = document.createElement("time");
  t.setAttribute("datetime", fire);
  t.dataset.testid = "preview-fire";
  t.title = date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
  li.append(t);
  if (!zone) {
    t.textContent = wallClock(date, viewer) + " " + viewer + " (your time zone)";
    return li;
  }
  let there;
  try {
    there = wallClock(date, zone);
  } catch (_) {
    // A zone the daemon knows and this browser does not: its wall clock, from the offset.
    there = fire.slice(0, 16).replace("T", " ");
  }
  t.textContent = there + " " + zone;
  const here = wallClock(date, viewer);
  if (here !== there) {
    const mine = document.createElement("span");
    mine.className = "muted";
    mine.dataset.testid = "preview-fire-local";
    mine.textContent = " (your time: " + here + " " + viewer + ")";
    li.append(mine);
  }
  return li;
}

function wireForm() {
  const form = document.getElementById("schedule-form");
  if (!form) return;
  const reader = (read) => (name) => (form.elements[name] ? read(form.elements[name]).trim() : "");
  const v = reader(NOW);

  function trigger(val) {
    const kind = val("trigger_kind");
    if (kind === "every") return { every: val("every") };
    if (kind === "at") return { at: val("at") };
    const cron = { expression: val("cron") };
    if (val("timezone")) cron.timezone = val("timezone");
    return { cron };
  }

  // The schedule's action (prefix "") or a follow-up's (prefix "on_fail_").
  function action(val, kind, prefix) {
    if (kind === "agent") {
      // The whole action is replaced on save, so model and profile travel with it.
      const agent = { kind: "agent", prompt: val(prefix + "prompt") };
      if (val(prefix + "model")) agent.model = val(prefix + "model");
      if (val(prefix + "profile")) agent.profile = val(prefix + "profile");
      return agent;
    }
    const args = val(prefix + "args").split("\n").map((a) => a.trim()).filter((a) => a !== "");
    return { kind: "command", executable: val(prefix + "executable"), args };
  }

  // Empty means the default, which the spec leaves out.
  function policies(val, read) {
    const p = {};
    if (val("missed_fire")) p.missed_fire = val("missed_fire");
    if (val("overlap")) p.overlap = val("overlap");
    if (val("on_daemon_loss")) p.on_daemon_loss = val("on_daemon_loss");
    for (const k of ["max_runs", "deadline", "budget_usd"]) if (val(k)) p[k] = numberOr(val(k));
    if (val("max_fires") || val("window_seconds")) {
      p.rate_limit = { max_fires: numberOr(val("max_fires")), window_seconds: numberOr(val("window_seconds")) };
    }
    // Only while its box is ticked: a schedule without the policy gains none, and one
    // stored switched off stays as stored.
    if (ticked(read, form.elements.approval_required)) {
      p.approval = { required: true, distinct_from_requester: ticked(read, form.elements.approval_distinct) };
      if (val("approval_expires_after")) p.approval.expires_after = val("approval_expires_after");
    }
    return p;
  }

  function followUp(val, key) {
    const kind = val(key + "_kind");
    if (!kind) return null;
    const node = { action: action(val, kind, key + "_") };
    // What chains on from the follow-up is not edited here: it travels along unchanged.
    const box = form.querySelector('[data-follow-up="' + key + '"]');
    if (box && box.dataset.chain) Object.assign(node, JSON.parse(box.dataset.chain));
    return node;
  }

  // The spec the form describes, read through `read` (NOW or RENDERED).
  function specOf(read) {
    const val = reader(read);
    const spec = { name: val("name") };
    if (val("description")) spec.description = val("description");
    spec.trigger = trigger(val);
    spec.action = action(val, val("action_kind"), "");
    if (val("cwd")) spec.cwd = val("cwd");
    const labels = (val("target") || "").split(",").map((l) => l.trim()).filter((l) => l);
    if (labels.length > 0) spec.target = { labels };
    const env = envLines(form.elements.env ? read(form.elements.env) : "").pairs;
    if (Object.keys(env).length > 0) spec.env = env;
    const secrets = secretLines(form.elements.secrets ? read(form.elements.secrets) : "").pairs;
    if (Object.keys(secrets).length > 0) spec.secrets = secrets;
    const p = policies(val, read);
    if (Object.keys(p).length > 0) spec.policies = p;
    for (const key of ["on_success", "on_fail"]) {
      const node = followUp(val, key);
      if (node) spec[key] = node;
    }
    return spec;
  }

  // What the API cannot say for us: it never sees the env or secrets text or a half rate
  // limit.
  function localErrors() {
    const errors = [
      ...envLines(form.elements.env.value).problems.map((reason) => ({ path: "env", reason })),
      ...secretLines(form.elements.secrets.value).problems.map((reason) => ({ path: "secrets", reason })),
    ];
    const fires = v("max_fires");
    const secs = v("window_seconds");
    if (!fires !== !secs) {
      errors.push({
        path: "policies.rate_limit." + (fires ? "window_seconds" : "max_fires"),
        reason: "give both, or neither for no rate limit",
      });
    }
    return errors;
  }

  // Only the chosen trigger's and action's fields are shown.
  function showKinds() {
    for (const el of form.querySelectorAll("[data-kind]")) el.hidden = el.dataset.kind !== v("trigger_kind");
    for (const el of form.querySelectorAll("[data-action-kind]")) el.hidden = el.dataset.actionKind !== v("action_kind");
    for (const el of form.querySelectorAll("[data-when]")) {
      const [name, value] = el.dataset.when.split("=");
      el.hidden = v(name) !== value;
    }
    for (const el of form.querySelectorAll("[data-when-checked]")) {
      el.hidden = !ticked(NOW, form.elements[el.dataset.whenChecked]);
    }
  }

  function clearErrors(scope) {
    for (const el of form.querySelectorAll(".field-error" + (scope ? "[data-scope=" + scope + "]" : ""))) {
      const input = el.closest(".field") && el.closest(".field").querySelector("input, select, textarea");
      if (input) {
        input.removeAttribute("aria-invalid");
        const rest = (input.getAttribute("aria-describedby") || "").split(" ").filter((id) => id && id !== el.id);
        if (rest.length > 0) input.setAttribute("aria-describedby", rest.join(" "));
        else input.removeAttribute("aria-describedby");
      }
      el.remove();
    }
    const general = form.querySelector('[data-error-for="form"]');
    if (!scope) { general.hidden = true; general.textContent = ""; }
  }

  function showErrors(errors, scope) {
    for (const e of errors) {
      const { field, named } = fieldOf(e.path);
      const text = (named ? e.path + ": " : "") + e.reason;
      const box = form.querySelector('.field[data-field="' + field + '"]');
      if (!box || field === "form") {
        const general = form.querySelector('[data-error-for="form"]');
        general.hidden = false;
        general.textContent += (e.path ? e.path + ": " : "") + e.reason + " ";
        continue;
      }
      // An error in the closed "Advanced" section opens it, so that it can be seen.
      const details = box.closest("details");
      if (details) details.open = true;
      const id = "error-" + field + "-" + scope;
      const known = document.getElementById(id);
      if (known) { known.textContent += "; " + text; continue; }
      const p = document.createElement("p");
      p.className = "field-error";
      p.id = id;
      p.dataset.testid = "error-" + field;
      p.dataset.scope = scope;
      p.setAttribute("role", "alert");
      p.textContent = text;
      box.append(p);
      const input = box.querySelector("input, select, textarea");
      if (input) {
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", ((input.getAttribute("aria-describedby") || "") + " " + p.id).trim());
      }
    }
  }

  // A field is judged once it has been typed in, or the form submitted: a new form does
  // not open with errors for what nobody has entered yet.
  const touched = new Set();
  let submitted = false;
  for (const type of ["input", "change"]) {
    form.addEventListener(type, (ev) => {
      const box = ev.target.closest && ev.target.closest(".field");
      if (box) touched.add(box.dataset.field);
    });
  }
  function judged(error) {
    const { field } = fieldOf(error.path);
    const boxless = field === "form" || field === "trigger";
    return submitted || touched.has(field) || (boxless && touched.size > 0);
  }

  // The preview region is busy from a change until the answer to the latest one is shown;
  // an answer overtaken by a newer request is dropped.
  const section = document.getElementById("preview");
  let previewTimer = null;
  let previewSeq = 0;
  async function preview() {
    const seq = ++previewSeq;
    previewTimer = null;
    const list = document.getElementById("preview-list");
    const words = document.getElementById("cron-words");
    section.setAttribute("aria-busy", "true");
    try {
      const r = await call("POST", "/api/schedules/preview", { trigger: trigger(v), count: 5 });
      if (seq !== previewSeq) return;
      clearErrors("preview");
      list.textContent = "";
      words.textContent = "";
      if (!r.ok) {
        const errors = ((r.data && r.data.errors) || []).filter(judged);
        if (errors.length > 0) showErrors(errors, "preview");
        else list.textContent = "The next fires show here once the trigger is complete.";
        return;
      }
      words.textContent = r.data.description || "";
      for (const f of r.data.fires || []) list.append(fireItem(f, r.data.timezone));
      if ((r.data.fires || []).length === 0) list.textContent = "No future fires.";
    } catch (_) {
      if (seq !== previewSeq) return;
      list.textContent = "Preview unavailable.";
      words.textContent = "";
    } finally {
      if (seq === previewSeq && previewTimer === null) section.setAttribute("aria-busy", "false");
    }
  }
  function schedulePreview() {
    clearTimeout(previewTimer);
    section.setAttribute("aria-busy", "true");
    previewTimer = setTimeout(preview, 300);
  }
  for (const name of ["trigger_kind", "cron", "timezone", "every", "at"]) {
    form.elements[name].addEventListener("input", schedulePreview);
    form.elements[name].addEventListener("change", schedulePreview);
  }
  for (const name of ["trigger_kind", "action_kind", "on_success_kind", "on_fail_kind", "approval_required"]) {
    form.elements[name].addEventListener("change", showKinds);
  }
  showKinds();
  preview();

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    submitted = true;
    clearErrors();
    const submit = form.querySelector('[type="submit"]');
    const local = localErrors();
    if (local.length > 0) {
      showErrors(local, "submit");
      const first = form.querySelector("[aria-invalid=true]");
      if (first) first.focus();
      return;
    }
    let body = specOf(NOW);
    if (form.dataset.method === "POST") {
      body.enabled = form.elements.enabled ? form.elements.enabled.checked : true;
    } else {
      // Only what changed is sent, so whatever was not touched stays as stored, byte for
      // byte; with no change at all nothing is written.
      body = mergePatch(specOf(RENDERED), body, WHOLE);
      if (Object.keys(body).length === 0) {
        window.location.assign(form.dataset.done);
        return;
      }
    }
    submit.disabled = true;
    try {
      const r = await call(form.dataset.method, form.dataset.url, body);
      if (r.ok && r.data && r.data.id) {
        window.location.assign("/schedules/" + encodeURIComponent(r.data.id));
        return;
      }
      const errors = (r.data && r.data.errors) ||
        [{ path: r.data && r.data.code === "name_taken" ? "name" : "", reason: (r.data && r.data.message) || "failed (HTTP " + r.status + ")" }];
      showErrors(errors, "submit");
      const first = form.querySelector("[aria-invalid=true]");
      if (first) first.focus();
    } catch (_) {
      showErrors([{ path: "", reason: "the app could not be reached" }], "submit");
    } finally {
      submit.disabled = false;
    }
  });
}

// How many items need attention, in the navigation of every paired page (and in words on
// the overview). The queue is derived on each read, so a count is kept for this tab for
// COUNT_FRESH_MS instead of asked again on every page; the attention page stores the
// count it lists (the `studio:attention-count` event from attention.js).
const COUNT_KEY = "studio.attention_count";
const COUNT_FRESH_MS = 20000;
function showAttentionCount(n) {
  const badge = document.querySelector('[data-testid="nav-attention-count"]');
  if (badge) {
    badge.textContent = String(n);
    badge.hidden = n === 0;
    badge.title = n + (n === 1 ? " item needs" : " items need") + " attention";
  }
  const summary = document.getElementById("attention-summary");
  if (summary) {
    const link = document.createElement("a");
    link.href = "/attention";
    link.textContent = n === 0 ? "Nothing needs attention." :
      n + (n === 1 ? " item needs" : " items need") + " attention now.";
    summary.textContent = "";
    summary.append(link);
    summary.dataset.count = String(n);
  }
}
async function wireAttention() {
  // The attention page says what it lists.
  document.addEventListener("studio:attention-count", (e) => {
    sessionStorage.setItem(COUNT_KEY, JSON.stringify({ n: e.detail, at: Date.now() }));
    showAttentionCount(e.detail);
  });
  const state = document.getElementById("status");
  if (!state || state.dataset.serverState !== "paired" || window.location.pathname === "/attention") return;
  try {
    const kept = JSON.parse(sessionStorage.getItem(COUNT_KEY) || "null");
    // The overview always asks: it is where the count is read in words.
    if (kept && Date.now() - kept.at < COUNT_FRESH_MS && !document.getElementById("attention-summary")) {
      showAttentionCount(kept.n);
      return;
    }
    const res = await fetch("/api/app/attention", { credentials: "same-origin", cache: "no-store" });
    const data = await res.json();
    if (!res.ok) return;
    const n = (data.items || []).length;
    sessionStorage.setItem(COUNT_KEY, JSON.stringify({ n, at: Date.now() }));
    showAttentionCount(n);
  } catch (_) { /* the link to /attention stays */ }
}

// "45 s", "5 min", "2 h 10 min", "3 d 4 h": whole units, two at most (as the server says).
function span(secs) {
  const a = Math.abs(secs);
  if (a < 60) return a + " s";
  if (a < 3600) return Math.floor(a / 60) + " min";
  if (a < 86400) {
    const h = Math.floor(a / 3600), m = Math.floor((a % 3600) / 60);
    return m ? h + " h " + m + " min" : h + " h";
  }
  const d = Math.floor(a / 86400), h = Math.floor((a % 86400) / 3600);
  return h ? d + " d " + h + " h" : d + " d";
}

// "in 5 min", "3 h ago", "now", from a number of seconds (negative: past).
function relative(secs) {
  if (Math.abs(secs) < 5) return "now";
  return secs > 0 ? "in " + span(secs) : span(secs) + " ago";
}

// Relative times tick: each is recomputed from its <time>'s instant.
function tickTimes(root) {
  const now = Date.now();
  for (const t of root.querySelectorAll("time[data-local]")) {
    const rel = t.nextElementSibling;
    const at = Date.parse(t.getAttribute("datetime"));
    if (!rel || !rel.classList.contains("rel") || isNaN(at)) continue;
    rel.textContent = "(" + relative(Math.round((at - now) / 1000)) + ")";
  }
}

// A running run's duration ticks: how long it has run, and how long its deadline leaves.
function tickDuration() {
  const el = document.getElementById("run-duration");
  if (!el || !el.dataset.since) return;
  const now = Date.now();
  const since = Date.parse(el.dataset.since);
  if (isNaN(since)) return;
  const words = (ms) => span(Math.max(0, Math.floor(ms / 1000)));
  let line = "running for " + words(now - since);
  const deadline = Date.parse(el.dataset.deadline || "");
  if (!isNaN(deadline)) {
    line += deadline > now ? " · " + words(deadline - now) + " left before its deadline" : " · at its deadline";
  }
  el.textContent = line;
}

// What a person was typing in a live region survives its refresh: the text of its fields
// (matched by id) is carried into the fresh copy; returns the id of the field that had
// the focus, for the caller to focus again once the copy is in place.
function keepTyping(old, fresh) {
  for (const field of old.querySelectorAll("input[id], textarea[id]")) {
    const twin = fresh.querySelector("#" + CSS.escape(field.id));
    if (twin && field.value !== field.defaultValue) twin.value = field.value;
  }
  const focused = document.activeElement;
  return old.contains(focused) && focused.id ? focused.id : null;
}

// Renders the live regions again now (set by wireLive on a page that has some).
let refreshLive = null;
// The event stream wireLive opened, which other parts of the page listen to as well.
let liveEvents = null;

// Live lists: the regions of a page marked data-live are rendered again by the server
// when a run, a schedule, an approval request or a task changes (one request per burst
// of events), so what they show follows the daemon without a reload; at most one
// request a second, however busy the daemon is.
function wireLive() {
  if (!document.querySelector("[data-live]")) return;
  let timer = null;
  let busy = false;
  let next = 0;
  async function refresh() {
    if (busy) { timer = setTimeout(refresh, 300); return; }
    busy = true;
    next = Date.now() + 1000;
    try {
      const res = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      for (const region of document.querySelectorAll("[data-live]")) {
        const fresh = doc.getElementById(region.id);
        if (!fresh || fresh.innerHTML === region.innerHTML) continue;
        const node = document.importNode(fresh, true);
        const focused = keepTyping(region, node);
        localizeTimes(node);
        tickTimes(node);
        tickCountdowns(node);
        region.replaceWith(node);
        const again = focused && document.getElementById(focused);
        if (again) again.focus();
      }
    } catch (_) {
      /* the banner reports an unreachable app; the next event tries again */
    } finally {
      busy = false;
    }
  }
  refreshLive = () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 0);
  };
  const events = stream();
  liveEvents = events;
  for (const kind of ["run", "schedule", "approval", "task"]) {
    events.addEventListener(kind, () => {
      clearTimeout(timer);
      timer = setTimeout(refresh, Math.max(250, next - Date.now()));
    });
  }
  events.addEventListener("approval", countApprovals);
}

// How many requests wait for a decision, beside "Approvals" in the navigation of every
// paired page: read as the page loads, and again at each approval event on a page that
// follows the event stream.
async function countApprovals() {
  const badge = document.querySelector('[data-testid="nav-approvals-count"]');
  const state = document.getElementById("status");
  if (!badge || !state || state.dataset.serverState !== "paired") return;
  try {
    const res = await fetch("/api/approvals?status=pending&limit=100", { credentials: "same-origin", cache: "no-store" });
    if (!res.ok) return;
    const data = await res.json();
    const n = (data.approvals || []).length;
    badge.textContent = data.next_cursor ? n + "+" : String(n);
    badge.hidden = n === 0;
    badge.title = n + (n === 1 ? " run waits" : " runs wait") + " for approval";
  } catch (_) { /* the link to /approvals stays */ }
}

// The time left before an instant, in the server's words ("14 min 5 s left", days to
// the minute), or "expired".
function countdown(secs) {
  if (secs <= 0) return "expired";
  const d = Math.floor(secs / 86400), h = Math.floor((secs % 86400) / 3600);
  const m = Math.floor((secs % 3600) / 60), s = secs % 60;
  const left = d > 0 ? d + " d " + h + " h " + m + " min"
    : h > 0 ? h + " h " + m + " min " + s + " s"
    : m > 0 ? m + " min " + s + " s" : s + " s";
  return left + " left";
}

// Each countdown to an approval's expiry, recomputed from its instant; an expired
// request's decision is withdrawn (studiod would refuse it).
function tickCountdowns(root) {
  const now = Math.floor(Date.now() / 1000);
  for (const el of root.querySelectorAll(".countdown[data-expires]")) {
    const at = Date.parse(el.dataset.expires);
    if (isNaN(at)) continue;
    const secs = Math.floor(at / 1000) - now;
    el.textContent = countdown(secs);
    const decision = secs <= 0 && el.closest("[data-approval]")?.querySelector(".decision");
    if (decision) decision.hidden = true;
  }
}

// Grant and Deny on the Approvals page: the reason typed beside them goes with the
// decision (and, as with every write, this browser's decision token). A refusal is said
// in the request's card in studiod's words, and nothing else changes; one that says the
// request moved on (decided, expired, voided) also brings the list up to date.
function wireDecisions() {
  const status = document.getElementById("approvals-status");
  if (!status) return;
  document.addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-decide]");
    if (!b || b.disabled) return;
    const card = b.closest("[data-approval]");
    const id = card.dataset.approval;
    const grant = b.dataset.decide === "grant";
    // A refresh may have put a fresh copy of the card in place meanwhile.
    const say = (words) => {
      const now = document.getElementById(card.id);
      const out = now && now.querySelector(".action-result");
      if (out) out.textContent = words;
    };
    const reason = card.querySelector("input[name=reason]").value.trim();
    const buttons = [...card.querySelectorAll("button[data-decide]")];
    for (const x of buttons) x.disabled = true;
    say("");
    try {
      const r = await call("POST", b.dataset.url, reason ? { reason } : {});
      if (!r.ok) {
        const why = (r.data && r.data.message) || "failed (HTTP " + r.status + ")";
        say((grant ? "Not granted: " : "Not denied: ") + why);
        if (r.status === 409) {
          status.textContent = "Request " + id.slice(-8) + ": " + why;
          if (refreshLive) refreshLive();
        }
        return;
      }
      const a = r.data.approval || {};
      const run = r.data.run || {};
      const what = "run " + String(run.id || a.run_id || "").slice(-8) + " of " + (a.schedule_name || "its schedule");
      status.textContent = !grant ? "Denied: " + what + " will not run."
        : run.status === "skipped" ? "Granted: " + what + ", which its schedule's policies then skipped (" + (run.reason || "skipped") + ")."
        : "Granted: " + what + " launches now.";
      countApprovals();
      if (refreshLive) refreshLive(); else window.location.reload();
    } catch (_) {
      say("the app could not be reached");
    } finally {
      for (const x of buttons) x.disabled = false;
    }
  });
}

// A run awaiting approval: its page reloads once the run leaves that status (granted,
// denied or expired), wherever the decision was made.
function wireAwaiting() {
  const box = document.getElementById("run-awaiting");
  if (!box) return;
  const run = box.dataset.run;
  const events = stream();
  let done = false;
  const moved = (status) => {
    if (done || !status || status === "awaiting_approval") return;
    done = true;
    events.close();
    window.location.reload();
  };
  events.addEventListener("run", (ev) => {
    let d;
    try { d = JSON.parse(ev.data); } catch (_) { return; }
    if (d.id === run) moved(d.status);
  });
  // A decision made before the stream connected is read once it has.
  events.addEventListener("open", async () => {
    try {
      const res = await fetch("/api/runs/" + encodeURIComponent(run), { credentials: "same-origin", cache: "no-store" });
      const d = await res.json();
      if (res.ok) moved(d.status);
    } catch (_) { /* the next event decides */ }
  });
}

// A task's page shows its latest attempt's log: when another attempt begins (a retry,
// or the first one of a task that waited), the page is loaded again to show its log. A
// change made before the event stream connected (or while it was away) is read once it
// has, and loads the page again too.
function wireTask() {
  const page = document.getElementById("task");
  if (!page) return;
  const task = page.dataset.task;
  const shown = page.dataset.lastRun || "";
  const events = liveEvents || stream();
  let done = false;
  const reload = () => {
    if (done) return;
    done = true;
    window.location.reload();
  };
  events.addEventListener("task", (ev) => {
    let d;
    try { d = JSON.parse(ev.data); } catch (_) { return; }
    if (d.id === task && (d.last_run_id || "") !== shown) reload();
  });
  events.addEventListener("open", async () => {
    try {
      const res = await fetch("/api/tasks/" + encodeURIComponent(task), { credentials: "same-origin", cache: "no-store" });
      const d = await res.json();
      const now = res.ok && d.task;
      if (now && ((now.last_run_id || "") !== shown || now.status !== page.dataset.status)) reload();
    } catch (_) { /* the next event decides */ }
  });
}

// Filter forms marked data-autosubmit apply a choice as it is made (a text box when it
// is left or Enter is pressed), and leave empty fields out of the address.
function wireFilters() {
  for (const form of document.querySelectorAll("form[data-autosubmit]")) {
    form.addEventListener("change", () => form.requestSubmit());
    form.addEventListener("submit", () => {
      for (const el of form.elements) {
        if (el.name && el.value === "" && el.type !== "checkbox") el.disabled = true;
      }
    });
    // Coming back to this page from history restores the form as it was left.
    window.addEventListener("pageshow", () => {
      for (const el of form.elements) el.disabled = false;
    });
  }
}

// The project box suggests every project (the page renders those of its own rows), read
// once, when the box is first used: focused, pressed or typed in (a window without focus,
// as a background tab, gets no focus event).
function wireProjects() {
  const box = document.querySelector('input[list="projects"]');
  const list = document.getElementById("projects");
  if (!box || !list) return;
  let asked = false;
  const load = async () => {
    if (asked) return;
    asked = true;
    try {
      const res = await fetch("/api/projects", { credentials: "same-origin", cache: "no-store" });
      if (!res.ok) return;
      const data = await res.json();
      list.replaceChildren(...(data.projects || []).map((p) =>
        Object.assign(document.createElement("option"), {
          value: p.name,
          label: p.schedules + (p.schedules === 1 ? " schedule" : " schedules"),
        })));
      list.dataset.loaded = "true";
    } catch (_) { /* the page's own suggestions stay */ }
  };
  for (const event of ["focus", "pointerdown", "keydown"]) box.addEventListener(event, load);
}

// How long each listed run has run ("4 min"), from the instant it started.
function tickElapsed() {
  const now = Date.now();
  for (const el of document.querySelectorAll(".elapsed[data-since]")) {
    const since = Date.parse(el.dataset.since);
    if (!isNaN(since)) el.textContent = "for " + span(Math.max(0, Math.floor((now - since) / 1000)));
  }
}

// Keyboard shortcuts, outside text fields: "/" finds (the page's search box), "g" then
// a letter goes to a page, "?" lists them.
const GO = { o: ["/", "Overview"], s: ["/schedules", "Schedules"], r: ["/runs", "Runs"], t: ["/tasks", "Tasks"], a: ["/attention", "Attention"], d: ["/devices", "Devices"] };
function wireKeys() {
  let help = null;
  function toggleHelp() {
    if (!help) {
      help = document.createElement("dialog");
      help.id = "keys";
      help.dataset.testid = "keys-help";
      help.setAttribute("aria-label", "Keyboard shortcuts");
      const list = document.createElement("dl");
      const add = (keys, what) => {
        const dt = document.createElement("dt");
        dt.append(...keys.map((k) => Object.assign(document.createElement("kbd"), { textContent: k })));
        list.append(dt, Object.assign(document.createElement("dd"), { textContent: what }));
      };
      add(["/"], "find on this page");
      for (const [key, [, name]] of Object.entries(GO)) add(["g", key], "go to " + name);
      add(["?"], "show or hide this list");
      const close = Object.assign(document.createElement("button"), { type: "button", textContent: "Close" });
      close.addEventListener("click", () => help.close());
      help.append(Object.assign(document.createElement("h2"), { textContent: "Keyboard shortcuts" }), list, close);
      document.body.append(help);
    }
    if (help.open) help.close(); else help.showModal();
  }
  let pending = false;
  document.addEventListener("keydown", (ev) => {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const t = ev.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    if (pending) {
      pending = false;
      const to = GO[ev.key];
      if (to) { ev.preventDefault(); window.location.assign(to[0]); }
      return;
    }
    if (ev.key === "g") { pending = true; setTimeout(() => { pending = false; }, 1500); return; }
    if (ev.key === "?") { ev.preventDefault(); toggleHelp(); return; }
    if (ev.key === "/") {
      const box = document.querySelector("main input[type=search], main #q");
      if (box) { ev.preventDefault(); box.focus(); box.select(); }
    }
  });
}

localizeTimes(document);
setInterval(() => tickTimes(document), 30000);
if (document.querySelector(".countdown[data-expires], #approvals-pending")) {
  tickCountdowns(document);
  setInterval(() => tickCountdowns(document), 1000);
}
wireKeys();
if (document.querySelector(".elapsed[data-since]")) {
  tickElapsed();
  setInterval(tickElapsed, 1000);
}
wireFilters();
wireProjects();
wireLive();
wireActions();
wireLog();
wireAttention();
countApprovals();
wireDecisions();
wireAwaiting();
wireTask();
wireForm();
