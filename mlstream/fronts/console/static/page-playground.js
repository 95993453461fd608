// Playground: a prompt streamed token by token through _predict/stream or /v1/chat/completions,
// with time to first token and tokens/s; Stop aborts the fetch, and the server cancels upstream.

import {errorOf, readBody, request, searchAll, sseData} from "./api.js";
import {$, formatNumber, h, say} from "./dom.js";

let wired = false, controller = null;

export function show() {
  if (!wired) {
    wired = true;
    $("play-form").addEventListener("submit", send);
    $("play-stop").addEventListener("click", stop);
    $("play-api").addEventListener("change", () => {
      $("play-interface").disabled = $("play-api").value !== "mlcommons";
    });
  }
  loadModels();
}

export function hide() {}

async function loadModels() {
  const select = $("play-model"), chosen = select.value;
  try {
    const models = await searchAll("models");
    select.replaceChildren(...models.map((m) =>
      h("option", {value: m.id}, `${m.name ?? ""} (${m.id})${m.model_state === "DEPLOYED" ? "" : ` – ${m.model_state ?? ""}`}`)));
    if (models.some((m) => m.id === chosen)) select.value = chosen;
    if (!models.length) say($("play-message"), "No model yet: register one on the Connectors & models page.");
  } catch (error) {
    say($("play-message"), error.reason || String(error));
  }
}

function messages() {
  const list = [];
  const system = $("play-system").value.trim();
  if (system) list.push({role: "system", content: system});
  list.push({role: "user", content: $("play-prompt").value});
  return list;
}

// What one event adds: {text, done, finish, error}.
function mlcommonsEvent(data) {
  const event = JSON.parse(data);
  if (event.error !== undefined) return {error: errorOf(0, event).reason};
  const map = event?.inference_results?.[0]?.output?.[0]?.dataAsMap || {};
  return {text: typeof map.content === "string" ? map.content : "", done: map.is_last === true,
          finish: map.finish_reason};
}

function openaiEvent(data) {
  if (data === "[DONE]") return {done: true};
  const event = JSON.parse(data);
  if (event.error !== undefined) return {error: errorOf(0, event).reason};
  const choice = event?.choices?.[0];
  return {text: typeof choice?.delta?.content === "string" ? choice.delta.content : "",
          finish: choice?.finish_reason || undefined, usage: event.usage || undefined};
}

function setState(text) {
  $("play-state").textContent = text;
}

async function send(event) {
  event.preventDefault();
  if (controller) return;
  const model = $("play-model").value;
  if (!model) { say($("play-message"), "Choose a model first."); return; }
  const viaOpenAI = $("play-api").value === "openai";
  let path, body;
  if (viaOpenAI) {
    path = "/v1/chat/completions";
    body = {model, messages: messages(), stream: true, stream_options: {include_usage: true}};
  } else {
    path = `/_plugins/_ml/models/${encodeURIComponent(model)}/_predict/stream`;
    body = {parameters: {messages: messages()}};
    if ($("play-interface").value) body.parameters._llm_interface = $("play-interface").value;
  }
  const output = $("play-output");
  output.textContent = "";
  say($("play-message"), "");
  for (const id of ["play-ttft", "play-tokens", "play-rate"]) $(id).textContent = "–";
  controller = new AbortController();
  $("play-send").disabled = true;
  $("play-stop").disabled = false;
  setState("waiting for the first token…");
  const started = performance.now();
  let firstAt = null, lastAt = null, tokens = 0, finish, reported;
  const update = () => {
    $("play-tokens").textContent = formatNumber(tokens);
    if (firstAt !== null && lastAt > firstAt) {
      $("play-rate").textContent = formatNumber(tokens / ((lastAt - firstAt) / 1000), 1);
    }
  };
  try {
    const response = await request("POST", path, body, {signal: controller.signal});
    if (!response.ok) throw errorOf(response.status, await readBody(response));
    for await (const data of sseData(response)) {
      const step = viaOpenAI ? openaiEvent(data) : mlcommonsEvent(data);
      if (step.error) throw new Error(step.error);
      if (step.usage) reported = step.usage;
      if (step.finish) finish = step.finish;
      if (step.text) {
        const now = performance.now();
        if (firstAt === null) {
          firstAt = now;
          $("play-ttft").textContent = `${formatNumber(now - started)} ms`;
          setState("streaming…");
        }
        lastAt = now;
        tokens += 1;
        output.append(document.createTextNode(step.text));
        update();
      }
      if (step.done) break;
    }
    if (reported?.completion_tokens) tokens = reported.completion_tokens;
    update();
    setState(`done${finish ? ` (${finish})` : ""}: ${formatNumber(tokens)} tokens`);
  } catch (error) {
    if (error.name === "AbortError") {
      setState(`stopped after ${formatNumber(tokens)} tokens`);
    } else {
      setState("failed");
      say($("play-message"), error.reason || error.message || String(error));
    }
  } finally {
    controller = null;
    $("play-send").disabled = false;
    $("play-stop").disabled = true;
  }
}

function stop() {
  controller?.abort();
}
