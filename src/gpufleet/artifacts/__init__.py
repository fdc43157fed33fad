"""Artifacts: the files a job keeps (outputs, checkpoints), stored by key outside the database.

`keys` says where a job's file lives and which paths are refused; `store` writes, reads,
lists, deletes and presigns them; `backends` opens the store the settings name.
"""
