// Studio's pairing and connection state (every page has it): a small indicator while
// paired, a banner with what to do when not paired, on an ended epoch or cut off from the
// daemon. Disconnecting is on the Devices page. The pairing code arrives in the URL fragment (never sent to a
// server by the browser), is removed from the address bar at once, and is redeemed with
// one JSON POST. The admission token comes back as an HttpOnly cookie this script cannot
// read; the decision token is kept in sessionStorage only.
"use strict";

(function () {
  const DECISION_KEY = "studio.decision_token";
  const POLL_MS = 5000;
  const TEXT = {
    loading: "Checking…",
    paired: "Paired",
    "not-paired": "Not paired",
    "daemon-unavailable": "Daemon unavailable",
    "epoch-ended": "Epoch ended",
  };

  const el = (id) => document.getElementById(id);
  const main = el("status");
  let message = "";
  let justPaired = false;

  function show(state, session) {
    main.dataset.state = state;
    if (state !== "paired" && el("stale")) el("stale").hidden = true;
    el("state-text").textContent = TEXT[state];
    const paired = state === "paired";
    const epoch = session && session.epoch;
    el("details").hidden = !epoch;
    el("epoch").textContent = epoch || "—";
    el("principal").textContent = (session && session.principal) || "—";
    if (epoch) main.title = "epoch " + epoch + " · browser " + ((session && session.principal) || "—");
    else main.removeAttribute("title");
    el("hint").hidden = !(state === "not-paired" || state === "epoch-ended");
    const msg = el("message");
    msg.textContent = paired ? "" : message;
    msg.hidden = paired || !message;
  }

  async function api(method, path, body) {
    const init = {
      method,
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "application/json" },
    };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const decision = sessionStorage.getItem(DECISION_KEY);
    if (decision && method !== "GET") {
      init.headers["x-studio-decision-token"] = decision;
    }
    const res = await fetch(path, init);
    let data = null;
    try {
      data = await res.json();
    } catch (_) {
      data = null;
    }
    return { ok: res.ok, status: res.status, data };
  }

  function failure(r, what) {
    return (r.data && r.data.message) || what + " failed (HTTP " + r.status + ")";
  }

  // Returns an error message, or "" when the code was redeemed (or there was none).
  async function pairFromFragment() {
    const match = /^#pair=([^&]*)/.exec(window.location.hash);
    if (!match) return "";
    // First thing: the code must not stay in the address bar or in history.
    history.replaceState(null, "", window.location.pathname + window.location.search);
    let code;
    try {
      code = decodeURIComponent(match[1]);
    } catch (_) {
      return "the pairing link is malformed";
    }
    try {
      const r = await api("POST", "/api/studio/pair", { code });
      if (r.ok && r.data && r.data.paired) {
        sessionStorage.setItem(DECISION_KEY, r.data.decision_token);
        justPaired = true;
        return "";
      }
      return failure(r, "pairing");
    } catch (_) {
      return "pairing failed: the app could not be reached";
    }
  }

  async function refresh() {
    let r;
    try {
      r = await api("GET", "/api/app/session");
    } catch (_) {
      show("daemon-unavailable", null);
      return;
    }
    const s = r.data || {};
    if (s.paired) {
      show("paired", s);
      // Back after the page was rendered without data: offer a reload rather than
      // reloading under the user's hands (a half-filled form would be lost).
      const stale = el("stale");
      if (stale) stale.hidden = !main.dataset.serverState || main.dataset.serverState === "paired";
    } else if (s.daemon !== "ok" || s.reason === "daemon_unavailable") {
      show("daemon-unavailable", s);
    } else if (s.reason === "epoch_ended") {
      sessionStorage.removeItem(DECISION_KEY);
      show("epoch-ended", s);
    } else {
      sessionStorage.removeItem(DECISION_KEY);
      show("not-paired", s);
    }
  }

  (async () => {
    message = await pairFromFragment();
    // The server rendered this page before the cookie existed: render it again, paired.
    if (justPaired && main.dataset.serverState !== "paired") {
      window.location.reload();
      return;
    }
    await refresh();
    setInterval(refresh, POLL_MS);
  })();
})();
