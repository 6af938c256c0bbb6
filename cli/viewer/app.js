// The viewer's page: reads its state from the URL's query string, asks the REST API of `memprof
// serve` (docs/viewer-api.md) for exactly what the visible view needs, and draws the charts and
// flame graphs as SVG by hand (no library, nothing fetched from elsewhere).
//
// Invariants: the URL is the whole state (a copied URL reopens the same view), so every change
// goes through `navigate`, which rewrites the URL and redraws from it; the page never asks for
// more timeline points than the chart has pixels; an answer that arrives after a newer request
// for the same view is dropped; every failure of the API shows its message in the page.
"use strict";

// The filters every endpoint takes, with the same names in the URL and in the API.
// The group filters have no input: written in the URL, they are kept and applied.
const FILTERS = ["size_min", "size_max", "address_min", "address_max", "life_min", "life_max", "life", "thread", "func",
  "nofunc", "file", "nofile", "label", "crate", "marker_from", "marker_to", "group_allocations_min",
  "group_allocations_max", "group_leaked_min", "group_leaked_max", "group_interval_min",
  "group_interval_max"];
const MOMENTS = ["at", "from", "to"];
const VIEWS = ["timeline", "sites", "flame", "diff", "labels", "crates", "mappings"];
// The filters `/api/mappings` takes: a mapping is no block, and has no size class or lifetime.
const MAPPING_FILTERS = ["thread", "func", "nofunc", "file", "nofile", "label", "crate"];
const MAX_POINTS = 10000;
const SITES_PAGE = 100;
const LIVE_POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";

let summary = null;
// The traces served (`memprof serve A B ...`): the views show one, `trace=ID` in the URL.
let traces = [];
// Every marker of the trace: the summary lists the first ones, `api/markers` all of them.
let markers = [];
const latest = {}; // the newest request of each view: older answers are dropped

// ---------------------------------------------------------------------------------------------
// Formatting

function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const sign = n < 0 ? "−" : "";
  let v = Math.abs(n);
  if (v < 1024) return `${sign}${v} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let i = -1;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return `${sign}${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

function fmtCount(n) {
  if (n === null || n === undefined) return "—";
  return n.toLocaleString("en-US");
}

// Under sampling the figures of blocks and bytes are estimates, as memprof report's: marked ≈.
function isEstimated() {
  return Boolean(summary && summary.estimated);
}

function estBytes(n) {
  return n === null || n === undefined ? "—" : `${isEstimated() ? "≈" : ""}${fmtBytes(n)}`;
}

function estCount(n) {
  return n === null || n === undefined ? "—" : `${isEstimated() ? "≈" : ""}${fmtCount(n)}`;
}

function fmtDuration(ns) {
  if (ns === null || ns === undefined) return "—";
  const v = Math.abs(ns);
  if (v < 1e3) return `${ns} ns`;
  if (v < 1e6) return `${(ns / 1e3).toFixed(1)} µs`;
  if (v < 1e9) return `${(ns / 1e6).toFixed(1)} ms`;
  return `${(ns / 1e9).toFixed(2)} s`;
}

// A moment as the API reads it: seconds since the start, without trailing zeros.
function momentOf(ns) {
  return (ns / 1e9).toFixed(9).replace(/0+$/, "").replace(/\.$/, "");
}

// A time picked on a chart, on the nearest edge of the server's index buckets: the index answers
// such moments without reading the trace again (docs/viewer-api.md).
function snapped(ns) {
  const bucket = summary && summary.bucket_ns;
  return bucket ? Math.round(ns / bucket) * bucket : ns;
}

// A time for the eye: six significant digits at most (the URL keeps the exact moment).
function fmtSeconds(ns) {
  return `${Number((ns / 1e9).toPrecision(6))} s`;
}

// A site is named by its program's first frame (`function`, `file`, `line`: the first frame of
// its context outside the standard library); `context` holds the frames the reports show for it,
// innermost first, the collection operation the program called before that frame. The server
// writes files as the reports do (`core/src/...`, not `/rustc/<commit>/library/core/src/...`).
function siteName(site) {
  return site.function || "(unknown function)";
}

function frameLocation(frame) {
  if (!frame.file) return "";
  return frame.line ? `${frame.file}:${frame.line}` : frame.file;
}

function siteLocation(site) {
  return frameLocation(site);
}

// A frame as the reports print it: `FILE:LINE in 'FUNCTION'`.
function frameText(frame) {
  const at = frameLocation(frame);
  return at ? `${at} in '${frame.function}'` : frame.function;
}

// A site's context for a tooltip: one frame a line, as the Markdown report lists them.
function contextText(site) {
  return (site.context || []).map(frameText).join("\n");
}

// The cell naming a site: the program's function, prominent; its location and id; the
// collection operation it called (`via ...`); and the callers of the context, innermost first.
function siteCell(site, idText = `#${site.id} `) {
  const context = site.context || [];
  const program = site.program || 0;
  const own = context[program];
  const cell = el("td", { class: "text", title: contextText(site) || null },
    el("div", { class: own && own.std ? "function std" : "function", text: siteName(site) }),
    el("div", { class: "location" }, el("span", { class: "site-id", text: idText }), siteLocation(site)));
  if (program > 0) {
    cell.append(el("div", { class: "via", text: `via ${context.slice(0, program).map((f) => f.function).join(" ← ")}` }));
  }
  const callers = context.slice(program + 1);
  if (callers.length) {
    cell.append(el("div", { class: "callers", text: `← ${callers.map((f) => f.function).join(" ← ")}` }));
  }
  return cell;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// ---------------------------------------------------------------------------------------------
// State in the URL

function state() {
  return new URLSearchParams(location.search);
}

function currentView() {
  const view = state().get("view");
  return VIEWS.includes(view) ? view : "timeline";
}

// Rewrites the URL with `changes` (a value of null removes the parameter, an array repeats it)
// and redraws.
function navigate(changes, { replace = false } = {}) {
  const q = state();
  for (const [k, v] of Object.entries(changes)) {
    q.delete(k);
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else if (v !== null && v !== undefined && v !== "") q.set(k, v);
  }
  const url = `${location.pathname}${q.toString() ? "?" + q : ""}`;
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  render();
}

// The query of an API call: the filters, the named moments, and `extra`.
function apiParams(moments, extra = {}) {
  const q = state();
  const out = new URLSearchParams();
  for (const name of FILTERS) for (const v of q.getAll(name)) if (v !== "") out.append(name, v);
  for (const name of moments) {
    const v = q.get(name);
    if (v) out.set(name, v);
  }
  for (const [k, v] of Object.entries(extra)) if (v !== null && v !== undefined) out.set(k, v);
  return out;
}

// The time in ns of a moment written as the API reads it, or null when unknown.
function resolveMoment(text) {
  if (!text || !summary) return null;
  if (text === "start") return 0;
  if (text === "end") return summary.duration_ns;
  if (text === "peak") return summary.peak.time_ns;
  if (text.startsWith("marker:")) return markerTime(text.slice(7));
  const s = Number(text);
  return Number.isFinite(s) ? Math.round(s * 1e9) : null;
}

function markerTime(label) {
  const m = markers.find((x) => x.label === label);
  return m ? m.time_ns : null;
}

// The selected range [from, to] in ns, or null: from/to, or the marker range.
function selectedRange() {
  const q = state();
  let from = resolveMoment(q.get("from"));
  let to = resolveMoment(q.get("to"));
  if (q.get("marker_from")) from = markerTime(q.get("marker_from"));
  if (q.get("marker_to")) to = markerTime(q.get("marker_to"));
  if (from === null && to === null) return null;
  return [from ?? 0, to ?? summary.duration_ns];
}

// ---------------------------------------------------------------------------------------------
// The API

// The trace the views show: `trace=ID` when the server has it, else the first.
function traceId() {
  const id = Number(state().get("trace"));
  return Number.isInteger(id) && id > 0 && id < traces.length ? id : 0;
}

// Where the API of the trace shown answers: `api/traces/ID/` but for the first.
function apiBase(id = traceId()) {
  return id ? `api/traces/${id}/` : "api/";
}

// A trace for the eye: its id and its file's name (the whole path in its tooltip).
function traceName(id) {
  const t = traces[id];
  return t ? `${id}: ${t.path.split("/").pop()}` : String(id);
}

class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.status = status;
  }
}

