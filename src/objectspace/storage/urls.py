"""Storage URLs as they may be shown: passwords and secret options masked.

A storage URL can carry credentials: ``postgresql://user:secret@host/db`` and, for segment
files, fsspec options such as ``?key=…&secret=…&token=…`` (and a catalog URL, which may hold
a password of its own). Every repr, str and error message of objectspace that names a
storage goes through :func:`redact_url`; a message that quotes text from elsewhere (a
driver's exception) goes through :func:`redact_text`, which removes the secrets of the URLs
it is given wherever they appear.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlparse

__all__ = ["MASK", "is_secret_option", "redact_text", "redact_url", "url_secrets"]

MASK = "***"
"""What a secret is replaced with."""

# An option whose lowercased name contains one of these is a secret (``key``,
# ``secret``, ``aws_secret_access_key``, ``session_token``, ``sslpassword``, ...).
_SECRET_WORDS = ("password", "passwd", "secret", "token", "key", "credential", "auth")
# Options that hold another URL, itself redacted.
_URL_OPTIONS = frozenset({"catalog"})


def is_secret_option(name: str) -> bool:
    """Whether a URL query option of that name holds a secret (its value is masked)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _split(url: str) -> tuple[str, str | None, list[tuple[str, str]]]:
    """``(url without query, password or None, query pairs)``; raises ValueError."""
    parsed = urlparse(url)
    password = parsed.password
    query = parse_qsl(parsed.query, keep_blank_values=True)
    base = url.partition("?")[0]
    return base, password, query


def redact_url(url: object) -> str:
    """``url`` with its password and secret query options replaced by ``***``, the URLs in
    its ``catalog=`` option redacted likewise. Never raises: a URL that cannot be parsed
    keeps only its scheme (anything after it might be a secret).

    >>> redact_url("postgresql://u:pw@h:5432/db?schema=s")
    'postgresql://u:***@h:5432/db?schema=s'
    """
    if not isinstance(url, str):
        return f"<{type(url).__name__}>"
    try:
        base, password, query = _split(url)
    except ValueError:
        scheme, sep, _ = url.partition("://")
        return f"{scheme}{sep}{MASK}" if sep else MASK
    if password is not None:
        scheme, sep, rest = base.partition("://")
        userinfo, at, host = rest.rpartition("@")
        user = userinfo.split(":", 1)[0]
        base = f"{scheme}{sep}{user}:{MASK}{at}{host}"
    if "?" not in url:
        return base
    masked = [
        (
            name,
            redact_url(value)
            if name in _URL_OPTIONS
            else MASK
            if is_secret_option(name)
            else value,
        )
        for name, value in query
    ]
    return f"{base}?{urlencode(masked, safe='/:*@')}"


def url_secrets(url: object) -> Iterator[str]:
    """The secret strings of ``url`` (its password, the values of its secret options, and
    those of its catalog URL), as written and as decoded."""
    if not isinstance(url, str):
        return
    try:
        parsed = urlparse(url)
        raw_password = parsed.netloc.rpartition("@")[0].partition(":")[2]
        query = parse_qsl(parsed.query, keep_blank_values=True)
    except ValueError:
        return
    if raw_password:
        yield raw_password
        yield unquote(raw_password)
    for name, value in query:
        if name in _URL_OPTIONS:
            yield from url_secrets(value)
        elif is_secret_option(name) and value:
            yield value
            yield quote(value, safe="")
            yield quote_plus(value, safe="")


def redact_text(text: object, urls: Iterable[object] = (), secrets: Iterable[object] = ()) -> str:
    """``str(text)`` with every secret of ``urls`` (see :func:`url_secrets`) and every str
    of ``secrets`` replaced by ``***``; for messages that quote a driver's error."""
    out = str(text)
    found: set[str] = set()
    for url in urls:
        found.update(url_secrets(url))
    found.update(s for s in secrets if isinstance(s, str))
    # Longest first, so a secret that contains another is masked whole; one or two
    # characters are no secret worth mangling every word of the message for.
    for secret in sorted((s for s in found if len(s) >= 3), key=len, reverse=True):
        out = out.replace(secret, MASK)
    return out
