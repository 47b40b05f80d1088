"""The journal's archiver: drains a vhost's journal queue into one RBAK backup per run (docs/operations.md)."""