// Answers already had, by URL: a click that changes only what is shown (a sort, an open site, a
// zoom) redraws without asking the server again. A trace does not change while it is served.
const answers = new Map();
const ANSWERS_KEPT = 32;

async function api(view, path, params) {
  const ticket = (latest[view] = (latest[view] || 0) + 1);
  const url = `${apiBase()}${path}${params && params.toString() ? "?" + params : ""}`;
  if (answers.has(url)) return ticket === latest[view] ? answers.get(url) : null;
  const body = await fetchJson(url);
  answers.set(url, body);
  if (answers.size > ANSWERS_KEPT) answers.delete(answers.keys().next().value);
  if (ticket !== latest[view]) return null; // a newer request replaced this one
  return body;
}

async function fetchJson(url) {
  let response;
  try {
    response = await fetch(url);
  } catch (e) {
    throw new ApiError(`${url}: the server does not answer (${e.message})`);
  }
  let body;
  const text = await response.text();
  try {
    body = JSON.parse(text);
  } catch {
    body = null;
  }
  if (!response.ok) {
    const message = body && body.error ? body.error : text.slice(0, 300) || response.statusText;
    throw new ApiError(`${url}: ${response.status} ${message}`, response.status);
  }
  if (body === null) throw new ApiError(`${url}: the answer is not JSON`);
  return body;
}

function showError(message) {
  const box = document.getElementById("errors");
  box.hidden = false;
  const line = el("div", { class: "error" }, el("span", { text: message }));
  const close = el("button", { type: "button", "aria-label": "dismiss", text: "×" });
  close.addEventListener("click", () => {
    line.remove();
    if (!box.children.length) box.hidden = true;
  });
  line.append(close);
  box.append(line);
}

function clearErrors() {
  const box = document.getElementById("errors");
  box.replaceChildren();
  box.hidden = true;
}

// Runs a view's drawing, turning any failure into a message in the page and in the view.
async function guarded(target, work) {
  try {
    await work();
  } catch (e) {
    showError(e instanceof ApiError ? e.message : `the page failed: ${e.message}`);
    if (target) target.replaceChildren(el("p", { class: "failed", text: "not available: see the error above" }));
    if (!(e instanceof ApiError)) console.error(e);
  }
}

// ---------------------------------------------------------------------------------------------
// Summary and the filter form

function drawSummary() {
  const s = summary;
  const threads = s.threads.length;
  document.getElementById("summary").replaceChildren(
    el("span", { class: "path", text: s.path }),
    el("span", { text: `${fmtCount(s.events)} events over ${fmtDuration(s.duration_ns)}` }),
    el("span", { text: `peak ${estBytes(s.peak.bytes)} in ${estCount(s.peak.blocks)} blocks at ${fmtSeconds(s.peak.time_ns)}` }),
    el("span", { text: `at end ${estBytes(s.end.bytes)} in ${estCount(s.end.blocks)} blocks` }),
    el("span", { text: `${estCount(s.totals.allocations)} allocations (${estBytes(s.totals.allocated_bytes)}), ${estCount(s.totals.frees)} frees, ${estCount(s.totals.temporary)} temporary, ${estCount(s.totals.short_lived)} short-lived (freed within ${fmtDuration(s.totals.short_lived_ns)})` }),
    el("span", { text: `${threads} thread${threads === 1 ? "" : "s"}` }),
  );
  if (s.estimated) {
    const recorded = s.recorded ? ` from ${fmtCount(s.recorded.allocations)} recorded allocations` : "";
    document.getElementById("summary").append(el("span", { class: "estimated",
      text: `≈ sampled: one allocation per ${fmtCount(s.sample_interval)} bytes on average recorded; the figures marked ≈ are estimates${recorded}, as memprof report's` }));
  }
  if (s.complete === false || s.live) {
    document.getElementById("summary").append(el("span", { class: "live", text: "still arriving, or cut short: followed every 2 s" }));
  }
  if (s.live) {
    const late = s.live.out_of_order_events ? `, ${fmtCount(s.live.out_of_order_events)} counted out of order (arrived late)` : "";
    document.getElementById("summary").append(el("span", { class: "live", text: `indexed up to ${fmtSeconds(s.live.indexed_through_ns)}: ${fmtCount(s.live.pending_events)} events wait for the other threads'${late}` }));
  }
  const form = document.getElementById("filters");
  // Size and lifetime bounds offered on the index's bin edges, which it answers without a replay.
  const edges = s.index_edges || { size: [], life_ns: [] };
  for (const [name, values, fmt] of [
    ["size_min", edges.size, fmtBytes], ["size_max", edges.size, fmtBytes],
    ["life_min", edges.life_ns, fmtDuration], ["life_max", edges.life_ns, fmtDuration],
  ]) {
    const select = form.elements[name];
    if (!select || select.dataset.edges) continue;
    select.dataset.edges = "filled";
    for (const v of values) select.append(el("option", { value: String(v), text: fmt(v) }));
  }
  for (const name of ["marker_from", "marker_to"]) {
    const select = form.elements[name];
    for (const m of markers) {
      select.append(el("option", { value: m.label, text: `${m.label} (${fmtSeconds(m.time_ns)})` }));
    }
  }
  const threadSelect = form.elements.thread;
  threadSelect.size = Math.min(4, Math.max(2, s.threads.length));
  for (const t of s.threads) {
    threadSelect.append(el("option", { value: String(t.id), text: t.label }));
  }
}

function fillForm() {
  const q = state();
  const form = document.getElementById("filters");
  for (const name of [...MOMENTS, ...FILTERS]) {
    const field = form.elements[name];
    if (!field) continue;
    if (field.multiple) {
      const chosen = q.getAll(name);
      for (const option of field.options) option.selected = chosen.includes(option.value);
    } else {
      const value = q.get(name) || "";
      if (field.tagName === "SELECT" && value !== "" && ![...field.options].some((o) => o.value === value)) {
        // A bound from the URL off the index's edges: kept, and answered by a replay.
        field.append(el("option", { value, text: `${value} (replayed)`, title: "off the index's edges: the server replays the trace" }));
      }
      field.value = value;
    }
  }
}

function submitForm(event) {
  event.preventDefault();
  const form = document.getElementById("filters");
  const changes = { site: null, zoom: null, offset: null };
  for (const name of [...MOMENTS, ...FILTERS]) {
    const field = form.elements[name];
    if (!field) continue;
    if (field.multiple) changes[name] = [...field.selectedOptions].map((o) => o.value);
    else changes[name] = field.value.trim();
  }
  navigate(changes);
}

function resetForm() {
  const changes = { site: null, zoom: null };
  for (const name of [...MOMENTS, ...FILTERS]) changes[name] = null;
  navigate(changes);
}

function drawExports() {
  const params = apiParams(MOMENTS);
  for (const a of document.querySelectorAll("#exports a")) {
    a.href = `${apiBase()}export/${a.dataset.format}${params.toString() ? "?" + params : ""}`;
  }
}

// ---------------------------------------------------------------------------------------------
// Charts

