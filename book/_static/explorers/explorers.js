/* Interactive explorers for the course book.
 *
 * Every number shown comes from a JSON table that the book's build computed with the
 * course's `solutions/` package; this script only looks values up (and, for model state,
 * multiplies a per-parameter table by the shard size). No network, no libraries.
 * Each displayed number carries its unrounded value in `data-raw`, which the browser
 * tests compare with `solutions/`.
 */
(function () {
  "use strict";

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) { node.appendChild(c); });
    return node;
  }

  function svgEl(tag, attrs) {
    var node = document.createElementNS("http://www.w3.org/2000/svg", tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }

  function count(x) {
    var units = [["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]];
    for (var i = 0; i < units.length; i++) {
      if (x >= units[i][1]) return (x / units[i][1]).toPrecision(3).replace(/\.?0+$/, "") + units[i][0];
    }
    return x.toPrecision(3);
  }

  function setValue(node, raw, text) {
    node.setAttribute("data-raw", String(raw));
    node.textContent = text;
  }

  function select(label, name, options, initial) {
    var s = el("select", { "data-control": name, "aria-label": label });
    options.forEach(function (o) {
      var opt = el("option", { value: String(o[0]), text: o[1] });
      if (String(o[0]) === String(initial)) opt.selected = true;
      s.appendChild(opt);
    });
    return [el("label", {}, [el("span", { text: label }), s]), s];
  }

  /* ------------------------------------------------------------ Chinchilla */

  function chinchilla(root, data) {
    var slider = el("input", { type: "range", min: "0", max: String(data.budgets.length - 1), step: "1",
      value: String(data.initial), "data-control": "budget", "aria-label": "compute budget" });
    var budget = el("output", { "data-value": "budget" });
    var controls = el("div", { "class": "explorer-controls" }, [
      el("label", {}, [el("span", { text: "compute budget C" }), slider, budget])]);
    var table = el("table", { "class": "explorer-table" });
    var head = el("tr", {}, ["constants", "N (parameters)", "D (tokens)", "D / N", "loss"].map(function (h) {
      return el("th", { text: h });
    }));
    table.appendChild(el("thead", {}, [head]));
    var body = el("tbody");
    var cells = {};
    data.sets.forEach(function (s) {
      var row = el("tr", {}, [el("td", { text: s.label })]);
      cells[s.name] = {};
      ["N", "D", "ratio", "loss"].forEach(function (k) {
        var td = el("td", { "data-value": s.name + ":" + k });
        cells[s.name][k] = td;
        row.appendChild(td);
      });
      body.appendChild(row);
    });
    table.appendChild(body);
    root.appendChild(controls);
    root.appendChild(el("div", { "class": "explorer-scroll" }, [table]));

    function update() {
      var i = Number(slider.value);
      var C = data.budgets[i];
      setValue(budget, C, C.toExponential(1).replace("e+", "e") + " FLOPs");
      data.sets.forEach(function (s) {
        var r = s.rows[i];
        setValue(cells[s.name].N, r[0], count(r[0]));
        setValue(cells[s.name].D, r[1], count(r[1]));
        setValue(cells[s.name].ratio, r[2], r[2].toFixed(1));
        if (r[3] === null) setValue(cells[s.name].loss, "", "\u2013");
        else setValue(cells[s.name].loss, r[3], r[3].toFixed(3));
      });
    }
    slider.addEventListener("input", update);
    update();
  }

  /* ------------------------------------------------------------ memory and layout */

  function memoryExplorer(root, data) {
    var controls = el("div", { "class": "explorer-controls" });
    var sel = {};
    function add(label, name, options, initial) {
      var pair = select(label, name, options, initial);
      controls.appendChild(pair[0]);
      sel[name] = pair[1];
    }
    add("model", "model", data.models.map(function (m) { return [m.name, m.name + " (" + count(m.params) + ")"]; }),
      data.initial.model);
    add("GPUs", "count", data.counts.map(function (c) { return [c, c.toLocaleString("en")]; }), data.initial.count);
    add("TP", "tp", data.tps.map(function (t) { return [t, t]; }), data.initial.tp);
    add("PP", "pp", data.pps.map(function (p) { return [p, p]; }), data.initial.pp);
    add("ZeRO stage", "zero", [[0, "0 (plain DP)"], [1, "1"], [2, "2"], [3, "3 (FSDP)"]], data.initial.zero);
    add("bytes/param", "convention", data.conventions.map(function (c) { return [c.name, c.label]; }),
      data.initial.convention);
    add("recompute", "recompute", data.recompute.map(function (r) { return [r, r]; }), data.initial.recompute);
    add("GPU", "gpu", data.gpus.map(function (g) { return [g.name, g.name + " (" + g.memory_gb + " GB)"]; }),
      data.initial.gpu);
    root.appendChild(controls);

    var summary = el("p", { "class": "explorer-summary" });
    var dp = el("strong", { "data-value": "dp" });
    var status = el("strong", { "data-value": "fits" });
    summary.appendChild(document.createTextNode("DP degree = GPUs / (TP \u00d7 PP) = "));
    summary.appendChild(dp);
    summary.appendChild(document.createTextNode(". "));
    summary.appendChild(status);
    root.appendChild(summary);

    var parts = [["weights", "weights"], ["grads", "gradients"], ["optimizer", "optimizer state"],
      ["activations", "activations"]];
    var bar = el("div", { "class": "explorer-bar", role: "img", "aria-label": "memory per GPU" });
    var limit = el("div", { "class": "explorer-limit" });
    bar.appendChild(limit);
    var segs = {};
    parts.forEach(function (p) {
      segs[p[0]] = el("div", { "class": "explorer-seg", style: "background:" + data.colors[p[0]] });
      bar.appendChild(segs[p[0]]);
    });
    root.appendChild(bar);
    var legend = el("ul", { "class": "explorer-legend" });
    var vals = {};
    parts.concat([["total", "total per GPU"]]).forEach(function (p) {
      var swatch = el("span", { "class": "explorer-swatch", style: "background:" + (data.colors[p[0]] || "transparent") });
      vals[p[0]] = el("span", { "data-value": p[0] });
      legend.appendChild(el("li", {}, [swatch, el("span", { text: p[1] + ": " }), vals[p[0]]]));
    });
    root.appendChild(legend);

    function update() {
      var model = data.models.filter(function (m) { return m.name === sel.model.value; })[0];
      var n = Number(sel.count.value), tp = Number(sel.tp.value), pp = Number(sel.pp.value);
      var gpu = data.gpus.filter(function (g) { return g.name === sel.gpu.value; })[0];
      var capacity = gpu.memory_gb * 1e9;
      if (n % (tp * pp) !== 0) {
        setValue(dp, "", "\u2013");
        setValue(status, "", "TP \u00d7 PP = " + tp * pp + " does not divide " + n + " GPUs.");
        status.className = "explorer-bad";
        parts.concat([["total"]]).forEach(function (p) { setValue(vals[p[0]], "", "\u2013"); });
        parts.forEach(function (p) { segs[p[0]].style.width = "0"; });
        return;
      }
      var d = n / (tp * pp);
      setValue(dp, d, String(d));
      var perParam = data.state[sel.convention.value][sel.zero.value][String(d)];
      var shard = model.params / (tp * pp);
      var bytes = { weights: perParam[0] * shard, grads: perParam[1] * shard, optimizer: perParam[2] * shard,
        activations: data.activations[model.name][tp + "x" + pp][sel.recompute.value] };
      var total = bytes.weights + bytes.grads + bytes.optimizer + bytes.activations;
      var scale = Math.max(total, capacity);
      parts.forEach(function (p) {
        setValue(vals[p[0]], bytes[p[0]], (bytes[p[0]] / 1e9).toFixed(2) + " GB");
        segs[p[0]].style.width = (100 * bytes[p[0]] / scale) + "%";
      });
      setValue(vals.total, total, (total / 1e9).toFixed(2) + " GB");
      limit.style.left = (100 * capacity / scale) + "%";
      var fits = total <= capacity;
      setValue(status, fits ? 1 : 0, fits ? "Fits in " + gpu.memory_gb + " GB." : "Does not fit in " + gpu.memory_gb + " GB.");
      status.className = fits ? "explorer-good" : "explorer-bad";
    }
    Object.keys(sel).forEach(function (k) { sel[k].addEventListener("change", update); });
    update();
  }

  /* ------------------------------------------------------------ pipeline stepper */

  function pipelineExplorer(root, data) {
    var controls = el("div", { "class": "explorer-controls" });
    var sel = {};
    [["stages p", "p", data.ps, data.initial.p], ["micro-batches m", "m", data.ms, data.initial.m]].forEach(function (c) {
      var pair = select(c[0], c[1], c[2].map(function (x) { return [x, x]; }), c[3]);
      controls.appendChild(pair[0]);
      sel[c[1]] = pair[1];
    });
    var pair = select("schedule", "kind", data.kinds.map(function (k) { return [k.name, k.label]; }), data.initial.kind);
    controls.appendChild(pair[0]);
    sel.kind = pair[1];
    var time = el("input", { type: "range", min: "0", max: "1", step: "1", value: "0", "data-control": "time",
      "aria-label": "time step" });
    var timeOut = el("output", { "data-value": "time" });
    var stepBtn = el("button", { type: "button", "data-control": "step", text: "step \u25b6" });
    controls.appendChild(el("label", {}, [el("span", { text: "time" }), time, timeOut]));
    controls.appendChild(stepBtn);
    root.appendChild(controls);
    var figure = el("div", { "class": "explorer-timeline" });
    root.appendChild(figure);
    var stats = el("ul", { "class": "explorer-legend" });
    var vals = {};
    [["bubble", "bubble, (p\u22121)/(v\u00b7m+p\u22121)"], ["idle", "idle share of the simulated step"],
      ["makespan", "step time (forward = 1, backward = 2)"], ["inflight", "micro-batches stashed on stage 1"],
      ["running", "running now"]].forEach(function (s) {
      vals[s[0]] = el("span", { "data-value": s[0] });
      stats.appendChild(el("li", {}, [el("span", { text: s[1] + ": " }), vals[s[0]]]));
    });
    root.appendChild(stats);

    function current() {
      return data.schedules[sel.kind.value + ":" + sel.p.value + ":" + sel.m.value];
    }

    function draw(reset) {
      var s = current();
      var p = Number(sel.p.value);
      if (reset) {
        time.max = String(s.makespan);
        time.value = String(s.makespan);
      }
      var t = Number(time.value);
      setValue(timeOut, t, t + " / " + s.makespan);
      setValue(vals.bubble, s.bubble, (100 * s.bubble).toFixed(1) + "%");
      if (s.events) {
        setValue(vals.idle, s.idle, (100 * s.idle).toFixed(1) + "%");
        setValue(vals.makespan, s.makespan, String(s.makespan));
        setValue(vals.inflight, s.inflight, String(s.inflight));
      } else {
        ["idle", "makespan", "inflight"].forEach(function (k) { setValue(vals[k], "", "not simulated"); });
      }
      figure.textContent = "";
      if (!s.events) {
        figure.appendChild(el("p", { text: s.note }));
        setValue(vals.running, "", "\u2013");
        return;
      }
      var rowH = 22, labelW = 56, W = 720;
      var unit = (W - labelW) / s.makespan;
      var svg = svgEl("svg", { viewBox: "0 0 " + W + " " + (p * rowH + 24), width: "100%", role: "img",
        "aria-label": "pipeline timeline" });
      for (var st = 0; st < p; st++) {
        var label = svgEl("text", { x: 4, y: st * rowH + 15, "font-size": 12 });
        label.textContent = "GPU " + (st + 1);
        svg.appendChild(label);
      }
      var running = [];
      s.events.forEach(function (e) {
        var stage = e[0], mb = e[1], phase = e[2], start = e[3], end = e[4];
        var done = end <= t;
        var active = start < t && t < end;
        if (start <= t && t < end) running.push(phase + (mb + 1) + "@GPU" + (stage + 1));
        var rect = svgEl("rect", { x: labelW + start * unit, y: stage * rowH + 2, width: (end - start) * unit - 1,
          height: rowH - 4, fill: phase === "F" ? data.colors.F : data.colors.B,
          opacity: done || active ? 1 : 0.15, "data-event": phase + mb + "@" + stage });
        svg.appendChild(rect);
        if ((end - start) * unit > 14) {
          var txt = svgEl("text", { x: labelW + (start + (end - start) / 2) * unit, y: stage * rowH + 15,
            "font-size": 10, "text-anchor": "middle", fill: "#fff" });
          txt.textContent = (phase === "F" ? "F" : "B") + (mb + 1);
          svg.appendChild(txt);
        }
      });
      var line = svgEl("line", { x1: labelW + t * unit, x2: labelW + t * unit, y1: 0, y2: p * rowH + 4,
        stroke: "#000", "stroke-width": 1.5 });
      svg.appendChild(line);
      figure.appendChild(svg);
      setValue(vals.running, running.length, running.length ? running.join(", ") : "(idle or done)");
    }
    ["p", "m", "kind"].forEach(function (k) { sel[k].addEventListener("change", function () { draw(true); }); });
    time.addEventListener("input", function () { draw(false); });
    stepBtn.addEventListener("click", function () {
      var t = Number(time.value);
      time.value = String(t >= Number(time.max) ? 0 : t + 1);
      draw(false);
    });
    draw(true);
  }

  var builders = { chinchilla: chinchilla, memory: memoryExplorer, pipeline: pipelineExplorer };

  function init() {
    var roots = document.querySelectorAll("[data-explorer]");
    Array.prototype.forEach.call(roots, function (root) {
      if (root.getAttribute("data-ready")) return;
      var kind = root.getAttribute("data-explorer");
      var data = JSON.parse(root.querySelector("script.explorer-data").textContent);
      var mount = el("div", { "class": "explorer-body" });
      root.appendChild(mount);
      builders[kind](mount, data);
      root.setAttribute("data-ready", "1");
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
