// Sign in with an API key; the answer sets the session cookie, then we go where we were.
import { $ } from "./dom.js";

const form = $("#signin");
const error = $("#signin-error");

// Where to go after signing in: a page of this site only. The browser's own URL parser
// decides (it drops tabs, reads "\\" as "/"), and the whole URL it made is followed: its
// path alone could read "//elsewhere" again ("/.//elsewhere" resolves to that path).
function sameOrigin(next) {
  try {
    const url = new URL(next || "/", location.origin);
    if (url.origin === location.origin) return url.href;
  } catch {
    // not a URL at all: go home
  }
  return "/";
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.textContent = "";
  const button = $("button[type=submit]", form);
  button.disabled = true;
  try {
    const resp = await fetch("/ui/session", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ api_key: form.api_key.value, next: form.next.value }),
    });
    const body = await resp.json();
    if (!resp.ok) throw new Error(body.detail || `sign-in failed (${resp.status})`);
    location.assign(sameOrigin(body.next));
  } catch (err) {
    error.textContent = err.message;
    button.disabled = false;
  }
});
