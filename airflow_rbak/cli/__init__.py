"""The ``rbak`` command line."""
