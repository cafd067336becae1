// bertkit serve: the page. Plain JavaScript, no library, nothing loaded from the network: every
// picture is drawn here (canvas heat maps, SVG lines and points) from the JSON API's answers,
// which are kept in `bertkit.state` for scripts and tests to read.
"use strict";

const bertkit = { info: null, state: {} };
window.bertkit = bertkit;

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#3559e0", "#e0642b", "#2a9d57", "#c7379b", "#8a6d1f", "#1aa3b8", "#7046c9",
                "#d13b3b", "#5a6b7b", "#9bb000"];

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                      : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function showError(message) {
  const box = $("error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function api(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({ error: `${response.status} ${response.statusText}` }));
  if (!response.ok) throw new Error(data.error || `${response.status}`);
  return data;
}

async function run(action) {
  showError("");
  document.body.classList.add("busy");
  try { await action(); } catch (e) { showError(e.message); } finally {
    document.body.classList.remove("busy");
  }
}

function fillSelect(select, options) {
  select.replaceChildren(...options.map(([value, label]) => el("option", { value, text: label })));
}

// Charts --------------------------------------------------------------------------------------

function lineChart(svg, series, { xlabel = "", ylabel = "", width = 640, height = 300 } = {}) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const m = { l: 56, r: 12, t: 12, b: 40 };
  const xs = series.flatMap((s) => s.x), ys = series.flatMap((s) => s.y).filter((v) => v !== null);
  if (!xs.length || !ys.length) return;
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) x1 = x0 + 1;
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
  const X = (v) => m.l + (v - x0) / (x1 - x0) * (width - m.l - m.r);
  const Y = (v) => height - m.b - (v - y0) / (y1 - y0) * (height - m.t - m.b);
  for (let k = 0; k <= 4; k++) {
    const v = y0 + (y1 - y0) * k / 4;
    svg.append(el("svg:line", { x1: m.l, x2: width - m.r, y1: Y(v), y2: Y(v), stroke: "#eee" }));
    svg.append(el("svg:text", { x: m.l - 4, y: Y(v) + 4, "text-anchor": "end", text: fmt(v) }));
    const xv = x0 + (x1 - x0) * k / 4;
    svg.append(el("svg:text", { x: X(xv), y: height - m.b + 14, "text-anchor": "middle", text: fmt(xv) }));
  }
  svg.append(el("svg:text", { x: (width + m.l) / 2, y: height - 6, "text-anchor": "middle", text: xlabel }));
  svg.append(el("svg:text", { x: 12, y: height / 2, transform: `rotate(-90 12 ${height / 2})`,
                              "text-anchor": "middle", text: ylabel }));
  series.forEach((s, k) => {
    const pts = s.x.map((x, i) => [x, s.y[i]]).filter(([, y]) => y !== null);
    const color = s.color || COLORS[k % COLORS.length];
    svg.append(el("svg:polyline", { points: pts.map(([x, y]) => `${X(x)},${Y(y)}`).join(" "),
                                    fill: "none", stroke: color, "stroke-width": 2,
                                    "data-series": s.name }));
    if (pts.length < 40) pts.forEach(([x, y]) => svg.append(el("svg:circle", { cx: X(x), cy: Y(y), r: 3, fill: color })));
    svg.append(el("svg:text", { x: width - m.r - 4, y: m.t + 14 * (k + 1), "text-anchor": "end",
                                fill: color, text: s.name }));
  });
}

function fmt(v) {
  if (Number.isInteger(v)) return v.toLocaleString("en");
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1);
  return a >= 100 ? v.toFixed(0) : a >= 1 ? v.toFixed(2) : v.toFixed(3);
}

