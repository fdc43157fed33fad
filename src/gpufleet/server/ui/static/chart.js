// Small SVG line charts. On the job page: each metric the job reports, over its steps, with
// step / total, rate and ETA, drawn from the stored, thinned history
// (GET /api/queue/{id}/progress) and re-read when the job's progress changes (the page's
// `jobs` nudges on /api/events), never per report. On the Teams page: a team's usage over
// time; on the Fleet page: the fleet's (`lineChart` with the `TIME` axis).
import { get } from "./api.js";
import { duration, h, localTime, serial, showError } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const W = 320;
const H = 150;
const PAD = { left: 58, right: 8, top: 8, bottom: 22 }; // room for "-1.23e+05"
const MARKERS = 60; // beyond this many points a series is drawn as a line only

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  for (const child of children) if (child) el.append(child);
  return el;
}

// A number short enough for an axis: 4 significant digits, exponents for the very large
// and the very small.
export function fmt(v) {
  if (v === null || v === undefined) return "—";
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
  return String(Number(v.toPrecision(4)));
}

// The axis's span: the values' own; for one value, from 0 to it with `fromZero` (a count of
// steps, a loss: "0 to 0.99", never "0.891 to 1.089"), else padded either side (a time).
function range(values, fromZero) {
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  if (lo === hi && fromZero) {
    lo = Math.min(0, lo);
    hi = Math.max(0, hi) || 1;
  } else if (lo === hi) {
    const pad = Math.abs(lo) * 0.1 || 1;
    lo -= pad;
    hi += pad;
  }
  return [lo, hi];
}

// Time along x (the Teams and Fleet pages): the clock of the rest of the UI, 24 hours.
const clock = (ms) => localTime(ms).slice(11); // 17:04:05
export const TIME = {
  axis: clock,
  tick: clock,
  at: localTime,
  span: (a, b) => `${clock(a)} to ${clock(b)}`,
};

// Steps are whole numbers: their axis spans the steps reported, or 0 to the only one.
const STEPS = { fromZero: true, axis: (v) => `step ${fmt(v)}`, tick: fmt, at: (v) => `step ${v}`, span: (a, b) => `steps ${a} to ${b}` };

// `xAxis` says the x values in words: the first tick, the last, one point, the span.
// `names`: each series' name (a sweep's jobs, sweep.js), all drawn alike, each its colour.
export function lineChart(name, points, xAxis = STEPS, names = null) {
  // points: [x, value, series], oldest first; each series (a job's attempt) is its own line.
  const [x0, x1] = range(points.map((p) => p[0]), xAxis.fromZero);
  const [y0, y1] = range(points.map((p) => p[1]), true);
  const x = (step) => PAD.left + ((step - x0) / (x1 - x0)) * (W - PAD.left - PAD.right);
  const y = (v) => H - PAD.bottom - ((v - y0) / (y1 - y0)) * (H - PAD.top - PAD.bottom);
  const last = points[points.length - 1];
  const attempts = [...new Set(points.map((p) => p[2]))];
  const lines = attempts.map((attempt) => {
    const mine = points.filter((p) => p[2] === attempt);
    const d = mine.map((p, i) => `${i ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`);
    if (names) {
      const title = svg("title", {}, document.createTextNode(names[attempt]));
      return svg("path", { d: d.join(""), class: `line c${attempt % 8}`, "data-line": names[attempt] }, title);
    }
    return svg("path", { d: d.join(""), class: attempt === last[2] ? "line" : "line earlier" });
  });
  const dots = !names && points.length <= MARKERS
    ? points.filter((p) => p[2] === last[2]).map((p) =>
      svg("circle", { cx: x(p[0]).toFixed(1), cy: y(p[1]).toFixed(1), r: 2.2, class: "dot" },
        svg("title", {}, document.createTextNode(`${xAxis.at(p[0])}: ${fmt(p[1])}`))))
    : [];
  const text = (tx, ty, anchor, words) =>
    svg("text", { x: tx, y: ty, "text-anchor": anchor, class: "tick" }, document.createTextNode(words));
  const frame = svg("g", { class: "axes" },
    svg("line", { x1: PAD.left, y1: H - PAD.bottom, x2: W - PAD.right, y2: H - PAD.bottom }),
    svg("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: H - PAD.bottom }),
    text(PAD.left - 4, PAD.top + 8, "end", fmt(y1)),
    text(PAD.left - 4, H - PAD.bottom, "end", fmt(y0)),
    text(PAD.left, H - 6, "start", xAxis.axis(x0)),
    text(W - PAD.right, H - 6, "end", xAxis.tick(x1)));
  const label = `${name} over ${xAxis.span(x0, x1)}: latest ${fmt(last[1])} at ${xAxis.at(last[0])}`;
  const picture = svg("svg", {
    viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, "data-points": points.length,
  }, frame, ...lines, ...dots);
  return h("figure", { class: "chart", dataset: { series: name } },
    h("figcaption", {},
      h("span", { class: "name", text: name }),
      h("span", { class: "latest mono", text: names ? `${attempts.length} jobs` : fmt(last[1]) })),
    picture);
}

function paceFacts(p) {
  const step = p.step === null ? "—" : p.total ? `${p.step} / ${p.total}` : String(p.step);
  const rate = p.rate === null ? "—" : `${fmt(p.rate)} steps/s`;
  let eta = "—";
  if (p.eta_s !== null) eta = duration(p.eta_s);
  else if (p.status === "completed") eta = "done";
  return [["Step", step, "pace-step"], ["Rate", rate, "pace-rate"], ["ETA", eta, "pace-eta"]]
    .flatMap(([k, v, id]) => [h("dt", { text: k }), h("dd", { id, class: "mono", text: v })]);
}

// The charts panel of one job: `update(job)` with each fresh read of the job.
export function trainingCharts(panel, jobId) {
  const box = panel.querySelector(".charts");
  const facts = panel.querySelector(".pace");
  const error = panel.querySelector(".error");
  let seen = null;
  const load = serial(async () => {
    let p;
    try {
      p = await get(`/api/queue/${jobId}/progress`);
    } catch (err) {
      return showError(error, err);
    }
    showError(error, null);
    panel.hidden = p.step === null && !p.series.length;
    facts.replaceChildren(...paceFacts(p));
    box.replaceChildren(...p.series.map((s) => lineChart(s.name, s.points)));
  });
  return {
    update(job) {
      const key = `${job.status} ${JSON.stringify(job.progress)}`;
      if (key === seen) return;
      seen = key;
      load();
    },
  };
}
