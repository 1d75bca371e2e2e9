// Two runs side by side: both category tables with their CIs and the paired bootstrap of A - B
// (computed by the report's code when the site was written), then one row per shared question.
"use strict";
(function (S) {
  var f = {category: "all", outcome: "all", evidence: "all", threshold: "0.5", text: ""};

  function pairOf(a, b) {
    var t = S.index.pairs[a + "," + b];
    if (t) return t;
    t = S.index.pairs[b + "," + a];
    if (!t) return null;
    var out = S.map();  // B - A stored: flip it
    Object.keys(t).forEach(function (c) {
      var x = t[c];
      out[c] = {n: x.n, diff: -x.diff, ci_low: -x.ci_high, ci_high: -x.ci_low, p_value: x.p_value};
    });
    return out;
  }

  function runSelect(which, a, b) {
    var sel = S.h("select", {"aria-label": "run " + which, onchange: function () {
      location.hash = "#compare/" + (which === "A" ? sel.value + "/" + b : a + "/" + sel.value);
    }}, S.index.runs.map(function (r, i) { return S.h("option", {value: i}, S.runLabel(i)); }));
    sel.value = which === "A" ? a : b;
    return S.h("label", null, ["run " + which + " ", sel]);
  }

  S.viewCompare = function (main, a, b) {
    S.add(main, [S.h("h2", null, "Two runs"), S.h("div.filters", null, [runSelect("A", a, b), runSelect("B", a, b)])]);
    var ta = S.index.tables[a], tb = S.index.tables[b], pair = pairOf(a, b);
    var names = Object.keys(ta).filter(function (c) { return Object.prototype.hasOwnProperty.call(tb, c); });
    S.add(main, S.h("table.summary", {id: "compare-categories"}, [S.h("tr", null, ["category", "n (A/B/shared)", "A F1 [95% CI]", "B F1 [95% CI]",
      "A − B paired [95% CI]", "p (two-sided)"].map(function (x) { return S.h("th", null, x); }))].concat(names.map(function (c) {
      var d = S.own(pair, c);
      return S.h("tr", null, [S.h("td", null, c), S.h("td.num", null, ta[c].n + " / " + tb[c].n + " / " + (d ? d.n : 0)),
        S.h("td.num", null, S.num(ta[c].f1) + " " + S.ci(ta[c].ci.f1)), S.h("td.num", null, S.num(tb[c].f1) + " " + S.ci(tb[c].ci.f1)),
        S.h("td.num", null, d ? S.num(d.diff) + " " + S.ci([d.ci_low, d.ci_high]) : "no shared questions"),
        S.h("td.num", null, d ? S.num(d.p_value, 4) : "")]);
    }))));
    S.add(main, S.h("p.note", null, "CIs: percentile bootstrap over questions (" + S.index.n_resamples + " resamples, seed " +
      S.index.seed + "), as Table 1; the Average's paired test resamples within each category." +
      (S.index.paired_all ? "" : " Paired tests only against run 0 (many runs).")));
    var rowsB = S.map();
    S.rows(b).forEach(function (r) { rowsB[r.sample + "\u0000" + r.qa_index] = r; });
    var joined = [];
    S.rows(a).forEach(function (r) {
      var o = rowsB[r.sample + "\u0000" + r.qa_index];
      if (o) joined.push({ra: r, rb: o, k: r.k, sample: r.sample, qa_index: r.qa_index, category: r.category,
        question: r.question, f1a: r.f1, f1b: o.f1, diff: r.f1 - o.f1, era: r.evidence_recall, erb: o.evidence_recall});
    });
    var t = Number(f.threshold), q = f.text.toLowerCase();
    var rows = joined.filter(function (x) {
      var ra = S.right(x.ra, t), rb = S.right(x.rb, t);
      if (f.category !== "all" && String(x.category) !== f.category) return false;
      if (f.outcome === "ab" && !(ra && !rb)) return false;
      if (f.outcome === "ba" && !(rb && !ra)) return false;
      if (f.outcome === "both" && !(ra && rb)) return false;
      if (f.outcome === "neither" && (ra || rb)) return false;
      if (f.outcome === "differ" && x.diff === 0) return false;
      if (f.evidence === "ab" && !(x.era > 0 && !(x.erb > 0))) return false;
      if (f.evidence === "ba" && !(x.erb > 0 && !(x.era > 0))) return false;
      if (q && (x.question + "\n" + x.ra.prediction + "\n" + x.rb.prediction).toLowerCase().indexOf(q) < 0) return false;
      return true;
    });
    S.add(main, S.h("div.filters", null, [S.select(f, "category", S.categoryOptions(a), "category"),
      S.select(f, "outcome", [["all", "all"], ["ab", "A right, B wrong"], ["ba", "B right, A wrong"], ["both", "both right"],
        ["neither", "both wrong"], ["differ", "F1 differs"]], "answers"), S.input(f, "threshold", "right = F1 ≥", "number"),
      S.select(f, "evidence", [["all", "all"], ["ab", "evidence retrieved in A, not in B"], ["ba", "evidence retrieved in B, not in A"]],
        "evidence"), S.input(f, "text", "search")]));
    S.add(main, S.h("p.count", {id: "count"}, rows.length + " of " + joined.length + " shared questions"));
    var cols = [{key: "sample", label: "conv"}, {key: "qa_index", label: "qa", num: true},
      {key: "category", label: "cat", fmt: function (v) { return S.CATS[v] || v; }}, {key: "question", label: "question"},
      {key: "pa", label: "prediction A", get: function (x) { return x.ra.prediction; }},
      {key: "pb", label: "prediction B", get: function (x) { return x.rb.prediction; }},
      {key: "f1a", label: "F1 A", num: true, fmt: S.pct}, {key: "f1b", label: "F1 B", num: true, fmt: S.pct},
      {key: "diff", label: "A − B", num: true, fmt: S.pct, cls: function (x) { return x.diff > 0 ? "good" : x.diff < 0 ? "bad" : "same"; }},
      {key: "era", label: "ev. A", num: true, fmt: function (v) { return v === null ? "n/a" : S.pct(v); }},
      {key: "erb", label: "ev. B", num: true, fmt: function (v) { return v === null ? "n/a" : S.pct(v); }}];
    main.appendChild(S.table("paired", cols, rows, function (x) { return "#q/" + a + "/" + x.k; }));
    S.add(main, S.h("p.note", null, "A row opens the question in run A; its page links the same question in the other runs."));
  };
})(SCGV);
