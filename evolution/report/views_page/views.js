"use strict";
let DATA = null;  // the page's data, unpacked (unpack)
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf",
                "#393b79","#637939","#8c6d31","#843c39","#7b4173","#3182bd"];
const SVG = "http://www.w3.org/2000/svg";
const state = {model: 0, sentence: 0, attention: "encoder", level: "word", weight: "alpha", layer: 0, heads: null,
               neuronHead: 0, query: 0};
// The payload's packed leaves (evolution/report/views_payload.py): base64 of zlib data, inflated by the browser.
async function inflate(b64) {
  const s = atob(b64), b = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) b[i] = s.charCodeAt(i);
  const stream = new Blob([b]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}
function edgeSet(x, b) {  // {edges: [L, H, T], keys}: per (layer, head, query) its count, then keys, then weights in 1/255
  const [L, H, T] = x.edges, size = x.keys < 256 ? 1 : 2, rows = L * H * T;
  const at = size === 1 ? i => b[i] : i => b[2 * i] | (b[2 * i + 1] << 8);
  let n = 0;
  for (let r = 0; r < rows; r++) n += at(r);
  const wOff = (rows + n) * size, out = [];
  let e = 0;
  for (let l = 0; l < L; l++) {
    const layer = []; out.push(layer);
    for (let h = 0; h < H; h++) {
      const head = []; layer.push(head);
      for (let q = 0; q < T; q++) {
        const c = at((l * H + h) * T + q);
        for (let j = 0; j < c; j++, e++) head.push([q, at(rows + e), b[wOff + e] / 255]);
      }
    }
  }
  return out;
}
function half(h) {  // IEEE 754 binary16 -> number
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
  if (e === 0) return s * Math.pow(2, -14) * (f / 1024);
  if (e === 31) return f ? NaN : s * Infinity;
  return s * Math.pow(2, e - 15) * (1 + f / 1024);
}
function halfSet(x, b) {  // {half: shape}: the float16 values' low bytes, then their high bytes -> nested arrays
  const n = b.length / 2, flat = new Array(n);
  for (let i = 0; i < n; i++) flat[i] = half(b[i] | (b[n + i] << 8));
  function nest(shape, off) {
    if (shape.length === 1) return flat.slice(off, off + shape[0]);
    const size = shape.slice(1).reduce((a, c) => a * c, 1);
    return Array.from({length: shape[0]}, (_, i) => nest(shape.slice(1), off + i * size));
  }
  return nest(x.half, 0);
}
async function unpack(x) {  // the payload with every packed leaf replaced by its arrays
  if (Array.isArray(x)) return Promise.all(x.map(unpack));
  if (x === null || typeof x !== "object") return x;
  if (typeof x.z === "string") { const b = await inflate(x.z); return x.edges ? edgeSet(x, b) : halfSet(x, b); }
  const out = {};
  for (const [k, v] of Object.entries(x)) out[k] = await unpack(v);
  return out;
}
function seen(node, piece, text) {  // a piece the model saw as <unk>: its text beside it (a print keeps it) and as the tooltip
  if (!text || text === piece) return;
  node.textContent = piece + " [" + text + "]";
  el("title", {}, node, true).textContent = "the text: " + text;
}
function el(tag, attrs, parent, ns) {
  const e = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function select(label, options, value, onchange, parent) {
  const l = el("label", {}, parent); l.textContent = label + " ";
  const s = el("select", {}, l);
  options.forEach(([v, t]) => { const o = el("option", {value: v}, s); o.textContent = t; if (String(v) === String(value)) o.selected = true; });
  s.onchange = () => onchange(s.value);
  return s;
}
function model() { return DATA.models[state.model]; }
function item() { return model().sentences[state.sentence]; }
function level() { return item().levels[state.level]; }
function edges(layer, head) { const e = level().edges[state.weight] || level().edges.alpha; return e[layer][head]; }
function view() {  // the shown attention type: query tokens (left), key tokens (right), layers, edges of a (layer, head)
  const it = item(), d = it.decoder;
  const texts = level().texts;  // the text an <unk> stands for (a tooltip), where the model saw one
  if (state.attention === "encoder" || !d) return {q: level().tokens, k: level().tokens, qt: texts, kt: texts, layers: model().layers, edges: edges};
  const own = state.attention === "decoder";
  return {q: d.tokens, k: own ? d.tokens : it.levels.subword.tokens, kt: own ? null : it.levels.subword.texts, layers: d.layers,
          edges: (l, h) => (own ? d.self : d.cross)[l][h]};
}
function controls() {
  const c = document.getElementById("controls"); c.innerHTML = "";
  select("model", DATA.models.map((m, i) => [i, m.name]), state.model, v => { state.model = +v; state.sentence = 0; state.heads = null; state.layer = 0; state.neuronHead = 0; state.query = 0; draw(); }, c);
  select("sentence", model().sentences.map((s, i) => [i, "corpus sentence " + s.sentence]), state.sentence, v => { state.sentence = +v; state.query = 0; draw(); }, c);
  if (item().decoder) select("attention", [["encoder", "encoder self-attention"], ["decoder", "decoder self-attention (its greedy translation)"], ["cross", "decoder over the source (encoder-decoder)"]],
                              state.attention, v => { state.attention = v; state.layer = 0; draw(); }, c);
  else state.attention = "encoder";
  if (state.attention !== "encoder") { state.level = "subword"; state.weight = "alpha"; }
  select("level", [["word", "word"], ["subword", "subword"]], state.level, v => { state.level = v; state.query = 0; draw(); }, c);
  const weights = Object.keys(level().edges).map(w => [w, w === "alpha" ? "alpha" : "||alpha f(x)||"]);
  if (!level().edges[state.weight]) state.weight = "alpha";
  select("weight", weights, state.weight, v => { state.weight = v; draw(); }, c);
}
function headView() {
  const m = model(), v = view(), ctl = document.getElementById("headctl");
  if (state.heads === null) state.heads = Array.from({length: m.heads}, (_, h) => h);
  if (state.layer >= v.layers) state.layer = 0;
  ctl.innerHTML = "";
  select("layer", Array.from({length: v.layers}, (_, l) => [l, "layer " + (l + 1)]), state.layer, x => { state.layer = +x; draw(); }, ctl);
  for (let h = 0; h < m.heads; h++) {
    const l = el("label", {style: "color:" + COLORS[h % COLORS.length]}, ctl);
    const cb = el("input", {type: "checkbox", class: "headbox"}, l); cb.checked = state.heads.includes(h);
    cb.onchange = () => { state.heads = cb.checked ? state.heads.concat([h]) : state.heads.filter(x => x !== h); draw(); };
    l.appendChild(document.createTextNode("head " + h));
  }
  const svg = document.getElementById("headview"); svg.innerHTML = "";
  const rowH = 16, width = 520, height = rowH * Math.max(v.q.length, v.k.length) + 10;
  svg.setAttribute("width", width); svg.setAttribute("height", height);
  const lines = el("g", {}, svg, true);
  const left = [];
  v.q.forEach((t, i) => {
    const a = el("text", {x: 150, y: 12 + i * rowH, "text-anchor": "end", class: "tok"}, svg, true); a.textContent = t;
    seen(a, t, v.qt && v.qt[i]);
    left.push(a);
  });
  v.k.forEach((t, i) => { const b = el("text", {x: 370, y: 12 + i * rowH, class: "tok"}, svg, true); b.textContent = t; seen(b, t, v.kt && v.kt[i]); });
  function drawLines(only) {
    lines.innerHTML = "";
    for (const h of state.heads) for (const [q, k, w] of v.edges(state.layer, h)) {
      if (only !== undefined && q !== only) continue;
      el("line", {x1: 155, y1: 8 + q * rowH, x2: 365, y2: 8 + k * rowH, stroke: COLORS[h % COLORS.length],
                  "stroke-opacity": Math.min(1, w), "stroke-width": 2, class: "edge"}, lines, true);
    }
  }
  left.forEach((t, i) => { t.onmouseenter = () => { t.classList.add("hi"); drawLines(i); }; t.onmouseleave = () => { t.classList.remove("hi"); drawLines(); }; });
  drawLines();
}
function modelView() {
  const m = model(), v = view(), box = document.getElementById("modelview"); box.innerHTML = "";
  const size = 80, stepQ = size / Math.max(v.q.length, 1), stepK = size / Math.max(v.k.length, 1);
  for (let l = 0; l < v.layers; l++) {
    const row = el("div", {}, box); const lab = el("span", {class: "rowlab"}, row); lab.textContent = "L" + (l + 1);
    for (let h = 0; h < m.heads; h++) {
      const svg = el("svg", {width: size, height: size, class: "thumb", "data-layer": l + 1, "data-head": h}, row, true);
      for (const [q, k, w] of v.edges(l, h))
        el("line", {x1: 4, y1: (q + .5) * stepQ, x2: size - 4, y2: (k + .5) * stepK, stroke: COLORS[h % COLORS.length], "stroke-opacity": Math.min(1, w), "stroke-width": 1}, svg, true);
      svg.onclick = () => { state.layer = l; state.heads = [h]; state.neuronHead = h; draw(); };
    }
  }
}
function color(v, scale) { const a = Math.min(1, Math.abs(v) / scale); return v >= 0 ? `rgba(31,119,180,${a})` : `rgba(214,39,40,${a})`; }
function neuronView() {
  const box = document.getElementById("neuronview"), ctl = document.getElementById("neuronctl");
  box.innerHTML = ""; ctl.innerHTML = "";
  const it = item();
  if (!it.neuron) { box.textContent = "No queries and keys for this model (the neuron view needs a fairseq Transformer or a BERT-like encoder)."; return; }
  const toks = it.levels.subword.tokens, m = model();
  select("layer", Array.from({length: m.layers}, (_, l) => [l, "layer " + (l + 1)]), state.layer, v => { state.layer = +v; draw(); }, ctl);
  select("head", Array.from({length: m.heads}, (_, h) => [h, "head " + h]), state.neuronHead, v => { state.neuronHead = +v; draw(); }, ctl);
  if (state.query >= toks.length) state.query = 0;
  select("query", toks.map((t, i) => [i, i + ": " + t]), state.query, v => { state.query = +v; draw(); }, ctl);
  if (state.layer >= m.layers) state.layer = 0;
  const Q = it.neuron.q, KK = it.neuron.k;
  const q = Q[state.layer][state.neuronHead][state.query], K = KK[state.layer][state.neuronHead];
  const d = q.length, scores = K.map(k => k.reduce((s, x, i) => s + x * q[i], 0) / Math.sqrt(d));
  const mx = Math.max(...scores), ex = scores.map(s => Math.exp(s - mx)), z = ex.reduce((a, b) => a + b, 0);
  const scale = Math.max(...q.map(Math.abs), ...K.flat().map(Math.abs), 1e-6);
  const t = el("table", {class: "neuron"}, box);
  const head = el("tr", {}, t); ["key", "query q", "key k", "q x k", "q . k / sqrt(d)", "softmax"].forEach(s => { el("th", {}, head).textContent = s; });
  K.forEach((k, j) => {
    const tr = el("tr", {class: "neuronrow"}, t);
    el("td", {}, tr).textContent = toks[j];
    for (const vec of [q, k, k.map((x, i) => x * q[i])]) {
      const td = el("td", {}, tr);
      vec.forEach(v => el("span", {class: "cell", style: "background:" + color(v, vec === q || vec === k ? scale : scale * scale)}, td));
    }
    el("td", {}, tr).textContent = scores[j].toFixed(2);
    el("td", {}, tr).textContent = (ex[j] / z).toFixed(3);
  });
}
function draw() { controls(); headView(); modelView(); neuronView(); document.body.dataset.ready = "1"; }
function start() {
  // an initial state from the address: #model=mt&attention=cross&layer=2&sentence=1 (names or numbers)
  for (const [k, v] of new URLSearchParams(location.hash.slice(1))) {
    if (k === "model") { const i = DATA.models.findIndex(m => m.name === v); if (i >= 0) state.model = i; }
    else if (k === "layer") state.layer = Math.max(0, (+v || 1) - 1);
    else if (k === "sentence") state.sentence = +v || 0;
    else if (k in state) state[k] = v;
  }
  draw();
}
if (typeof DecompressionStream === "undefined")
  document.getElementById("controls").textContent = "This browser cannot unpack the page's data (it lacks DecompressionStream: " +
    "Chrome 80, Firefox 113, Safari 16.4 or later have it).";
else unpack(JSON.parse(document.getElementById("data").textContent)).then(d => { DATA = d; start(); }, e => {
  document.getElementById("controls").textContent = "The page's data could not be unpacked: " + e; throw e; });