function scatter(svg, points, colors, tips, { title = "", width = 420, height = 360 } = {}) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  const m = 24;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const X = (v) => m + (v - x0) / ((x1 - x0) || 1) * (width - 2 * m);
  const Y = (v) => height - m - (v - y0) / ((y1 - y0) || 1) * (height - 2 * m - 14);
  svg.append(el("svg:text", { x: width / 2, y: 14, "text-anchor": "middle", text: title }));
  points.forEach((p, i) => {
    const dot = el("svg:circle", { cx: X(p[0]), cy: Y(p[1]), r: 5, fill: colors[i], class: "point" });
    dot.append(el("svg:title", { text: tips[i] }));
    svg.append(dot);
  });
}

function heat(value) {  // 0..1 -> white to dark blue
  const t = Math.max(0, Math.min(1, value));
  return [Math.round(255 - 222 * t), Math.round(255 - 186 * t), Math.round(255 - 31 * t)];
}

// 1. Fill the mask ----------------------------------------------------------------------------

const WORD = /[\p{L}\p{N}]+|\[MASK\]|[^\s\p{L}\p{N}]/gu;

function renderWords() {
  const text = $("fm-text").value;
  const box = $("fm-words");
  box.replaceChildren();
  for (const m of text.matchAll(WORD)) {
    const start = m.index, end = start + m[0].length;
    box.append(el("span", {
      class: "word" + (m[0] === "[MASK]" ? " masked" : ""), "data-start": start, "data-end": end,
      text: m[0], onclick: () => {
        const t = $("fm-text").value;
        $("fm-text").value = t.slice(0, start) + "[MASK]" + t.slice(end);
        renderWords();
        guess();
      },
    }), " ");
  }
}

function guess() {
  return run(async () => {
    const text = $("fm-text").value;
    const top_k = parseInt($("fm-topk").value, 10) || 5;
    const data = await api("/api/fill-mask", { text, top_k });
    bertkit.state.fillMask = data;
    const out = $("fm-results");
    out.replaceChildren();
    for (const model of data.models) {
      const panel = el("div", { class: "panel fm-model", "data-model": model.name },
                       el("h4", { text: model.name }));
      if (model.error) panel.append(el("p", { class: "note", text: model.error }));
      (model.masks || []).forEach((guesses, k) => {
        if (model.masks.length > 1) panel.append(el("div", { class: "note", text: `[MASK] ${k + 1}` }));
        const list = el("div", { class: "guesses", "data-mask": k });
        for (const g of guesses) {
          list.append(el("div", { class: "guess", "data-token": g.token, "data-score": g.score },
            el("span", { class: "token", text: g.token }),
            el("div", { class: "barbox" }, el("div", { class: "bar", style: `width:${(100 * g.score).toFixed(1)}%` })),
            el("span", { class: "score", text: (100 * g.score).toFixed(1) + "%" })));
        }
        panel.append(list);
      });
      if (model.ms !== undefined) panel.append(el("div", { class: "note", text: `${model.ms} ms` }));
      out.append(panel);
    }
  });
}

// 2. Attention --------------------------------------------------------------------------------

function showAttention() {
  return run(async () => {
    const data = await api("/api/attention", {
      model: $("at-model").value, text: $("at-text").value, pair: $("at-pair").value || null,
    });
    bertkit.state.attention = data;
    const L = data.weights.length, A = data.weights[0].length;
    const keepLayer = Math.min(parseInt($("at-layer").value || L, 10), L);
    fillSelect($("at-layer"), [...Array(L).keys()].map((i) => [i + 1, `${i + 1} of ${L}`]));
    $("at-layer").value = keepLayer;
    fillSelect($("at-head"), [["all", "all"], ...[...Array(A).keys()].map((h) => [h, h])]);
    drawAttention();
    drawSummary(data);
  });
}

