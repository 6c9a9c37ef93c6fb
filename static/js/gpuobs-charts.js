/* gpuobs: draws the plotly figures a page embeds as JSON (diagnosis/charts.py `embed`).
 *
 * Each chart is a <div data-figure="ID"> and a <script type="application/json" id="ID"> with the
 * figure. No inline script runs, so a Content-Security-Policy of script-src 'self' holds. A click
 * on a point whose customdata starts with a same-site path ("/...") follows it: the waterfall's
 * bars link to the findings behind each bucket.
 */
(function () {
  "use strict";

  var config = {
    responsive: true,
    displaylogo: false,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
  };

  function linkOf(point) {
    var data = point && point.customdata;
    var url = Array.isArray(data) ? data[0] : data;
    return typeof url === "string" && url.charAt(0) === "/" && url.charAt(1) !== "/" ? url : null;
  }

  function draw(container) {
    var source = document.getElementById(container.getAttribute("data-figure"));
    if (!source) {
      return;
    }
    if (typeof window.Plotly === "undefined") {
      container.textContent = "The chart needs JavaScript (plotly.js did not load); the table below has its figures.";
      container.classList.add("chart-missing");
      return;
    }
    var figure = JSON.parse(source.textContent);
    window.Plotly.newPlot(container, figure.data, figure.layout, config).then(function (plot) {
      plot.on("plotly_click", function (event) {
        var url = linkOf(event.points && event.points[0]);
        if (url) {
          window.location.assign(url);
        }
      });
      container.setAttribute("data-drawn", "true");
    });
  }

  function drawAll() {
    var charts = document.querySelectorAll("[data-figure]");
    for (var i = 0; i < charts.length; i++) {
      draw(charts[i]);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
