"""What every backend's URL parser shares: prefixes, endpoints, query parameters, and where credentials go instead.

Errors name a parameter and never repeat its value, which may be a secret (an Azure SAS signature, say).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from airflow_rbak.exceptions import ConfigurationError

#: Query parameters that carry a secret (an Azure SAS token's signature, a signed URL's): refused without echoing.
SECRET_PARAMS = frozenset({"sig", "x-goog-signature", "x-amz-signature", "x-amz-credential", "x-amz-security-token"})
#: Where storage credentials go instead of the URL (said by every refusal of a URL that holds some).
CREDENTIALS_HINT = ("credentials come from an Airflow connection (storage_conn_id, [rbak] storage_conn_id: type aws, "
                    "wasb or google_cloud_platform) or the cloud's own chain (the AWS credential chain; "
                    "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_KEY; "
                    "GOOGLE_APPLICATION_CREDENTIALS); write an '@' in a path as %40")


def cloud_params(name: str, query: str, kind: str, holder: str, known: tuple[str, ...]) -> dict[str, str]:
    """The query parameters of a cloud URL; errors name parameters, never repeat values (a SAS is one)."""
    if not name:
        raise ConfigurationError(f"{kind} URL has no {holder}; use {kind.lower()}://{holder}/optional/prefix")
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key.lower() in SECRET_PARAMS for key, _ in pairs):
        raise ConfigurationError(f"the {kind} storage URL must not hold credentials (it has a signature); {CREDENTIALS_HINT}")
    params: dict[str, str] = {}
    for key, value in pairs:
        if key in params:
            raise ConfigurationError(f"parameter {key!r} is repeated in the {kind} URL")
        params[key] = value
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigurationError(f"unknown {kind} URL parameter(s) {', '.join(unknown)}; supported: {', '.join(known)}")
    return params


def cloud_url(scheme: str, holder: str, prefix: str, params: tuple[tuple[str, str | None], ...]) -> str:
    """A cloud URL from its parts (the inverse of its parser)."""
    path = "/" + quote(prefix) if prefix else ""
    given = [(k, v) for k, v in params if v]
    query = "?" + urlencode(given, safe=":/") if given else ""
    return f"{scheme}://{holder}{path}{query}"


def clean_prefix(prefix: str, kind: str) -> str:
    """The prefix without outer slashes; refused when a segment is empty, ``.`` or ``..``."""
    cleaned = prefix.strip("/")
    if cleaned and any(p in ("", ".", "..") for p in cleaned.split("/")):
        raise ConfigurationError(f"invalid {kind} prefix {prefix!r}: no empty, '.' or '..' segments")
    return cleaned


def prefix_segments(prefix: str) -> tuple[str, ...]:
    """A key prefix's path segments, as the access rules compare them."""
    return tuple(p for p in prefix.split("/") if p)


def query_params(query: str, url: str) -> dict[str, str]:
    """Parse the query string, refusing repeated parameters (which one would win?)."""
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key in params:
            raise ConfigurationError(f"parameter {key!r} is repeated in {redact(url)!r}")
        params[key] = value
    return params


def reject_query(query: str, scheme: str, url: str) -> None:
    """Refuse any query on a backend that takes no parameters."""
    if query:
        raise ConfigurationError(
            f"{scheme}:// storage takes no parameters, got {query!r} in {redact(url)!r}"
        )


def parse_bool(value: str, name: str) -> bool:
    """A URL's boolean parameter, in any of the usual spellings."""
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ConfigurationError(f"{name} must be true or false, got {value!r}")


def check_endpoint(endpoint: str, kind: str) -> None:
    """Accept only ``http(s)://host[:port][/path]`` without credentials."""
    if "@" in endpoint:  # before anything quotes it: a secret with '/' or '?' would spill into path or query
        raise ConfigurationError(f"an {kind} endpoint must not hold credentials (it has an '@'); {CREDENTIALS_HINT}")
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"invalid {kind} endpoint {redact(endpoint)!r}: expected http(s)://host[:port]"
        )
    try:
        _ = parts.port  # urllib validates the port only when it is read
    except ValueError:
        raise ConfigurationError(f"invalid port in {kind} endpoint {redact(endpoint)!r}") from None
    if parts.query or parts.fragment:  # not echoed: a query may be a SAS token
        raise ConfigurationError(f"an {kind} endpoint must not have a query or fragment")


def redact(url: str) -> str:
    """Hide any ``user:password@`` so error messages are safe to log."""
    return re.sub(r"(?<=://)[^/?#@]*@", "***@", unquote(url))