function drawAttention() {
  const data = bertkit.state.attention;
  if (!data) return;
  const layer = parseInt($("at-layer").value, 10) - 1;
  const head = $("at-head").value;
  const maps = $("at-maps");
  maps.replaceChildren();
  const T = data.tokens.length, A = data.weights[layer].length;
  const heads = head === "all" ? [...Array(A).keys()] : [parseInt(head, 10)];
  const cell = heads.length === 1 ? Math.max(4, Math.floor(480 / T)) : Math.max(2, Math.floor(200 / T));
  for (const h of heads) {
    const canvas = el("canvas", { width: T * cell, height: T * cell, "data-layer": layer + 1, "data-head": h });
    const ctx = canvas.getContext("2d");
    const w = data.weights[layer][h];
    for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) {
      const [r, g, b] = heat(w[q][k]);
      ctx.fillStyle = `rgb(${r},${g},${b})`;
      ctx.fillRect(k * cell, q * cell, cell, cell);
    }
    canvas.addEventListener("mousemove", (e) => {
      const q = Math.floor(e.offsetY / cell), k = Math.floor(e.offsetX / cell);
      if (q < T && k < T) canvas.title = `${data.tokens[q]} → ${data.tokens[k]}: ${w[q][k].toFixed(3)}`;
    });
    canvas.addEventListener("click", () => { $("at-head").value = h; drawAttention(); });
    const box = el("div", { class: "map" + (heads.length === 1 ? " chosen" : "") }, canvas,
                   el("span", { text: `layer ${layer + 1}, head ${h}` }));
    maps.append(box);
  }
  if (heads.length === 1 && T <= 64) {  // the one head's rows, labelled
    maps.append(el("div", { class: "note", text: "rows: " + data.tokens.join(" ") }));
  }
  drawLines(layer, head === "all" ? null : parseInt(head, 10));
}

function drawLines(layer, head) {
  const svg = $("at-lineview");
  const shown = $("at-lines").checked;
  svg.toggleAttribute("hidden", !shown);  // an SVG element has no .hidden property
  if (!shown) return;
  const data = bertkit.state.attention;
  const T = data.tokens.length, A = data.weights[layer].length;
  const rowH = 18, width = 420, height = T * rowH + 20;
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  const heads = head === null ? [...Array(A).keys()] : [head];
  const y = (i) => 14 + i * rowH;
  for (let q = 0; q < T; q++) {
    svg.append(el("svg:text", { x: 110, y: y(q) + 4, "text-anchor": "end", text: data.tokens[q] }));
    svg.append(el("svg:text", { x: width - 110, y: y(q) + 4, text: data.tokens[q] }));
  }
  heads.forEach((h, n) => {
    const color = COLORS[h % COLORS.length];
    for (let q = 0; q < T; q++) for (let k = 0; k < T; k++) {
      const w = data.weights[layer][h][q][k] / heads.length;
      if (w < 0.02) continue;
      svg.append(el("svg:line", { x1: 116, y1: y(q), x2: width - 116, y2: y(k), stroke: color,
                                  "stroke-opacity": Math.min(1, w * 1.5), "stroke-width": 1 + 3 * w }));
    }
  });
}

function drawSummary(data) {
  const targets = Object.keys(data.summary);
  const L = data.weights.length, A = data.weights[0].length;
  const table = el("table", { class: "summary" });
  table.append(el("tr", {}, el("th", { text: "layer.head" }), ...targets.map((t) => el("th", { text: t }))));
  for (let l = 0; l < L; l++) for (let h = 0; h < A; h++) {
    const row = el("tr", {}, el("th", { text: `${l + 1}.${h}` }));
    for (const t of targets) {
      const v = data.summary[t][l][h];
      const [r, g, b] = heat(v);
      row.append(el("td", { style: `background:rgb(${r},${g},${b});color:${v > 0.55 ? "#fff" : "inherit"}`,
                            text: v.toFixed(2) }));
    }
    table.append(row);
  }
  $("at-summary").replaceChildren(table);
}

// 3. Contextual embeddings --------------------------------------------------------------------

