// The job page's log tools: times shown on demand, Find within the lines the page holds
// (‹ and Find step through them), and Search whole log (GET …/logs?q=, the newest matches,
// each a link to its line, #L<seq>). Text is sought as typed, ignoring case, on both sides.
import { get } from "./api.js";
import { $, h, showError } from "./dom.js";

const RESULTS = 100; // matches the whole-log search lists
const TIMES = "gpufleet.log-times"; // the reader's choice, kept in this browser

export function logSearch(view) {
  const box = $("#logs");
  const input = $("#log-q");
  const hits = $("#log-hits");
  const error = $("#log-search-error");
  let found = [];
  let at = -1;
  let term = "";

  const times = $("#log-times");
  times.checked = localStorage.getItem(TIMES) === "on";
  const showTimes = () => box.classList.toggle("show-times", times.checked);
  times.addEventListener("change", () => {
    localStorage.setItem(TIMES, times.checked ? "on" : "off");
    showTimes();
  });
  showTimes();

  function collect() {
    for (const el of box.querySelectorAll(".log-hit")) el.classList.remove("log-hit");
    term = input.value.toLowerCase();
    found = term
      ? [...box.querySelectorAll(".log-line")].filter((el) => el.textContent.toLowerCase().includes(term))
      : [];
    for (const el of found) el.classList.add("log-hit");
  }

  function step(by) {
    showError(error, null);
    if (input.value.toLowerCase() !== term || !found.every((el) => el.isConnected)) {
      collect();
      at = by > 0 ? -1 : found.length;
    }
    if (!term) {
      hits.textContent = "";
      return;
    }
    if (!found.length) {
      hits.textContent = "no match in the lines shown: try Search whole log";
      return;
    }
    at = (at + by + found.length) % found.length;
    hits.textContent = `${at + 1} of ${found.length} in the lines shown`;
    view.mark(Number(found[at].dataset.seq));
  }

  async function searchAll() {
    showError(error, null);
    hits.textContent = "";
    const q = input.value;
    if (!q) return showError(error, new Error("Type the text to search for, then press Search whole log."));
    const params = new URLSearchParams({ q, tail: RESULTS, limit: RESULTS, ...view.scope() });
    try {
      const page = await get(`${view.base}?${params}`);
      const list = page.lines.map((line) => h("li", {},
        h("a", { href: `#L${line.seq}`, class: "mono", text: `line ${line.seq}` }), " ",
        h("span", { class: "log-result-text", text: line.text })));
      $("#log-results").replaceChildren(...list);
      const n = page.lines.length;
      $("#log-results-title").textContent = !n ? `No line of the log holds “${q}”.`
        : page.next_before !== null ? `The newest ${n} lines holding “${q}”:`
          : `${n} line${n === 1 ? "" : "s"} hold${n === 1 ? "s" : ""} “${q}”:`;
      $("#log-results-box").hidden = false;
    } catch (err) {
      showError(error, err);
    }
  }

  $("#log-find").addEventListener("submit", (event) => {
    event.preventDefault();
    step(1);
  });
  $("#log-prev").addEventListener("click", () => step(-1));
  $("#log-search-all").addEventListener("click", searchAll);
}
