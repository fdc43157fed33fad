// On every signed-in page: sign out (a CSRF-checked DELETE of the session).
import { del } from "./api.js";
import { $ } from "./dom.js";

const button = $("#signout");
if (button) {
  button.addEventListener("click", async () => {
    try {
      await del("/ui/session");
    } finally {
      location.assign("/signin");
    }
  });
}
