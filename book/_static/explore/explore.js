/* Explorers for the course book. Every number shown is looked up in the table that the page
 * carries as JSON, computed at build time by the course's `solutions` package
 * (book/_ext/explore.py). This script formats and draws; it evaluates no formula.
 * Written for this course; no third-party code. */
(function () {
  "use strict";

  var SVGNS = "http://www.w3.org/2000/svg";

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function svg(tag, attrs, children) {
    var node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }
  function setAttrs(node, attrs) {
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "style") node.setAttribute("style", attrs[k]);
      else node.setAttribute(k, attrs[k]);
    });
  }
  function append(node, children) {
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
  }

  /* Formatting only: a count with a K/M/B/T suffix and four significant digits. */
  function fmtCount(x) {
    var units = [[1e12, " T"], [1e9, " B"], [1e6, " M"], [1e3, " K"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(x) >= units[i][0]) return (x / units[i][0]).toPrecision(4) + units[i][1];
    }
    return x.toPrecision(4);
  }
  /* Gigabytes: four significant digits, whole numbers with thousands separators above 1,000. */
  function fmtGB(x) {
    if (Math.abs(x) >= 1000) return Math.round(x).toLocaleString("en-US") + " GB";
    return x.toPrecision(4) + " GB";
  }
  function fmtPct(x) { return (100 * x).toFixed(2) + " %"; }

  /* Call fn now and whenever the element's width changes (charts are drawn at their width). */
  function onWidthChange(node, fn) {
    var last = -1;
    function check() {
      var w = node.clientWidth;
      if (w !== last) { last = w; fn(); }
    }
    check();
    window.addEventListener("resize", check);
  }

  var uid = 0;
  function control(labelText, input, readout) {
    var id = "explorer-input-" + (++uid);
    input.id = id;
    var head = el("span", {}, [labelText]);
    if (readout) append(head, [" ", readout]);
    var label = el("label", { "for": id }, [head, input]);
    return label;
  }
  function select(name, options, value) {
    var s = el("select", { name: name });
    options.forEach(function (o) {
      var opt = el("option", { value: String(o[0]), text: o[1] });
      if (String(o[0]) === String(value)) opt.selected = true;
      s.appendChild(opt);
    });
    return s;
  }

  /* ------------------------------------------------------------------ */
  /* Chinchilla explorer                                                  */
  /* ------------------------------------------------------------------ */
  function chinchilla(root, data) {
    var slider = el("input", { type: "range", name: "budget", min: "0", max: String(data.C.length - 1),
                               step: "1", value: String(data["default"]),
                               "aria-label": "compute budget C in FLOPs (log scale)" });
    var readout = el("span", { "class": "readout", "data-out": "C" });
    var controls = el("div", { "class": "explorer-controls" }, [
      (function () { var c = control("Compute budget C =", slider, readout); c.className = "wide"; return c; })(),
    ]);

    var rows = [["N", "N"], ["D", "D"], ["ratio", "D/N"], ["loss", "loss"]];
    var head = el("tr", {}, [el("th", { text: "" })].concat(data.sets.map(function (s) {
      return el("th", { title: s.label }, [el("span", { "class": "swatch", style: "background:" + s.colour }), s["short"]]);
    })));
    var body = el("tbody");
    var cells = {};
    rows.forEach(function (r) {
      var tr = el("tr", {}, [el("th", { text: r[1] })]);
      data.sets.forEach(function (s) {
        var td = el("td", { "data-set": s.key, "data-out": r[0] });
        cells[s.key + ":" + r[0]] = td;
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    var table = el("table", { "class": "explorer-chinchilla" }, [
      el("caption", { text: "Compute-optimal parameters N, training tokens D, tokens per parameter D/N and loss " +
                            "L(N, D) = E + A/N^\u03b1 + B/D^\u03b2 at the budget C = 6ND, for each published set of constants." }),
      el("thead", {}, [head]), body]);

    /* Chart: tokens per parameter against the budget, one line per constant set. Drawn at the
       width of its box (so the text stays legible on a phone) and redrawn when that changes. */
    var xs = data.log10C, x0 = xs[0], x1 = xs[xs.length - 1];
    var ys = [];
    data.sets.forEach(function (s) { s.ratio.forEach(function (r) { ys.push(Math.log10(r)); }); });
    var y0 = Math.floor(Math.min.apply(null, ys) * 10) / 10, y1 = Math.ceil(Math.max.apply(null, ys) * 10) / 10;
    var chartBox = el("div", { "class": "explorer-chart" });
    var chart, marker, dots, px, py;
    function draw() {
      var W = Math.max(300, Math.min(720, chartBox.clientWidth || 640)), H = W < 500 ? 240 : 270;
      var L = 44, R = 18, T = 12, B = 40;
      px = function (lx) { return L + (lx - x0) / (x1 - x0) * (W - L - R); };
      py = function (ly) { return H - B - (ly - y0) / (y1 - y0) * (H - T - B); };
      chart = svg("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                           "aria-label": "Tokens per parameter at the compute-optimal allocation against the compute budget" });
      var step = W < 500 ? 3 : 1;
      for (var e = Math.ceil(x0); e <= x1; e++) {
        chart.appendChild(svg("line", { x1: px(e), x2: px(e), y1: T, y2: H - B, "class": "grid" }));
        if ((e - Math.ceil(x0)) % step === 0) chart.appendChild(svg("text", { x: px(e), y: H - B + 16, "text-anchor": "middle", text: "1e" + e }));
      }
      [10, 20, 50, 100, 200, 500, 1000].forEach(function (v) {
        var ly = Math.log10(v);
        if (ly < y0 || ly > y1) return;
        chart.appendChild(svg("line", { x1: L, x2: W - R, y1: py(ly), y2: py(ly), "class": "grid" }));
        chart.appendChild(svg("text", { x: L - 6, y: py(ly) + 4, "text-anchor": "end", text: String(v) }));
      });
      chart.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", text: "compute budget C (FLOPs)" }));
      chart.appendChild(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
                                      transform: "rotate(-90 12 " + (T + H - B) / 2 + ")", text: "D/N" }));
      marker = svg("line", { y1: T, y2: H - B, stroke: "currentColor", "stroke-dasharray": "4 3" });
      chart.appendChild(marker);
      dots = {};
      data.sets.forEach(function (s) {
        var pts = xs.map(function (lx, i) { return px(lx).toFixed(1) + "," + py(Math.log10(s.ratio[i])).toFixed(1); });
        chart.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: s.colour, "stroke-width": 2.5 }));
        dots[s.key] = svg("circle", { r: 5, fill: s.colour });
        chart.appendChild(dots[s.key]);
      });
      chartBox.innerHTML = "";
      chartBox.appendChild(chart);
    }

    function update() {
      var i = Number(slider.value);
      readout.textContent = data.C[i].toExponential(2).replace("e+", "e") + " FLOPs";
      data.sets.forEach(function (s) {
        cells[s.key + ":N"].textContent = fmtCount(s.N[i]);
        cells[s.key + ":D"].textContent = fmtCount(s.D[i]);
        cells[s.key + ":ratio"].textContent = s.ratio[i].toPrecision(4);
        cells[s.key + ":loss"].textContent = s.loss[i].toFixed(3);
        dots[s.key].setAttribute("cx", px(xs[i]));
        dots[s.key].setAttribute("cy", py(Math.log10(s.ratio[i])));
      });
      marker.setAttribute("x1", px(xs[i]));
      marker.setAttribute("x2", px(xs[i]));
    }
    slider.addEventListener("input", update);
    append(root, [controls, el("div", { "class": "explorer-table-wrap" }, [table]), chartBox]);
    onWidthChange(chartBox, function () { draw(); update(); });
  }

  var EXPLORERS = { chinchilla: chinchilla };

  function init() {
    var roots = document.querySelectorAll(".explorer[data-explorer]");
    Array.prototype.forEach.call(roots, function (root) {
      var kind = root.getAttribute("data-explorer");
      var script = root.querySelector("script.explorer-data");
      if (!EXPLORERS[kind] || !script) return;
      EXPLORERS[kind](root, JSON.parse(script.textContent));
      root.setAttribute("data-ready", "true");
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
