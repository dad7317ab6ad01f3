"""The settings that name the server on the web, checked and normalised, and the readers of the request headers
they are compared with.

* ``ZSNLI_PUBLIC_URL`` (`public_url`): the absolute URL readers reach the server at (links are built from it only);
* ``ZSNLI_FORWARDED_ALLOW_IPS`` (`forwarded_allow_ips`): the proxies whose forwarded headers are believed;
* ``ZSNLI_ALLOWED_HOSTS`` (`allowed_hosts`): the ``Host`` names answered (the DNS rebinding guard of
  `zsnli.serving.origin_check`);
* ``ZSNLI_ALLOWED_ORIGINS`` (`allowed_origins`): the web pages (origins, RFC 6454) that may drive the server from a
  browser besides its own.

Each checker raises ``ValueError`` with one line naming the variable; `zsnli.config.Settings` turns it into
``SettingsError`` (a refused start, exit 3). `split_host` and `parse_origin` read a ``Host`` header and an
``Origin`` (or ``Referer``) header the way the settings are written, so a request and a setting compare equal
whatever their letter case, default port or trailing dot.

May import: the standard library, and ``publicsuffixlist`` when installed (the Public Suffix List, bundled:
`public_suffix`, only when a domain entry is checked; without it single labels only). Imported by `zsnli.config` and `zsnli.serving.origin_check`.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import urlsplit

#: The port an origin has when it names none (RFC 6454 section 4: the scheme's default port).
DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = r"(?!-)[a-z0-9_-]{1,63}(?<!-)"
_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def ip_literal(host: str) -> bool:
    """Whether ``host`` (as `split_host` gives it: lower case, no brackets) is an IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def split_host(value: str) -> tuple[str, int | None] | None:
    """A ``Host`` header (or an authority) -> ``(host, port)``: the host in lower case without one trailing dot
    (``Example.COM.`` is ``example.com``) and an IPv6 address without its brackets; the port as an int, None when
    absent or empty (RFC 9110 section 7.2, ``uri-host [ ":" port ]``). None when it is no such thing (user
    information, a path, spaces, an IPv6 address without brackets, a port out of range)."""
    text = value.strip().lower()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or ":" not in host or not ip_literal(host):
            return None
    else:
        host, _, port = text.partition(":")
        rest = ":" + port if _ else ""
        host = host[:-1] if host.endswith(".") else host
        if not _NAME.fullmatch(host):
            return None
    if rest and not rest.startswith(":"):
        return None
    port = rest[1:]
    if port and (not port.isdigit() or len(port) > 5 or int(port) > 65535):
        return None
    return host, int(port) if port else None


def parse_origin(value: str, *, url: bool = False) -> tuple[str, str, int | None] | None:
    """An ``Origin`` header -> ``(scheme, host, port)`` in the form of `split_host` (lower case, no trailing
    dot), the port filled in from `DEFAULT_PORTS` when absent; None when it is not ``scheme://host[:port]``
    (``null``, a list of origins, user information, a path). url: read a URL (a ``Referer``) and keep its origin,
    whatever its path and query."""
    text = value.strip()
    try:
        parts = urlsplit(text)
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc or "@" in parts.netloc or any(c.isspace() for c in text):
        return None
    if not url and (parts.path not in ("", "/") or parts.query or parts.fragment):
        return None
    found = split_host(parts.netloc)
    if found is None:
        return None
    scheme = parts.scheme.lower()
    return scheme, found[0], found[1] if found[1] is not None else DEFAULT_PORTS.get(scheme)


def origin_text(origin: tuple[str, str, int | None]) -> str:
    """``(scheme, host, port)`` -> ``scheme://host[:port]`` (the port left out when it is the scheme's default,
    an IPv6 host in brackets): the one spelling of `allowed_origins`."""
    scheme, host, port = origin
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" + ("" if port is None or DEFAULT_PORTS.get(scheme) == port else f":{port}")


@functools.lru_cache(maxsize=1)
def _suffix_list():
    """The bundled Public Suffix List, or None where ``publicsuffixlist`` is not installed (a venv holding only the
    product card's packages, where serve.sh runs: the check falls back to single labels, `public_suffix`)."""
    try:
        from publicsuffixlist import PublicSuffixList
    except ImportError:
        return None
    return PublicSuffixList()


