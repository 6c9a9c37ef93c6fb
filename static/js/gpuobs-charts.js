/* gpuobs: draws the plotly figures a page embeds as JSON (diagnosis/charts/figures.py `embed`).
 *
 * Each chart is a <div data-figure="ID"> and a <script type="application/json" id="ID"> with the
 * figure. No inline script runs, so a Content-Security-Policy of script-src 'self' holds. A click
 * on a point whose customdata starts with a same-site path ("/...") follows it: the waterfall's
 * bars link to the findings behind each bucket.
 *
 * Charts follow the page's theme (gpuobs-theme.js): the container's data-themes holds the text
 * and grid colours of each (diagnosis/charts/figures.py CHART_THEMES), applied before the first draw
 * and again when the reader switches. Charts that a live update swaps in (htmx) are drawn too.
 * On a Chinese page (<html lang="zh-hans">) plotly's dates are in Chinese (its locale "zh-CN").
 */
(function () {
  "use strict";

  var config = {
    responsive: true,
    displaylogo: false,
    modeBarButtonsToRemove: ["select2d", "lasso2d", "autoScale2d"],
  };

  // Chinese pages: dates on the axes and in the hover in Chinese (plotly's locale mechanism;
  // the names are CLDR's zh month and weekday names, written here, not a fetched locale file).
  var ZH = {
    moduleType: "locale",
    name: "zh-CN",
    dictionary: {
      "Zoom": "缩放",
      "Pan": "平移",
      "Zoom in": "放大",
      "Zoom out": "缩小",
      "Reset axes": "重置坐标轴",
      "Download plot as a png": "下载为 PNG 图片",
      "Double-click to zoom back out": "双击恢复缩放",
    },
    format: {
      days: ["星期日", "星期一", "星期二", "星期三", "星期四", "星期五", "星期六"],
      shortDays: ["周日", "周一", "周二", "周三", "周四", "周五", "周六"],
      months: ["一月", "二月", "三月", "四月", "五月", "六月", "七月", "八月", "九月", "十月", "十一月", "十二月"],
      shortMonths: ["1月", "2月", "3月", "4月", "5月", "6月", "7月", "8月", "9月", "10月", "11月", "12月"],
      date: "%Y-%m-%d",
    },
  };

  function useLocale() {
    var lang = (document.documentElement.getAttribute("lang") || "").toLowerCase();
    if (lang.indexOf("zh") !== 0 || typeof window.Plotly === "undefined" || config.locale) {
      return;
    }
    window.Plotly.register(ZH);
    config.locale = "zh-CN";
  }

  function linkOf(point) {
    var data = point && point.customdata;
    var url = Array.isArray(data) ? data[0] : data;
    return typeof url === "string" && url.charAt(0) === "/" && url.charAt(1) !== "/" ? url : null;
  }

  function themeColours(container) {
    var theme = document.documentElement.getAttribute("data-theme") || "light";
    try {
      var themes = JSON.parse(container.getAttribute("data-themes") || "{}");
      return themes[theme] || null;
    } catch (error) {
      return null;
    }
  }

  function layoutUpdate(layout, colours) {
    var update = { "font.color": colours.ink };
    Object.keys(layout).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) {
        update[key + ".gridcolor"] = colours.grid;
        update[key + ".zerolinecolor"] = colours.grid;
        update[key + ".linecolor"] = colours.grid;
      }
    });
    return update;
  }

  function paint(figure, colours) {
    var update = layoutUpdate(figure.layout, colours);
    figure.layout.font = figure.layout.font || {};
    figure.layout.font.color = colours.ink;
    Object.keys(update).forEach(function (path) {
      var parts = path.split(".");
      if (parts.length === 2 && parts[1] !== "color") {
        figure.layout[parts[0]] = figure.layout[parts[0]] || {};
        figure.layout[parts[0]][parts[1]] = update[path];
      }
    });
    figure.data.forEach(function (trace) {
      if (trace.type === "waterfall" && trace.totals && trace.totals.marker) {
        trace.totals.marker.color = colours.ink;
      }
    });
  }

  function repaint(container) {
    var colours = themeColours(container);
    if (!colours || !container.layout || typeof window.Plotly === "undefined") {
      return;
    }
    window.Plotly.relayout(container, layoutUpdate(container.layout, colours));
    container.data.forEach(function (trace, index) {
      if (trace.type === "waterfall") {
        window.Plotly.restyle(container, { "totals.marker.color": colours.ink }, [index]);
      }
    });
    container.setAttribute("data-theme-drawn", document.documentElement.getAttribute("data-theme"));
  }

  function draw(container) {
    if (container.getAttribute("data-drawn") || container.getAttribute("data-drawing")) {
      return;
    }
    var source = document.getElementById(container.getAttribute("data-figure"));
    if (!source) {
      return;
    }
    if (typeof window.Plotly === "undefined") {
      container.textContent = "The chart needs JavaScript (plotly.js did not load); the table below has its figures.";
      container.classList.add("chart-missing");
      return;
    }
    useLocale();
    var figure = JSON.parse(source.textContent);
    var colours = themeColours(container);
    if (colours) {
      paint(figure, colours);
    }
    container.setAttribute("data-drawing", "true");
    window.Plotly.newPlot(container, figure.data, figure.layout, config).then(function (plot) {
      plot.on("plotly_click", function (event) {
        var url = linkOf(event.points && event.points[0]);
        if (url) {
          window.location.assign(url);
        }
      });
      container.setAttribute("data-drawn", "true");
      container.setAttribute("data-theme-drawn", document.documentElement.getAttribute("data-theme"));
    });
  }

  function drawAll() {
    var charts = document.querySelectorAll("[data-figure]");
    for (var i = 0; i < charts.length; i++) {
      draw(charts[i]);
    }
  }

  function repaintAll() {
    var charts = document.querySelectorAll("[data-figure][data-drawn]");
    for (var i = 0; i < charts.length; i++) {
      repaint(charts[i]);
    }
  }

  document.addEventListener("gpuobs:theme", repaintAll);
  document.addEventListener("htmx:afterSettle", drawAll);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
})();
