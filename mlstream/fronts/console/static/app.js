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
let role = null;  // "admin" or "user" (an open server, without keys, counts as admin)

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

// Which pages this key may use: a key that may read cluster settings is an admin's.
async function detectRole() {
  try {
    const response = await request("GET", "/_cluster/settings");
    return response.status === 403 ? "user" : "admin";
  } catch {
    return "user";
  }
}

async function enter() {
  role = await detectRole();
  if (!storedKey()) return;  // refused meanwhile
  $("sign-in").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("who-role").textContent = `${role} key`;
  for (const link of document.querySelectorAll("[data-admin]")) link.parentElement.hidden = role !== "admin";
  route();
}

function signOut(message) {
  current?.hide();
  current = null;
  forgetKey();
  role = null;
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
  if (!(name in PAGES) || (name === "keys" && role !== "admin")) name = "overview";
  current?.hide();
  for (const [other, _] of Object.entries(PAGES)) $(`page-${other}`).hidden = other !== name;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.page === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  current = PAGES[name];
  document.title = `${$(`${name}-title`).textContent} – mlstream console`;
  current.show({role});
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
