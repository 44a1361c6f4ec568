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
function wireActions() {
  for (const b of document.querySelectorAll("button[data-action]")) {
    b.addEventListener("click", async () => {
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
        if (then === "run" && r.data && r.data.id) window.location.assign("/runs/" + encodeURIComponent(r.data.id));
        else if (then && then.startsWith("/")) window.location.assign(then);
        else window.location.reload();
      } catch (_) {
        if (out) out.textContent = "the app could not be reached";
      } finally {
        b.disabled = false;
      }
    });
  }
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

  async function open(stream) {
    for (const a of view.querySelectorAll("[data-stream]")) {
      a.setAttribute("aria-pressed", String(a.dataset.stream === stream));
    }
    const known = Number(view.dataset[stream + "Bytes"] || "0");
    const start = Math.max(0, known - CHUNK);
    s = { stream, start, end: start, decoder: new TextDecoder() };
    text.textContent = "";
    await more(s);
  }

  async function more(cur) {
    try {
      const r = await range(cur.stream, cur.end, CHUNK * 4);
      if (cur !== s) return;
      text.textContent += cur.decoder.decode(r.bytes, { stream: active });
      cur.end += r.bytes.length;
      earlier.hidden = cur.start === 0;
      state.textContent = (active ? "live · " : "") + cur.end + " of " + r.size + " bytes";
      if (r.size > cur.end) return more(cur);
    } catch (e) {
      state.textContent = "log unavailable: " + e.message;
    }
  }

  earlier.addEventListener("click", async () => {
    const cur = s;
    const from = Math.max(0, cur.start - CHUNK);
    const r = await range(cur.stream, from, cur.start - from);
    text.textContent = new TextDecoder().decode(r.bytes) + text.textContent;
    cur.start = from;
    earlier.hidden = from === 0;
  });
  for (const a of view.querySelectorAll("[data-stream]")) {
    a.addEventListener("click", (ev) => { ev.preventDefault(); open(a.dataset.stream); });
  }
  open("stdout");

  if (!active) return;
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
  const events = new EventSource("/api/events");
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
    events.close();
    await more(s);
    window.location.reload();
  }
}

// The schedule form: JSON out, field errors next to their fields, a live preview.
const FIELD_OF = [
  [/^name/, "name"], [/^description/, "description"],
  [/^trigger\.cron\.timezone/, "timezone"], [/^trigger\.cron/, "cron"],
  [/^trigger\.every/, "every"], [/^trigger\.at/, "at"], [/^trigger/, "trigger"],
  [/^action\.executable/, "executable"], [/^action\.args/, "args"],
  [/^action\.prompt/, "prompt"], [/^action\.model/, "model"], [/^action\.profile/, "profile"], [/^action/, "action"], [/^cwd/, "cwd"], [/^enabled/, "enabled"],
];

function fieldOf(path) {
  const hit = FIELD_OF.find(([re]) => re.test(path || ""));
  return hit ? hit[1] : "form";
}

