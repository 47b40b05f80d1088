"""The backup run: one method per task of the backup DAG, over the repository (``repository/``) it writes."""
