/* gpuobs: the page header's controls, without inline scripts (script-src 'self').
 *
 * - the menu button folds the navigation away on narrow screens and opens it again;
 * - the theme button switches light and dark (gpuobs-theme.js keeps the choice);
 * - the language list submits its form when changed (its Go button does without JavaScript);
 * - so does the time zone list, which also offers the browser's own zone;
 * - a range picker's custom fields are checked by the browser (from before to).
 */
(function () {
  "use strict";

  function setUpMenu() {
    var button = document.querySelector(".menu-toggle");
    var menu = document.getElementById("topbar-menu");
    if (!button || !menu) {
      return;
    }
    button.addEventListener("click", function () {
      var open = button.getAttribute("aria-expanded") !== "true";
      button.setAttribute("aria-expanded", open ? "true" : "false");
      menu.classList.toggle("is-open", open);
    });
  }

  function setUpTheme() {
    var button = document.querySelector(".theme-toggle");
    if (!button || !window.gpuobsTheme) {
      return;
    }
    function show() {
      button.setAttribute("aria-pressed", window.gpuobsTheme.current() === "dark" ? "true" : "false");
    }
    button.addEventListener("click", function () {
      window.gpuobsTheme.choose(window.gpuobsTheme.current() === "dark" ? "light" : "dark");
    });
    document.addEventListener("gpuobs:theme", show);
    show();
  }

  function setUpLanguage() {
    var select = document.getElementById("language-select");
    if (!select || !select.form) {
      return;
    }
    select.form.classList.add("auto-submit");
    select.addEventListener("change", function () {
      select.form.submit();
    });
  }

  function setUpTimeZone() {
    var select = document.getElementById("time-zone-select");
    if (!select || !select.form) {
      return;
    }
    var zone = "";
    try {
      zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (error) {
      zone = "";
    }
    var known = Array.prototype.some.call(select.options, function (option) {
      return option.value === zone;
    });
    if (zone && !known) {
      var option = document.createElement("option");
      option.value = zone;
      option.textContent = zone + " (" + (select.getAttribute("data-browser-label") || "browser") + ")";
      select.appendChild(option);
    }
    select.form.classList.add("auto-submit");
    select.addEventListener("change", function () {
      select.form.submit();
    });
  }

  function setUpRangePickers() {
    var pickers = document.querySelectorAll("form.range-picker");
    Array.prototype.forEach.call(pickers, function (form) {
      var start = form.querySelector("input[name=from]");
      var end = form.querySelector("input[name=to]");
      if (!start || !end) {
        return;
      }
      // both are 24-hour "YYYY-MM-DD HH:MM" text, so their order is their text's order
      function check() {
        var wrong = start.value && end.value && end.value.replace("T", " ") <= start.value.replace("T", " ");
        end.setCustomValidity(wrong ? (end.getAttribute("data-order-message") || "to must be after from") : "");
      }
      start.addEventListener("input", check);
      end.addEventListener("input", check);
      check();
    });
  }

  function setUp() {
    setUpMenu();
    setUpTheme();
    setUpLanguage();
    setUpTimeZone();
    setUpRangePickers();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