const MARGIN = { left: 64, right: 48, top: 30, bottom: 24 };
const compact = new Intl.NumberFormat("en-US", { notation: "compact", maximumFractionDigits: 1 });

function chartWidth(container) {
  return Math.max(320, Math.floor(container.clientWidth || 800));
}

function timeTicks(from, to, n) {
  const span = to - from || 1;
  const raw = span / n;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * pow).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) ticks.push(t);
  return ticks;
}

function axes(root, x0, x1, y0, y1, from, to, xOf, yMax, yOfBytes) {
  root.append(svg("line", { x1: x0, x2: x1, y1: y1, y2: y1, class: "axis" }));
  for (const t of timeTicks(from, to, 6)) {
    const x = xOf(t);
    root.append(svg("line", { x1: x, x2: x, y1: y1, y2: y1 + 4, class: "axis" }));
    const label = svg("text", { x, y: y1 + 16, class: "tick", "text-anchor": "middle" });
    label.textContent = fmtSeconds(t);
    root.append(label);
  }
  if (yOfBytes) {
    for (let i = 0; i <= 4; i++) {
      const v = (yMax * i) / 4;
      const y = yOfBytes(v);
      root.append(svg("line", { x1: x0, x2: x1, y1: y, y2: y, class: "grid" }));
      const label = svg("text", { x: x0 - 4, y: y + 4, class: "tick", "text-anchor": "end" });
      label.textContent = fmtBytes(Math.round(v));
      root.append(label);
    }
  }
}

// Draws live bytes (area) and live blocks (line) of a timeline answer into `container`, with
// its markers, its peak and the page's selection; `interactive` adds the range and moment picking.
function drawLive(container, data, { height = 220, interactive = false, selection = true, legend: names = ["live bytes", "live blocks (right)"], describe = null } = {}) {
  const width = chartWidth(container);
  const x0 = MARGIN.left, x1 = width - MARGIN.right, y0 = MARGIN.top, y1 = height - MARGIN.bottom;
  const from = data.from_ns, to = Math.max(data.to_ns, data.from_ns + 1);
  const xOf = (t) => x0 + ((t - from) / (to - from)) * (x1 - x0);
  const tOf = (x) => Math.round(from + ((Math.min(Math.max(x, x0), x1) - x0) / (x1 - x0)) * (to - from));
  const points = data.points || [];
  const maxBytes = Math.max(1, data.peak ? data.peak.bytes : 0, ...points.map((p) => p.live_bytes));
  const maxBlocks = Math.max(1, ...points.map((p) => p.live_blocks));
  const yOf = (v) => y1 - (v / maxBytes) * (y1 - y0);
  const yBlocks = (v) => y1 - (v / maxBlocks) * (y1 - y0);

  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "timeline", "data-points": points.length });
  axes(root, x0, x1, y0, y1, from, to, xOf, maxBytes, yOf);
  for (let i = 0; i <= 4; i++) {
    const label = svg("text", { x: x1 + 4, y: yBlocks((maxBlocks * i) / 4) + 4, class: "tick blocks" });
    label.textContent = compact.format(Math.round((maxBlocks * i) / 4));
    root.append(label);
  }
  const legend = svg("text", { x: x0, y: 12, class: "legend" });
  const [bytesName, blocksName] = names;
  const bytesSpan = svg("tspan", { class: "bytes" });
  bytesSpan.textContent = `■ ${bytesName}  `;
  const blocksSpan = svg("tspan", { class: "blocks" });
  blocksSpan.textContent = `— ${blocksName}`;
  legend.append(bytesSpan, blocksSpan);
  root.append(legend);

  if (points.length) {
    // A step line: live_* hold from a point's time to the next one's.
    let area = `M${xOf(from).toFixed(1)},${y1}`;
    let blocks = "";
    let prevX = xOf(from);
    for (const p of points) {
      const a = prevX.toFixed(1), b = xOf(p.t_ns).toFixed(1);
      const yb = yOf(p.live_bytes).toFixed(1), yk = yBlocks(p.live_blocks).toFixed(1);
      area += `L${a},${yb}L${b},${yb}`;
      blocks += `${blocks ? "L" : "M"}${a},${yk}L${b},${yk}`;
      prevX = xOf(p.t_ns);
    }
    area += `L${prevX.toFixed(1)},${y1}Z`;
    root.append(svg("path", { d: area, class: "live-bytes" }));
    root.append(svg("path", { d: blocks, class: "live-blocks" }));
  }

  const q = state();
  if (selection) {
    const range = selectedRange();
    if (range) {
      const a = xOf(range[0]), b = xOf(range[1]);
      root.append(svg("rect", { x: Math.min(a, b), y: y0, width: Math.max(1, Math.abs(b - a)), height: y1 - y0, class: "selection" }));
    }
    const at = resolveMoment(q.get("at"));
    if (at !== null) {
      const x = xOf(at);
      root.append(svg("line", { x1: x, x2: x, y1: y0, y2: y1, class: "moment" }));
    }
  }

  // Marker labels go on the first of a few rows where they do not overlap the label before;
  // one that fits on none is left out (its line stays, its label in the line's tooltip).
  const rowEnds = [-Infinity, -Infinity, -Infinity];
  for (const m of data.markers || []) {
    const x = xOf(m.time_ns);
    const g = svg("g", { class: "marker", "data-label": m.label });
    g.append(svg("line", { x1: x, x2: x, y1: y0 - 4, y2: y1 }));
    const title = svg("title");
    title.textContent = `${m.label} (${fmtSeconds(m.time_ns)})`;
    g.append(title);
    const width = labelWidth(m.label);
    // Right of its line, or left of it where the chart ends.
    const left = x + 3 + width > x1 ? x - 3 - width : x + 3;
    const row = rowEnds.findIndex((end) => left > end + 4);
    if (row >= 0) {
      const label = svg("text", { x: left, y: y0 + 2 + row * 13 });
      label.textContent = m.label;
      g.append(label);
      rowEnds[row] = left + width;
    }
    root.append(g);
  }

  if (data.peak && data.peak.bytes > 0) {
    const x = xOf(data.peak.time_ns), y = yOf(data.peak.bytes);
    const g = svg("g", { class: "peak" });
    g.append(svg("circle", { cx: x, cy: y, r: 4 }));
    const label = svg("text", { x: x + (x > (x0 + x1) / 2 ? -6 : 6), y: Math.max(y0 + 10, y - 6), "text-anchor": x > (x0 + x1) / 2 ? "end" : "start" });
    label.textContent = `peak ${estBytes(data.peak.bytes)}`;
    g.append(label);
    root.append(g);
  }

  const overlay = svg("rect", { x: x0, y: y0, width: x1 - x0, height: y1 - y0, class: "overlay" });
  root.append(overlay);
  const drag = svg("rect", { x: 0, y: y0, width: 0, height: y1 - y0, class: "dragging", visibility: "hidden" });
  root.append(drag);
  container.replaceChildren(root);

  const xIn = (event) => event.clientX - root.getBoundingClientRect().left;
  const nearest = (t) => {
    let lo = 0, hi = points.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (points[mid].t_ns < t) lo = mid + 1;
      else hi = mid;
    }
    return points[lo];
  };
  overlay.addEventListener("pointermove", (event) => {
    const t = tOf(xIn(event));
    const p = points.length ? nearest(t) : null;
    tooltip(event, p && describe ? describe(p) : p
      ? [fmtSeconds(p.t_ns), `live ${estBytes(p.live_bytes)} in ${estCount(p.live_blocks)} blocks`,
        `${estCount(p.allocs)} allocations (${estBytes(p.alloc_bytes)})`, `${estCount(p.frees)} frees (${estBytes(p.free_bytes)})`]
      : [fmtSeconds(t)]);
  });
  overlay.addEventListener("pointerleave", () => tooltip(null));
  if (!interactive) return;
  let start = null;
  overlay.addEventListener("pointerdown", (event) => {
    start = xIn(event);
    overlay.setPointerCapture(event.pointerId);
  });
  overlay.addEventListener("pointermove", (event) => {
    if (start === null) return;
    const x = Math.min(Math.max(xIn(event), x0), x1);
    drag.setAttribute("x", Math.min(start, x));
    drag.setAttribute("width", Math.abs(x - start));
    drag.setAttribute("visibility", "visible");
  });
  overlay.addEventListener("pointerup", (event) => {
    if (start === null) return;
    const end = xIn(event);
    const a = tOf(start), b = tOf(end);
    const moved = Math.abs(end - start);
    start = null;
    drag.setAttribute("visibility", "hidden");
    if (moved < 4) {
      navigate({ at: momentOf(snapped(a)) });
    } else {
      navigate({ from: momentOf(snapped(Math.min(a, b))), to: momentOf(snapped(Math.max(a, b))), marker_from: null, marker_to: null });
    }
  });
}

