// Usage: tokens and cost per key, model or tenant over time (the usage API), a table, CSV
// export. An admin may narrow it to one tenant; the API confines anyone else to their own.

import {api, searchAll} from "./api.js";
import {lineChart} from "./chart.js";
import {$, fillTable, formatNumber, h, say} from "./dom.js";

const USAGE = "/_plugins/_mlstream/usage";
const HOUR = 3600 * 1000, DAY = 24 * HOUR;
let wired = false, tableRows = [];

export function show({role}) {
  if (!wired) {
    wired = true;
    $("usage-form").addEventListener("submit", (event) => { event.preventDefault(); refresh(); });
    $("usage-range").addEventListener("change", refresh);
    $("usage-by").addEventListener("change", refresh);
    $("usage-tenant").addEventListener("change", refresh);
    $("usage-csv").addEventListener("click", exportCsv);
  }
  const admin = role === "admin";
  $("usage-tenant-field").hidden = !admin;
  $("usage-by").querySelector("option[value=tenant]").hidden = !admin;
  if (!admin) {
    if ($("usage-by").value === "tenant") $("usage-by").value = "key";
    $("usage-tenant").value = "";
    refresh();
  } else {
    loadTenants().then(refresh);
  }
}

async function loadTenants() {
  const select = $("usage-tenant"), before = select.value;
  const tenants = await api("GET", "/_plugins/_mlstream/tenants").then((found) => found?.tenants || [], () => []);
  select.replaceChildren(h("option", {value: ""}, "all tenants"),
                         ...tenants.map((tenant) => h("option", {value: String(tenant.name)}, String(tenant.name))));
  if (tenants.some((tenant) => tenant.name === before)) select.value = before;
}

export function hide() {}

// The bucket starts (ms) from `from` up to `to`, by hour or day (UTC, as the API groups).
function bucketsOf(from, to, step) {
  const out = [];
  for (let t = Math.floor(from / step) * step; t < to; t += step) out.push(t);
  return out;
}

function bucketTime(row, unit) {
  // "2026-12-01T10:00Z" (hour) or "2026-12-01" (day), UTC
  const text = String(row[unit] ?? "");
  return Date.parse(unit === "day" ? `${text}T00:00:00Z` : text.replace(/Z$/, ":00Z"));
}

async function refresh() {
  const days = Number($("usage-range").value);
  const unit = days === 1 ? "hour" : "day";
  const step = unit === "hour" ? HOUR : DAY;
  const by = $("usage-by").value;
  const to = Date.now(), from = to - days * DAY;
  const tenant = $("usage-tenant").value;
  const only = tenant ? `&tenant=${encodeURIComponent(tenant)}` : "";
  const query = (groups) => `${USAGE}?from=${from}&to=${to}&group_by=${groups}${only}`;
  try {
    const [chart, table, models] = await Promise.all([
      api("GET", query(`${unit},${by}`)), api("GET", query(`${unit},tenant,key,model`)),
      searchAll("models").catch(() => []),
    ]);
    const names = new Map(models.map((m) => [m.id, m.name]));
    const label = (row) => by === "model" ? modelLabel(names, row.model) : String(row[by] ?? "");
    const times = bucketsOf(from, to, step);
    const groups = [...new Set(chart.rows.map(label))].sort();
    const series = (field) => groups.map((group) => {
      const sums = new Map();
      for (const row of chart.rows) {
        if (label(row) !== group) continue;
        const value = field(row);
        const t = Math.floor(bucketTime(row, unit) / step) * step;
        if (value !== null) sums.set(t, (sums.get(t) || 0) + value);
      }
      return {name: group, points: times.map((t) => [t, sums.has(t) ? sums.get(t) : 0])};
    });
    const tick = unit === "hour"
      ? (t) => new Date(t).toISOString().slice(11, 16)
      : (t) => new Date(t).toISOString().slice(5, 10);
    const domain = [times[0], times[times.length - 1]];
    $("usage-tokens-caption").textContent = `Tokens (input + output) per ${by}, by ${unit} (UTC)`;
    $("usage-cost-caption").textContent = `Cost per ${by}, by ${unit} (UTC)`;
    lineChart($("usage-tokens-chart"), {series: series((r) => (r.input_tokens || 0) + (r.output_tokens || 0)),
      xDomain: domain, xFormat: tick, yFormat: (v) => formatNumber(v), label: `Tokens per ${by}`});
    lineChart($("usage-cost-chart"), {series: series((r) => r.cost ?? null), xDomain: domain, xFormat: tick,
      yFormat: (v) => formatNumber(v, 4), label: `Cost per ${by}`});
    const totals = chart.totals || {};
    say($("usage-totals"), `${formatNumber(totals.requests)} requests, ${formatNumber(totals.errors)} errors, ` +
        `${formatNumber(totals.input_tokens)} input and ${formatNumber(totals.output_tokens)} output tokens, ` +
        `cost ${totals.cost === null || totals.cost === undefined ? "unknown (no prices)" : formatNumber(totals.cost, 4)}, ` +
        `${formatNumber(totals.cache_hits || 0)} answered from the response cache`);
    tableRows = table.rows.map((row) => ({
      period: String(row[unit] ?? ""), tenant: String(row.tenant ?? ""), key: String(row.key ?? ""),
      model: modelLabel(names, row.model),
      requests: row.requests, errors: row.errors, input_tokens: row.input_tokens, output_tokens: row.output_tokens,
      cached_input_tokens: row.cached_input_tokens, cost: row.cost, cache_hits: row.cache_hits,
      saved_cost: row.saved_cost,
    }));
    fillTable($("usage-table").tBodies[0], tableRows.map((row) => [
      h("td", {}, row.period), h("td", {}, row.tenant), h("td", {}, row.key), h("td", {}, row.model),
      ...["requests", "errors", "input_tokens", "output_tokens", "cached_input_tokens"].map((f) =>
        h("td", {class: "num"}, formatNumber(row[f]))),
      h("td", {class: "num"}, money(row.cost)),
      h("td", {class: "num"}, formatNumber(row.cache_hits || 0)),
      h("td", {class: "num"}, money(row.saved_cost)),
    ]), "No calls in this period", 12);
    say($("usage-message"), "");
  } catch (error) {
    say($("usage-message"), error.reason || String(error));
  }
}

function money(value) {
  return value === null || value === undefined ? "–" : formatNumber(value, 6);
}

function modelLabel(names, id) {
  const name = names.get(id);
  return name ? `${name} (${id})` : String(id ?? "");
}

// A cell as CSV: quoted, and a leading = + - @ defused so a spreadsheet never runs it.
export function csvCell(value) {
  let text = value === null || value === undefined ? "" : String(value);
  if (/^[=+\-@\t\r]/.test(text) && !/^-?\d+(\.\d+)?$/.test(text)) text = `'${text}`;
  return `"${text.replace(/"/g, '""')}"`;
}

function exportCsv() {
  const fields = ["period", "tenant", "key", "model", "requests", "errors", "input_tokens", "output_tokens",
                  "cached_input_tokens", "cost", "cache_hits", "saved_cost"];
  const lines = [fields.join(","), ...tableRows.map((row) => fields.map((f) => csvCell(row[f])).join(","))];
  const blob = new Blob([lines.join("\r\n") + "\r\n"], {type: "text/csv"});
  const link = h("a", {href: URL.createObjectURL(blob), download: `mlstream-usage-${new Date().toISOString().slice(0, 10)}.csv`});
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}
