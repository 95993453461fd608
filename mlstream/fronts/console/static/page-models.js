// Connectors and models: list, search, details, create from a blueprint, deploy, undeploy, delete.
// What the API answers — names, descriptions, errors — is shown as text, in its own words.

import {api, searchAll} from "./api.js";
import {$, confirmInline, fillTable, h, say} from "./dom.js";

const ML = "/_plugins/_ml";
let connectors = [], models = [], connectorError = null, modelError = null;
let wired = false;

export function show() {
  if (!wired) wire();
  refresh();
}

export function hide() {}

function wire() {
  wired = true;
  $("models-search").addEventListener("input", render);
  $("models-refresh").addEventListener("click", refresh);
  $("details-close").addEventListener("click", () => { $("details").hidden = true; });
  $("connector-form").addEventListener("submit", createConnector);
  $("model-form").addEventListener("submit", registerModel);
}

function feedback(error, status) {
  say($("models-message"), error ? (error.reason || String(error)) : "");
  say($("models-status"), status || "");
}

export async function refresh() {
  const [foundConnectors, foundModels] = await Promise.allSettled([searchAll("connectors"), searchAll("models")]);
  connectors = foundConnectors.status === "fulfilled" ? foundConnectors.value : [];
  connectorError = foundConnectors.status === "rejected" ? foundConnectors.reason : null;
  models = foundModels.status === "fulfilled" ? foundModels.value : [];
  modelError = foundModels.status === "rejected" ? foundModels.reason : null;
  render();
}

function matches(item, words) {
  const text = [item.name, item.id, item.description].map((v) => String(v ?? "").toLowerCase()).join(" ");
  return words.every((word) => text.includes(word));
}

function render() {
  const words = $("models-search").value.toLowerCase().split(/\s+/).filter(Boolean);
  const names = new Map(connectors.map((c) => [c.id, c.name]));
  fillTable($("connectors-table").tBodies[0],
    connectors.filter((c) => matches(c, words)).map((c) => [
      h("td", {}, String(c.name ?? "")), h("td", {class: "mono"}, c.id), h("td", {}, String(c.protocol ?? "")),
      h("td", {}, String(c.description ?? "")),
      h("td", {}, actions([["Details", () => details("connectors", c.id, c.name)],
                           ["Delete", (cell) => remove(cell, "connectors", c.id, c.name), "danger-text"]])),
    ]), connectorError ? `Cannot list connectors: ${connectorError.reason}` : "No connectors", 5);
  fillTable($("models-table").tBodies[0],
    models.filter((m) => matches(m, words)).map((m) => {
      const deployed = m.model_state === "DEPLOYED";
      return [
        h("td", {}, String(m.name ?? "")), h("td", {class: "mono"}, m.id),
        h("td", {class: `state-${String(m.model_state ?? "")}`}, String(m.model_state ?? "")),
        h("td", {}, m.connector_id ? `${names.get(m.connector_id) ?? ""} (${m.connector_id})` : "inline"),
        h("td", {}, actions([["Details", () => details("models", m.id, m.name)],
                             deployed ? ["Undeploy", () => act("POST", `${ML}/models/${enc(m.id)}/_undeploy`, `Undeployed ${m.name}`)]
                                      : ["Deploy", () => act("POST", `${ML}/models/${enc(m.id)}/_deploy`, `Deployed ${m.name}`)],
                             ["Delete", (cell) => remove(cell, "models", m.id, m.name), "danger-text"]])),
      ];
    }), modelError ? `Cannot list models: ${modelError.reason}` : "No models", 5);
  const select = $("model-connector"), chosen = select.value;
  select.replaceChildren(...connectors.map((c) => h("option", {value: c.id}, `${c.name ?? ""} (${c.id})`)));
  if (connectors.some((c) => c.id === chosen)) select.value = chosen;
}

function actions(list) {
  const cell = h("span", {class: "actions"});
  for (const [label, run, extra] of list) {
    cell.append(h("button", {type: "button", class: `link ${extra || ""}`.trim(), onclick: () => run(cell)}, label));
  }
  return cell;
}

function enc(id) {
  return encodeURIComponent(id);
}

async function details(kind, id, name) {
  try {
    const body = await api("GET", `${ML}/${kind}/${enc(id)}`);
    $("details-title").textContent = `Details of ${name ?? id}`;
    $("details-body").textContent = JSON.stringify(withoutCredentials(body), null, 2);
    $("details").hidden = false;
    $("details-title").focus();
    feedback(null);
  } catch (error) {
    feedback(error);
  }
}

// The API never returns credentials; should one ever appear, it is not shown either.
function withoutCredentials(value) {
  if (Array.isArray(value)) return value.map(withoutCredentials);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) =>
      [k, /^credentials?$/i.test(k) ? "(stored encrypted, never shown)" : withoutCredentials(v)]));
  }
  return value;
}

async function act(method, path, done, body) {
  try {
    await api(method, path, body);
    feedback(null, done);
  } catch (error) {
    feedback(error);
  }
  await refresh();
}

function remove(cell, kind, id, name) {
  const what = kind === "models" ? "model" : "connector";
  confirmInline(cell, `Delete ${what} ${name ?? id}?`, "Delete",
                () => act("DELETE", `${ML}/${kind}/${enc(id)}`, `Deleted ${what} ${name ?? id}`));
}

async function createConnector(event) {
  event.preventDefault();
  let blueprint;
  try {
    blueprint = JSON.parse($("connector-json").value);
  } catch (error) {
    feedback({reason: `The blueprint is not valid JSON: ${error.message}`});
    return;
  }
  try {
    const created = await api("POST", `${ML}/connectors/_create`, blueprint);
    feedback(null, `Created connector ${created.connector_id}`);
    await refresh();
    $("model-connector").value = created.connector_id;
    if (!$("model-name").value && typeof blueprint?.name === "string") $("model-name").value = blueprint.name;
  } catch (error) {
    feedback(error);
  }
}

async function registerModel(event) {
  event.preventDefault();
  const body = {name: $("model-name").value, function_name: "remote", connector_id: $("model-connector").value};
  if ($("model-description").value) body.description = $("model-description").value;
  const deploy = $("model-deploy").checked;
  try {
    const created = await api("POST", `${ML}/models/_register${deploy ? "?deploy=true" : ""}`, body);
    feedback(null, `Registered model ${created.model_id}${deploy ? " and deployed it" : ""}`);
  } catch (error) {
    feedback(error);
  }
  await refresh();
}