// Allocation (up) and free (down) counts per point.
function drawRates(container, data, height = 160) {
  const width = chartWidth(container);
  const x0 = MARGIN.left, x1 = width - MARGIN.right, y0 = MARGIN.top, y1 = height - MARGIN.bottom;
  const mid = (y0 + y1) / 2;
  const from = data.from_ns, to = Math.max(data.to_ns, data.from_ns + 1);
  const xOf = (t) => x0 + ((t - from) / (to - from)) * (x1 - x0);
  const points = data.points || [];
  const max = Math.max(1, ...points.map((p) => Math.max(p.allocs, p.frees)));
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "rates" });
  axes(root, x0, x1, y0, y1, from, to, xOf, 0, null);
  let up = "", down = "", prev = xOf(from);
  for (const p of points) {
    const x = xOf(p.t_ns);
    const w = Math.max(0.5, x - prev).toFixed(1);
    if (p.allocs) up += `M${prev.toFixed(1)},${mid}h${w}v${(-(p.allocs / max) * (mid - y0)).toFixed(1)}h-${w}Z`;
    if (p.frees) down += `M${prev.toFixed(1)},${mid}h${w}v${((p.frees / max) * (y1 - mid)).toFixed(1)}h-${w}Z`;
    prev = x;
  }
  root.append(svg("path", { d: up, class: "allocs" }), svg("path", { d: down, class: "frees" }));
  root.append(svg("line", { x1: x0, x2: x1, y1: mid, y2: mid, class: "axis" }));
  const scaleLabel = svg("text", { x: x0, y: y0 - 10, class: "tick" });
  scaleLabel.textContent = `bars up to ${fmtCount(max)} per interval of ${fmtDuration(Math.round((to - from) / Math.max(1, points.length)))}`;
  root.append(scaleLabel);
  for (const [y, text] of [[mid - 6, "allocs ↑"], [mid + 14, "frees ↓"]]) {
    const label = svg("text", { x: x0 - 4, y, class: "tick", "text-anchor": "end" });
    label.textContent = text;
    root.append(label);
  }
  container.replaceChildren(root);
}

// The width of a marker's label in pixels (11 px text), measured once per label.
const labelWidths = new Map();
function labelWidth(text) {
  if (!labelWidths.has(text)) {
    const canvas = labelWidth.canvas || (labelWidth.canvas = document.createElement("canvas"));
    const context = canvas.getContext("2d");
    context.font = `600 11px ${getComputedStyle(document.documentElement).fontFamily}`;
    labelWidths.set(text, context.measureText(text).width);
  }
  return labelWidths.get(text);
}

function tooltip(event, lines) {
  const tip = document.getElementById("tooltip");
  if (!event) {
    tip.hidden = true;
    return;
  }
  tip.replaceChildren(...lines.map((l) => el("div", { text: l })));
  tip.hidden = false;
  const x = Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  const y = Math.min(event.clientY + 14, window.innerHeight - tip.offsetHeight - 8);
  tip.style.left = `${x}px`;
  tip.style.top = `${y}px`;
}

function pointsFor(container) {
  return Math.min(MAX_POINTS, Math.max(10, chartWidth(container) - MARGIN.left - MARGIN.right));
}

// ---------------------------------------------------------------------------------------------
// Views

async function drawTimeline() {
  const container = document.getElementById("timeline");
  // `tzoom=1` draws the selected range only (the whole run otherwise).
  const range = selectedRange();
  const zoomed = state().get("tzoom") === "1" && range !== null;
  const zoomButton = document.getElementById("timeline-zoom");
  zoomButton.hidden = range === null && !zoomed;
  zoomButton.textContent = zoomed ? "show the whole run" : "zoom to the selection";
  const extra = { points: pointsFor(container) };
  if (zoomed) Object.assign(extra, { from: momentOf(range[0]), to: momentOf(range[1]) });
  // A marker range is a selection like from/to: shaded on the whole run unless zoomed.
  const params = apiParams([], extra);
  params.delete("marker_from");
  params.delete("marker_to");
  await guarded(container, async () => {
    const data = await api("timeline", "timeline", params);
    if (!data) return;
    // A diff between two traces reads its moments in them, not in this one: no selection here.
    drawLive(container, data, { interactive: true, selection: !(currentView() === "diff" && diffSides().cross) });
    container.dataset.rendered = "1";
    if (currentView() === "timeline") {
      drawRates(document.getElementById("rates"), data);
      const body = document.querySelector("#markers tbody");
      body.replaceChildren(...(data.markers || []).map((m) => {
        const row = el("tr", {}, el("td", { text: fmtSeconds(m.time_ns) }), el("td", { class: "text", text: m.label }));
        const pick = el("button", { type: "button", text: "pick" });
        pick.addEventListener("click", () => navigate({ at: `marker:${m.label}` }));
        row.append(el("td", {}, pick));
        return row;
      }));
      if (!body.children.length) body.append(el("tr", {}, el("td", { colspan: 3, text: "no markers in this trace" })));
    }
  });
}

function sitesSort() {
  const q = state();
  return { sort: q.get("sort") || "allocated_bytes", desc: q.get("desc") === "0" ? "0" : "1" };
}

function siteRow(s) {
  const row = el("tr", { "data-site": s.id, tabindex: 0 });
  row.append(siteCell(s));
  const cells = [
    [estCount(s.allocations), null],
    [estBytes(s.allocated_bytes), s.allocated_bytes],
    [estBytes(s.freed_bytes), `${estCount(s.freed_bytes)} bytes in ${estCount(s.frees)} frees`],
    [estBytes(s.live_bytes), `${estCount(s.live_bytes)} bytes in ${estCount(s.live_blocks)} blocks`],
    [estBytes(s.leaked_bytes), `${estCount(s.leaked_bytes)} bytes in ${estCount(s.leaked_blocks)} blocks`],
    [estBytes(s.peak_bytes), s.peak_bytes],
    [estCount(s.temporary), null],
    [estCount(s.short_lived), `${estCount(s.short_lived_bytes)} bytes`],
    // 0 (or none) when no block of the range was freed.
    s.mean_lifetime_ns ? [fmtDuration(s.mean_lifetime_ns), `${fmtCount(s.mean_lifetime_ns)} ns`] : ["—", "none freed"],
  ];
  for (const [text, title] of cells) row.append(el("td", { text, title: title === null ? null : String(title) }));
  const open = () => navigate({ site: s.id });
  row.addEventListener("click", open);
  row.addEventListener("keydown", (e) => { if (e.key === "Enter") open(); });
  return row;
}

