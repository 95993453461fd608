// The console's entry: sign-in, navigation between pages (#overview, #models, ...), sign-out.

import {forgetKey, request, storeKey, storedKey} from "./api.js";
import {$, say} from "./dom.js";
import * as keys from "./page-keys.js";
import * as models from "./page-models.js";
import * as overview from "./page-overview.js";
import * as playground from "./page-playground.js";
import * as usage from "./page-usage.js";

const PAGES = {overview, models, keys, usage, playground};
let current = null;
let role = null;  // "admin", "tenant_admin" or "user" (an open server, without keys, counts as admin)
let tenant = null;  // a tenant_admin's tenant (the page shows nothing of another)

async function signIn(event) {
  event.preventDefault();
  const key = $("key-input").value.trim();
  if (!key) {
    say($("sign-in-message"), "Enter an API key.");
    return;
  }
  say($("sign-in-message"), "");
  try {
    const response = await request("GET", "/", undefined, {key});
    if (response.status === 401) {
      say($("sign-in-message"), "This key was not accepted: check that it is a key of this server and not revoked.");
      $("key-input").select();
      return;
    }
    if (!response.ok) {
      say($("sign-in-message"), `The server answered HTTP ${response.status}; try again.`);
      return;
    }
  } catch (error) {
    say($("sign-in-message"), `The server cannot be reached: ${error.message}`);
    return;
  }
  storeKey(key);
  $("key-input").value = "";
  await enter();
}

// Which pages this key may use: a key that may read cluster settings is an admin's; one
// refused those but allowed the key list is a tenant_admin's (that list is its tenant's only).
async function detectRole() {
  try {
    if ((await request("GET", "/_cluster/settings")).status !== 403) return {role: "admin", tenant: null};
    const listed = await request("GET", "/_plugins/_mlstream/keys");
    if (!listed.ok) return {role: "user", tenant: null};
    const keys = (await listed.json())?.keys || [];
    return {role: "tenant_admin", tenant: keys[0]?.tenant ?? null};
  } catch {
    return {role: "user", tenant: null};
  }
}

async function enter() {
  ({role, tenant} = await detectRole());
  if (!storedKey()) return;  // refused meanwhile
  $("sign-in").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("who-role").textContent = tenant ? `${role} key · tenant ${tenant}` : `${role} key`;
  for (const link of document.querySelectorAll("[data-admin]")) link.parentElement.hidden = !managesKeys();
  route();
}

function managesKeys() {
  return role === "admin" || role === "tenant_admin";
}

function signOut(message) {
  current?.hide();
  current = null;
  forgetKey();
  role = tenant = null;
  for (const page of document.querySelectorAll(".page")) page.hidden = true;
  $("nav").hidden = true;
  $("who").hidden = true;
  $("sign-in").hidden = false;
  say($("sign-in-message"), message || "");
  $("key-input").focus();
}

function route() {
  if (!storedKey() || role === null) return;
  let name = location.hash.replace(/^#/, "");
  if (!(name in PAGES) || (name === "keys" && !managesKeys())) name = "overview";
  current?.hide();
  for (const [other, _] of Object.entries(PAGES)) $(`page-${other}`).hidden = other !== name;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  current = PAGES[name];
  document.title = `${$(`${name}-title`).textContent} – mlstream console`;
  current.show({role, tenant});
  $(`${name}-title`).focus();
}

function start() {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut("Signed out."));
  window.addEventListener("hashchange", route);
  window.addEventListener("console:unauthorized", () => {
    if (storedKey()) signOut("The server no longer accepts this key (revoked?): sign in again.");
  });
  if (storedKey()) enter();
  else signOut();
}

start();
