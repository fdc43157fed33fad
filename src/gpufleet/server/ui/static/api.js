// The pages' one way to the orchestrator: the public JSON API, with the session cookie and,
// on every write, the CSRF token from the `gpufleet_csrf` cookie.

const CSRF_COOKIE = "gpufleet_csrf";

export class ApiError extends Error {
  // `fields`: a refused body's problems by field name (a 422's `errors`), for a form to show
  // each beside its field.
  constructor(status, detail, fields = {}) {
    super(detail);
    this.status = status;
    this.fields = fields;
  }
}

function fieldsOf(data) {
  const fields = {};
  for (const e of (data && Array.isArray(data.errors)) ? data.errors : []) {
    const name = (e.loc || []).filter((part) => part !== "body").join(".");
    if (name && !(name in fields)) fields[name] = e.msg;
  }
  return fields;
}

function csrfToken() {
  const prefix = `${CSRF_COOKIE}=`;
  const found = document.cookie.split("; ").find((c) => c.startsWith(prefix));
  return found ? decodeURIComponent(found.slice(prefix.length)) : "";
}

export function signInAgain() {
  const here = location.pathname + location.search;
  location.assign(`/signin?next=${encodeURIComponent(here)}`);
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrfToken();
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch {
    throw new ApiError(0, "the orchestrator cannot be reached; check it is running, then retry");
  }
  if (resp.status === 401) {
    signInAgain();
    throw new ApiError(401, "signed out");
  }
  const json = (resp.headers.get("content-type") || "").includes("json");
  const data = json ? await resp.json() : null;
  if (!resp.ok) {
    // `detail_for.ui`: the same as `detail`, in the page's terms (a button, not an endpoint)
    const detail = data && ((data.detail_for && data.detail_for.ui) || data.detail);
    const unexplained = `the orchestrator refused this without saying why (${resp.status} ${resp.statusText}); try again, or see its log`;
    throw new ApiError(resp.status, detail || unexplained, fieldsOf(data));
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body);
export const put = (path, body) => api("PUT", path, body);
export const patch = (path, body) => api("PATCH", path, body);
export const del = (path) => api("DELETE", path);