async function drawSites() {
  const q = state();
  const table = document.getElementById("sites");
  const body = table.querySelector("tbody");
  const { sort, desc } = sitesSort();
  for (const th of table.querySelectorAll("th[data-key]")) {
    th.classList.toggle("sorted", th.dataset.key === sort);
    th.setAttribute("aria-sort", th.dataset.key === sort ? (desc === "1" ? "descending" : "ascending") : "none");
  }
  const caption = document.getElementById("sites-caption");
  const at = q.get("at") || "end";
  const range = q.get("from") || q.get("to") ? `${q.get("from") || "start"} … ${q.get("to") || "end"}` : "the whole run";
  caption.textContent = `Live at ${at}; allocated and freed over ${range}.`;
  const more = document.getElementById("more-sites");
  let offset = 0;
  const load = async (append) => {
    const data = await api("sites", "sites", apiParams(MOMENTS, { sort, desc, limit: SITES_PAGE, offset, short_lived_ns: q.get("short_lived_ns") }));
    if (!data) return;
    const rows = data.sites.map(siteRow);
    if (append) body.append(...rows);
    else body.replaceChildren(...rows);
    if (!data.sites.length && !append) body.append(el("tr", {}, el("td", { colspan: 10, class: "empty", text: "no call site matches the filters" })));
    offset += data.sites.length;
    table.dataset.total = data.total_sites;
    caption.textContent = `${fmtCount(data.total_sites)} call sites. Live at ${at}; allocated and freed over ${range}; short-lived: freed within ${fmtDuration(data.short_lived_ns)}.`;
    const short = table.querySelector('th[data-key="short_lived"]');
    if (short) short.title = `allocations freed within ${fmtDuration(data.short_lived_ns)} of their allocation (short_lived_ns= in the page's address changes the bound)`;
    more.hidden = offset >= data.total_sites;
    more.textContent = `${fmtCount(data.total_sites - offset)} more`;
    more.onclick = () => guarded(null, () => load(true));
  };
  await guarded(body, () => load(false));
  await drawSite();
}

// The open site's panel: under its row when the row is shown, else under the table. The table
// is redrawn often, so the panel is held here rather than looked up in the document.
let sitePanel = null;

async function drawSite() {
  const id = state().get("site");
  const panel = sitePanel || (sitePanel = document.getElementById("site"));
  for (const row of document.querySelectorAll("#sites tr[data-site]")) row.classList.toggle("open", row.dataset.site === id);
  for (const detail of document.querySelectorAll("#sites tr.detail")) detail.remove();
  if (!id) {
    panel.hidden = true;
    return;
  }
  const row = document.querySelector(`#sites tr[data-site="${CSS.escape(id)}"]`);
  if (row) {
    const cell = el("td", { colspan: row.children.length });
    cell.append(panel);
    row.after(el("tr", { class: "detail" }, cell));
  } else {
    document.getElementById("more-sites").after(panel);
  }
  panel.hidden = false;
  const stacks = panel.querySelector("#site-stacks");
  const title = panel.querySelector("#site-title");
  await guarded(stacks, async () => {
    const chart = panel.querySelector("#site-timeline");
    const unfold = state().get("hidden") === "1";
    panel.querySelector("#site-hidden").checked = unfold;
    const data = await api("site", `site/${encodeURIComponent(id)}`,
      apiParams(MOMENTS, { points: pointsFor(chart), ...(unfold ? { hidden: "1" } : {}) }));
    if (!data) return;
    panel.dataset.site = data.id;
    title.textContent = `#${data.id} ${siteName(data)} ${siteLocation(data)}`;
    title.title = contextText(data);
    drawLive(chart, data.timeline, { height: 140, selection: false });
    const at = state().get("at") || "end";
    // The site's stacks grouped by the frames shown: stacks that differ only in frames left out
    // make one group, their figures summed. A server without groups answers one per stack.
    const groups = data.groups || data.stacks.map((s) => ({ ...s, stacks: [s.id],
      hidden_above: [s.hidden_above, s.hidden_above], hidden_below: [s.hidden_below, s.hidden_below] }));
    const byId = new Map(data.stacks.map((s) => [s.id, s]));
    const count = (range) => (range[0] === range[1] ? `${range[0]}` : `${range[0]} to ${range[1]}`);
    stacks.replaceChildren(...groups.map((group, i) => {
      // The program's frames as the reports trim them: memprof's and the allocator's frames
      // above, and the runtime below the program, are counted, not listed. The site's own frame
      // is marked, the standard library's dimmed.
      const own = group.frames.findIndex((f) => !f.std);
      const item = (f, j) => el("li", { class: j === own ? "own" : f.std ? "std" : null },
        el("span", { class: "function", text: f.function || (f.address ? f.address : "??") }),
        el("span", { class: "location", title: frameText(f), text: frameLocation(f) }));
      const hidden = (range, what) => (range[1] ? [el("p", { class: "hidden-frames",
        text: `${count(range)} frame${range[1] === 1 ? "" : "s"} of ${what} not shown` })] : []);
      const frames = el("ol", { class: "frames" }, ...group.frames.map(item));
      const merged = group.stacks.length > 1 ? ` (${group.stacks.length} stacks that differ only in frames not shown)` : "";
      // Unfolded: each stack of the group with every frame, those left out marked.
      const full = unfold ? group.stacks.map((id) => byId.get(id)).filter((s) => s && s.all_frames).map((s) =>
        el("div", { class: "full-stack" },
          el("h4", { text: `stack ${s.id}: ${estBytes(s.bytes)} in ${estCount(s.blocks)} blocks live at ${at}` }),
          el("ol", { class: "frames" }, ...s.all_frames.map((f) => el("li", { class: f.hidden ? `hidden ${f.hidden}` : f.std ? "std" : null },
            el("span", { class: "function", text: f.function || f.address }),
            el("span", { class: "location", title: frameText(f), text: frameLocation(f) })))))) : [];
      return el("div", { class: "stack" },
        el("h3", { text: `stack ${i + 1} of ${groups.length}: ${estBytes(group.bytes)} in ${estCount(group.blocks)} blocks live at ${at}` +
          (group.allocations !== undefined ? `; ${estCount(group.allocations)} allocations (${estBytes(group.allocated_bytes)}) in the range` : "") + merged }),
        ...hidden(group.hidden_above, "memprof, the allocator and std below the collection operation"),
        frames, ...hidden(group.hidden_below, "the runtime below the program"), ...full);
    }));
    if (!data.stacks.length) stacks.append(el("p", { text: "no stack of this site matches the filters" }));
  });
}

// ---------------------------------------------------------------------------------------------
// Flame graphs

// A frame's function for its box: the server names frames as the Markdown report writes them,
// `FILE:LINE:COLUMN in 'FUNCTION'`, and the function is what the eye looks for.
function frameLabel(name) {
  const m = /^(.*) in '(.*)'$/.exec(name);
  return m ? m[2] : name;
}

function hue(name) {
  let h = 0;
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) | 0;
  return Math.abs(h);
}