def public_suffix(name: str) -> bool:
    """Whether the domain ``name`` (lower case, no trailing dot) is a public suffix: a name under which different
    owners register their own (``com``, ``co.uk``, ``github.io``, any single label), by the Mozilla Public Suffix
    List (publicsuffix.org; ICANN and private sections, as browsers apply it to cookies) that the
    ``publicsuffixlist`` package bundles, never fetched here. A label not on the list is a top-level domain of its
    own (the list's ``*`` rule): ``lab`` is a suffix, ``corp.lab`` is not. Without the package installed only a
    single label counts (``com`` yes, ``co.uk`` no): the server still starts in an environment of the card's
    packages alone, with the weaker check."""
    suffixes = _suffix_list()
    return "." not in name if suffixes is None else suffixes.is_public(name)


def punycode_hint(item: str) -> str:
    """What to add to the error of a host or origin ``item`` that holds a non-ASCII name, ``''`` otherwise.

    ``Host`` and ``Origin`` headers carry such a name in punycode (IDNA, RFC 5890/3492), so the setting is written
    so too: ``münchen.de`` -> ``'; a non-ASCII name is written in punycode (IDNA): xn--mnchen-3ya.de'``. Each
    dot-, colon- or slash-separated run holding a non-ASCII character is encoded with Python's ``idna`` codec
    (IDNA 2003); when one will not encode, the hint gives the example ``xn--mnchen-3ya.de`` instead."""
    if item.isascii():
        return ""
    try:
        spelt = _NON_ASCII_LABEL.sub(lambda m: m.group(0).encode("idna").decode("ascii") if not m.group(0).isascii()
                                     else m.group(0), item)
    except UnicodeError:
        return "; a non-ASCII name is written in punycode (IDNA), e.g. xn--mnchen-3ya.de for münchen.de"
    return f"; a non-ASCII name is written in punycode (IDNA): {spelt}"


_NON_ASCII_LABEL = re.compile(r"[^\s.:/\[\]@*,]+")


def allowed_hosts(raw: str) -> str | None:
    """``ZSNLI_ALLOWED_HOSTS`` checked and normalised: comma-separated host names (``zsnli.example.com``), IP
    addresses, ``.example.com`` (or ``*.example.com``) for a domain and every name under it, or ``*`` for any
    host; no ports. Returns the items in lower case without trailing dots, joined by ``,`` (None for an empty
    value: the default rule of `zsnli.serving.origin_check.host_allowed`). Raises ``ValueError`` (one line)
    for an item that is none of these (a non-ASCII name: how it is written in punycode, `punycode_hint`), and for
    a domain that is a public suffix (`public_suffix`: ``.com``, ``.co.uk``, ``*.github.io``, which would allow
    every host anyone registers under it)."""
    items = []
    for item in (part.strip().lower() for part in raw.split(",")):
        if not item:
            continue
        domain = item[1:] if item.startswith(".") else item[2:] if item.startswith("*.") else None
        name = (domain if domain is not None else item).rstrip(".") if item != "*" else "*"
        name = name[1:-1] if name.startswith("[") and name.endswith("]") else name
        found = split_host(f"[{name}]" if ":" in name else name) if name != "*" else ("*", None)
        if domain is not None and found is not None and not ip_literal(found[0]) and public_suffix(found[0]):
            raise ValueError(f"ZSNLI_ALLOWED_HOSTS: {item!r} is a public suffix (Public Suffix List), so it would "
                             f"allow every name anyone registers under it; list the names or a domain of your own "
                             f"(.example.co.uk); got {item!r} in {raw!r}")
        if found is None or found[1] is not None or (domain is not None and ip_literal(found[0])):
            raise ValueError(f"ZSNLI_ALLOWED_HOSTS must be a comma-separated list of host names or IP addresses "
                             f"without a port (.example.com for a domain and the names under it, * for any); got "
                             f"{item!r} in {raw!r}{punycode_hint(item)}")
        items.append("." + found[0] if domain is not None else found[0])
    return ",".join(dict.fromkeys(items)) or None


