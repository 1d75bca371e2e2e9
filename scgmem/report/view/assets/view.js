// The run viewer's core: data loading, DOM helpers, routing, and the question list.
// Every string from a run reaches the page through SCGV.txt (a text node): nothing from a run is
// ever parsed as HTML, and no attribute but title holds run data. data/*.js files are loaded by
// <script src> (file:// allows no fetch), their names built from integers only.
"use strict";
var SCGV = (function () {
  var S = {store: {}, waiting: {}, filters: {}, sorts: {}, pages: {}, PAGE: 200};
  var CATS = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"};
  S.CATS = CATS;

  // The one place data becomes DOM: a text node (tests swap it for an HTML-parsing variant to
  // show that the hostile-payload test fails on a view that does not escape).
  // Lookups by a key from a run ("__proto__" and "constructor" are keys like any other): own
  // properties only, and maps built here have no prototype.
  S.own = function (o, k) { return o && Object.prototype.hasOwnProperty.call(o, k) ? o[k] : undefined; };
  S.map = function () { return Object.create(null); };

  S.txt = function (s) { return document.createTextNode(s === null || s === undefined ? "" : String(s)); };

  // h("tag.class", {attr: value, onclick: fn}, [children]): children are nodes or strings (as text).
  S.h = function (spec, attrs, children) {
    var parts = spec.split("."), el = document.createElement(parts[0]);
    if (parts.length > 1) el.className = parts.slice(1).join(" ");
    S.attrs(el, attrs);
    S.add(el, children);
    return el;
  };
  S.attrs = function (el, attrs) {
    for (var k in attrs || {}) {
      if (!Object.prototype.hasOwnProperty.call(attrs, k) || attrs[k] === undefined || attrs[k] === null) continue;
      if (k.slice(0, 2) === "on") el.addEventListener(k.slice(2), attrs[k]);
      else if (k === "value") el.value = attrs[k];
      else el.setAttribute(k, String(attrs[k]));
    }
  };
  S.add = function (el, children) {
    if (children === undefined || children === null) return el;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (c) {
      if (c === null || c === undefined || c === false) return;
      el.appendChild(typeof c === "object" && c.nodeType ? c : S.txt(c));
    });
    return el;
  };
  S.svg = function (tag, attrs, children) {
    var el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    S.attrs(el, attrs);
    S.add(el, children);
    return el;
  };
  S.link = function (hash, children, cls) { return S.h("a" + (cls ? "." + cls : ""), {href: hash}, children); };
  S.clear = function (el) { while (el.firstChild) el.removeChild(el.firstChild); return el; };
  S.num = function (x, digits) { return x === null || x === undefined ? "–" : Number(x).toFixed(digits === undefined ? 2 : digits); };
  S.pct = function (x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1); };
  S.ci = function (ci) { return ci && ci.length === 2 ? "[" + S.num(ci[0], 1) + ", " + S.num(ci[1], 1) + "]" : ""; };

  // ---- data files
  S.receive = function (name, obj) {
    S.store[name] = obj;
    (S.waiting[name] || []).forEach(function (cb) { cb(obj); });
    delete S.waiting[name];
  };
  S.need = function (name, cb) {
    if (!/^(index|t[0-9]+|r[0-9]+_c[0-9]+)$/.test(name)) throw new Error("bad data name");
    if (Object.prototype.hasOwnProperty.call(S.store, name)) { cb(S.store[name]); return; }
    if (S.waiting[name]) { S.waiting[name].push(cb); return; }
    S.waiting[name] = [cb];
    var s = document.createElement("script");
    s.src = "data/" + name + ".js";
    s.onerror = function () { S.receive(name, null); };
    document.head.appendChild(s);
  };
  S.needAll = function (names, cb) {
    var left = names.length, out = {};
    if (!left) { cb(out); return; }
    names.forEach(function (n) { S.need(n, function (o) { out[n] = o; if (--left === 0) cb(out); }); });
  };

  // ---- rows: index.rows[run][k] is an array named by index.columns
  S.row = function (run, k) {
    var r = S.index.rows[run][k], o = {run: run, k: k};
    S.index.columns.forEach(function (c, i) { o[c] = r[i]; });
    o.sample = S.index.samples[o.conv];
    return o;
  };
  S.rows = function (run) {
    if (!S.rowCache) S.rowCache = {};
    if (!S.rowCache[run]) S.rowCache[run] = S.index.rows[run].map(function (_, k) { return S.row(run, k); });
    return S.rowCache[run];
  };
  S.runLabel = function (i) { return "[" + i + "] " + S.index.runs[i].label; };

  // ---- sortable table: cols [{key, label, num, fmt, get}], rows [objects]; onclick(row) per row
  S.table = function (id, cols, rows, rowLink) {
    var sort = S.sorts[id] || {key: null, dir: 1};
    if (sort.key !== null) {
      var col = cols.filter(function (c) { return c.key === sort.key; })[0];
      var get = col.get || function (r) { return r[col.key]; };
      rows = rows.slice().sort(function (a, b) {
        var x = get(a), y = get(b);
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * sort.dir;
      });
    }
    var head = S.h("tr", null, cols.map(function (c) {
      var mark = sort.key === c.key ? (sort.dir > 0 ? " ▲" : " ▼") : "";
      return S.h("th" + (c.num ? ".num" : ""), {title: "sort by " + c.label, onclick: function () {
        S.sorts[id] = {key: c.key, dir: sort.key === c.key ? -sort.dir : (c.num ? -1 : 1)};
        S.route();
      }}, c.label + mark);
    }));
    var body = S.h("tbody"), all = rows;
    // One page of rows in the DOM: a table of 1,890 rows takes seconds to lay out on a slow machine.
    var page = Math.min(S.pages[id] || 0, Math.max(0, Math.ceil(rows.length / S.PAGE) - 1));
    rows = rows.slice(page * S.PAGE, (page + 1) * S.PAGE);
    rows.forEach(function (r) {
      var tr = S.h("tr", {tabindex: 0, onclick: function () { location.hash = rowLink(r); },
        onkeydown: function (e) { if (e.key === "Enter") location.hash = rowLink(r); }}, cols.map(function (c) {
        var v = c.get ? c.get(r) : r[c.key];
        return S.h("td" + (c.num ? ".num" : "") + (c.cls ? "." + c.cls(r) : ""), null, c.fmt ? c.fmt(v, r) : v);
      }));
      body.appendChild(tr);
    });
    S.lastRows = all;
    var pager = function () {
      if (all.length <= S.PAGE) return null;
      var go = function (to) { return function () { S.pages[id] = to; S.route(); }; };
      return S.h("p.pages", null, [page > 0 ? S.h("button", {onclick: go(page - 1)}, "‹ previous " + S.PAGE) : null,
        " rows " + (page * S.PAGE + 1) + "–" + (page * S.PAGE + rows.length) + " of " + all.length + " ",
        (page + 1) * S.PAGE < all.length ? S.h("button", {onclick: go(page + 1)}, "next " + S.PAGE + " ›") : null]);
    };
    return S.h("div", null, [pager(), S.h("table.list", {id: id}, [S.h("thead", null, head), body]), pager()]);
  };

  // ---- controls bound to a state object; changing one re-renders the route
  S.select = function (state, key, options, label) {
    var sel = S.h("select", {"aria-label": label, onchange: function () { state[key] = sel.value; S.pages = {}; S.route(); }},
      options.map(function (o) { return S.h("option", {value: o[0]}, o[1]); }));
    sel.value = state[key];
    return S.h("label", null, [label + " ", sel]);
  };
  S.input = function (state, key, label, type) {
    var inp = S.h("input", {type: type || "text", value: state[key], "aria-label": label, step: "0.05",
      onchange: function () { state[key] = inp.value; S.pages = {}; S.route(); }});
    return S.h("label", null, [label + " ", inp]);
  };

  // ---- the question list of one run
  S.right = function (r, t) { return r.f1 !== null && r.f1 >= t; };
  S.filterRows = function (rows, f) {
    var t = Number(f.threshold), lo = f.f1min === "" ? -1 : Number(f.f1min), hi = f.f1max === "" ? 2 : Number(f.f1max);
    var q = f.text.toLowerCase();
    return rows.filter(function (r) {
      if (f.category !== "all" && String(r.category) !== f.category) return false;
      if (f.outcome === "right" && !S.right(r, t)) return false;
      if (f.outcome === "wrong" && S.right(r, t)) return false;
      if (r.f1 < lo || r.f1 > hi) return false;
      if (f.evidence === "some" && !(r.evidence_recall > 0)) return false;
      if (f.evidence === "none" && r.evidence_recall !== 0) return false;
      if (f.evidence === "unattributed" && r.evidence_recall !== null) return false;
      if (f.conv !== "all" && String(r.conv) !== f.conv) return false;
      if (q && (r.question + "\n" + r.reference + "\n" + r.prediction).toLowerCase().indexOf(q) < 0) return false;
      return true;
    });
  };
  S.listFilters = function (run) {
    if (!S.filters[run]) S.filters[run] = {category: "all", outcome: "all", threshold: "0.5", f1min: "", f1max: "",
      evidence: "all", text: "", conv: "all"};
    return S.filters[run];
  };
  S.categoryOptions = function (run) {
    var cats = S.index.runs[run].categories, out = [["all", "all"]];
    Object.keys(cats).forEach(function (c) { out.push([c, c + " " + cats[c]]); });
    return out;
  };
  S.viewList = function (main, run) {
    var f = S.listFilters(run), rows = S.filterRows(S.rows(run), f);
    S.add(main, [S.h("h2", null, "Questions of " + S.runLabel(run)), S.summaryTable(run)]);
    var convs = [["all", "all"]].concat(S.index.samples.map(function (s, i) { return [String(i), s]; }));
    S.add(main, S.h("div.filters", null, [
      S.select(f, "category", S.categoryOptions(run), "category"),
      S.select(f, "outcome", [["all", "all"], ["right", "right (F1 ≥ threshold)"], ["wrong", "wrong"]], "answer"),
      S.input(f, "threshold", "threshold", "number"), S.input(f, "f1min", "F1 from", "number"),
      S.input(f, "f1max", "to", "number"),
      S.select(f, "evidence", [["all", "all"], ["some", "evidence retrieved"], ["none", "evidence not retrieved"],
        ["unattributed", "no gold evidence"]], "evidence"),
      S.select(f, "conv", convs, "conversation"), S.input(f, "text", "search")]));
    S.add(main, S.h("p.count", {id: "count"}, rows.length + " of " + S.index.rows[run].length + " questions"));
    main.appendChild(S.table("questions", S.questionCols(run), rows, function (r) { return "#q/" + run + "/" + r.k; }));
  };
  S.questionCols = function (run) {
    var cols = [{key: "sample", label: "conv"}, {key: "qa_index", label: "qa", num: true},
      {key: "category", label: "cat", fmt: function (v) { return CATS[v] || v; }},
      {key: "question", label: "question"}, {key: "reference", label: "reference"},
      {key: "prediction", label: "prediction"},
      {key: "f1", label: "F1", num: true, fmt: S.pct, cls: function (r) { return r.f1 >= 0.5 ? "good" : r.f1 > 0 ? "part" : "bad"; }},
      {key: "bleu1", label: "BLEU-1", num: true, fmt: S.pct},
      {key: "evidence_recall", label: "ev. recall", num: true, fmt: function (v) { return v === null ? "n/a" : S.pct(v); }}];
    if (S.index.runs[run].judged) cols.push({key: "judge", label: "J", num: true, fmt: S.pct});
    return cols;
  };
  S.summaryTable = function (run) {
    var t = S.index.tables[run], names = Object.keys(t);
    return S.h("table.summary", null, [S.h("tr", null, [S.h("th", null, "category"), S.h("th.num", null, "n"),
      S.h("th.num", null, "F1 [95% CI]"), S.h("th.num", null, "BLEU-1 [95% CI]")])].concat(names.map(function (c) {
      var x = t[c];
      return S.h("tr", null, [S.h("td", null, c), S.h("td.num", null, x.n),
        S.h("td.num", null, S.num(x.f1) + " " + S.ci(x.ci.f1)), S.h("td.num", null, S.num(x.bleu1) + " " + S.ci(x.ci.bleu1))]);
    })));
  };

  // ---- routing: #list/<run>, #q/<run>/<k>, #memory/<run>/<conv>, #compare/<a>/<b>; integers only
  S.route = function () {
    var parts = location.hash.replace(/^#/, "").split("/"), ints = parts.slice(1).map(Number);
    var n = S.index.runs.length, main = S.clear(document.getElementById("main"));
    var ok = ints.every(function (x) { return Number.isInteger(x) && x >= 0; }) && (ints.length === 0 || ints[0] < n);
    S.nav(parts[0], ok && ints.length ? ints[0] : 0);
    if (!ok) parts = ["list"];
    if (parts[0] === "q" && ints.length === 2 && ints[1] < S.index.rows[ints[0]].length) S.viewQuestion(main, ints[0], ints[1]);
    else if (parts[0] === "memory" && ints.length === 2 && ints[1] < S.index.samples.length) S.viewMemory(main, ints[0], ints[1]);
    else if (parts[0] === "compare" && n > 1) S.viewCompare(main, ints.length ? ints[0] : 0, ints.length > 1 && ints[1] < n ? ints[1] : 1);
    else S.viewList(main, ints.length ? ints[0] : 0);
    document.body.setAttribute("data-view", parts[0] || "list");
  };
  S.nav = function (view, run) {
    var nav = S.clear(document.getElementById("nav")), firstConv = S.index.rows[run].length ? S.index.rows[run][0][0] : 0;
    S.add(nav, [S.h("strong", null, "SCG-Mem run viewer"), S.link("#list/" + run, "Questions"),
      S.link("#memory/" + run + "/" + firstConv, "Memory"),
      S.index.runs.length > 1 ? S.link("#compare/" + run + "/" + (run === 0 ? 1 : 0), "Compare two runs") : null,
      S.h("span.runs", null, S.index.runs.length + " run(s) · data: " + (S.index.data || "data file not found"))]);
  };

  document.addEventListener("DOMContentLoaded", function () {
    S.need("index", function (index) {
      S.index = index;
      window.addEventListener("hashchange", S.route);
      S.route();
      document.body.setAttribute("data-ready", "1");
      // Marks for scripts/bench_view.py: list built, then its first frame drawn.
      performance.mark("scgv-ready");
      requestAnimationFrame(function () { setTimeout(function () { performance.mark("scgv-painted"); }, 0); });
    });
  });
  return S;
})();
