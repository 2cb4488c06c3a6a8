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
  /* Bytes in GiB (2^30), as torch.cuda and the planner's printout report memory. */
  function fmtGiB(bytes) {
    var x = bytes / 1073741824;
    if (Math.abs(x) >= 1000) return Math.round(x).toLocaleString("en-US") + " GiB";
    return x.toPrecision(4) + " GiB";
  }
  /* 10^e as a round count with a suffix: 100M, 1B, 10B, 1T. */
  function fmtPower(e) {
    var units = [[12, "T"], [9, "B"], [6, "M"], [3, "K"], [0, ""]];
    for (var i = 0; i < units.length; i++) {
      if (e >= units[i][0]) return String(Math.pow(10, e - units[i][0])) + units[i][1];
    }
    return String(Math.pow(10, e));
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

  /* A play/pause button that moves a range input one step at a time until its end; pressed at the
     end, it starts again from 0. `show` redraws after each step. */
  function player(range, show, ms) {
    var button = el("button", { type: "button", name: "play", "aria-pressed": "false", text: "\u25b6 play" });
    var timer = null;
    function stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
      button.textContent = "\u25b6 play";
      button.setAttribute("aria-pressed", "false");
    }
    function tick() {
      if (Number(range.value) >= Number(range.max)) { stop(); return; }
      range.value = String(Number(range.value) + 1);
      show();
      if (Number(range.value) >= Number(range.max)) stop();
    }
    button.addEventListener("click", function () {
      if (timer !== null) { stop(); return; }
      if (Number(range.value) >= Number(range.max)) { range.value = "0"; show(); }
      button.textContent = "\u275a\u275a pause";
      button.setAttribute("aria-pressed", "true");
      timer = setInterval(tick, ms || 500);
    });
    return { button: button, stop: stop };
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
  function wide(node) { node.classList.add("wide"); return node; }
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
    /* The corner cell names the rows for a screen reader (a header cell must not be empty). */
    function corner(text) { return el("th", { scope: "col" }, [el("span", { "class": "visually-hidden", text: text })]); }
    var head = el("tr", {}, [corner("quantity")].concat(data.sets.map(function (s) {
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

    /* Legend: one entry per fit, the same colours as the table's columns and both charts. */
    var legend = el("div", { "class": "legend", "data-out": "legend" }, data.sets.map(function (s) {
      return el("span", { "data-set": s.key }, [el("span", { "class": "swatch", style: "background:" + s.colour }), s.label]);
    }));

    /* The iso-FLOP valley: loss against model size N with D = C/(6N) at the chosen budget,
       one curve per fit; each curve's floor is that fit's compute-optimal N. */
    var valleyBox = el("div", { "class": "explorer-chart", "data-out": "valley" });
    var valleyHead = el("p", { "class": "note", "data-out": "valley-title" });
    function drawValley(i) {
      var W = Math.max(300, Math.min(720, valleyBox.clientWidth || 640)), H = W < 500 ? 240 : 270;
      var L = 50, R = 18, T = 12, B = 40;
      var g = data.valleyLog10N[i], n0 = g[0], n1 = g[g.length - 1];
      var lo = Infinity, hi = -Infinity;
      data.sets.forEach(function (s) {
        lo = Math.min(lo, s.loss[i]);
        hi = Math.max(hi, s.valley[i][0], s.valley[i][g.length - 1]);
      });
      /* Show the floor of the valley and its walls up to a fixed height above the lowest floor. */
      hi = Math.min(hi, lo + 0.6);
      var pad = (hi - lo) * 0.08, l0 = lo - pad, l1 = hi;
      var qx = function (ln) { return L + (ln - n0) / (n1 - n0) * (W - L - R); };
      var qy = function (v) { return H - B - (Math.min(v, l1) - l0) / (l1 - l0) * (H - T - B); };
      var chart = svg("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                               "aria-label": "Loss against model size N at the chosen compute budget, one curve per fit; " +
                                             "the lowest point of each curve is its compute-optimal size" });
      for (var e = Math.ceil(n0); e <= n1; e++) {
        chart.appendChild(svg("line", { x1: qx(e), x2: qx(e), y1: T, y2: H - B, "class": "grid" }));
        chart.appendChild(svg("text", { x: qx(e), y: H - B + 16, "text-anchor": "middle", text: fmtPower(e) }));
      }
      var tick = (l1 - l0) > 0.3 ? 0.1 : (l1 - l0) > 0.12 ? 0.05 : 0.02;
      for (var v = Math.ceil(l0 / tick) * tick; v <= l1 + 1e-9; v += tick) {
        chart.appendChild(svg("line", { x1: L, x2: W - R, y1: qy(v), y2: qy(v), "class": "grid" }));
        chart.appendChild(svg("text", { x: L - 6, y: qy(v) + 4, "text-anchor": "end", text: v.toFixed(2) }));
      }
      chart.appendChild(svg("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle", text: "model size N (parameters), D = C/(6N)" }));
      chart.appendChild(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
                                      transform: "rotate(-90 12 " + (T + H - B) / 2 + ")", text: "loss" }));
      data.sets.forEach(function (s) {
        var pts = g.map(function (ln, k) { return qx(ln).toFixed(1) + "," + qy(s.valley[i][k]).toFixed(1); });
        chart.appendChild(svg("polyline", { points: pts.join(" "), fill: "none", stroke: s.colour, "stroke-width": 2.5,
                                            "data-set": s.key, "data-log10n": g.join(" "), "data-loss": s.valley[i].join(" ") }));
      });
      data.sets.forEach(function (s) {
        chart.appendChild(svg("circle", { r: 5, fill: s.colour, stroke: "#ffffff", "stroke-width": 1.5, "class": "floor",
                                          cx: qx(Math.log10(s.N[i])), cy: qy(s.loss[i]), "data-set": s.key,
                                          "data-n": s.N[i], "data-loss": s.loss[i] }));
      });
      valleyBox.innerHTML = "";
      valleyBox.appendChild(chart);
      valleyHead.textContent = "Loss along the iso-FLOP line at C = " + data.C[i].toExponential(2).replace("e+", "e") +
        " FLOPs: a bigger model sees fewer tokens. Each dot is a fit's compute-optimal N, the floor of its valley.";
    }

    function update() {
      var i = Number(slider.value);
      readout.textContent = data.C[i].toExponential(2).replace("e+", "e") + " FLOPs";
      drawValley(i);
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
    /* The constants behind each column, and the exponent a of N_opt ~ C^a they imply. */
    var constRows = [["E", "E"], ["A", "A"], ["B", "B"], ["alpha", "\u03b1"], ["beta", "\u03b2"]];
    var cbody = el("tbody");
    constRows.forEach(function (r) {
      cbody.appendChild(el("tr", {}, [el("th", { text: r[1] })].concat(data.sets.map(function (s) {
        return el("td", { "data-set": s.key, "data-const": r[0], text: String(s.constants[r[0]]) });
      }))));
    });
    cbody.appendChild(el("tr", {}, [el("th", { text: "exponent a" })].concat(data.sets.map(function (s) {
      return el("td", { "data-set": s.key, "data-const": "a", text: s.a.toFixed(4) });
    }))));
    var constTable = el("table", { "class": "explorer-constants" }, [
      el("caption", { text: "The constants of each fit, and the allocation exponent a = \u03b2/(\u03b1 + \u03b2) they give." }),
      el("thead", {}, [el("tr", {}, [corner("constant")].concat(Array.prototype.slice.call(head.children, 1).map(function (th) {
        return th.cloneNode(true); })))]), cbody]);

    slider.addEventListener("input", update);
    append(root, [controls, el("div", { "class": "explorer-table-wrap", "tabindex": "0", "role": "region", "aria-label": "Compute-optimal allocation of each fit (scrolls sideways)" }, [table]),
                  legend, el("p", { "class": "note", text: "Tokens per parameter D/N at the compute-optimal allocation, against the budget." }), chartBox,
                  valleyHead, valleyBox,
                  el("div", { "class": "explorer-table-wrap", "tabindex": "0", "role": "region", "aria-label": "Constants of each fit (scrolls sideways)" }, [constTable])]);
    onWidthChange(chartBox, function () { draw(); update(); });
    onWidthChange(valleyBox, function () { drawValley(Number(slider.value)); });
  }


  /* ------------------------------------------------------------------ */
  /* Memory and layout explorer                                           */
  /* ------------------------------------------------------------------ */
  function memoryExplorer(root, data) {
    var d = data.defaults;
    var model = select("model", data.models.map(function (m, i) {
      return [i, m.name + " (" + fmtCount(m.params) + (m.moe === undefined ? "" :
        ", mixture of experts: " + m.experts + " experts, " + m.top_k + " per token, " + fmtCount(m.active) + " active") + ")"];
    }), data.models.findIndex(function (m) { return m.name === d.model; }));
    var prec = select("precision", data.precisions.map(function (q, i) { return [i, q.label]; }),
                      data.precisions.findIndex(function (q) { return q.name === d.precision; }));
    var ep = select("ep", data.ep.map(function (x, i) { return [i, String(x)]; }), data.ep.indexOf(d.ep));
    var epOut = el("span", { "class": "readout", "data-out": "edp" });
    var precNote = el("p", { "class": "note", "data-out": "precision" });
    var gpus = select("gpus", data.gpus.map(function (g) { return [g, g.toLocaleString("en-US")]; }), d.gpus);
    var tp = select("tp", data.tp.map(function (t, i) { return [i, String(t)]; }), data.tp.indexOf(d.tp));
    var pp = select("pp", data.pp.map(function (t, i) { return [i, String(t)]; }), data.pp.indexOf(d.pp));
    var zero = select("zero", data.zero.map(function (z, i) {
      return [i, ["0: replicate everything", "1: shard optimizer state", "2: + gradients", "3: + weights (FSDP)"][i]];
    }), d.zero);
    var conv = select("convention", data.conventions.map(function (c, i) { return [i, c.label]; }),
                      data.conventions.findIndex(function (c) { return c.name === d.convention; }));
    var device = select("device", data.devices.map(function (g, i) { return [i, g.name + " (" + g.memory_gb + " GB)"]; }),
                        data.devices.findIndex(function (g) { return g.name === d.device; }));
    var rc = select("recompute", data.recompute.map(function (r, i) { return [i, r[1]]; }),
                    data.recompute.findIndex(function (r) { return r[0] === d.recompute; }));
    var seq = select("seq", data.seq.map(function (x, i) { return [i, x.toLocaleString("en-US") + " tokens"]; }),
                     data.seq.indexOf(data.models[Number(model.value)].seq_len));
    var mb = select("micro_batch", data.micro_batch.map(function (x, i) { return [i, x + (x === 1 ? " sequence" : " sequences")]; }),
                    data.micro_batch.indexOf(d.micro_batch));
    var seqNote = el("span", { "class": "note", "data-out": "seq-note" });
    var sp = el("input", { type: "checkbox", name: "sp" });
    sp.checked = d.sp;
    var spLabel = el("label", { "class": "checkbox" }, [sp, " sequence parallelism (with TP)"]);
    spLabel.style.flexDirection = "row";
    spLabel.style.alignItems = "center";
    var dpOut = el("span", { "class": "readout", "data-out": "dp" });
    var convNote = el("p", { "class": "note", "data-out": "convention" });
    var controls = el("div", { "class": "explorer-controls" }, [
      control("Model", model), control("GPUs", gpus), control("Tensor parallel TP", tp),
      control("Pipeline parallel PP", pp),
      el("div", {}, [el("span", {}, ["Data parallel DP = GPUs / (TP \u00d7 PP) = "]), dpOut]),
      control("Expert parallel EP (mixtures of experts)", ep),
      el("div", {}, [el("span", {}, ["Expert data parallel = TP \u00d7 DP / EP = "]), epOut]),
      control("ZeRO stage (over DP)", zero), control("GPU", device), control("Training precision", prec),
      control("Sequence length", seq, seqNote), control("Micro-batch size", mb), spLabel,
      wide(control("Bytes per parameter", conv)), wide(control("Activation recomputation", rc)),
    ]);

    var message = el("div", { "class": "message", role: "alert", "data-out": "message" });
    var stack = el("div", { "class": "stack", role: "img" });
    var capacity = el("div", { "class": "capacity" });
    var parts = [["weights", "weights", "weights"], ["grads", "gradients", "gradients"],
                 ["optimizer", "optimizer state", "optimizer"], ["activations", "activations", "activations"]];
    var segs = {}, vals = {};
    var tbody = el("tbody");
    parts.forEach(function (p) {
      segs[p[0]] = el("span", { style: "background:" + data.colours[p[2]], title: p[1] });
      stack.appendChild(segs[p[0]]);
      vals[p[0]] = el("td", { "data-out": p[0] });
      tbody.appendChild(el("tr", {}, [el("th", {}, [el("span", { "class": "swatch", style: "background:" + data.colours[p[2]] }), p[1]]), vals[p[0]]]));
    });
    stack.appendChild(capacity);
    /* The bar's scale: ticks in GB at a round step, redrawn when the total or the GPU changes. */
    var axis = el("div", { "class": "bar-axis", "aria-hidden": "true", "data-out": "axis" });
    var barWrap = el("div", { "class": "bar-wrap" }, [stack, axis]);
    function drawAxis(scale) {
      /* The smallest round step (1, 2, 2.5 or 5 times a power of ten) with at most `want` steps. */
      var width = axis.clientWidth || 600, want = width < 500 ? 5 : 8;
      var raw = scale / want, mag = Math.pow(10, Math.floor(Math.log10(raw)));
      var stepGB = [1, 2, 2.5, 5, 10].map(function (k) { return k * mag; }).find(function (x) { return x >= raw; });
      axis.innerHTML = "";
      for (var x = 0; x <= scale + 1e-9; x += stepGB) {
        axis.appendChild(el("span", { "class": "tick", style: "left:" + (100 * x / scale) + "%", "data-gb": x,
                                      text: Number(x.toPrecision(6)).toLocaleString("en-US") }));
      }
      axis.appendChild(el("span", { "class": "unit", text: "GB" }));
    }
    var total = el("td", { "data-out": "total" });
    var verdict = el("td", { "data-out": "fits" });
    tbody.appendChild(el("tr", {}, [el("th", { text: "total per GPU" }), total]));
    tbody.appendChild(el("tr", {}, [el("th", { text: "fits in the GPU?" }), verdict]));
    var summaryLine = el("p", { "class": "readout", "data-out": "summary" });
    /* The bar and its total stay in view (sticky on a phone) while the reader works the controls. */
    var results = el("div", { "class": "explorer-result" }, [
      el("div", { "class": "legend" }, [el("span", {}, ["Busiest GPU (pipeline stage 0); the dashed line is what the GPU leaves usable."])]),
      barWrap, summaryLine,
    ]);
    var details = el("div", {}, [
      el("div", { "class": "explorer-table-wrap", "tabindex": "0", "role": "region", "aria-label": "Memory on the busiest GPU (scrolls sideways)" }, [el("table", {}, [tbody])]),
      convNote, precNote,
    ]);

    function update() {
      var m = Number(model.value), g = Number(gpus.value), t = Number(tp.value), p = Number(pp.value);
      var key = g + "," + data.tp[t] + "," + data.pp[p];
      var layout = data.layouts[key];
      var c = data.conventions[Number(conv.value)];
      convNote.textContent = c.label.split(":")[0] + " per parameter: " + c.description + ".";
      var own = data.models[m].seq_len;
      seqNote.textContent = data.seq[Number(seq.value)] === own ? "(the model's training length)" : "(trained at " + own.toLocaleString("en-US") + ")";
      var mm = data.models[m], e = data.ep[Number(ep.value)], q = data.precisions[Number(prec.value)];
      var dev = data.devices[Number(device.value)];
      function stop(text) {
        message.textContent = text;
        message.hidden = false;
        results.hidden = details.hidden = true;
      }
      if (!layout) {
        dpOut.textContent = "none";
        epOut.textContent = "none";
        stop("TP \u00d7 PP = " + data.tp[t] + " \u00d7 " + data.pp[p] + " = " + (data.tp[t] * data.pp[p]) +
          " does not divide " + g.toLocaleString("en-US") + " GPUs: there is no whole data-parallel degree. " +
          "Choose a GPU count that is a multiple of TP \u00d7 PP.");
        return;
      }
      dpOut.textContent = String(layout[1]);
      var epl = data.ep_layouts[key + "," + e];
      epOut.textContent = mm.moe === undefined ? "none (a dense model)" : (epl ? String(epl[1]) : "none");
      if (e > 1 && mm.moe === undefined) {
        stop("Expert parallelism splits the experts of a mixture of experts, and " + mm.name +
          " is dense: choose a mixture of experts, or EP 1.");
        return;
      }
      if (e > 1 && mm.experts % e) {
        stop("EP = " + e + " does not divide the " + mm.experts + " experts of " + mm.name + ".");
        return;
      }
      if (e > 1 && !epl) {
        stop("EP = " + e + " does not divide TP \u00d7 DP = " + (data.tp[t] * layout[1]) +
          ": expert parallelism is carved out of the tensor- and data-parallel GPUs.");
        return;
      }
      message.hidden = true;
      results.hidden = details.hidden = false;
      var ci = Number(conv.value), zi = Number(zero.value), qi = Number(prec.value);
      var ri = Number(rc.value), spi = sp.checked ? 1 : 0;
      var tokens = data.seq[Number(seq.value)] * data.micro_batch[Number(mb.value)];
      var st, a;
      if (mm.moe === undefined) {
        st = data.state[mm.dense][ci][zi][layout[0]].slice();
        a = data.act[mm.dense][t][p][ri][spi][Number(seq.value)][Number(mb.value)] -
            data.saved[mm.dense][qi][t][p][ri][spi] * tokens;
      } else {
        /* per billion parameters: the dense part on TP x PP, the experts on PP x EP */
        var denseB = (mm.params - mm.expert_params) / 1e9, u = data.unit[ci][zi][layout[0]];
        var ue = data.unit_ep[ci][zi][epl[0]];
        st = u.map(function (x, i) { return x * denseB + ue[i] * mm.expert_params / 1e9; });
        a = data.moe_act[mm.moe][qi][t][p][ri][spi] * tokens;
      }
      /* a low precision keeps quantised copies of the weights, sharded like them: beside the
         16-bit weights, or in their place (FP8 and MXFP8, as Megatron-Core's fp8_param_gather) */
      var cv = data.conventions[ci];
      st[0] *= q.weight_bytes[ci] / cv.weights;
      var needs = q.name === "bf16" ? "bf16" : q.name;
      precNote.textContent = (q.name === "bf16" ? "BF16 weights, activations and products." :
        q.label + (q.copies_only ?
          ": the weights held in the low precision only (" + q.weight_copy + " bytes per parameter, in place of the " +
          "16-bit ones; the FP32 master weights are the optimizer's), and the " :
          ": a copy of the weights in the low precision (" + q.weight_copy + " bytes per parameter), and the ") +
        "linear layers' inputs stored in it for the backward pass.") +
        (dev.formats.indexOf(needs) < 0 ? " The " + dev.name + " has no " + q.label.split(" ")[0] +
          " tensor cores: the figures are for a GPU that has." : "") +
        (mm.moe === undefined ? "" : " A mixture of experts' activations are counted with FlashAttention (no attention scores).");
      var v = { weights: st[0], grads: st[1], optimizer: st[2], activations: a };
      var sum = v.weights + v.grads + v.optimizer + v.activations;
      var dv = data.devices[Number(device.value)];
      var cap = dv.usable_gb;  /* what CUDA can allocate, less the allocator's reserve, as the planner counts it */
      var scale = Math.max(sum, cap) * 1.05;
      parts.forEach(function (q) {
        segs[q[0]].style.width = (100 * v[q[0]] / scale) + "%";
        vals[q[0]].textContent = fmtGB(v[q[0]]);
      });
      capacity.style.left = (100 * cap / scale) + "%";
      drawAxis(scale);
      total.textContent = fmtGB(sum);
      var fits = sum <= cap;
      verdict.className = fits ? "verdict-ok" : "verdict-no";
      verdict.textContent = (fits ? "yes: " : "no: ") + fmtGB(sum) + (fits ? " of " : " > ") + fmtGB(cap) + " usable";
      verdict.setAttribute("data-fits", fits ? "yes" : "no");
      summaryLine.textContent = fmtGB(sum) + " per GPU (DP = " + layout[1] + "): " + (fits ? "fits in" : "more than") + " the " +
        fmtGB(cap) + " usable on the " + dv.name + " (sold as " + dv.memory_gb + " GB: " +
        ({ cuda: "CUDA sees ", "nvidia-smi": "nvidia-smi shows ", mig: "its full-GPU MIG profile holds at most " }[dv.basis] ||
         "read as GiB, ") + fmtGB(dv.cuda_gb) + ", less a " + fmtGB(dv.cuda_gb - dv.usable_gb) + " reserve).";
      stack.setAttribute("aria-label", "Memory per GPU: " + parts.map(function (q) { return q[1] + " " + fmtGB(v[q[0]]); }).join(", "));
    }
    /* A new model starts at its own training length. */
    model.addEventListener("change", function () {
      var i = data.seq.indexOf(data.models[Number(model.value)].seq_len);
      if (i >= 0) seq.value = String(i);
    });
    [model, gpus, tp, pp, zero, conv, device, rc, sp, seq, mb, prec, ep].forEach(function (x) { x.addEventListener("change", update); });
    /* The result first: on a phone the controls fill two screens, and the bar must stay in view. */
    append(root, [message, results, controls, details]);
    update();
  }


  /* ------------------------------------------------------------------ */
  /* Pipeline schedule stepper                                            */
  /* ------------------------------------------------------------------ */
  function pipelineExplorer(root, data) {
    var d = data.defaults;
    var sched = select("schedule", data.schedules.map(function (s) { return [s[0], s[1]]; }), d.schedule);
    var pSel = select("p", data.p.map(function (x) { return [x, String(x)]; }), d.p);
    var mSel = select("m", data.m.map(function (x) { return [x, String(x)]; }), d.m);
    var step = el("input", { type: "range", name: "step", min: "0", max: "0", step: "1", value: "0",
                             "aria-label": "time step" });
    var stepOut = el("span", { "class": "readout", "data-out": "time" });
    var back = el("button", { type: "button", name: "back", text: "\u25c0 step back" });
    var fwd = el("button", { type: "button", name: "forward", text: "step forward \u25b6" });
    var end = el("button", { type: "button", name: "end", text: "whole step" });
    var stepper = control("Time", step, stepOut);
    stepper.className = "wide";
    var play = player(step, function () { showStep(); }, 450);
    var buttons = el("div", { "class": "buttons wide" }, [play.button, back, fwd, end]);
    var controls = el("div", { "class": "explorer-controls" }, [
      control("Schedule", sched), control("Pipeline stages p", pSel), control("Micro-batches m", mSel),
      stepper,
      buttons,
    ]);
    var message = el("div", { "class": "message", role: "alert", "data-out": "message" });
    var chartBox = el("div", { "class": "explorer-chart" });
    var outs = {};
    var rows = [["share", "bubble, share of total time (formula)"],
                ["relative", "bubble, relative to ideal compute (formula)"],
                ["idle", "idle share of the simulated timeline"],
                ["inner", "idle share inside each stage's own span"],
                ["makespan", "time for the whole step (forward pass = 1)"],
                ["peak0", "micro-batches stage 0 holds at once"],
                ["done", "passes finished at this time"]];
    var tbody = el("tbody");
    rows.forEach(function (r) {
      outs[r[0]] = el("td", { "data-out": r[0] });
      tbody.appendChild(el("tr", {}, [el("th", { text: r[1] }), outs[r[0]]]));
    });
    /* The legend names what the chosen schedule runs: a whole backward, or its two halves. */
    var legend = el("div", { "class": "legend", "data-out": "legend" });
    function drawLegend(split) {
      legend.innerHTML = "";
      var items = [[data.colours.forward, "forward (1 unit)", 1]];
      if (split) {
        items.push([data.colours.backward, "B: gradient of the input (1 unit)", 1]);
        items.push([data.colours.weight_grad, "W: gradient of the weights (1 unit)", 1]);
      } else {
        items.push([data.colours.backward, "backward (2 units)", 1]);
      }
      items.push([data.colours.forward, split ? "lighter: micro-batches fed from the last stage (DualPipe)" :
                  "lighter: second chunk (interleaved)", 0.55]);
      items.forEach(function (it) {
        append(legend, [el("span", {}, [el("span", { "class": "swatch", style: "background:" + it[0] + ";opacity:" + it[2] }), it[1]])]);
      });
    }
    var PHASE = ["F", "B", "W"];
    var phaseColour = [data.colours.forward, data.colours.backward, data.colours.weight_grad];
    var results = el("div", {}, [legend, chartBox, el("div", { "class": "explorer-table-wrap", "tabindex": "0", "role": "region", "aria-label": "Bubble and step figures (scrolls sideways)" }, [el("table", {}, [tbody])])]);
    var run = null, times = [], boxes = [];

    /* Each pass is five integers: stage, micro-batch, 2 x phase + chunk, start and end in 1/scale units. */
    function events(r) {
      var out = [], f = r.events;
      for (var i = 0; i < f.length; i += 5) out.push({ stage: f[i], mb: f[i + 1], phase: f[i + 2] >> 1, chunk: f[i + 2] & 1,
                                                       start: f[i + 3] / data.scale, end: f[i + 4] / data.scale });
      return out;
    }
    function draw() {
      chartBox.innerHTML = "";
      boxes = [];
      if (!run || run.error) return;
      var evs = events(run), p = Number(pSel.value);
      var W = Math.max(300, Math.min(900, chartBox.clientWidth || 640));
      var L = 58, R = 8, T = 6, rowH = Math.max(16, Math.min(30, 200 / p)), B = 26;
      var H = T + p * rowH + B;
      var span = run.makespan;
      function px(t) { return L + t / span * (W - L - R); }
      var chart = svg("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                               "aria-label": "Pipeline timeline: one row per stage, forward and backward passes in time" });
      for (var s = 0; s < p; s++) {
        chart.appendChild(svg("rect", { x: L, y: T + s * rowH + 1, width: W - L - R, height: rowH - 2, "class": "idle" }));
        chart.appendChild(svg("text", { x: L - 6, y: T + s * rowH + rowH / 2 + 4, "text-anchor": "end", text: "stage " + s }));
      }
      evs.forEach(function (e) {
        var x = px(e.start), w = px(e.end) - px(e.start);
        var g = svg("g", { "class": "pass", "data-stage": e.stage, "data-mb": e.mb, "data-phase": PHASE[e.phase],
                           "data-start": e.start, "data-end": e.end });
        g.appendChild(svg("rect", { x: x + 0.5, y: T + e.stage * rowH + 1, width: Math.max(0.5, w - 1), height: rowH - 2,
                                    fill: phaseColour[e.phase], opacity: e.chunk ? 0.55 : 1 }));
        if (w >= 12 && rowH >= 14) g.appendChild(svg("text", { x: x + w / 2, y: T + e.stage * rowH + rowH / 2 + 4,
                                                             "text-anchor": "middle", "font-size": Math.min(12, w - 2), text: String(e.mb) }));
        chart.appendChild(g);
        boxes.push({ node: g, e: e });
      });
      var tick = span <= 40 ? 5 : span <= 100 ? 10 : 20;
      for (var t = 0; t <= span + 1e-9; t += tick) chart.appendChild(svg("text", { x: px(t), y: H - 8, "text-anchor": "middle", text: String(t) }));
      chartBox.appendChild(chart);
      showStep();
    }
    function showStep() {
      if (!run || run.error) return;
      var t = times[Number(step.value)];
      var done = 0;
      boxes.forEach(function (b) {
        var finished = b.e.end <= t;
        if (finished) done++;
        b.node.style.opacity = finished ? "1" : "0.12";
      });
      stepOut.textContent = "t = " + t + " of " + run.makespan;
      outs.done.textContent = done + " of " + boxes.length;
    }
    function update() {
      run = data.runs[sched.value + "," + pSel.value + "," + mSel.value];
      if (run.error) {
        message.textContent = (/^this page/.test(run.error) ? "Not in this page's table: " : "Not a valid schedule: ") +
          run.error + ".";
        message.hidden = false;
        results.hidden = stepper.hidden = buttons.hidden = true;
        return;
      }
      message.hidden = true;
      results.hidden = stepper.hidden = buttons.hidden = false;
      /* The steps are the moments a pass ends (and the start). */
      var seen = { 0: true };
      times = [0];
      for (var i = 4; i < run.events.length; i += 5) {
        var t = run.events[i] / data.scale;
        if (!seen[t]) { seen[t] = true; times.push(t); }
      }
      times.sort(function (a, b) { return a - b; });
      drawLegend(/^(zb|dualpipe)/.test(sched.value));
      step.max = String(times.length - 1);
      step.value = String(times.length - 1);
      outs.share.textContent = fmtPct(run.share);
      outs.relative.textContent = fmtPct(run.relative);
      outs.idle.textContent = fmtPct(run.idle);
      outs.inner.textContent = fmtPct(run.inner);
      outs.makespan.textContent = String(run.makespan);
      outs.peak0.textContent = String(run.peak0);
      draw();
    }
    [sched, pSel, mSel].forEach(function (x) { x.addEventListener("change", function () { play.stop(); update(); }); });
    step.addEventListener("input", showStep);
    back.addEventListener("click", function () { play.stop(); step.value = String(Math.max(0, Number(step.value) - 1)); showStep(); });
    fwd.addEventListener("click", function () { play.stop(); step.value = String(Math.min(Number(step.max), Number(step.value) + 1)); showStep(); });
    end.addEventListener("click", function () { play.stop(); step.value = step.max; showStep(); });
    append(root, [controls, message, results]);
    update();
    onWidthChange(chartBox, draw);
  }

  /* ------------------------------------------------------------------ */
  /* Collective stepper: a ring all-reduce, reduce-scatter or all-gather  */
  /* ------------------------------------------------------------------ */
  /* Bytes: four significant digits in GB, or in MB below one gigabyte. */
  function fmtBytes(x) {
    if (x === 0) return "0 GB";
    if (Math.abs(x) < 1e9) return (x / 1e6).toPrecision(4) + " MB";
    return fmtGB(x / 1e9);
  }
  function bitCount(m) { var k = 0; while (m) { k += m & 1; m >>= 1; } return k; }
  /* A colour between white (share 0) and `hex` (share 1), for a cell's fill. */
  function mix(hex, share) {
    var c = [1, 3, 5].map(function (i) { return parseInt(hex.slice(i, i + 2), 16); });
    return "rgb(" + c.map(function (v) { return Math.round(255 + (v - 255) * share); }).join(",") + ")";
  }

  function collectiveExplorer(root, data) {
    var d = data.defaults;
    var kind = select("collective", data.collectives, d.collective);
    var pSel = select("p", data.p.map(function (x) { return [x, String(x)]; }), d.p);
    var buf = select("buffer", data.buffers.map(function (b, i) { return [i, b]; }), d.buffer);
    var step = el("input", { type: "range", name: "step", min: "0", max: "0", step: "1", value: "0",
                             "aria-label": "step of the collective" });
    var stepOut = el("span", { "class": "readout", "data-out": "step" });
    var back = el("button", { type: "button", name: "back", text: "\u25c0 step back" });
    var fwd = el("button", { type: "button", name: "forward", text: "step forward \u25b6" });
    var reset = el("button", { type: "button", name: "start", text: "start again" });
    var stepper = control("Step", step, stepOut);
    stepper.className = "wide";
    var play = player(step, function () { show(); }, 900);
    var controls = el("div", { "class": "explorer-controls" }, [
      control("Collective", kind), control("GPUs in the ring p", pSel), control("Buffer on each GPU", buf),
      stepper, el("div", { "class": "buttons wide" }, [play.button, back, fwd, reset]),
    ]);
    var phase = el("p", { "class": "phase", "aria-live": "polite", "data-out": "phase" });
    var gridWrap = el("div", { "class": "explorer-table-wrap", "tabindex": "0", "role": "region", "aria-label": "Chunks on each GPU (scrolls sideways)" });
    var bytesWrap = el("div", { "class": "explorer-table-wrap", "tabindex": "0", "role": "region", "aria-label": "Bytes sent (scrolls sideways)" });
    var gridNote = el("p", { "class": "note", "data-out": "grid-note" });
    var key = "", run = null, cells = [], sendsOut = [], sentOut = [], formulaOut = null;

    function build() {
      var p = Number(pSel.value);
      key = kind.value + "," + p;
      run = data.runs[key];
      step.max = String(run.steps.length);
      step.value = "0";
      var top = el("tr", {}, [el("td", {}), el("th", { scope: "colgroup", colspan: String(p), text: "chunk" }), el("td", {})]);
      var head = el("tr", {}, [el("th", { scope: "col", text: "GPU" })]);
      for (var c = 0; c < p; c++) head.appendChild(el("th", { scope: "col", "aria-label": "chunk " + c, text: String(c) }));
      head.appendChild(el("th", { scope: "col", text: "sends next" }));
      var body = el("tbody");
      cells = []; sendsOut = [];
      for (var r = 0; r < p; r++) {
        var tr = el("tr", {}, [el("th", { scope: "row", text: "GPU " + r })]);
        cells.push([]);
        for (c = 0; c < p; c++) {
          var td = el("td", { "class": "chunk", "data-gpu": r, "data-chunk": c });
          cells[r].push(td);
          tr.appendChild(td);
        }
        sendsOut.push(el("td", { "data-out": "sends", "data-gpu": r }));
        tr.appendChild(sendsOut[r]);
        body.appendChild(tr);
      }
      var what = kind.value === "all-gather" ? "\u2713: the GPU has that chunk (a shard of the gathered buffer)." :
        "k/" + p + ": the chunk holds the sum of k GPUs' values; " + p + "/" + p + " is the finished sum.";
      gridNote.textContent = "Each GPU's buffer, cut into " + p + " chunks. " + what +
        " A framed cell has just arrived from the GPU before it in the ring; the last column is the chunk each GPU sends in the next step.";
      gridWrap.innerHTML = "";
      gridWrap.appendChild(el("table", { "class": "explorer-ring" }, [
        el("caption", { "class": "visually-hidden", text: "Chunks on each GPU" }),
        el("thead", {}, [top, head]), body]));
      var bbody = el("tbody");
      sentOut = [];
      for (r = 0; r < p; r++) {
        sentOut.push(el("td", { "data-out": "sent", "data-gpu": r }));
        bbody.appendChild(el("tr", {}, [el("th", { scope: "row", text: "GPU " + r + " \u2192 GPU " + ((r + 1) % p) }), sentOut[r]]));
      }
      formulaOut = el("td", { "data-out": "formula" });
      var factor = kind.value === "all-reduce" ? "2(p\u22121)/p" : "(p\u22121)/p";
      bbody.appendChild(el("tr", { "class": "formula" }, [el("th", { scope: "row", text: "ring formula for the whole collective, " + factor + " \u00d7 buffer" }), formulaOut]));
      bytesWrap.innerHTML = "";
      bytesWrap.appendChild(el("table", {}, [el("caption", { text: "Bytes each GPU has sent so far." }), bbody]));
      show();
    }
    function show() {
      var p = Number(pSel.value), s = Number(step.value), n = run.steps.length, full = (1 << p) - 1;
      var st = s > 0 ? run.steps[s - 1] : null, masks = st ? st.mask : run.start;
      var gather = kind.value === "all-gather";
      for (var r = 0; r < p; r++) {
        for (var c = 0; c < p; c++) {
          var m = masks[r][c], k = bitCount(m), td = cells[r][c];
          td.setAttribute("data-mask", m);
          td.textContent = gather ? (m ? "\u2713" : "\u2013") : k + "/" + p;
          var done = m === full;
          td.style.background = done ? data.colours.chunk : m ? mix(data.colours.chunk, 0.1 + 0.4 * k / p) : "#ffffff";
          td.style.color = done ? "#ffffff" : m ? "#000000" : "#555555";
          td.style.fontWeight = done ? "700" : "400";
          var from = (r - 1 + p) % p;
          td.classList.toggle("recv", !!st && st.sends[from] === c);
          var names = [];
          for (var j = 0; j < p; j++) if (m & (1 << j)) names.push(j);
          td.title = gather ? (m ? "has chunk " + c : "chunk " + c + " not here yet") :
            "chunk " + c + ": the sum of GPU " + names.join(", ");
        }
        var next = s < n ? run.steps[s] : null;
        sendsOut[r].textContent = next ? "chunk " + next.sends[r] : "\u2013";
        sendsOut[r].title = next ? "to GPU " + ((r + 1) % p) : "";
        sentOut[r].textContent = fmtBytes(s > 0 ? run.sent[Number(buf.value)][s - 1][r] : 0);
      }
      formulaOut.textContent = fmtBytes(run.formula[Number(buf.value)]);
      stepOut.textContent = s + " of " + n;
      var label = st ? st.phase : null;
      if (s === 0) {
        phase.textContent = gather ? "Start: each GPU holds one chunk, its shard; the table shows what each step will send." :
          "Start: each GPU holds its own values in every chunk; the last column shows what step 1 will send.";
      } else if (s === n) {
        phase.textContent = "Done after " + n + " steps: " + (kind.value === "reduce-scatter" ?
          "each GPU holds one finished chunk of the sum." : "every GPU holds every chunk" +
          (gather ? "." : " of the sum."));
      } else {
        phase.textContent = "Step " + s + " (" + label + "): every GPU sent one chunk to the next GPU, which " +
          (label === "reduce-scatter" ? "added it to its own copy." : "kept it as its copy.");
      }
    }
    kind.addEventListener("change", function () { play.stop(); build(); });
    pSel.addEventListener("change", function () { play.stop(); build(); });
    buf.addEventListener("change", show);
    step.addEventListener("input", show);
    back.addEventListener("click", function () { play.stop(); step.value = String(Math.max(0, Number(step.value) - 1)); show(); });
    fwd.addEventListener("click", function () { play.stop(); step.value = String(Math.min(Number(step.max), Number(step.value) + 1)); show(); });
    reset.addEventListener("click", function () { play.stop(); step.value = "0"; show(); });
    append(root, [controls, phase, gridNote, gridWrap, bytesWrap]);
    build();
  }

  /* ------------------------------------------------------------------ */
  /* FSDP timeline: gather, compute, free, prefetch, reduce-scatter       */
  /* ------------------------------------------------------------------ */
  function fsdpExplorer(root, data) {
    var d = data.defaults;
    var mSel = select("m", data.m.map(function (x) { return [x, String(x)]; }), d.m);
    var rSel = select("ratio", data.ratio.map(function (x) { return [x, x + " \u00d7 a forward pass"]; }), d.ratio);
    function checkbox(name, text, on) {
      var box = el("input", { type: "checkbox", name: name });
      box.checked = on;
      var label = el("label", { "class": "checkbox" }, [box, " " + text]);
      label.style.flexDirection = "row";
      label.style.alignItems = "center";
      return [box, label];
    }
    var pre = checkbox("prefetch", "prefetch the next unit", d.prefetch);
    var resh = checkbox("reshard", "free the weights after the forward pass", d.reshard);
    var step = el("input", { type: "range", name: "step", min: "0", max: "0", step: "1", value: "0", "aria-label": "time step" });
    var stepOut = el("span", { "class": "readout", "data-out": "time" });
    var back = el("button", { type: "button", name: "back", text: "\u25c0 step back" });
    var fwd = el("button", { type: "button", name: "forward", text: "step forward \u25b6" });
    var end = el("button", { type: "button", name: "end", text: "whole step" });
    var stepper = control("Time", step, stepOut);
    stepper.className = "wide";
    var play = player(step, function () { showStep(); }, 450);
    var controls = el("div", { "class": "explorer-controls" }, [
      control("Micro-batches per step m", mSel), control("All-gather (and reduce-scatter) per unit", rSel),
      pre[1], resh[1], stepper, el("div", { "class": "buttons wide" }, [play.button, back, fwd, end]),
    ]);
    var phase = el("p", { "class": "phase", "aria-live": "polite", "data-out": "phase" });
    var chartBox = el("div", { "class": "explorer-chart" });
    var outs = {};
    var rows = [["makespan", "time for the whole step (forward pass of a unit = 1)"],
                ["compute", "of which computing"],
                ["exposed", "of which waiting for communication"],
                ["gathers", "all-gathers per step"],
                ["reduces", "reduce-scatters per step"],
                ["peak", "most units held whole at once"],
                ["held", "units held whole at this time"],
                ["done", "passes and collectives finished at this time"]];
    var tbody = el("tbody");
    rows.forEach(function (r) {
      outs[r[0]] = el("td", { "data-out": r[0] });
      tbody.appendChild(el("tr", {}, [el("th", { text: r[1] }), outs[r[0]]]));
    });
    var c = data.colours;
    var colour = [c.gather, c.gather, c.reduce, c.forward, c.backward];
    var short = ["AG", "AG", "RS", "F", "B"];
    var names = ["all-gather for the forward", "all-gather for the backward", "reduce-scatter of the gradients",
                 "forward", "backward"];
    var legend = el("div", { "class": "legend" }, [
      el("span", {}, [el("span", { "class": "swatch", style: "background:" + c.gather }), "all-gather of a unit's weights (AG)"]),
      el("span", {}, [el("span", { "class": "swatch", style: "background:" + c.reduce }), "reduce-scatter of its gradients (RS)"]),
      el("span", {}, [el("span", { "class": "swatch", style: "background:" + c.forward }), "forward (F, 1 unit)"]),
      el("span", {}, [el("span", { "class": "swatch", style: "background:" + c.backward }), "backward (B, 2 units)"]),
    ]);
    var results = el("div", {}, [legend, chartBox, el("div", { "class": "explorer-table-wrap", "tabindex": "0", "role": "region",
                                                              "aria-label": "Step figures (scrolls sideways)" }, [el("table", {}, [tbody])])]);
    var run = null, times = [], boxes = [], heldLine = null, marker = null, px = null;

    function events(r) {
      var out = [], f = r.events;
      for (var i = 0; i < f.length; i += 5) out.push({ kind: f[i], unit: f[i + 1], mb: f[i + 2],
                                                       start: f[i + 3] / data.scale, end: f[i + 4] / data.scale });
      return out;
    }
    function heldAt(t) {
      var h = 0;
      run.held.forEach(function (p) { if (p[0] / data.scale <= t + 1e-9) h = p[1]; });
      return h;
    }
    function draw() {
      chartBox.innerHTML = "";
      boxes = [];
      var evs = events(run);
      var W = Math.max(300, Math.min(900, chartBox.clientWidth || 640));
      var L = 84, R = 8, T = 6, rowH = 30, gap = 10, memH = 48, B = 26;
      var H = T + 2 * rowH + gap + memH + B;
      var span = run.makespan;
      px = function (t) { return L + t / span * (W - L - R); };
      var chart = svg("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
                               "aria-label": "FSDP timeline: collectives on one row, computation on the next, and the units held whole below" });
      var rowNames = ["collectives", "compute"];
      for (var r = 0; r < 2; r++) {
        chart.appendChild(svg("rect", { x: L, y: T + r * rowH + 1, width: W - L - R, height: rowH - 2, "class": "idle" }));
        chart.appendChild(svg("text", { x: L - 6, y: T + r * rowH + rowH / 2 + 4, "text-anchor": "end", text: rowNames[r] }));
      }
      evs.forEach(function (e) {
        var row = e.kind <= 2 ? 0 : 1, x = px(e.start), w = px(e.end) - px(e.start);
        var g = svg("g", { "class": "pass", "data-kind": ["gather-F", "gather-B", "reduce-scatter", "forward", "backward"][e.kind],
                           "data-unit": e.unit, "data-mb": e.mb, "data-start": e.start, "data-end": e.end });
        g.appendChild(svg("rect", { x: x + 0.5, y: T + row * rowH + 1, width: Math.max(0.5, w - 1), height: rowH - 2,
                                    fill: colour[e.kind], opacity: e.mb % 2 ? 0.6 : 1 }));
        g.appendChild(svg("title", { text: names[e.kind] + ", unit " + e.unit + ", micro-batch " + e.mb }));
        var label = short[e.kind] + e.unit;
        if (w >= 8 * label.length) g.appendChild(svg("text", { x: x + w / 2, y: T + row * rowH + rowH / 2 + 4, "text-anchor": "middle",
                                                            "font-size": 11, text: label }));
        chart.appendChild(g);
        boxes.push({ node: g, e: e });
      });
      /* Units held whole: a step line over the step, 0 to the units of the model. */
      var y0 = T + 2 * rowH + gap + memH, yTop = T + 2 * rowH + gap;
      var qy = function (v) { return y0 - v / data.units * (memH - 4); };
      chart.appendChild(svg("text", { x: L - 6, y: yTop + memH / 2, "text-anchor": "end", text: "units held" }));
      chart.appendChild(svg("text", { x: L - 6, y: yTop + memH / 2 + 14, "text-anchor": "end", text: "whole" }));
      chart.appendChild(svg("line", { x1: L, x2: W - R, y1: y0, y2: y0, "class": "grid" }));
      chart.appendChild(svg("line", { x1: L, x2: W - R, y1: qy(data.units), y2: qy(data.units), "class": "grid" }));
      chart.appendChild(svg("text", { x: L + 4, y: qy(data.units) + 12, "font-size": 11, text: "all " + data.units + " units" }));
      var pts = [];
      run.held.forEach(function (p, i) {
        var t = p[0] / data.scale, v = p[1];
        if (i > 0) pts.push(px(t).toFixed(1) + "," + qy(run.held[i - 1][1]).toFixed(1));
        pts.push(px(t).toFixed(1) + "," + qy(v).toFixed(1));
      });
      heldLine = svg("polyline", { points: pts.join(" "), fill: "none", stroke: c.gather, "stroke-width": 2, "data-out": "held-line" });
      chart.appendChild(heldLine);
      marker = svg("line", { y1: T, y2: y0, stroke: "currentColor", "stroke-dasharray": "4 3" });
      chart.appendChild(marker);
      var tick = span <= 20 ? 2 : span <= 50 ? 5 : 10;
      for (var t = 0; t <= span + 1e-9; t += tick) chart.appendChild(svg("text", { x: px(t), y: H - 8, "text-anchor": "middle", text: String(t) }));
      chartBox.appendChild(chart);
      showStep();
    }
    function showStep() {
      var t = times[Number(step.value)], done = 0;
      boxes.forEach(function (b) {
        var finished = b.e.end <= t + 1e-9;
        if (finished) done++;
        b.node.style.opacity = finished ? "1" : "0.15";
      });
      if (marker) { marker.setAttribute("x1", px(t)); marker.setAttribute("x2", px(t)); }
      stepOut.textContent = "t = " + t + " of " + run.makespan;
      outs.done.textContent = done + " of " + boxes.length;
      outs.held.textContent = String(heldAt(t));
      var running = boxes.filter(function (b) { return b.e.start <= t + 1e-9 && b.e.end > t + 1e-9; })
        .map(function (b) { return names[b.e.kind] + " of unit " + b.e.unit; });
      phase.textContent = t >= run.makespan ? "Step done: every unit's gradients are reduce-scattered; each GPU updates its own shard." :
        (running.length ? "Running now: " + running.join("; ") + "." : "At t = " + t + ".");
    }
    function update() {
      var key = mSel.value + "," + Number(rSel.value) + "," + (pre[0].checked ? 1 : 0) + "," + (resh[0].checked ? 1 : 0);
      run = data.runs[key];
      var seen = { 0: true };
      times = [0];
      for (var i = 4; i < run.events.length; i += 5) {
        var t = run.events[i] / data.scale;
        if (!seen[t]) { seen[t] = true; times.push(t); }
      }
      times.sort(function (a, b) { return a - b; });
      step.max = String(times.length - 1);
      step.value = String(times.length - 1);
      ["makespan", "compute", "exposed"].forEach(function (k) { outs[k].textContent = String(run[k]); });
      ["gathers", "reduces", "peak"].forEach(function (k) { outs[k].textContent = String(run[k]); });
      draw();
    }
    [mSel, rSel, pre[0], resh[0]].forEach(function (x) { x.addEventListener("change", function () { play.stop(); update(); }); });
    step.addEventListener("input", showStep);
    back.addEventListener("click", function () { play.stop(); step.value = String(Math.max(0, Number(step.value) - 1)); showStep(); });
    fwd.addEventListener("click", function () { play.stop(); step.value = String(Math.min(Number(step.max), Number(step.value) + 1)); showStep(); });
    end.addEventListener("click", function () { play.stop(); step.value = step.max; showStep(); });
    append(root, [controls, phase, results]);
    update();
    onWidthChange(chartBox, draw);
  }

  /* ------------------------------------------------------------------ */
  /* Planner: the plans of `python -m solutions.plan`, made at build time */
  /* ------------------------------------------------------------------ */
  var SCHEDULES = { "1f1b": "1F1B", gpipe: "GPipe", interleaved: "interleaved 1F1B", "zb-h1": "ZB-H1", "zb-h2": "ZB-H2" };
  /* A layout in words, from the planner's JSON `layout` object. */
  function describeLayout(l) {
    var axes = ["TP " + l.tp];
    if (l.cp > 1) axes.push("CP " + l.cp);
    axes.push("PP " + l.pp, "DP " + l.dp);
    var words = [axes.join(" \u00d7 ")];
    if (l.ep * (l.etp || 1) > 1) words.push("EP " + l.ep + (l.etp > 1 ? " \u00d7 ETP " + l.etp : ""));
    words.push("ZeRO stage " + l.zero);
    if (l.pp > 1) {
      words.push((SCHEDULES[l.schedule] || l.schedule) +
                 (l.virtual_stages > 1 ? " with " + l.virtual_stages + " chunks per stage" : "") + " pipeline schedule");
    }
    words.push("micro-batches of " + l.micro_batch + (l.micro_batch === 1 ? " sequence" : " sequences"));
    words.push(l.recompute === "none" ? "no recomputation" : l.recompute + " recomputation");
    return words.join(", ");
  }
  function fmtSeconds(s) { return s >= 1 ? s.toPrecision(4) + " s" : (1000 * s).toPrecision(3) + " ms"; }
  var MEBI = 1048576;
  function fmtTokens(x) {
    return x >= MEBI && x % MEBI === 0 ? (x / MEBI) + "M tokens (" + x.toLocaleString("en-US") + ")" : x.toLocaleString("en-US") + " tokens";
  }

  function plannerExplorer(root, data) {
    var d = data.defaults;
    function billions(x) { return (x >= 1e10 ? Math.round(x / 1e9) : (x / 1e9).toPrecision(2)) + "B"; }
    var model = select("model", data.models.map(function (m, i) {
      /* "Chinchilla (70B)"; "Llama 3 70B" names its size; a mixture of experts gives both of its sizes */
      if (m.active) return [i, m.name + " (" + billions(m.params) + ", " + billions(m.active) + " active)"];
      return [i, / \d+B$/.test(m.name) ? m.name : m.name + " (" + billions(m.params) + ")"];
    }),
                       data.models.findIndex(function (m) { return m.name === d.model; }));
    var gpu = select("gpu", data.gpus.map(function (g, i) { return [i, g.name + " (" + g.memory + ")"]; }),
                     data.gpus.findIndex(function (g) { return g.name === d.gpu; }));
    var count = select("count", data.counts.map(function (n, i) { return [i, n.toLocaleString("en-US")]; }), data.counts.indexOf(d.count));
    var batch = select("batch", data.batch_tokens.map(function (b, i) { return [i, fmtTokens(b)]; }), data.batch_tokens.indexOf(d.batch_tokens));
    var precision = select("precision", data.precisions.map(function (p, i) { return [i, p[1]]; }),
                           Math.max(0, data.precisions.findIndex(function (p) { return p[0] === d.precision; })));
    var controls = el("div", { "class": "explorer-controls" }, [
      control("Model", model), control("GPU", gpu), control("Number of GPUs", count),
      control("Batch per optimizer step", batch), control("Precision", precision),
    ]);

    var headline = el("div", { "class": "planner-headline", "aria-live": "polite" });
    var title = el("p", { "class": "planner-title", "data-out": "title" });
    var layoutOut = el("p", { "class": "planner-layout", "data-out": "layout" });
    var facts = {}, factRows = {}, factNames = {};
    var factList = el("dl", { "class": "planner-facts" });
    [["step", "step time"], ["tps", "tokens per second"], ["tps_gpu", "tokens per second per GPU"],
     ["tflops_gpu", "model TFLOP/s per GPU"],
     ["mfu", "model FLOPs utilisation, of the BF16 peak"], ["mfu_precision", "model FLOPs utilisation, of the precision's peak"],
     ["days", "days to train"], ["memory", "memory per GPU"]].forEach(function (f) {
      facts[f[0]] = el("dd", { "data-out": f[0] });
      factNames[f[0]] = el("dt", { text: f[1] });
      factRows[f[0]] = el("div", {}, [factNames[f[0]], facts[f[0]]]);
      factList.appendChild(factRows[f[0]]);
    });
    var message = el("div", { "class": "message", role: "alert", "data-out": "message" });
    append(headline, [title, layoutOut, factList, message]);

    function tableWrap(label, table) {
      return el("div", { "class": "explorer-table-wrap", tabindex: "0", role: "region", "aria-label": label + " (scrolls sideways)" }, [table]);
    }
    var timeBody = el("tbody"), memBody = el("tbody"), altBody = el("tbody");
    var timeTable = el("table", { "class": "planner-time" }, [el("caption", { text: "Where a step's time goes (exposed time on the critical path)" }),
      el("thead", {}, [el("tr", {}, [el("th", { scope: "col", text: "part" }), el("th", { scope: "col", text: "time" }), el("th", { scope: "col", text: "share" })])]), timeBody]);
    var memTable = el("table", { "class": "planner-memory" }, [el("caption", { text: "Memory on the busiest GPU" }),
      el("thead", {}, [el("tr", {}, [el("th", { scope: "col", text: "part" }), el("th", { scope: "col", text: "per GPU" })])]), memBody]);
    var altTable = el("table", { "class": "planner-alternatives" }, [el("caption", { text: "The next fastest layouts" }),
      el("thead", {}, [el("tr", {}, [el("th", { scope: "col", text: "layout" }), el("th", { scope: "col", text: "step" }), el("th", { scope: "col", text: "MFU (BF16 peak)" })])]), altBody]);
    var whyList = el("ul", { "class": "planner-why", "data-out": "why" });
    /* The published runs like the plan (planner_form.py keeps each distinct list once per GPU, in its chunk's tracks). */
    var trackNote = el("p", { "class": "note", "data-out": "track-note" });
    var trackBody = el("tbody", { "data-out": "track" });
    var trackCaption = el("caption", { "data-out": "track-caption" });
    var TRACK_COLUMNS = ["published", "predicted", "error", "set"];
    var trackTable = el("table", { "class": "planner-runs-like" }, [trackCaption,
      el("thead", {}, [el("tr", {}, ["run"].concat(TRACK_COLUMNS).map(function (h) { return el("th", { scope: "col", text: h }); }))]), trackBody]);
    var trackWrap = tableWrap("Published runs like this one", trackTable);
    var adviceHead = el("p", { "class": "note", text: "What to change:" });
    var adviceList = el("ul", { "data-out": "advice" });
    var commandOut = el("code", { "data-out": "command" });
    var details = el("div", { "class": "planner-details" }, [
      tableWrap("Step time", timeTable), tableWrap("Memory", memTable), tableWrap("Other layouts", altTable),
      el("p", { "class": "note", text: "Why the other layouts lose, as the planner says it:" }), whyList,
      trackNote, trackWrap,
      adviceHead, adviceList,
      el("p", { "class": "note" }, ["The same plan from a shell, as JSON: ", commandOut]),
    ]);

    var PARTS = [["compute", "compute"], ["tp", "tensor-parallel traffic"], ["cp", "context-parallel traffic"],
                 ["pp", "pipeline sends"], ["dp", "data-parallel / ZeRO traffic"], ["ep", "expert all-to-alls"],
                 ["offload", "activation offloading"], ["bubble", "pipeline bubble"]];
    function row(body, cells, attrs) {
      body.appendChild(el("tr", attrs || {}, [el("th", { scope: "row", text: cells[0] })].concat(cells.slice(1).map(function (c) { return el("td", { text: c }); }))));
    }
    /* Layouts travel as lists of values in the order of data.layout_keys (planner_form.py). */
    function unpack(values) {
      var layout = {};
      data.layout_keys.forEach(function (k, i) { layout[k] = values[i]; });
      return layout;
    }
    /* Each GPU's plans ride in a script of their own (book/_ext/explore.py), loaded when it is picked. */
    var kind = root.getAttribute("data-explorer"), chunkSrc = root.getAttribute("data-chunk-src"), chunks = {};
    function withChunk(i, then) {
      if (chunks[i]) { then(chunks[i]); return; }
      root.setAttribute("aria-busy", "true");
      var script = document.createElement("script");
      script.src = chunkSrc.replace("{i}", String(i));
      script.onload = function () {
        chunks[i] = window.courseExplorerData[kind + "-" + i];
        root.removeAttribute("aria-busy");
        then(chunks[i]);
      };
      script.onerror = function () {
        root.removeAttribute("aria-busy");
        message.textContent = "The plans for this GPU could not be loaded (" + script.src.split("?")[0] + ").";
        message.hidden = false;
      };
      document.head.appendChild(script);
    }
    function update() {
      var gi = Number(gpu.value);
      withChunk(gi, function (chunk) { if (Number(gpu.value) === gi) show(chunk); });
    }
    function show(chunk) {
      var choice = [model.value, gpu.value, count.value, batch.value, precision.value];
      var p = chunk.plans[Number(model.value)][Number(count.value)][Number(batch.value)][Number(precision.value)];
      var m = data.models[Number(model.value)], g = data.gpus[Number(gpu.value)], n = data.counts[Number(count.value)];
      var prec = data.precisions[Number(precision.value)][0].toUpperCase();
      title.textContent = m.name + " on " + n.toLocaleString("en-US") + " " + g.name + " in " + prec + ", " +
        fmtTokens(data.batch_tokens[Number(batch.value)]).split(" (")[0] + " per step, trained on " +
        data.tokens_per_param + " tokens per parameter";
      root.setAttribute("data-shown", choice.join(","));
      commandOut.textContent = p.command;
      root.setAttribute("data-command", p.command);
      [timeBody, memBody, altBody, whyList, adviceList, trackBody].forEach(function (b) { b.innerHTML = ""; });
      if (p.error) {
        message.textContent = "The planner refuses this choice: " + p.error;
        message.hidden = false;
        layoutOut.textContent = "";
        layoutOut.removeAttribute("data-layout");
        factList.hidden = details.hidden = true;
        return;
      }
      factList.hidden = details.hidden = false;
      var layout = unpack(p.layout);
      layoutOut.textContent = "Fastest layout: " + describeLayout(layout) + ".";
      layoutOut.setAttribute("data-layout", JSON.stringify(layout));
      facts.step.textContent = fmtSeconds(p.step_time_s);
      facts.tps.textContent = Math.round(p.tokens_per_s).toLocaleString("en-US");
      facts.tps_gpu.textContent = Math.round(p.tokens_per_s_per_gpu).toLocaleString("en-US");
      facts.tflops_gpu.textContent = Math.round(p.tflops_per_gpu).toLocaleString("en-US");
      facts.mfu.textContent = (100 * p.predicted_mfu).toFixed(1) + " %";
      factNames.mfu_precision.textContent = "model FLOPs utilisation, of the " + prec + " peak";
      facts.mfu_precision.textContent = (100 * p.mfu_precision_peak).toFixed(1) + " %";
      factRows.mfu_precision.hidden = prec === "BF16";
      facts.days.textContent = p.days.toPrecision(4);
      var usable = fmtGiB(p.memory.usable_bytes) + " usable";  /* the planner's: what CUDA allocates, less a reserve */
      facts.memory.textContent = fmtGiB(p.memory_per_gpu_bytes) + " of " + usable;
      var fits = p.memory.fits;
      if (!fits) {
        message.textContent = "No layout fits in the " + usable + " per GPU; this is the least hungry, and it does not fit. " +
          "See what to change below.";
      }
      message.hidden = fits;
      PARTS.forEach(function (q) {
        var t = p.breakdown_s[q[0]];
        if (t > 0 || q[0] === "compute") row(timeBody, [q[1], fmtSeconds(t), (100 * t / p.step_time_s).toFixed(1) + " %"], { "data-part": q[0] });
      });
      row(timeBody, ["whole step", fmtSeconds(p.step_time_s), "100 %"], { "class": "total" });
      [["weights_bytes", "weights"], ["grads_bytes", "gradients"], ["optimizer_bytes", "optimizer state"],
       ["activation_bytes", "activations"]].forEach(function (q) { row(memBody, [q[1], fmtGiB(p.memory[q[0]])]); });
      row(memBody, ["total", fmtGiB(p.memory_per_gpu_bytes) + " of " + usable + (fits ? "" : ": does not fit")], { "class": "total" });
      p.alternatives.forEach(function (a) {
        row(altBody, [describeLayout(unpack(a.layout)), fmtSeconds(a.step_time_s), (100 * a.predicted_mfu).toFixed(1) + " %"]);
      });
      p.why_others_lose.forEach(function (w) { whyList.appendChild(el("li", { text: w })); });
      p.advice.forEach(function (w) { adviceList.appendChild(el("li", { text: w })); });
      adviceHead.hidden = adviceList.hidden = !p.advice.length;
      var track = chunk.tracks[p.track];
      track.runs.forEach(function (r) {
        var cells = [Math.round(r.published_tokens_per_s_per_gpu).toLocaleString("en-US"),
          Math.round(r.predicted_tokens_per_s_per_gpu).toLocaleString("en-US"),
          (r.error >= 0 ? "+" : "") + (100 * r.error).toFixed(1) + " %", r.set];
        trackBody.appendChild(el("tr", {}, [el("th", { scope: "row", text: r.name })].concat(cells.map(function (c, i) {
          return el("td", { text: c, "data-label": TRACK_COLUMNS[i] });
        }))));
      });
      trackCaption.textContent = "How far the model has been from published runs like this one (" + track.match +
        "): tokens/s per GPU";
      trackNote.textContent = "No published run on the " + g.name + " to compare with: the model has not been " +
        "checked against one, so its figures rest on the datasheet alone.";
      trackWrap.hidden = !track.runs.length;
      trackNote.hidden = !!track.runs.length;
    }
    [model, gpu, count, batch, precision].forEach(function (x) { x.addEventListener("change", update); });
    append(root, [headline, controls, details]);
    update();
  }

  var EXPLORERS = { chinchilla: chinchilla, memory: memoryExplorer, pipeline: pipelineExplorer,
                    collectives: collectiveExplorer, fsdp: fsdpExplorer, planner: plannerExplorer };

  function start(root, kind, data) {
    var loading = root.querySelector(".explorer-loading");
    if (loading) loading.remove();
    EXPLORERS[kind](root, data);
    root.setAttribute("data-ready", "true");
  }
  /* A large table rides in a script of its own (book/_ext/explore.py, DEFERRED), fetched when the
     explorer comes near the window: a script element, since fetch() is refused from a folder on disk. */
  function startDeferred(root, kind) {
    var loaded = false;
    function load() {
      if (loaded) return;
      loaded = true;
      var script = document.createElement("script");
      script.src = root.getAttribute("data-src");
      script.onload = function () { start(root, kind, window.courseExplorerData[kind]); };
      document.head.appendChild(script);
    }
    if (!("IntersectionObserver" in window)) { load(); return; }
    var seen = new IntersectionObserver(function (entries) {
      if (entries.some(function (e) { return e.isIntersecting; })) { seen.disconnect(); load(); }
    }, { rootMargin: "600px 0px" });
    seen.observe(root);
  }

  function init() {
    var roots = document.querySelectorAll(".explorer[data-explorer]");
    Array.prototype.forEach.call(roots, function (root) {
      var kind = root.getAttribute("data-explorer");
      if (!EXPLORERS[kind]) return;
      var script = root.querySelector("script.explorer-data");
      if (script) start(root, kind, JSON.parse(script.textContent));
      else if (root.getAttribute("data-src")) startDeferred(root, kind);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