// Draws `tree` as a flame graph (the root at the bottom) in `container`. `zoom` is the path of
// names from the root to the node shown full width; `onZoom` gets the new path on a click.
function drawFlame(container, tree, { zoom = [], onZoom = null, palette = "warm" } = {}) {
  const width = chartWidth(container);
  const rowHeight = 18;
  // The zoomed node and the chain of its ancestors.
  const chain = [tree];
  for (const name of zoom) {
    const child = (chain[chain.length - 1].children || []).find((c) => c.name === name);
    if (!child) break;
    chain.push(child);
  }
  const focus = chain[chain.length - 1];
  const depthOf = (node) => 1 + Math.max(0, ...(node.children || []).map(depthOf));
  const depth = chain.length - 1 + depthOf(focus);
  const height = depth * rowHeight + 4;
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "flamegraph" });
  const total = tree.value || 1;
  const scale = width / (focus.value || 1);
  const minWidth = 0.5; // narrower frames are left out: they would not be seen
  const charWidth = 7;

  const box = (node, level, x, w, path, dim) => {
    const y = height - (level + 1) * rowHeight;
    const g = svg("g", { class: `frame${dim ? " ancestor" : ""}${node.std ? " std" : ""}`, "data-name": node.name, "data-value": node.value });
    const h = hue(frameLabel(node.name));
    // The standard library's frames (the collection operations, std's code between the
    // program's frames) in grey: the program's own stand out.
    const color = node.std
      ? `hsl(220, 8%, ${74 + (h % 10)}%)`
      : palette === "growth"
        ? `hsl(${110 + (h % 40)}, 55%, ${55 + (h % 15)}%)`
        : `hsl(${(h % 55)}, ${70 + (h % 20)}%, ${55 + (h % 12)}%)`;
    g.append(svg("rect", { x: x.toFixed(2), y, width: Math.max(0.5, w - 0.5).toFixed(2), height: rowHeight - 1, fill: color, rx: 2 }));
    const title = svg("title");
    title.textContent = `${node.name}: ${estBytes(node.value)} (${((node.value / total) * 100).toFixed(1)}%)`;
    g.append(title);
    if (w > charWidth * 3) {
      const text = svg("text", { x: (x + 4).toFixed(2), y: y + rowHeight - 5 });
      const fit = Math.floor((w - 8) / charWidth);
      const label = frameLabel(node.name);
      text.textContent = label.length > fit ? label.slice(0, Math.max(1, fit - 1)) + "…" : label;
      g.append(text);
    }
    g.addEventListener("click", () => onZoom && onZoom(path));
    g.addEventListener("mousemove", (event) => tooltip(event, [node.name, `${estBytes(node.value)} (${estCount(node.value)} bytes)`,
      `${((node.value / total) * 100).toFixed(2)}% of all, ${((node.value / (focus.value || 1)) * 100).toFixed(2)}% of the zoomed frame`]));
    g.addEventListener("mouseleave", () => tooltip(null));
    root.append(g);
  };

  chain.forEach((node, level) => box(node, level, 0, width, chain.slice(1, level + 1).map((n) => n.name), level < chain.length - 1));
  const walk = (node, level, x, path) => {
    let cx = x;
    for (const child of node.children || []) {
      const w = child.value * scale;
      if (w >= minWidth) {
        const childPath = [...path, child.name];
        box(child, level, cx, w, childPath, false);
        walk(child, level + 1, cx, childPath);
      }
      cx += w;
    }
  };
  walk(focus, chain.length, 0, chain.slice(1).map((n) => n.name));
  container.replaceChildren(root);
  return focus;
}

// The zoomed frame's path from the root, as a JSON array of names (names may hold any
// character, `;` included: `<[T; 4] as Trait>::f`).
function zoomPath() {
  try {
    const path = JSON.parse(state().get("zoom") || "[]");
    return Array.isArray(path) ? path.map(String) : [];
  } catch {
    return [];
  }
}

async function drawFlameView() {
  const q = state();
  const what = ["live", "allocated", "leaked", "temporary"].includes(q.get("what")) ? q.get("what") : "live";
  document.getElementById("what").value = what;
  const container = document.getElementById("flame");
  const caption = document.getElementById("flame-caption");
  const reset = document.getElementById("flame-reset");
  await guarded(container, async () => {
    const tree = await api("flame", "flame", apiParams(MOMENTS, { what }));
    if (!tree) return;
    const describe = {
      live: `live at ${q.get("at") || "end"}`,
      allocated: `allocated over ${q.get("from") || "start"} … ${q.get("to") || "end"}`,
      leaked: "leaked at end",
      temporary: "temporary allocations",
    }[what];
    if (!tree.value) {
      container.replaceChildren(el("p", { class: "empty", text: `nothing ${describe} matches the filters` }));
      caption.textContent = "";
      reset.hidden = true;
      return;
    }
    const zoom = zoomPath();
    const focus = drawFlame(container, tree, { zoom, onZoom: (path) => navigate({ zoom: path.length ? JSON.stringify(path) : null }) });
    caption.textContent = `${estBytes(tree.value)} ${describe}${focus !== tree ? `; showing ${focus.name} (${estBytes(focus.value)})` : ""}`;
    reset.hidden = focus === tree;
    container.dataset.rendered = "1";
  });
}

// The two sides of the diff: a trace and a moment each. Within the trace shown, `from` and `to`
// (or two markers) as the other views read them; between two traces (`from_trace`, `to_trace`,
// the API's names), each moment is read in its own trace, `end` unless told.
function diffSides() {
  const q = state();
  const shown = traceId();
  const side = (name) => {
    const id = Number(q.get(name));
    return q.get(name) !== null && Number.isInteger(id) && id >= 0 && id < traces.length ? id : shown;
  };
  const fromTrace = side("from_trace"), toTrace = side("to_trace");
  const cross = fromTrace !== toTrace;
  const from = q.get("from") || (q.get("marker_from") ? `marker:${q.get("marker_from")}` : cross ? "end" : "start");
  const to = q.get("to") || (q.get("marker_to") ? `marker:${q.get("marker_to")}` : "end");
  return { shown, fromTrace, toTrace, cross, from, to };
}

// A site of a diff between two traces is matched by its code: its id in each run (none where the
// run has no such site).
function crossId(s) {
  if (s.from_id !== null && s.to_id !== null) return `#${s.from_id} → #${s.to_id} `;
  if (s.to_id !== null) return `only in B (#${s.to_id}) `;
  return `only in A (#${s.from_id}) `;
}

