// API keys (admin, or a tenant_admin for its own tenant): list (an admin by tenant), create
// with a tenant, models, backend roles, a budget and limits (the secret shown once), revoke.

import {api} from "./api.js";
import {$, confirmInline, fillTable, formatNumber, h, say} from "./dom.js";

const KEYS = "/_plugins/_mlstream/keys", TENANTS = "/_plugins/_mlstream/tenants";
let wired = false, confined = false;

// An admin picks among every tenant; a tenant_admin's keys are its tenant's, so it is shown
// no tenant to pick, and no admin role to give (the API refuses both).
export function show({role}) {
  if (!wired) {
    wired = true;
    $("key-form").addEventListener("submit", create);
    $("keys-tenant").addEventListener("change", refresh);
    $("secret-copy").addEventListener("click", copySecret);
    $("secret-done").addEventListener("click", hideSecret);
  }
  confined = role === "tenant_admin";
  $("keys-tenant-bar").hidden = confined;
  $("key-tenant-field").hidden = confined;
  $("key-role").querySelector("option[value=admin]").hidden = confined;
  $("key-role").querySelector("option[value=admin]").disabled = confined;
  if (confined) $("keys-tenant").value = "";
  else loadTenants();
  refresh();
}

async function loadTenants() {
  let tenants = [];
  try {
    tenants = (await api("GET", TENANTS))?.tenants || [];
  } catch (error) {
    feedback(error);
  }
  const names = tenants.map((tenant) => String(tenant.name));
  fillSelect($("keys-tenant"), [["", "all tenants"], ...names.map((name) => [name, name])]);
  fillSelect($("key-tenant"), names.map((name) => [name, name]), "default");
}

// Options as [value, label]; the choice made before is kept while it is still offered, and
// `preferred` is what a reset of the form comes back to.
function fillSelect(select, options, preferred) {
  const before = select.value || preferred;
  select.replaceChildren(...options.map(([value, label]) =>
    h("option", {value, selected: value === (preferred ?? "")}, label)));
  if (options.some(([value]) => value === before)) select.value = before;
}

// Leaving the page forgets a secret still shown.
export function hide() {
  hideSecret();
}

function feedback(error, status) {
  say($("keys-message"), error ? (error.reason || String(error)) : "");
  say($("keys-status"), status || "");
}

async function refresh() {
  let keys = [], failed = null;
  try {
    const tenant = $("keys-tenant").value;
    keys = (await api("GET", tenant ? `${KEYS}?tenant=${encodeURIComponent(tenant)}` : KEYS))?.keys || [];
  } catch (error) {
    failed = error;
    feedback(error);
  }
  fillTable($("keys-table").tBodies[0], keys.map((key) => [
    h("td", {}, String(key.name ?? "")), h("td", {}, String(key.role ?? "")),
    h("td", {}, String(key.tenant ?? "default")),
    h("td", {}, Array.isArray(key.models) ? (key.models.join(", ") || "none") : "all of the tenant's"),
    h("td", {}, (key.backend_roles || []).join(", ")),
    h("td", {}, key.budget === null || key.budget === undefined ? "none"
      : `${formatNumber(key.budget, 4)} per ${key.budget_period ?? "month"}`),
    h("td", {class: "num"}, key.tpm ? formatNumber(key.tpm) : "no limit"),
    h("td", {class: "num"}, key.rpm ? formatNumber(key.rpm) : "no limit"),
    h("td", {}, key.created_time ? new Date(key.created_time).toISOString().replace("T", " ").slice(0, 16) + " UTC" : ""),
    h("td", {}, revokeButton(key.name)),
  ]), failed ? `Cannot list keys: ${failed.reason}` : "No keys", 10);
}

function revokeButton(name) {
  const cell = h("span", {});
  cell.append(h("button", {type: "button", class: "link danger-text", onclick: () =>
    confirmInline(cell, `Revoke key ${name}? Calls with it are refused from the next request on.`, "Revoke",
                  () => revoke(name))}, "Revoke"));
  return cell;
}

async function revoke(name) {
  try {
    await api("DELETE", `${KEYS}/${encodeURIComponent(name)}`);
    feedback(null, `Revoked key ${name}`);
  } catch (error) {
    feedback(error);
  }
  refresh();
}

function numberField(id) {
  const text = $(id).value.trim();
  return text === "" ? undefined : Number(text);
}

function listField(id) {
  const text = $(id).value.trim();
  return text === "" ? undefined : text.split(",").map((part) => part.trim()).filter(Boolean);
}

async function create(event) {
  event.preventDefault();
  const body = {name: $("key-name").value.trim(), role: $("key-role").value};
  const budget = numberField("key-budget"), tpm = numberField("key-tpm"), rpm = numberField("key-rpm");
  if (budget !== undefined) { body.budget = budget; body.budget_period = $("key-period").value; }
  if (tpm !== undefined) body.tpm = tpm;
  if (rpm !== undefined) body.rpm = rpm;
  if (!confined && $("key-tenant").value) body.tenant = $("key-tenant").value;
  const models = listField("key-models"), backendRoles = listField("key-backend-roles");
  if (models !== undefined) body.models = models;
  if (backendRoles !== undefined) body.backend_roles = backendRoles;
  try {
    const created = await api("POST", KEYS, body);
    feedback(null, `Created key ${created.name}`);
    $("secret-name").textContent = created.name;
    $("secret-value").value = created.key;
    $("secret-box").hidden = false;
    $("secret-value").focus();
    $("secret-value").select();
    $("key-form").reset();
  } catch (error) {
    feedback(error);
  }
  refresh();
}

async function copySecret() {
  try {
    await navigator.clipboard.writeText($("secret-value").value);
    say($("keys-status"), "Copied to the clipboard");
  } catch {
    $("secret-value").select();
    say($("keys-status"), "Select the key and copy it (the browser refused the clipboard)");
  }
}

function hideSecret() {
  $("secret-value").value = "";
  $("secret-box").hidden = true;
}
