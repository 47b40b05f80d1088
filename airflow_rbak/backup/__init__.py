"""Whole-backup operations over a storage location: manifests, listing, validation, rebuild."""