function compareWord() {
  return run(async () => {
    const data = await api("/api/similarity", {
      model: $("em-model").value,
      a: { text: $("em-text-a").value, word: $("em-word-a").value },
      b: { text: $("em-text-b").value, word: $("em-word-b").value },
    });
    bertkit.state.similarity = data;
    const series = [{ name: "cosine", x: data.layers, y: data.raw }];
    if (data.standardized) series.push({ name: `standardized (${data.standardized_with})`, x: data.layers, y: data.standardized });
    lineChart($("em-sim-chart"), series, { xlabel: "layer (0 = embeddings)", ylabel: `cosine of "${data.words[0]}" and "${data.words[1]}"` });
  });
}

function projectWord() {
  return run(async () => {
    const layer = $("em-layer").value;
    const data = await api("/api/senses", {
      model: $("em-model").value, word: $("em-word").value,
      layer: /^\d+$/.test(layer) ? parseInt(layer, 10) : layer,
    });
    bertkit.state.senses = data;
    const kinds = [...new Set(data.senses)];
    const colors = data.senses.map((s) => COLORS[kinds.indexOf(s) % COLORS.length]);
    const tips = data.contexts.map((c, i) => `${data.senses[i] ? data.senses[i] + ": " : ""}${c.before}[${c.word}]${c.after}`);
    const out = $("em-senses");
    out.replaceChildren();
    for (const key of ["raw", "standardized"]) {
      const svg = el("svg:svg", { class: "scatter", "data-kind": key });
      const part = data[key];
      scatter(svg, part.points, colors, tips, { title: `${key}: expected cosine ${part.anisotropy.toFixed(3)}` });
      out.append(el("div", { class: "panel" }, svg,
                    el("div", { class: "note", text: part.axes.join(" · ") })));
    }
    $("em-legend").replaceChildren(el("div", { class: "legend" }, ...kinds.map((s, k) => el("span", {},
      el("span", { class: "swatch", style: `background:${COLORS[k % COLORS.length]}` }),
      `${s || data.word} (${data.senses.filter((x) => x === s).length})${data.glosses[s] ? ": " + data.glosses[s] : ""}`))),
      el("div", { class: "note", text: `${data.senses.length} occurrences in ${data.source}; standardized with ${data.standardized_with}` }));
    const corpus = $("em-corpus");
    corpus.replaceChildren();
    if (data.corpus) {
      const table = el("table", { class: "summary" }, el("tr", {}, ...["layer", "expected cosine", "standardized", "top rogue dimensions (share)"].map((t) => el("th", { text: t }))));
      for (const row of data.corpus.layers) {
        table.append(el("tr", {}, el("td", { text: row.layer }), el("td", { text: row.anisotropy.toFixed(3) }),
          el("td", { text: row.anisotropy_standardized.toFixed(3) }),
          el("td", { text: row.rogue.map((r) => `${r.dim} (${(100 * r.share).toFixed(0)}%)`).join(", ") })));
      }
      corpus.append(el("h3", { text: `Anisotropy of ${data.corpus.name} (${data.corpus.words} words)` }), table);
    }
  });
}

// 4. Training runs ----------------------------------------------------------------------------

const runState = { name: null, records: [], next: 0, timer: null };

function followRun() {
  clearTimeout(runState.timer);
  const name = $("run-name").value;
  if (!name) return;
  if (name !== runState.name) Object.assign(runState, { name, records: [], next: 0 });
  run(async () => {
    const data = await api(`/api/runs/${encodeURIComponent(name)}?after=${runState.next}`);
    if (data.restarted) runState.records = [];
    runState.records.push(...data.records);
    runState.next = data.next;
    bertkit.state.run = { name, records: runState.records, training_args: data.training_args };
    drawRun(data.training_args);
  }).finally(() => {
    if ($("run-live").checked && !document.querySelector("#view-runs").hidden) {
      runState.timer = setTimeout(followRun, 2000);
    }
  });
}

