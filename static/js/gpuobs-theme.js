/* gpuobs: light or dark, before the first paint (docs/ui.md "Dark mode").
 *
 * The reader's choice (the header's toggle, kept in localStorage "gpuobs-theme") wins; without
 * one the system's prefers-color-scheme decides, and follows it when it changes. The answer is
 * <html data-theme="light|dark">; static/css/gpuobs.css colours the page from it and
 * gpuobs-charts.js the charts. Without JavaScript the CSS follows prefers-color-scheme alone.
 */
(function () {
  "use strict";

  var KEY = "gpuobs-theme";
  var media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

  function stored() {
    try {
      var value = window.localStorage.getItem(KEY);
      return value === "light" || value === "dark" ? value : null;
    } catch (error) {
      return null; // storage refused (private mode): the system decides
    }
  }

  function current() {
    return stored() || (media && media.matches ? "dark" : "light");
  }

  function apply() {
    var theme = current();
    document.documentElement.setAttribute("data-theme", theme);
    document.dispatchEvent(new CustomEvent("gpuobs:theme", { detail: { theme: theme } }));
  }

  function choose(theme) {
    try {
      window.localStorage.setItem(KEY, theme);
    } catch (error) {
      /* not kept; this page still switches */
    }
    document.documentElement.setAttribute("data-theme", theme);
    document.dispatchEvent(new CustomEvent("gpuobs:theme", { detail: { theme: theme } }));
  }

  window.gpuobsTheme = { current: current, choose: choose };
  apply();
  if (media && media.addEventListener) {
    media.addEventListener("change", function () {
      if (!stored()) {
        apply();
      }
    });
  }
})();
