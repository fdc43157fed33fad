// A job's code on its page: the workdir snapshot its config names (digest, size, its files;
// a small text file shown on click, read from the stored archive by the server), and the
// requirements and setup its config carries. Hidden for a job that brings none of them.
import { get } from "./api.js";
import { bytes } from "./artifacts.js";
import { $, h, showError } from "./dom.js";

const base = (jobId) => `/api/queue/${encodeURIComponent(jobId)}/workdir`;

const SAID = {
  binary: "binary: not shown",
  too_large: "over 256 KiB: not shown",
};

export function codeView({ jobId, panel }) {
  const error = $(".error", panel);
  const viewer = $("#code-file", panel);
  let drawn = null; // what the panel shows, to draw it again only when that changes

  function fact(name, value) {
    return [h("dt", { text: name }), h("dd", {}, value)];
  }

  async function show(file, button) {
    showError(error, null);
    for (const b of panel.querySelectorAll(".code-files button")) b.removeAttribute("aria-current");
    button.setAttribute("aria-current", "true");
    let found;
    try {
      found = await get(`${base(jobId)}/file?path=${encodeURIComponent(file.path)}`);
    } catch (err) {
      return showError(error, err);
    }
    const title = h("p", { class: "code-file-name mono", text: found.path });
    if (found.status === "text") {
      viewer.replaceChildren(title, h("pre", { class: "code-text", tabindex: "0", text: found.text }));
    } else {
      const why = found.status === "link" ? `a link to ${found.link}` : SAID[found.status];
      viewer.replaceChildren(title, h("p", { class: "muted", text: `${bytes(found.size)}, ${why}` }));
    }
    viewer.hidden = false;
  }

  function fileItem(file) {
    const label = file.type === "link" ? `${file.path} → ${file.link}` : file.path;
    const button = h("button", {
      type: "button", class: "linklike mono", text: label,
      onclick: (event) => show(file, event.currentTarget),
    });
    return h("li", {}, button, h("span", { class: "muted", text: ` ${bytes(file.size)}` }));
  }

  async function list() {
    let code;
    try {
      code = await get(base(jobId));
    } catch (err) {
      return showError(error, err); // 403: someone outside its team; 404: gone
    }
    const files = code.files.filter((f) => f.type !== "dir");
    const more = code.truncated ? ` (the first ${code.files.length} listed)` : "";
    $("#code-size", panel).textContent = `${bytes(code.size)}, ${files.length} files${more}`;
    $(".code-files", panel).replaceChildren(...files.map(fileItem));
  }

  function update(job) {
    const { workdir, requirements, setup } = job.config || {};
    const has = (v) => typeof v === "string" && v !== "";
    panel.hidden = !(has(workdir) || has(requirements) || has(setup));
    const seen = JSON.stringify([workdir, requirements, setup]);
    if (panel.hidden || seen === drawn) return;
    drawn = seen;
    $("#code-facts", panel).replaceChildren(
      ...(has(workdir) ? fact("Digest", h("span", { class: "mono", id: "code-digest", text: workdir })) : []),
      ...(has(workdir) ? fact("Size", h("span", { id: "code-size", text: "…" })) : []),
      ...(has(requirements) ? fact("Requirements", h("pre", { class: "mono", text: requirements })) : []),
      ...(has(setup) ? fact("Setup", h("pre", { class: "mono", text: setup })) : []),
    );
    $(".code-files", panel).hidden = !has(workdir);
    if (has(workdir)) list();
  }

  return { update };
}