function drawRun(args) {
  const records = runState.records;
  const charts = $("run-charts");
  charts.replaceChildren();
  const groups = [
    ["loss", (k) => k === "loss" || k.endsWith("_loss")],
    ["accuracy", (k) => k.includes("accuracy") || /(^|_)(f1|acc)$/.test(k)],
    ["learning rate", (k) => k === "learning_rate"],
  ];
  for (const [title, wanted] of groups) {
    const series = [];
    for (const split of [...new Set(records.map((r) => r.split || "train"))]) {
      const rows = records.filter((r) => (r.split || "train") === split);
      const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter(wanted);
      for (const key of keys) {
        const have = rows.filter((r) => typeof r[key] === "number");
        if (have.length) series.push({ name: `${split} ${key}`, x: have.map((r) => r.step), y: have.map((r) => r[key]) });
      }
    }
    if (!series.length) continue;
    const svg = el("svg:svg", { class: "chart", "data-chart": title });
    lineChart(svg, series, { xlabel: "step", ylabel: title });
    charts.append(el("div", { class: "panel" }, el("h4", { text: title }), svg));
  }
  const last = records[records.length - 1];
  $("run-status").textContent = last ? `${records.length} records, step ${last.step}` : "no records yet";
  $("run-args").textContent = args ? JSON.stringify(args, null, 1) : "";
}

// 5. Predict ----------------------------------------------------------------------------------

function modelInfo(name) { return bertkit.info.models.find((m) => m.name === name); }

function predictForm() {
  const m = modelInfo($("pr-model").value);
  if (!m) return;
  $("pr-task").textContent = `${m.task}: ${m.labels.length ? m.labels.join(", ") : ""}`;
  $("pr-qa-row").hidden = m.verb !== "answer";
  $("pr-text-row").hidden = m.verb === "answer";
  $("pr-pair").hidden = m.task !== "pair" && m.task !== "regress";
}

function labelColor(label) {  // the same colour for a label wherever it appears
  let h = 0;
  for (const c of String(label).replace(/^[BIES]-/, "")) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return COLORS[h % COLORS.length];
}

function highlight(text, spans) {
  const out = el("div", { class: "text" });
  let at = 0;
  spans.forEach((s) => {
    out.append(text.slice(at, s.start));
    const color = labelColor(s.label) + "33";
    out.append(el("mark", { "data-label": s.label, style: `background:${color}` }, text.slice(s.start, s.end),
                  el("small", { text: s.label })));
    at = s.end;
  });
  out.append(text.slice(at));
  return out;
}

function predict() {
  return run(async () => {
    const m = modelInfo($("pr-model").value);
    const body = m.verb === "answer"
      ? { model: m.name, question: $("pr-question").value, context: $("pr-context").value }
      : { model: m.name, text: $("pr-text").value, pair: $("pr-pair").hidden ? null : $("pr-pair").value };
    const data = await api("/api/predict", body);
    bertkit.state.predict = data;
    const out = $("pr-result");
    out.replaceChildren();
    if (data.classes) {
      for (const c of data.classes) {
        out.append(el("div", { class: "guess", "data-label": c.label, "data-score": c.score },
          el("span", { text: c.label }),
          el("div", { class: "barbox" }, el("div", { class: "bar", style: `width:${(100 * c.score).toFixed(1)}%` })),
          el("span", { class: "score", text: (100 * c.score).toFixed(1) + "%" })));
      }
    } else if (data.entities) {
      out.append(highlight(data.text, data.entities));
      if (!data.entities.length) out.append(el("p", { class: "note", text: "no entities found" }));
    } else if (data.words) {
      out.append(highlight(data.text, data.words));
    } else if ("answer" in data) {
      const context = body.context;
      out.append(data.start >= 0 ? highlight(context, [{ start: data.start, end: data.end, label: `answer ${(100 * data.score).toFixed(1)}%` }])
                                 : el("p", { text: "no answer in the context (the model judges it unanswerable)" }));
    } else if ("score" in data) {
      out.append(el("p", { class: "text", text: `score ${data.score.toFixed(3)}` }));
    }
  });
}