function wireForm() {
  const form = document.getElementById("schedule-form");
  if (!form) return;
  const v = (name) => (form.elements[name] ? form.elements[name].value.trim() : "");

  function trigger() {
    const kind = v("trigger_kind");
    if (kind === "every") return { every: v("every") };
    if (kind === "at") return { at: v("at") };
    const cron = { expression: v("cron") };
    if (v("timezone")) cron.timezone = v("timezone");
    return { cron };
  }

  function action() {
    if (v("action_kind") === "agent") {
      // The whole action is replaced on save, so model and profile travel with it.
      const agent = { kind: "agent", prompt: v("prompt") };
      if (v("model")) agent.model = v("model");
      if (v("profile")) agent.profile = v("profile");
      return agent;
    }
    const args = form.elements.args.value.split("\n").map((a) => a.trim()).filter((a) => a !== "");
    return { kind: "command", executable: v("executable"), args };
  }

  // Only the chosen trigger's and action's fields are shown.
  function showKinds() {
    for (const el of form.querySelectorAll("[data-kind]")) el.hidden = el.dataset.kind !== v("trigger_kind");
    for (const el of form.querySelectorAll("[data-action-kind]")) el.hidden = el.dataset.actionKind !== v("action_kind");
  }

  function clearErrors(scope) {
    for (const el of form.querySelectorAll(".field-error" + (scope ? "[data-scope=" + scope + "]" : ""))) {
      const input = el.closest(".field") && el.closest(".field").querySelector("input, select, textarea");
      if (input) input.removeAttribute("aria-invalid");
      el.remove();
    }
    const general = form.querySelector('[data-error-for="form"]');
    if (!scope) { general.hidden = true; general.textContent = ""; }
  }

  function showErrors(errors, scope) {
    for (const e of errors) {
      const field = fieldOf(e.path);
      const box = form.querySelector('.field[data-field="' + field + '"]');
      if (!box || field === "form") {
        const general = form.querySelector('[data-error-for="form"]');
        general.hidden = false;
        general.textContent += (e.path ? e.path + ": " : "") + e.reason + " ";
        continue;
      }
      const p = document.createElement("p");
      p.className = "field-error";
      p.id = "error-" + field;
      p.dataset.testid = "error-" + field;
      p.dataset.scope = scope;
      p.setAttribute("role", "alert");
      p.textContent = e.reason;
      box.append(p);
      const input = box.querySelector("input, select, textarea");
      if (input) {
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", ((input.getAttribute("aria-describedby") || "") + " " + p.id).trim());
      }
    }
  }

  let previewTimer = null;
  async function preview() {
    const list = document.getElementById("preview-list");
    clearErrors("preview");
    try {
      const r = await call("POST", "/api/schedules/preview", { trigger: trigger(), count: 5 });
      list.textContent = "";
      if (!r.ok) {
        if (r.data && r.data.errors) showErrors(r.data.errors, "preview");
        return;
      }
      for (const f of r.data.fires || []) {
        const li = document.createElement("li");
        const t = document.createElement("time");
        t.setAttribute("datetime", f);
        t.dataset.local = "";
        t.title = new Date(f).toISOString().replace("T", " ").slice(0, 19) + " UTC";
        t.textContent = f;
        li.append(t);
        list.append(li);
      }
      if ((r.data.fires || []).length === 0) list.textContent = "No future fires.";
      localizeTimes(list);
    } catch (_) {
      list.textContent = "Preview unavailable.";
    }
  }
  function schedulePreview() {
    clearTimeout(previewTimer);
    previewTimer = setTimeout(preview, 300);
  }
  for (const name of ["trigger_kind", "cron", "timezone", "every", "at"]) {
    form.elements[name].addEventListener("input", schedulePreview);
    form.elements[name].addEventListener("change", schedulePreview);
  }
  form.elements.trigger_kind.addEventListener("change", showKinds);
  form.elements.action_kind.addEventListener("change", showKinds);
  showKinds();
  preview();

  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clearErrors();
    const submit = form.querySelector('[type="submit"]');
    const body = { name: v("name"), description: v("description"), trigger: trigger(), action: action() };
    if (form.dataset.method === "POST") {
      body.enabled = form.elements.enabled ? form.elements.enabled.checked : true;
      if (v("cwd")) body.cwd = v("cwd");
    } else {
      body.cwd = v("cwd") || null;
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

// The overview's attention summary; the attention page itself is `attention.js`, which
// only that page loads.
async function wireAttention() {
  const summary = document.getElementById("attention-summary");
  if (!summary) return;
  try {
    const res = await fetch("/api/app/attention", { credentials: "same-origin", cache: "no-store" });
    const data = await res.json();
    if (!res.ok) return;
    const n = (data.items || []).length;
    const link = document.createElement("a");
    link.href = "/attention";
    link.textContent = n === 0 ? "Nothing needs attention." :
      n + (n === 1 ? " item needs" : " items need") + " attention now.";
    summary.textContent = "";
    summary.append(link);
    summary.dataset.count = String(n);
  } catch (_) { /* the link to /attention stays */ }
}

localizeTimes(document);
wireActions();
wireLog();
wireAttention();
wireForm();
