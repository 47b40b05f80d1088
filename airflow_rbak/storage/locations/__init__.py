"""The built-in backends' descriptions: each one's URL scheme, configuration, access place, links and credentials.

Light on purpose: a description imports no client library, so parsing or checking a URL never loads boto3 or a
cloud SDK; the backend class itself (``storage/file.py``, ``s3.py``...) is imported when a location is opened.
"""
