"""Artifacts: the files a job keeps (outputs, checkpoints), stored by key outside the database.

`keys` says where a job's file lives and which paths are refused; `store` writes, reads,
lists, deletes and presigns them; `backends` opens the store the settings name.
"""

# The most one job's artifacts may take, all attempts together (`--artifact-max-job-bytes`).
# Here, not in the server's settings, so that the CLI names it without importing the server.
DEFAULT_MAX_JOB_BYTES = 100 * 1024**3
