// One question: its answer, scores, verdict and raw reply; the retrieved turns with the evidence
// marked and the missing evidence; SCG-Mem's recall path drawn (seeds -> concepts -> turns), or
// the baseline's memory items that hold the retrieved turns. Text only, through SCGV.txt.
"use strict";
(function (S) {
  function turnLine(turns, d, cls, extra) {
    var t = S.own(turns, d);
    return S.h("li.turn" + (cls ? "." + cls : ""), null, [
      S.h("span.dia", null, d), cls === "ev" || cls === "missing" ? S.h("span.tag", null, cls === "ev" ? "evidence" : "missing evidence") : null,
      t ? S.h("span.date", null, t[2]) : null, t ? S.h("b", null, t[0] + ": ") : null,
      t ? S.h("span.text", null, t[1] + (t[3] ? " [image: " + t[3] + "]" : "")) : S.h("span.none", null, "(turn text not in the data file)"),
      extra || null]);
  }

  function kv(rows) {
    return S.h("table.kv", null, rows.filter(Boolean).map(function (r) {
      return S.h("tr", null, [S.h("th", null, r[0]), S.h("td" + (r[2] ? "." + r[2] : ""), null, r[1])]);
    }));
  }

  function show(v) { return typeof v === "string" ? v : JSON.stringify(v); }

  S.viewQuestion = function (main, run, k) {
    var row = S.row(run, k), name = "r" + run + "_c" + row.conv;
    S.add(main, S.h("p.loading", null, "loading " + row.sample + "…"));
    S.needAll([name, "t" + row.conv], function (got) {
      S.clear(main);
      var conv = got[name], turns = got["t" + row.conv];
      var d = conv && conv.records[String(row.qa_index)];
      S.renderQuestion(main, run, k, row, d, conv, turns);
    });
  };

  S.renderQuestion = function (main, run, k, row, d, conv, turns) {
    var list = S.lastRows && S.lastRows.length && S.lastRows[0].run === run ? S.lastRows : S.rows(run);
    var pos = list.findIndex(function (r) { return r.k === k; });
    var prev = pos > 0 ? list[pos - 1] : null, next = pos >= 0 && pos + 1 < list.length ? list[pos + 1] : null;
    S.add(main, S.h("div.pager", null, [S.link("#list/" + run, "← list"),
      prev ? S.link("#q/" + run + "/" + prev.k, "‹ previous") : null, next ? S.link("#q/" + run + "/" + next.k, "next ›") : null,
      S.link("#memory/" + run + "/" + row.conv, "memory of " + row.sample)]));
    S.add(main, S.h("h2", null, row.sample + " · qa " + row.qa_index + " · " + (S.CATS[row.category] || row.category)));
    S.add(main, S.h("p.runlabel", null, S.runLabel(run)));
    var elsewhere = S.index.runs.map(function (_, i) {
      if (i === run) return null;
      var o = S.rows(i).filter(function (r) { return r.sample === row.sample && r.qa_index === row.qa_index; })[0];
      return o ? S.link("#q/" + i + "/" + o.k, "[" + i + "] " + S.index.runs[i].method + " F1 " + S.pct(o.f1)) : null;
    }).filter(Boolean);
    if (elsewhere.length) S.add(main, S.h("p.elsewhere", null, ["same question in: "].concat(elsewhere)));
    if (!d) { S.add(main, S.h("p.none", null, "The details of this conversation could not be loaded.")); return; }
    var f = d.fields || {};
    S.add(main, kv([["question", row.question, "big"], ["reference", row.reference], ["prediction", row.prediction, "big"],
      ["F1", S.pct(row.f1), row.f1 >= 0.5 ? "good" : row.f1 > 0 ? "part" : "bad"], ["BLEU-1", S.pct(row.bleu1)],
      ["judge (J)", d.judge ? S.pct(row.judge) + " CORRECT · labels: " + d.judge.join(", ") : "not judged"],
      ["raw reply", S.h("pre", null, d.reply === null || d.reply === undefined ? "(not stored)" : d.reply)],
      ["evidence recall", row.evidence_recall === null ? "n/a (no gold evidence)" : S.pct(row.evidence_recall)],
      ["prompt tokens", show(f.prompt_tokens === undefined ? "not stored" : f.prompt_tokens)],
      ["context", "the run stores no context text; it held " + (f.context_turns !== undefined ? f.context_turns : d.retrieved.length) +
        " turns (below)" + (f.context_tokens !== undefined ? ", " + f.context_tokens + " tokens" : "")]]));
    var others = Object.keys(f).filter(function (x) { return ["prompt_tokens", "context_tokens", "context_turns"].indexOf(x) < 0; });
    if (others.length) S.add(main, S.h("details", null, [S.h("summary", null, "other stored fields (" + others.length + ")"),
      kv(others.map(function (x) { return [x, S.h("pre", null, show(f[x]))]; }))]));
    var evidence = d.evidence || [], got = S.map();
    d.retrieved.forEach(function (x) { got[x] = true; });
    S.add(main, S.h("h3", null, "Retrieved turns (" + d.retrieved.length + "), evidence marked"));
    if (!turns) S.add(main, S.h("p.none", null, "The data file is not on this machine: turn text is not shown."));
    S.add(main, S.h("ol.turns", {id: "retrieved"}, d.retrieved.map(function (x) {
      var via = d.path && S.own(d.path.turns, x) ? d.path.turns[x].map(function (i) { return d.context_keys[i]; }) : [];
      var concepts = via.length ? S.h("span.via", null, " ← " + via.join(", ")) : null;
      return turnLine(turns, x, evidence.indexOf(x) >= 0 ? "ev" : "", concepts);
    })));
    var missing = evidence.filter(function (x) { return !got[x]; });
    S.add(main, S.h("h3", null, "Missing evidence (" + missing.length + " of " + evidence.length + ")"));
    S.add(main, missing.length ? S.h("ul.turns", {id: "missing"}, missing.map(function (x) { return turnLine(turns, x, "missing"); }))
      : S.h("p", null, evidence.length ? "every evidence turn was retrieved" : "the question has no gold evidence"));
    if (d.path) S.recallPath(main, d, turns, conv, run, row);
    else S.baselineItems(main, d, conv, run, row);
  };

  // ---- SCG-Mem: seeds -> concepts reached -> turns. The path names concepts by their position in
  // context_keys (extract.py keeps the site small); names() turns positions back into names.
  S.recallPath = function (main, d, turns, conv, run, row) {
    var p = d.path, settings = S.index.runs[run].settings, keys = d.context_keys || [];
    var names = function (ix) { return ix.map(function (i) { return keys[i]; }); };
    S.add(main, S.h("h3", null, "Recall path"));
    S.add(main, S.h("p.note", null, "Seeds: the constrained beam search's keys (log-probs: not stored by the run). " +
      "Concepts reached: P(v | u) = softmax(w/T) over u's neighbours in the exported graph, T = " + (settings.temperature || 1) +
      ", hops = " + settings.hops + "; the run stores no activations, so the strongest link is drawn. Generated keys: " +
      (d.generated_keys || []).join(", ")));
    S.add(main, S.drawPath(p, d, keys));
    var seedRows = (d.seed_keys || []).map(function (c) { return pathRow(c, "seed", null, null, p, keys.indexOf(c)); });
    S.add(main, S.h("table.list.path", {id: "path-table"}, [S.h("tr", null, ["concept", "reached from", "w_uv", "P(v|u)", "turns in context"]
      .map(function (x) { return S.h("th", null, x); }))].concat(seedRows).concat(p.reached.map(function (r) {
        return pathRow(keys[r[0]], r[1] === null ? "(no edge from a seed)" : keys[r[1]], r[2], r[3], p, r[0]);
      }))));
    S.add(main, S.h("h4", null, "Where the evidence sits"));
    S.add(main, S.h("ul.evidence", null, p.evidence.length ? p.evidence.map(function (e) {
      return S.h("li." + (e.retrieved ? "good" : "bad"), null, e.dia_id + (e.retrieved ? ": retrieved" : ": not retrieved") +
        "; active concepts grounding it: " + (names(e.active).join(", ") || "none") + "; other concepts grounding it: " +
        (e.other.join(", ") || "none"));
    }) : [S.h("li", null, "no gold evidence")]));
    if (p.unknown.length) S.add(main, S.h("p.bad", null, "keys not in the exported schema: " + p.unknown.join(", ")));
  };
  function pathRow(c, from, w, prob, p, pos) {
    var ts = Object.keys(p.turns).filter(function (t) { return p.turns[t].indexOf(pos) >= 0; });
    return S.h("tr", null, [S.h("td", null, c), S.h("td", null, from), S.h("td.num", null, w === null ? "" : S.num(w, 1)),
      S.h("td.num", null, prob === null ? "" : S.num(prob, 3)), S.h("td", null, ts.join(" "))]);
  }

  // The picture: three columns; edges seed -> concept (width by P), concept -> turn; evidence turns
  // green when retrieved, red when missing (linked from the active concepts that ground them).
  S.drawPath = function (p, d, keys) {
    var ev = S.map(), W = 980, X = [10, 330, 650], H = 18, TOP = 34;
    d.evidence.forEach(function (x) { ev[x] = true; });
    var nSeeds = keys.length - p.reached.length;  // context_keys: the active seeds first
    var turnIds = Object.keys(p.turns).concat(p.evidence.filter(function (e) { return !e.retrieved; }).map(function (e) { return e.dia_id; }));
    var height = Math.max(nSeeds, p.reached.length, turnIds.length) * H + TOP + 6;
    var svg = S.svg("svg", {width: W, height: height, viewBox: "0 0 " + W + " " + height, "class": "path", role: "img",
      "aria-label": "recall path", id: "recall-path"});
    var gEdges = S.svg("g"), gNodes = S.svg("g"), at = S.map(), turnY = S.map();
    svg.appendChild(S.svg("text", {x: X[0], y: 14, "class": "colhead"}, "seeds (" + nSeeds + ")"));
    svg.appendChild(S.svg("text", {x: X[1], y: 14, "class": "colhead"}, "reached by propagation (" + p.reached.length + ")"));
    svg.appendChild(S.svg("text", {x: X[2], y: 14, "class": "colhead"}, "turns in the context (" + Object.keys(p.turns).length +
      ") and missing evidence"));
    for (var i = 0; i < nSeeds; i++) at[i] = [X[0], TOP + i * H];
    p.reached.forEach(function (r, j) { at[r[0]] = [X[1], TOP + j * H]; });
    turnIds.forEach(function (t, j) { turnY[t] = TOP + j * H; });
    function line(a, x2, y2, cls, width) {
      var attrs = {x1: a[0] + 250, y1: a[1] - 4, x2: x2, y2: y2 - 4, "class": cls};
      if (width) attrs["stroke-width"] = width;
      gEdges.appendChild(S.svg("line", attrs));
    }
    p.reached.forEach(function (r) { if (r[1] !== null && at[r[1]]) line(at[r[1]], X[1], at[r[0]][1], "edge", (0.5 + 4 * r[3]).toFixed(2)); });
    Object.keys(p.turns).forEach(function (t) {
      p.turns[t].forEach(function (c) { if (at[c]) line(at[c], X[2], turnY[t], ev[t] ? "edge ev" : "edge turn"); });
    });
    p.evidence.forEach(function (e) {
      if (!e.retrieved) e.active.forEach(function (c) { if (at[c]) line(at[c], X[2], turnY[e.dia_id], "edge missing"); });
    });
    function label(x, y, text, cls, title, max) {
      max = max || 34;
      var t = S.svg("text", {x: x, y: y, "class": cls}, text.length > max ? text.slice(0, max - 1) + "…" : text);
      t.appendChild(S.svg("title", null, title));
      gNodes.appendChild(t);
    }
    for (var s = 0; s < nSeeds; s++) label(X[0], at[s][1], keys[s], "node seed", keys[s]);
    p.reached.forEach(function (r) { label(X[1], at[r[0]][1], keys[r[0]], "node", keys[r[0]] + (r[3] !== null ? " P=" + S.num(r[3], 3) : "")); });
    var grounding = S.map();  // missing evidence -> the concepts that ground it but were not active
    p.evidence.forEach(function (e) { grounding[e.dia_id] = e.other; });
    turnIds.forEach(function (t) {
      var miss = !S.own(p.turns, t), text = t + (ev[t] ? (miss ? "  missing evidence" : "  evidence") : "");
      if (miss && grounding[t] && grounding[t].length) text += " · not active: " + grounding[t].join(", ");
      label(X[2], turnY[t], text, "node " + (ev[t] ? (miss ? "missing" : "ev") : "turn"), text, 52);
    });
    svg.appendChild(gEdges);
    svg.appendChild(gNodes);
    return S.h("div.svgwrap", null, svg);
  };

  // ---- baselines: the memory items that hold the retrieved turns, where the run exports a memory
  S.baselineItems = function (main, d, conv, run, row) {
    var method = S.index.runs[run].method;
    S.add(main, S.h("h3", null, "What " + method + " retrieved"));
    if (!conv.memory) {
      S.add(main, S.h("p.note", null, "This run stores no memory export: the retrieved turns above (their dia_ids) are all it records of its recall."));
      return;
    }
    var items = d.items || [];
    if (!d.retrieved.length) {
      S.add(main, S.h("p.note", null, "The record's retrieved list is empty: no turn went into the context by its id. " +
        "The memory export (Memory) holds what the method keeps."));
      return;
    }
    S.add(main, S.h("p.note", null, items.length ? "The run stores the retrieved dia_ids, not the items; these are the items of its memory " +
      "export that hold them (" + items.length + ")." : "No item of its memory export names a retrieved dia_id, so the items behind " +
      "the retrieved turns cannot be told; its stored fields (above) and its memory (Memory) are what the run keeps."));
    S.add(main, S.h("ol.items", null, items.slice(0, 100).map(function (it) {
      var item = conv.memory[it.field][it.index];
      return S.h("li", null, [S.h("b", null, it.field + "[" + it.index + "] "), S.h("span.via", null, "holds " + it.hit.join(", ")),
        S.h("pre", null, S.itemText(item))]);
    })));
  };
  S.itemText = function (item) {
    if (typeof item !== "object" || item === null) return String(item);
    return Object.keys(item).map(function (key) {
      var v = item[key], s = typeof v === "string" ? v : JSON.stringify(v);
      return key + ": " + (s.length > 600 ? s.slice(0, 600) + "…" : s);
    }).join("\n");
  };
})(SCGV);