// 6. Search ----------------------------------------------------------------------------------

function searchForm(info) {  // a box per model that can search; the sentence models ticked
  const able = info.models.filter((m) => m.search);
  const ticked = able.some((m) => m.sentence_model) ? able.filter((m) => m.sentence_model) : able.slice(0, 1);
  $("se-models").replaceChildren(...able.map((m) => el("label", { title: m.search_vectors },
    el("input", { type: "checkbox", value: m.name, ...(ticked.includes(m) ? { checked: "" } : {}) }),
    ` ${m.name}${m.sentence_model ? " (sentence model)" : ""}`)));
  $("se-k").max = info.limits.search_k;
  if (!info.search) return;
  const s = info.search;
  $("se-note").textContent = `${s.lines.toLocaleString("en")} lines of ${s.source}`
    + (s.more ? " (the first ones; --search-lines sets how many)" : "")
    + (able.some((m) => !m.sentence_model) ? ". A model that is not a sentence model encodes them on its first search (its progress is in the server's log)." : "");
}

function searchLines() {
  return run(async () => {
    const models = [...document.querySelectorAll("#se-models input:checked")].map((b) => b.value);
    const k = parseInt($("se-k").value, 10) || 10;
    const encoded = (bertkit.state.search || bertkit.info.search || {}).encoded || [];
    const first = models.filter((m) => !encoded.includes(m));
    $("se-status").textContent = first.length ? `${first.join(", ")}: encoding the ${bertkit.info.search.lines.toLocaleString("en")} lines first (progress in the server's log)...` : "";
    let data;
    try { data = await api("/api/search", { query: $("se-query").value, k, models }); } finally { $("se-status").textContent = ""; }
    bertkit.state.search = data;
    const out = $("se-results");
    out.replaceChildren();
    for (const model of data.models) {
      const panel = el("div", { class: "panel se-model", "data-model": model.name }, el("h4", { text: model.name }));
      if (model.error) {
        panel.append(el("p", { class: "note", text: model.error }));
        out.append(panel);
        continue;
      }
      panel.append(el("div", { class: "note", text: model.vectors }));
      const list = el("ol", { class: "hits" });
      for (const hit of model.results) {
        list.append(el("li", { class: "hit", "data-line": hit.line, "data-cosine": hit.cosine },
          el("span", { class: "score", text: hit.cosine.toFixed(3) }),
          el("div", { class: "barbox" }, el("div", { class: "bar", style: `width:${(100 * Math.max(0, hit.cosine)).toFixed(1)}%` })),
          el("span", { class: "lineno", text: hit.file ? `${hit.file}:${hit.line}` : `line ${hit.line}` }),
          el("span", { class: "text", text: hit.text, title: "search for this line", onclick: () => {
            $("se-query").value = hit.text;
            searchLines();
          } })));
      }
      panel.append(list, el("div", { class: "note", text: `${model.ms} ms`
        + (model.encode_s !== undefined ? `; the ${data.lines.toLocaleString("en")} lines were encoded first, in ${model.encode_s} s` : "") }));
      out.append(panel);
    }
  });
}

function indexForm(info) {
  if (!info.index) return;
  const ix = info.index;
  $("ix-k").max = info.limits.search_k;
  $("ix-note").textContent = `${ix.passages.toLocaleString("en")} passages by ${ix.retrievers.join(", ")}`
    + (ix.fusion ? `, fused by ${ix.fusion}` : "") + (ix.rerank_top ? `; the top ${ix.rerank_top} reranked` : "");
}