async function drawDiff() {
  const { shown, fromTrace, toTrace, cross, from, to } = diffSides();
  const caption = document.getElementById("diff-caption");
  const body = document.querySelector("#diff tbody");
  const flame = document.getElementById("diff-flame");
  const form = document.getElementById("diff-traces");
  if (!form.hidden) {
    form.elements.from_trace.value = String(fromTrace);
    form.elements.to_trace.value = String(toTrace);
    form.elements.from.value = from;
    form.elements.to.value = to;
  }
  const [a, b] = cross ? ["in A", "in B"] : ["before", "after"];
  for (const th of document.querySelectorAll("#diff th.before")) th.textContent = th.textContent.replace(/ .*/, ` ${a}`);
  for (const th of document.querySelectorAll("#diff th.after")) th.textContent = th.textContent.replace(/ .*/, ` ${b}`);
  document.getElementById("diff-flame-title").hidden = cross;
  flame.hidden = cross;
  const sideName = (id, moment) => (traces.length > 1 ? `trace ${traceName(id)} at ${moment}` : moment);
  caption.textContent = cross
    ? `A: ${sideName(fromTrace, from)}; B: ${sideName(toTrace, to)}.`
    : `Live at ${from} against live at ${to} (pick the two moments with from and to, two markers, or a drag on the timeline).`;
  await guarded(body, async () => {
    const params = apiParams([], { from, to });
    params.delete("marker_from");
    params.delete("marker_to");
    if (fromTrace !== shown || toTrace !== shown) {
      params.set("from_trace", fromTrace);
      params.set("to_trace", toTrace);
    }
    const data = await api("diff", "diff", params);
    if (!data) return;
    // In the server's order: the largest growth first, then the largest shrinkage first.
    const sites = data.sites;
    const exact = (n, what) => `${fmtCount(n)} ${what}`;
    body.replaceChildren(...sites.map((s) => {
      const cls = s.delta_bytes > 0 ? "grew" : s.delta_bytes < 0 ? "shrank" : "";
      const sign = (v) => (v > 0 ? "+" : "");
      const row = cross
        ? el("tr", { class: cls, "data-from-site": s.from_id ?? "", "data-to-site": s.to_id ?? "" }, siteCell(s, crossId(s)))
        : el("tr", { class: cls, "data-site": s.id }, siteCell(s));
      row.append(
        el("td", { text: estBytes(s.from_bytes), title: exact(s.from_bytes, "bytes") }),
        el("td", { text: estBytes(s.to_bytes), title: exact(s.to_bytes, "bytes") }),
        el("td", { class: "delta", text: sign(s.delta_bytes) + estBytes(s.delta_bytes), title: sign(s.delta_bytes) + exact(s.delta_bytes, "bytes") }),
        el("td", { text: estCount(s.from_blocks) }), el("td", { text: estCount(s.to_blocks) }),
        el("td", { class: "delta", text: sign(s.delta_blocks) + estCount(s.delta_blocks) }));
      return row;
    }));
    if (!sites.length) body.append(el("tr", {}, el("td", { colspan: 7, class: "empty", text: "no call site changed" })));
    const grew = sites.filter((s) => s.delta_bytes > 0).reduce((n, s) => n + s.delta_bytes, 0);
    const shrank = sites.filter((s) => s.delta_bytes < 0).reduce((n, s) => n + s.delta_bytes, 0);
    const listed = data.total_sites > sites.length ? ` ${fmtCount(sites.length)} of the ${fmtCount(data.total_sites)} call sites that changed are listed: the largest growths and shrinkages.` : "";
    caption.textContent = cross
      ? `A: ${sideName(fromTrace, from)} (${fmtSeconds(data.from_ns)}); B: ${sideName(toTrace, to)} (${fmtSeconds(data.to_ns)}). ` +
        `Call sites matched by their code (each frame's function, file and line): +${estBytes(grew)} grew, ${estBytes(shrank)} shrank from A to B.${listed}`
      : `Live at ${from} (${fmtSeconds(data.from_ns)}) against live at ${to} (${fmtSeconds(data.to_ns)}): +${estBytes(grew)} grew, ${estBytes(shrank)} shrank.${listed}`;
    if (cross) return;
    if (data.flame && data.flame.value) drawFlame(flame, data.flame, { palette: "growth" });
    else flame.replaceChildren(el("p", { class: "empty", text: "nothing grew" }));
  });
}

function submitDiffTraces(event) {
  event.preventDefault();
  const form = event.target;
  const from = form.elements.from_trace.value, to = form.elements.to_trace.value;
  const shown = String(traceId());
  const own = from === shown && to === shown;
  navigate({
    from_trace: own ? null : from, to_trace: own ? null : to,
    from: form.elements.from.value.trim(), to: form.elements.to.value.trim(),
    marker_from: null, marker_to: null,
  });
}

// ---------------------------------------------------------------------------------------------
// Mappings: the program's own `mmap`s live at the moment, by call site, and over time

async function drawMappings() {
  const q = state();
  const at = q.get("at") || "end";
  const caption = document.getElementById("mappings-caption");
  const chart = document.getElementById("mappings-timeline");
  const body = document.querySelector("#mappings tbody");
  // The whole run, or the selected range when the timeline is zoomed to it.
  const range = selectedRange();
  const zoomed = q.get("tzoom") === "1" && range !== null;
  const params = new URLSearchParams();
  for (const name of MAPPING_FILTERS) for (const v of q.getAll(name)) if (v !== "") params.append(name, v);
  if (q.get("at")) params.set("at", q.get("at"));
  if (zoomed) {
    params.set("from", momentOf(range[0]));
    params.set("to", momentOf(range[1]));
  }
  params.set("points", pointsFor(chart));
  params.set("limit", 1000);
  // The filters on blocks (their size, lifetime, address, group) select no mapping.
  const ignored = FILTERS.filter((n) => !MAPPING_FILTERS.includes(n) && !n.startsWith("marker_") && q.get(n));
  await guarded(body, async () => {
    const data = await api("mappings", "mappings", params);
    if (!data) return;
    const t = data.timeline;
    const within = (time) => time >= t.from_ns && time <= t.to_ns;
    drawLive(chart, {
      from_ns: t.from_ns,
      to_ns: t.to_ns,
      points: t.points.map((p) => ({ t_ns: p.t_ns, live_bytes: p.bytes, live_blocks: p.mappings })),
      markers: markers.filter((m) => within(m.time_ns)).slice(0, 1000),
      peak: data.peak.bytes && within(data.peak.time_ns) ? data.peak : null,
    }, {
      interactive: true,
      legend: ["mapped bytes", "mappings (right)"],
      describe: (p) => [fmtSeconds(p.t_ns), `${fmtBytes(p.live_bytes)} mapped in ${fmtCount(p.live_blocks)} mappings`],
    });
    chart.dataset.rendered = "1";
    body.replaceChildren(...data.sites.map((s) => el("tr", { "data-site": s.id }, siteCell(s),
      el("td", { text: fmtBytes(s.bytes), title: `${fmtCount(s.bytes)} bytes` }),
      el("td", { text: fmtCount(s.mappings) }))));
    if (!data.sites.length) body.append(el("tr", {}, el("td", { colspan: 3, class: "empty", text: "no mapping of the program's is live at this moment" })));
    const totals = data.totals;
    caption.textContent = `${fmtBytes(data.bytes)} in ${fmtCount(data.mappings)} mappings of the program's own live at ${at} (${fmtSeconds(data.time_ns)}), ` +
      `from ${fmtCount(data.total_sites)} call site${data.total_sites === 1 ? "" : "s"}; the most mapped, ${fmtBytes(data.peak.bytes)}, at ${fmtSeconds(data.peak.time_ns)}; ` +
      `${fmtCount(totals.made)} mappings made over the run (${fmtBytes(totals.made_bytes)}), ${fmtCount(totals.unmaps)} unmaps.` +
      (ignored.length ? ` Not applied to mappings: ${ignored.join(", ")}.` : "");
  });
}

// The trace pickers, when the server has several traces: the views' trace in the header, and
// the diff's two sides.
function drawTracePickers() {
  const several = traces.length > 1;
  document.getElementById("trace-pick").hidden = !several;
  const form = document.getElementById("diff-traces");
  form.hidden = !several;
  if (!several) return;
  const options = () => traces.map((t, id) => el("option", { value: String(id), title: t.path, text: traceName(id) }));
  const select = document.getElementById("trace");
  select.replaceChildren(...options());
  select.value = String(traceId());
  form.elements.from_trace.replaceChildren(...options());
  form.elements.to_trace.replaceChildren(...options());
}

// Another trace in the views: the page loads again with its summary, markers and threads. The
// moments, markers, threads and the open site are the shown trace's own and are left out; the
// other filters mean the same in every trace and are kept.
function switchTrace(id) {
  const q = state();
  for (const name of ["at", "from", "to", "marker_from", "marker_to", "thread", "site", "zoom", "tzoom", "offset", "from_trace", "to_trace"]) q.delete(name);
  if (Number(id)) q.set("trace", id);
  else q.delete("trace");
  location.assign(`${location.pathname}${q.toString() ? "?" + q : ""}`);
}

// ---------------------------------------------------------------------------------------------
// Labels: the heap at the moment per label set (`memprof::with_labels`)

