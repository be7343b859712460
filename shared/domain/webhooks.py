"""Which webhook URLs spotline may POST a job's events to.

The URL comes from a job's spec, so it is user input that spotline's own
function requests: without these rules anyone who can submit could make it
call the metadata server (and read the function's access token) or services on
the project's private network (server-side request forgery). So:

* ``https://`` only; ``http://`` only to an address in the allowed networks
  (the ``webhook_allowed_networks`` setting: locally, ``127.0.0.0/8``);
* no user name or password in the URL (the spec is readable in the console);
* never the metadata server, by name or by address, allowed networks or not;
* every address the host resolves to must be public (``is_global``), or in
  the allowed networks: a private, loopback, link-local or reserved address
  is refused;
* an IPv6 address that carries an IPv4 one (IPv4-mapped ``::ffff:0:0/96``,
  IPv4-compatible ``::/96``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``,
  6to4 ``2002::/16``, Teredo ``2001::/32``) is judged by that IPv4 address
  too: Python's ``is_global`` calls ``64:ff9b::a00:1`` (10.0.0.1 through a
  NAT64 gateway) and ``2002:a9fe:a9fe::`` (the metadata server through 6to4)
  global.

Pure: the caller resolves the host and passes the addresses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from urllib.parse import urlsplit

MAX_URL_CHARS = 2048
# The metadata server's names and addresses (GCE: 169.254.169.254, fd00:ec2::254).
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "metadata.goog"})
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)

# Every address (for a check of the URL alone, before a deployment's rules).
ANY_NETWORK = ("0.0.0.0/0", "::/0")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def url_problem(url: str, allowed_networks: Sequence[str] = ()) -> str | None:
    """Why ``url`` may not be a webhook, in a sentence; None: it may (once its
    addresses pass ``address_problem``)."""
    if len(url) > MAX_URL_CHARS:
        return f"webhook_url: longer than {MAX_URL_CHARS} characters"
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018  (a bad port raises here)
    except ValueError as err:
        return f"webhook_url: {url!r} is not a URL ({err})"
    if parts.scheme not in ("https", "http"):
        return f"webhook_url: {url!r} must start with https://"
    if parts.scheme == "http" and not allowed_networks:
        return (
            f"webhook_url: {url!r} is plain http; only https is allowed "
            "(http only to the networks of the webhook_allowed_networks setting)"
        )
    if not host:
        return f"webhook_url: {url!r} names no host"
    if parts.username is not None or parts.password is not None:
        return "webhook_url: a user name or password in the URL would be stored in the job"
    if host.rstrip(".").lower() in METADATA_HOSTS:
        return f"webhook_url: {host} is the metadata server"
    literal = _address(host)
    if literal is not None:
        return address_problem(literal, allowed_networks, plain_http=parts.scheme == "http")
    return None


def address_problem(
    address: Address | str, allowed_networks: Sequence[str] = (), *, plain_http: bool = False
) -> str | None:
    """Why spotline may not connect to ``address`` for a webhook; None: it may.

    ``plain_http``: the URL is http://, which only an allowed network may take.
    """
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.0.0.1 is 10.0.0.1
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in embedded_ipv4(ip):
            problem = address_problem(inner, allowed_networks, plain_http=plain_http)
            if problem:
                return f"{problem}; {ip} carries it"
    if ip in METADATA_ADDRESSES:
        return f"webhook_url: {ip} is the metadata server"
    allowed = any(ip in ipaddress.ip_network(net, strict=False) for net in allowed_networks)
    if plain_http and not allowed:
        return f"webhook_url: plain http to {ip}, which is not in webhook_allowed_networks"
    if not allowed and not ip.is_global:
        return (
            f"webhook_url: {ip} is a private, loopback, link-local or reserved address "
            "(allow its network with the webhook_allowed_networks setting)"
        )
    return None


_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 transition form carries (none for others).

    NAT64's local-use prefix (RFC 8215) may embed at any RFC 6052 length: its
    last 32 bits are taken (the /96 form), and the prefix itself is never
    global. A Teredo address carries its server's and its client's.
    """
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _COMPATIBLE and int(ip) > 1:  # not :: nor ::1, which are their own
        return [low32]
    if ip in _NAT64 or ip in _NAT64_LOCAL:
        return [low32]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)
    return []


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