function searchIndex() {
  return run(async () => {
    const k = parseInt($("ix-k").value, 10) || 10;
    const data = await api("/api/index-search", { query: $("ix-query").value, k });
    const list = el("ol", { class: "hits" });
    for (const hit of data.results) {
      list.append(el("li", { class: "hit ix-hit", "data-id": hit.id, "data-score": hit.score },
        el("span", { class: "score", text: hit.score.toFixed(3) }),
        el("span", { class: "lineno", text: hit.id }),
        el("span", { class: "text", text: hit.text })));
    }
    $("ix-results").replaceChildren(list, el("div", { class: "note", text: `${data.ms} ms` }));
  });
}

// Start ---------------------------------------------------------------------------------------

function showView(name) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.view === name);
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== `view-${name}`;
  if (name === "runs") followRun();
  if (location.hash !== `#${name}`) history.replaceState(null, "", `#${name}`);
}

async function start() {
  bertkit.info = await api("/api/info");
  const info = bertkit.info;
  $("served").textContent = `${info.models.length} model(s)` + (info.runs.length ? `, ${info.runs.length} run(s)` : "")
    + (info.corpus ? `, corpus ${info.corpus}` : "");
  const pick = (test) => info.models.filter(test).map((m) => [m.name, `${m.name} (${m.kind})`]);
  fillSelect($("at-model"), pick((m) => m.attention));
  fillSelect($("em-model"), pick((m) => m.embeddings));
  fillSelect($("pr-model"), pick((m) => m.predict));
  fillSelect($("run-name"), info.runs.map((r) => [r, r]));
  const layerChoices = () => {
    const m = modelInfo($("em-model").value);
    fillSelect($("em-layer"), [["last4", "last 4 (mean)"], ...(m ? [...Array(m.layers + 1).keys()].map((i) => [i, i]) : [])]);
  };
  layerChoices();
  $("em-model").addEventListener("change", layerChoices);
  $("em-words").replaceChildren(...info.sense_words.map((w) => el("option", { value: w })));
  $("em-word").value = info.sense_words[0] || "bank";
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => showView(b.dataset.view));
  $("fm-text").addEventListener("input", renderWords);
  $("fm-text").addEventListener("keydown", (e) => { if (e.key === "Enter") guess(); });
  $("fm-go").addEventListener("click", guess);
  $("at-go").addEventListener("click", showAttention);
  $("at-layer").addEventListener("change", drawAttention);
  $("at-head").addEventListener("change", drawAttention);
  $("at-lines").addEventListener("change", drawAttention);
  $("em-sim-go").addEventListener("click", compareWord);
  $("em-senses-go").addEventListener("click", projectWord);
  $("run-name").addEventListener("change", followRun);
  $("run-live").addEventListener("change", followRun);
  $("pr-model").addEventListener("change", predictForm);
  $("pr-go").addEventListener("click", predict);
  $("se-go").addEventListener("click", searchLines);
  $("se-query").addEventListener("keydown", (e) => { if (e.key === "Enter") searchLines(); });
  searchForm(info);
  $("ix-go").addEventListener("click", searchIndex);
  $("ix-query").addEventListener("keydown", (e) => { if (e.key === "Enter") searchIndex(); });
  indexForm(info);
  predictForm();
  renderWords();
  const hidden = { fill: !info.models.some((m) => m.fill_mask), attention: !info.models.some((m) => m.attention),
                   embeddings: !info.models.some((m) => m.embeddings), runs: !info.runs.length,
                   predict: !info.models.some((m) => m.predict),
                   search: !info.search || !info.models.some((m) => m.search), index: !info.index };
  for (const b of document.querySelectorAll("#tabs button")) b.hidden = hidden[b.dataset.view];
  const wanted = location.hash.slice(1);
  const first = [wanted, "fill", "attention", "embeddings", "runs", "predict", "search", "index"].find((v) => v in hidden && !hidden[v]);
  showView(first || "fill");
  window.addEventListener("hashchange", () => {
    const view = location.hash.slice(1);
    if (view in hidden && !hidden[view]) showView(view);
  });
  document.body.dataset.ready = "1";
}

start().catch((e) => showError(e.message));
