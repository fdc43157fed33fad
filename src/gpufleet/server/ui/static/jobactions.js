// What the Queue and a job's page both do to a job.
import { post } from "./api.js";
import { act, askDialog, busy, confirmDialog, showError } from "./dom.js";

// Cancel after a confirmation; `after` (the page's refresh) runs once it is done.
export async function cancelJob(jobId, button, error, after) {
  const ok = await confirmDialog(`Cancel ${jobId}?`, "A running job is stopped on its worker.", "Cancel job");
  if (ok) await act(button, () => post(`/api/queue/${jobId}/cancel`), error, after);
}

// Re-run an ended job and open the new job's page.
export async function rerunJob(jobId, button, error) {
  try {
    const job = await busy(button, () => post(`/api/queue/${jobId}/rerun`));
    location.assign(`/queue/${job.id}`);
  } catch (err) {
    showError(error, err);
  }
}

// A job an approval rule holds: approved, it joins the queue.
export const approveJob = (jobId, button, error, after) =>
  act(button, () => post(`/api/queue/${jobId}/approve`), error, after);

// Rejected, with a reason its submitter will read, it is cancelled.
export async function rejectJob(jobId, button, error, after) {
  const reason = await askDialog(
    `Reject ${jobId}?`,
    "The job is cancelled and never runs; its submitter sees your reason.",
    "Reject job",
    "Reason",
    "Give a reason, such as: ask for 2 GPUs, not 8.",
  );
  if (reason === null) return;
  const query = new URLSearchParams({ reason });
  await act(button, () => post(`/api/queue/${jobId}/reject?${query}`), error, after);
}
