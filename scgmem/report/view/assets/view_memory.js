// The memory of one run and conversation: SCG-Mem's schema (concepts, their turns) and the
// associative graph around a chosen concept as a picture; another method's export as lists.
"use strict";
(function (S) {
  var state = {concept: null, filter: "", key: null, shown: {}};
  var NEIGHBOURS = 24;  // the strongest edges drawn around the chosen concept: more overlap on a 600-px circle

  S.viewMemory = function (main, run, c) {
    var name = "r" + run + "_c" + c;
    S.add(main, S.h("p.loading", null, "loading…"));
    S.needAll([name, "t" + c], function (got) {
      S.clear(main);
      var conv = got[name], turns = got["t" + c];
      var convs = S.index.samples.map(function (s, i) { return S.link("#memory/" + run + "/" + i, s, i === c ? "on" : ""); });
      S.add(main, [S.h("h2", null, "Memory of " + S.index.samples[c]), S.h("p.runlabel", null, S.runLabel(run)),
        S.h("p.convs", null, convs)]);
      if (!conv) { S.add(main, S.h("p.none", null, "This run answered no question of this conversation.")); return; }
      if (!conv.memory) { S.add(main, S.h("p.none", null, "This run stores no memory export for this conversation.")); return; }
      if (conv.schema) S.schemaView(main, conv.memory, turns, run, c);
      else S.exportView(main, conv.memory, run + "/" + c);
    });
  };

  S.schemaView = function (main, memory, turns, run, c) {
    var names = Object.keys(memory.concepts), key = run + "/" + c;
    if (state.key !== key || !Object.prototype.hasOwnProperty.call(memory.concepts, state.concept)) {
      state.key = key;
      state.concept = names.slice().sort(function (a, b) { return memory.concepts[b].length - memory.concepts[a].length; })[0];
    }
    var adj = S.map();
    memory.edges.forEach(function (e) {
      (adj[e[0]] = adj[e[0]] || []).push([e[1], e[2]]);
      (adj[e[1]] = adj[e[1]] || []).push([e[0], e[2]]);
    });
    S.add(main, S.h("p", null, names.length + " concepts, " + memory.edges.length + " edges, " +
      (memory.n_turns !== undefined ? memory.n_turns + " turns ingested" : "")));
    var left = S.h("div.concepts"), right = S.h("div.graph");
    var inp = S.h("input", {type: "text", value: state.filter, "aria-label": "filter concepts", placeholder: "filter concepts",
      onchange: function () { state.filter = inp.value; S.route(); }});
    var shown = names.filter(function (n) { return n.toLowerCase().indexOf(state.filter.toLowerCase()) >= 0; })
      .sort(function (a, b) { return memory.concepts[b].length - memory.concepts[a].length || (a < b ? -1 : 1); });
    S.add(left, [inp, S.h("ol.conceptlist", null, shown.map(function (n) {
      return S.h("li" + (n === state.concept ? ".on" : ""), {tabindex: 0, onclick: function () { state.concept = n; S.route(); }},
        [n, S.h("span.count", null, " " + memory.concepts[n].length + " turns · " + (adj[n] || []).length + " links")]);
    }))]);
    S.add(right, [S.h("h3", null, "Around “" + state.concept + "”"), S.drawEgo(state.concept, adj, memory),
      S.h("h4", null, "Turns of “" + state.concept + "” (" + memory.concepts[state.concept].length + ")"),
      S.h("ol.turns", null, memory.concepts[state.concept].map(function (d) {
        var t = S.own(turns, d);
        return S.h("li.turn", null, [S.h("span.dia", null, d), t ? S.h("span.date", null, t[2]) : null,
          t ? S.h("b", null, t[0] + ": ") : null, t ? t[1] : S.h("span.none", null, "(turn text not in the data file)")]);
      }))]);
    S.add(main, S.h("div.split", null, [left, right]));
  };

  // The chosen concept at the centre, its strongest neighbours on a circle (edge width by w_uv),
  // light edges between those neighbours; a click on a neighbour centres it.
  S.drawEgo = function (centre, adj, memory) {
    var W = 640, R = 240, cx = W / 2, cy = W / 2;
    var nb = (adj[centre] || []).slice().sort(function (a, b) { return b[1] - a[1]; }).slice(0, NEIGHBOURS);
    var wmax = nb.length ? nb[0][1] : 1, pos = S.map(), svg = S.svg("svg", {width: W, height: W, viewBox: "0 0 " + W + " " + W,
      "class": "ego", role: "img", "aria-label": "associative graph"});
    nb.forEach(function (e, i) {
      var a = 2 * Math.PI * i / nb.length - Math.PI / 2;
      pos[e[0]] = [cx + R * Math.cos(a), cy + R * Math.sin(a)];
    });
    var inner = S.map();
    nb.forEach(function (e) { inner[e[0]] = true; });
    nb.forEach(function (e) {
      (adj[e[0]] || []).forEach(function (f) {
        if (inner[f[0]] && e[0] < f[0]) svg.appendChild(S.svg("line", {x1: pos[e[0]][0], y1: pos[e[0]][1], x2: pos[f[0]][0],
          y2: pos[f[0]][1], "class": "edge faint"}));
      });
    });
    nb.forEach(function (e) {
      var line = S.svg("line", {x1: cx, y1: cy, x2: pos[e[0]][0], y2: pos[e[0]][1], "class": "edge",
        "stroke-width": (0.5 + 5 * e[1] / wmax).toFixed(2)});
      line.appendChild(S.svg("title", null, centre + " – " + e[0] + ": w = " + S.num(e[1], 1)));
      svg.appendChild(line);
    });
    nb.forEach(function (e) {
      var p = pos[e[0]], g = S.svg("g", {"class": "nbr", tabindex: 0, onclick: function () { state.concept = e[0]; S.route(); }});
      g.appendChild(S.svg("circle", {cx: p[0], cy: p[1], r: 5 + Math.min(10, memory.concepts[e[0]].length / 3)}));
      var anchor = p[0] < cx - 5 ? "end" : p[0] > cx + 5 ? "start" : "middle";
      g.appendChild(S.svg("text", {x: p[0] + (anchor === "end" ? -12 : anchor === "start" ? 12 : 0), y: p[1] + 4, "text-anchor": anchor},
        e[0].length > 22 ? e[0].slice(0, 21) + "…" : e[0]));
      g.appendChild(S.svg("title", null, e[0] + ": " + memory.concepts[e[0]].length + " turns, w = " + S.num(e[1], 1)));
      svg.appendChild(g);
    });
    svg.appendChild(S.svg("circle", {cx: cx, cy: cy, r: 14, "class": "centre"}));
    svg.appendChild(S.svg("text", {x: cx, y: cy + 32, "text-anchor": "middle", "class": "centre"}, centre));
    var more = (adj[centre] || []).length - nb.length;
    return S.h("div.svgwrap", null, [svg, S.h("p.note", null, (adj[centre] || []).length + " neighbours" +
      (more > 0 ? "; the " + NEIGHBOURS + " with the heaviest edges drawn" : "") + "; edge width ∝ w_uv (Eq. 10), node size ∝ turns")]);
  };

  // Another method's export: each top-level field as text, or as a list to page through.
  S.exportView = function (main, memory, key) {
    Object.keys(memory).forEach(function (field) {
      var v = memory[field];
      if (!Array.isArray(v)) {
        S.add(main, S.h("div.field", null, [S.h("h4", null, field), S.h("pre", null, typeof v === "string" ? v : JSON.stringify(v, null, 1))]));
        return;
      }
      var k = key + "/" + field, n = state.shown[k] || 50;
      S.add(main, S.h("h4", null, field + " (" + v.length + " items)"));
      S.add(main, S.h("ol.items", null, v.slice(0, n).map(function (item) { return S.h("li", null, S.h("pre", null, S.itemText(item))); })));
      if (v.length > n) S.add(main, S.h("button", {onclick: function () { state.shown[k] = n + 200; S.route(); }}, "show more"));
    });
  };
})(SCGV);
