// The one way the console reaches the server: its public API, with the key of this tab.
//
// The key lives in sessionStorage (this tab only, gone when it closes), never in a cookie
// or a URL. Every request says it comes from a script (X-Requested-With), so a 401 offers
// no Basic challenge and the browser never shows its own password dialog.

const KEY_ITEM = "mlstream.console.key";

export function storedKey() {
  return sessionStorage.getItem(KEY_ITEM);
}

export function storeKey(key) {
  sessionStorage.setItem(KEY_ITEM, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_ITEM);
}

export class ApiError extends Error {
  constructor(status, reason, type) {
    super(reason);
    this.status = status;
    this.reason = reason;
    this.type = type;
  }
}

// The API's own words for an error: OpenSearch's {"error": {"type", "reason"}, "status"},
// OpenAI's {"error": {"message", "type"}}, a stream's {"error": "..."}.
export function errorOf(status, data) {
  let reason, type;
  if (data && typeof data === "object" && "error" in data) {
    const error = data.error;
    if (typeof error === "string") reason = error;
    else if (error && typeof error === "object") {
      reason = typeof error.reason === "string" ? error.reason : error.message;
      type = error.type;
    }
  }
  if (typeof reason !== "string" || !reason) {
    reason = typeof data === "string" && data ? data : `the server answered HTTP ${status}`;
  }
  return new ApiError(status, reason, type);
}

export function headers(extra = {}) {
  const result = {"X-Requested-With": "XMLHttpRequest", ...extra};
  const key = storedKey();
  if (key) result.Authorization = `Bearer ${key}`;
  return result;
}

// fetch() with the key; the Response as it came (streams, /metrics, /readyz).
export async function request(method, path, body, {signal, key} = {}) {
  const extra = body === undefined ? {} : {"Content-Type": "application/json"};
  const sent = headers(extra);
  if (key !== undefined) sent.Authorization = `Bearer ${key}`;
  const response = await fetch(path, {
    method, headers: sent, signal, credentials: "omit", cache: "no-store", redirect: "error",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 401 && key === undefined) {
    window.dispatchEvent(new CustomEvent("console:unauthorized"));
  }
  return response;
}

export async function readBody(response) {
  const text = await response.text();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// A JSON call: the parsed answer, or an ApiError in the API's words.
export async function api(method, path, body, options) {
  const response = await request(method, path, body, options);
  const data = await readBody(response);
  if (!response.ok) throw errorOf(response.status, data);
  return data;
}

// Every hit of an ml-commons _search, as {id, ...source}.
export async function searchAll(kind) {
  const found = await api("POST", `/_plugins/_ml/${kind}/_search`, {query: {match_all: {}}, size: 1000});
  return (found?.hits?.hits || []).map((hit) => ({id: hit._id, ...hit._source}));
}

// The data payloads of an SSE body, as they arrive.
export async function* sseData(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true}).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
        if (data) yield data;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