def allowed_origins(raw: str) -> str | None:
    """``ZSNLI_ALLOWED_ORIGINS`` checked and normalised: comma-separated origins ``scheme://host[:port]`` (RFC
    6454; ``https://app.example.com``, ``http://localhost:3000``), or ``*`` for any page on the web. Returns them
    spelt as `origin_text` (lower case, default ports left out), joined by ``,`` (None for an empty value: only
    the server's own pages). Raises ``ValueError`` (one line) for an item that is no origin, ``null`` included
    (the opaque origin of sandboxed frames and ``file://`` pages, which any page can take on), one whose scheme is
    not ``http``/``https`` or whose port is 0 (a non-ASCII host: `punycode_hint`), and for a value of commas only."""
    items = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        origin = None if item.lower() == "null" else ("*" if item == "*" else parse_origin(item))
        if origin != "*" and origin is not None and (origin[0] not in ("http", "https") or origin[2] == 0):
            origin = None  # a page a browser serves is http(s) on a port 1-65535
        if origin is None:
            why = " (null is the origin any sandboxed page can take on)" if item.lower() == "null" else ""
            raise ValueError(f"ZSNLI_ALLOWED_ORIGINS must be a comma-separated list of origins such as "
                             f"https://app.example.com or http://localhost:3000 (scheme, host and port; no path), or "
                             f"*{why}; got {item!r} in {raw!r}{punycode_hint(item)}")
        items.append(origin if origin == "*" else origin_text(origin))
    if not items and raw.strip():
        raise ValueError(f"ZSNLI_ALLOWED_ORIGINS must name at least one origin (or be unset), got {raw!r}")
    return ",".join(dict.fromkeys(items)) or None


def public_url(raw: str) -> str:
    """``ZSNLI_PUBLIC_URL`` checked and normalised: an absolute ``http``/``https`` URL with a host, no
    query, fragment or credentials, ending with ``/`` (``https://zsnli.example.com/``). The bake-off pages
    build absolute links (the receipt's URLs, the badge Markdown) from it alone, never from a request's
    ``Host`` header. Raises ``ValueError`` (one line) otherwise."""
    why = None
    try:
        parts = urlsplit(raw.strip())
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        parts, why = None, str(exc)
    if parts is not None:
        if parts.scheme not in ("http", "https") or not parts.hostname:
            why = "needs http:// or https:// and a host"
        elif parts.query or parts.fragment or "@" in parts.netloc:
            why = "no query, fragment or user name allowed"
        elif any(c.isspace() or c in "<>\"'`" for c in raw.strip()):
            why = "no whitespace, quotes or angle brackets allowed"
    if why:
        raise ValueError(f"ZSNLI_PUBLIC_URL must be the absolute http(s) URL readers reach the server at, e.g. "
                         f"https://zsnli.example.com/ ({why}), got {raw!r}")
    text = raw.strip()
    return text if text.endswith("/") else text + "/"


def forwarded_allow_ips(raw: str) -> str | None:
    """``ZSNLI_FORWARDED_ALLOW_IPS`` checked and normalised: the proxies whose ``X-Forwarded-For`` /
    ``X-Forwarded-Proto`` are believed (uvicorn's ``forwarded_allow_ips``), a comma-separated list of IP
    addresses or networks (``10.0.0.0/8``), or ``*`` for any peer (only when nothing but the proxy can reach
    the server). Returns the list joined by ``,`` (None for an empty value: no proxy is trusted, the default).
    Raises ``ValueError`` (one line) for an item that is neither. The headers only ever set the client
    address and scheme uvicorn records; no answer is built from them (no redirects, links from
    ``ZSNLI_PUBLIC_URL`` only)."""
    items = [item.strip() for item in raw.split(",") if item.strip()]
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ValueError(f"ZSNLI_FORWARDED_ALLOW_IPS must be a comma-separated list of proxy IP addresses or "
                             f"networks (e.g. 10.0.0.1,192.168.0.0/16), or *; got {item!r} in {raw!r}") from None
    return ",".join(items) or None
