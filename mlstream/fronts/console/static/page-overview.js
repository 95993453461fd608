// Overview: version, uptime, workers, streams, readiness, and two live charts from /metrics.

import {api, errorOf, readBody, request} from "./api.js";
import {lineChart} from "./chart.js";
import {$, formatDuration, formatNumber, h, say} from "./dom.js";
import {bucketDelta, buckets, first, parseMetrics, quantile, total} from "./metrics.js";

const INTERVAL_MS = 2000;
const HISTORY_MS = 5 * 60 * 1000;  // the charts' span
const TTFT_WINDOW_MS = 60 * 1000;  // quantiles over the streams of the last minute
const MIN_SPAN_MS = 60 * 1000;
const TTFC = "mlstream_time_to_first_chunk_seconds";

let timer = null;
let samples = [];  // {t, requests, ttfc}, oldest first

export function show() {
  say($("ov-interval"), String(INTERVAL_MS / 1000));
  loadVersion();
  tick();
  timer = setInterval(tick, INTERVAL_MS);
}

export function hide() {
  clearInterval(timer);
  timer = null;
}

async function loadVersion() {
  try {
    const root = await api("GET", "/");
    say($("ov-version"), root?.version?.mlstream ?? "?");
  } catch (error) {
    say($("ov-version"), "?");
    say($("overview-message"), error.reason || String(error));
  }
}

async function tick() {
  await Promise.all([scrape(), readiness()]);
  draw();
}

async function scrape() {
  try {
    const response = await request("GET", "/metrics");
    const text = await response.text();
    if (!response.ok) {
      let data = text;
      try { data = JSON.parse(text); } catch { /* text as it is */ }
      throw errorOf(response.status, data);
    }
    const parsed = parseMetrics(text);
    const now = Date.now();
    const serverNow = Date.parse(response.headers.get("Date") || "") || now;
    const started = first(parsed, "mlstream_start_time_seconds");
    say($("ov-uptime"), started ? formatDuration(serverNow / 1000 - started) : "?");
    say($("ov-processes"), formatNumber(first(parsed, "mlstream_worker_processes")));
    say($("ov-stream-workers"), formatNumber(first(parsed, "mlstream_stream_workers")));
    say($("ov-active"), formatNumber(first(parsed, "mlstream_streams_active")));
    say($("ov-queued"), formatNumber(first(parsed, "mlstream_streams_queued")));
    samples.push({
      t: now,
      // every answered request but the scrapes themselves
      requests: total(parsed, "mlstream_http_requests_total", (labels) => labels.route !== "/metrics"),
      ttfc: buckets(parsed, TTFC),
    });
    samples = samples.filter((sample) => sample.t >= now - HISTORY_MS - TTFT_WINDOW_MS);
    say($("overview-message"), "");
  } catch (error) {
    say($("overview-message"), error.reason || String(error));
  }
}

async function readiness() {
  const box = $("ov-ready"), list = $("ov-problems");
  try {
    const response = await request("GET", "/readyz");
    const body = await readBody(response);
    const problems = Array.isArray(body?.problems) ? body.problems : [];
    box.replaceChildren(response.ok
      ? h("span", {class: "ready-ok"}, "Ready: taking traffic")
      : h("span", {class: "ready-bad"}, `Not ready (HTTP ${response.status})`));
    list.replaceChildren(...problems.map((problem) => h("li", {}, String(problem))));
  } catch (error) {
    box.replaceChildren(h("span", {class: "ready-bad"}, "The server cannot be reached"));
    list.replaceChildren(h("li", {}, error.message || String(error)));
  }
}

function draw() {
  const now = Date.now();
  const shown = samples.filter((sample) => sample.t >= now - HISTORY_MS);
  const rps = [], p50 = [], p95 = [];
  for (const sample of shown) {
    const index = samples.indexOf(sample);
    const previous = samples[index - 1];
    if (previous) {
      const seconds = (sample.t - previous.t) / 1000;
      rps.push([sample.t, seconds > 0 ? Math.max(0, sample.requests - previous.requests) / seconds : null]);
    }
    const windowStart = samples.find((other) => other.t >= sample.t - TTFT_WINDOW_MS);
    if (windowStart && windowStart !== sample) {
      const delta = bucketDelta(sample.ttfc, windowStart.ttfc);
      const q50 = quantile(0.5, delta), q95 = quantile(0.95, delta);
      p50.push([sample.t, q50 === null ? null : q50 * 1000]);
      p95.push([sample.t, q95 === null ? null : q95 * 1000]);
    }
  }
  // From the first sample (at least the last minute) up to 5 minutes: a page just opened has a chart to see.
  const span = Math.min(HISTORY_MS, Math.max(MIN_SPAN_MS, now - (samples[0]?.t ?? now)));
  const domain = [now - span, now];
  const clock = (t) => new Date(t).toLocaleTimeString("en-GB", {hour: "2-digit", minute: "2-digit", second: "2-digit"});
  lineChart($("ov-rps-chart"), {series: [{name: "requests/s", points: rps}], xDomain: domain, xFormat: clock,
                                 yFormat: (v) => formatNumber(v, 1), label: "Requests per second"});
  lineChart($("ov-ttft-chart"), {series: [{name: "p50", points: p50}, {name: "p95", points: p95}], xDomain: domain,
                                  xFormat: clock, yFormat: (v) => formatNumber(v, 0), label: "Time to first token in ms"});
}
