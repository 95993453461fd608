// API keys (admin): list, create with a budget and limits (the secret shown once), revoke.

import {api} from "./api.js";
import {$, confirmInline, fillTable, formatNumber, h, say} from "./dom.js";

const KEYS = "/_plugins/_mlstream/keys";
let wired = false;

export function show() {
  if (!wired) {
    wired = true;
    $("key-form").addEventListener("submit", create);
    $("secret-copy").addEventListener("click", copySecret);
    $("secret-done").addEventListener("click", hideSecret);
  }
  refresh();
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
    keys = (await api("GET", KEYS))?.keys || [];
  } catch (error) {
    failed = error;
    feedback(error);
  }
  fillTable($("keys-table").tBodies[0], keys.map((key) => [
    h("td", {}, String(key.name ?? "")), h("td", {}, String(key.role ?? "")),
    h("td", {}, key.budget === null || key.budget === undefined ? "none"
      : `${formatNumber(key.budget, 4)} per ${key.budget_period ?? "month"}`),
    h("td", {class: "num"}, key.tpm ? formatNumber(key.tpm) : "no limit"),
    h("td", {class: "num"}, key.rpm ? formatNumber(key.rpm) : "no limit"),
    h("td", {}, key.created_time ? new Date(key.created_time).toISOString().replace("T", " ").slice(0, 16) + " UTC" : ""),
    h("td", {}, revokeButton(key.name)),
  ]), failed ? `Cannot list keys: ${failed.reason}` : "No keys", 7);
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

async function create(event) {
  event.preventDefault();
  const body = {name: $("key-name").value.trim(), role: $("key-role").value};
  const budget = numberField("key-budget"), tpm = numberField("key-tpm"), rpm = numberField("key-rpm");
  if (budget !== undefined) { body.budget = budget; body.budget_period = $("key-period").value; }
  if (tpm !== undefined) body.tpm = tpm;
  if (rpm !== undefined) body.rpm = rpm;
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
