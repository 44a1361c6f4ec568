// The colour theme: the system's (auto) unless this browser chose light or dark. Loaded
// before the page is drawn, so a chosen theme shows without a flash; the header's button
// cycles auto → dark → light.
"use strict";
(function () {
  const KEY = "studio.theme";
  const root = document.documentElement;
  const saved = () => {
    try { return localStorage.getItem(KEY); } catch (_) { return null; }
  };
  const apply = (theme) => {
    if (theme === "light" || theme === "dark") root.dataset.theme = theme;
    else delete root.dataset.theme;
  };
  apply(saved());
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.getElementById("theme");
    if (!button) return;
    const show = () => {
      const theme = root.dataset.theme || "auto";
      button.textContent = "Theme: " + theme;
      button.dataset.theme = theme;
    };
    show();
    button.hidden = false;
    button.addEventListener("click", () => {
      const next = { auto: "dark", dark: "light", light: "auto" }[root.dataset.theme || "auto"];
      try {
        if (next === "auto") localStorage.removeItem(KEY);
        else localStorage.setItem(KEY, next);
      } catch (_) { /* not kept: this page still changes */ }
      apply(next);
      show();
    });
  });
})();