async function drawLabels() {
  const q = state();
  const at = q.get("at") || "end";
  const caption = document.getElementById("labels-caption");
  const body = document.querySelector("#labels tbody");
  await guarded(body, async () => {
    const data = await api("labels", "labels", apiParams(["at", "from", "to"]));
    if (!data) return;
    caption.textContent = `Live at ${at} (${fmtSeconds(data.time_ns)}) and allocated up to it, per label set.`;
    body.replaceChildren(...data.label_sets.map((set) => {
      const pairs = Object.entries(set.labels).map(([k, v]) => `${k}=${v}`).join(", ");
      return el("tr", {},
        el("td", { class: "text", text: pairs || "(no labels)" }),
        el("td", { text: estBytes(set.live_bytes) }), el("td", { text: estCount(set.live_blocks) }),
        el("td", { text: estBytes(set.allocated_bytes) }), el("td", { text: estCount(set.allocated_blocks) }));
    }));
    if (!data.label_sets.length) body.append(el("tr", {}, el("td", { colspan: 5, class: "empty", text: "nothing allocated" })));
  });
}

// ---------------------------------------------------------------------------------------------
// Crates: the heap at the moment per crate (the crate table of `memprof::log_crates`); a crate's
// name filters every view to it

async function drawCrates() {
  const q = state();
  const at = q.get("at") || "end";
  const byCaller = q.get("by") === "caller-crate";
  document.getElementById("crates-by").checked = byCaller;
  const caption = document.getElementById("crates-caption");
  const body = document.querySelector("#crates tbody");
  await guarded(body, async () => {
    const params = apiParams(["at", "from", "to"]);
    if (byCaller) params.set("by", "caller-crate");
    const data = await api("crates", "crates", params);
    if (!data) return;
    caption.textContent = `Live at ${at} (${fmtSeconds(data.time_ns)}) and allocated up to it, per ${byCaller ? "caller crate ← crate" : "crate"}: the innermost frame outside the standard library and memprof.`;
    const row = (name, r, link) => el("tr", {},
      el("td", { class: "text" }, link),
      el("td", { text: estBytes(r.live_bytes) }), el("td", { text: estCount(r.live_blocks) }),
      el("td", { text: estBytes(r.allocated_bytes) }), el("td", { text: estCount(r.allocated_blocks) }));
    body.replaceChildren(...data.crates.map((c) => {
      // By caller crate, the crate is the name after the arrow.
      const name = c.crate.includes(" ← ") ? c.crate.split(" ← ").pop() : c.crate;
      const link = el("a", { href: "#", text: c.crate, title: `only ${name}'s blocks in every view` });
      link.dataset.crate = name;
      link.addEventListener("click", (e) => { e.preventDefault(); navigate({ crate: name }); });
      return row(c.crate, c, link);
    }));
    if (!data.crates.length) body.append(el("tr", {}, el("td", { colspan: 5, class: "empty", text: "nothing allocated" })));
    else body.append(row("total", data.total, el("strong", { text: "total" })));
  });
}

// ---------------------------------------------------------------------------------------------
// Putting it together

async function render() {
  clearErrors();
  fillForm();
  drawExports();
  const view = currentView();
  // The Mappings tab, for a trace with mappings of the program's own (or asked for by the URL).
  document.querySelector('#tabs [data-view="mappings"]').hidden = !(summary && summary.totals.mappings > 0) && view !== "mappings";
  for (const v of VIEWS) {
    document.getElementById(`view-${v}`).hidden = v !== view;
    const tab = document.querySelector(`#tabs [data-view="${v}"]`);
    tab.setAttribute("aria-selected", v === view ? "true" : "false");
  }
  document.body.dataset.state = "loading";
  const work = [drawTimeline()];
  if (view === "sites") work.push(drawSites());
  if (view === "flame") work.push(drawFlameView());
  if (view === "diff") work.push(drawDiff());
  if (view === "labels") work.push(drawLabels());
  if (view === "crates") work.push(drawCrates());
  if (view === "mappings") work.push(drawMappings());
  await Promise.all(work);
  document.body.dataset.state = "ready";
}

async function start() {
  window.addEventListener("error", (e) => showError(`the page failed: ${e.message}`));
  window.addEventListener("unhandledrejection", (e) => showError(`the page failed: ${e.reason && e.reason.message ? e.reason.message : e.reason}`));
  document.getElementById("filters").addEventListener("submit", submitForm);
  document.getElementById("reset").addEventListener("click", resetForm);
  document.getElementById("diff-traces").addEventListener("submit", submitDiffTraces);
  document.getElementById("trace").addEventListener("change", (e) => switchTrace(e.target.value));
  document.getElementById("crates-by").addEventListener("change", (e) => navigate({ by: e.target.checked ? "caller-crate" : null }));
  for (const tab of document.querySelectorAll("#tabs [data-view]")) {
    tab.addEventListener("click", () => navigate({ view: tab.dataset.view }));
  }
  for (const th of document.querySelectorAll("#sites th[data-key]")) {
    if (th.dataset.key === "function") continue;
    th.classList.add("sortable");
    th.addEventListener("click", () => {
      const { sort, desc } = sitesSort();
      navigate({ sort: th.dataset.key, desc: sort === th.dataset.key && desc === "1" ? "0" : "1" });
    });
  }
  document.getElementById("close-site").addEventListener("click", () => navigate({ site: null }));
  document.getElementById("site-hidden").addEventListener("change", (e) => navigate({ hidden: e.target.checked ? "1" : null }));
  document.getElementById("timeline-zoom").addEventListener("click", () => navigate({ tzoom: state().get("tzoom") === "1" ? null : "1" }));
  document.getElementById("what").addEventListener("change", (e) => navigate({ what: e.target.value, zoom: null }));
  document.getElementById("flame-reset").addEventListener("click", () => navigate({ zoom: null }));
  window.addEventListener("popstate", render);
  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(render, 200);
  });

  for (;;) {
    try {
      traces = (await fetchJson("api/traces")).traces || [];
      summary = await api("summary", "summary", null);
      markers = await allMarkers(summary);
      break;
    } catch (e) {
      if (e instanceof ApiError && e.status === 503) {
        // A live server before the trace's first chunk.
        document.getElementById("summary").textContent = "waiting for the trace to arrive…";
        await new Promise((resolve) => setTimeout(resolve, LIVE_POLL_MS));
        continue;
      }
      showError(e.message);
      document.getElementById("summary").textContent = "the trace's summary is not available";
      document.body.dataset.state = "failed";
      return;
    }
  }
  drawSummary();
  drawTracePickers();
  await render();
  if (summary.complete === false || summary.live) setTimeout(followLive, LIVE_POLL_MS);
}

// The trace's markers: those of the summary when it lists them all, else asked once.
async function allMarkers(s) {
  if (!(s.markers_total > s.markers.length)) return s.markers;
  return (await fetchJson(`${apiBase()}markers`)).markers;
}

// A trace still arriving (or cut short): its summary is asked again, and while it changes the
// views are drawn again from fresh answers, so the timeline grows as the program runs.
async function followLive() {
  let fresh;
  try {
    fresh = await fetchJson(`${apiBase()}summary`);
  } catch (e) {
    showError(e.message);
    return;
  }
  if (fresh.events !== summary.events || fresh.complete !== summary.complete
      || JSON.stringify(fresh.live) !== JSON.stringify(summary.live)) {
    summary = fresh;
    try {
      markers = await allMarkers(summary);
    } catch (e) {
      showError(e.message);
      return;
    }
    answers.clear();
    for (const name of ["marker_from", "marker_to"]) {
      const select = document.getElementById("filters").elements[name];
      while (select.options.length > 1) select.remove(1);
    }
    document.getElementById("filters").elements.thread.replaceChildren();
    drawSummary();
    await render();
  }
  if (summary.complete === false || summary.live) setTimeout(followLive, LIVE_POLL_MS);
}

start();
