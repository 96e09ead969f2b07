"""Which image URLs the studio lets its servers fetch: not one that carries credentials, and not one whose host is,
or resolves to, an address inside a network (loopback, private, link-local, multicast, reserved, unspecified), so
that a visitor cannot make a server fetch its cloud's metadata, a database on its own machine or an admin page of
its network (server-side request forgery). An operator may allow private addresses (allow_private_image_urls);
operators' own runs are not held to it (they choose the servers, and what those reach).

What the check promises, and what it cannot: it reads the URL as the servers' resolvers would (a host written as
a number in any form they take: 0x7f000001, 2130706433, 127.1, [::ffff:127.0.0.1]) and looks the host's name up
once, as the run is submitted, on the studio's machine; every address it answers must be public. The server
fetches the image later, with its own resolver: a name that answers a public address now and a private one then
(DNS rebinding), a resolver of the server's that answers otherwise than the studio's, or a public address that
redirects to an internal one, gets past it. Only the servers' own network (an egress rule that keeps them from
internal addresses) closes those; this check keeps a visitor from naming an internal address outright.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# A resolver: (host, port) -> the addresses it answers, as text. socket.getaddrinfo's, in a worker with a time limit,
# unless a caller (a test) gives its own.
Resolver = Callable[[str, int | None], Sequence[str]]

RESOLVE_TIMEOUT_S = 3.0
ALLOW_FLAG = "--allow-private-image-urls"
# Lookups run here, each given RESOLVE_TIMEOUT_S: getaddrinfo takes no time limit of its own, and one that hangs
# holds its worker, not the caller.
_LOOKUPS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="image-url-lookup")
# NAT64's well-known prefix: the last 32 bits are an IPv4 address that a NAT64 gateway reaches.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def system_resolve(host: str, port: int | None) -> list[str]:
    """The addresses the studio's machine resolves `host` to; TimeoutError after RESOLVE_TIMEOUT_S."""
    lookup = _LOOKUPS.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in lookup.result(timeout=RESOLVE_TIMEOUT_S)]


def _ipv4_number(host: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address written as resolvers read it (inet_aton's forms): one to four parts split by dots, each
    decimal, octal (a leading 0) or hexadecimal (0x), the last one filling the bytes left (127.1, 2130706433,
    0x7f000001, 0177.0.0.1). None where `host` is no such number."""
    parts = host.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    numbers = []
    for part in parts:
        try:
            if part.lower().startswith("0x"):
                numbers.append(int(part[2:] or "0", 16))
            elif len(part) > 1 and part.startswith("0"):
                numbers.append(int(part, 8))
            else:
                numbers.append(int(part, 10))
        except ValueError:
            return None
    *leading, last = numbers
    if any(n > 0xFF for n in leading) or last >= 1 << (8 * (5 - len(numbers))):
        return None
    value = last
    for index, number in enumerate(leading):
        value |= number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def literal_address(host: str) -> IpAddress | None:
    """The address a host written as a number stands for (IPv6, with a zone too; IPv4 in any form resolvers take);
    None for a name."""
    host = host.strip("[]").rstrip(".")
    if not host:
        return None
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if not all(ch.isdigit() or ch in ".xXabcdefABCDEF" for ch in host) or not host[0].isdigit():
        return None  # a name (a number starts with a digit)
    return _ipv4_number(host)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches: IPv4-mapped (::ffff:a.b.c.d), 6to4, NAT64."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def inside_kind(address: IpAddress) -> str | None:
    """What kind of address inside a network `address` is ("loopback", "private", ...); None for a public one."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return inside_kind(embedded)
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("non-public", not address.is_global),  # e.g. shared address space (100.64.0.0/10)
    )
    return next((kind for kind, found in checks if found), None)


def shape_problem(url: str) -> str | None:
    """What is wrong with an http(s) URL's parts, without looking anything up: credentials, no host, a port that is
    none. None where they are fine."""
    parts = urlsplit(url)
    if "@" in parts.netloc:
        return (
            "must not carry a user name or password (user:pass@host): give the address of an image the server can "
            "fetch without them"
        )
    if not parts.hostname:
        return f"names no host, got {url[:80]!r}"
    try:
        _ = parts.port  # urlsplit reads the port only when asked
    except ValueError:
        return f"has a port that is no number from 0 to 65535, got {url[:80]!r}"
    return None


def _refused(kind: str, address: IpAddress, host: str) -> str:
    named = str(address) if host.strip("[]") == str(address) else f"{host}, at {address}"
    article = "an" if kind[0] in "aeiou" else "a"
    return (
        f"points at {article} {kind} address ({named}), inside the servers' network: give the public http(s) address of "
        f"the image (an operator may allow such addresses with {ALLOW_FLAG})"
    )


def image_url_refusal(url: str, allow_private: bool = False, resolve: Resolver | None = None) -> str | None:
    """Why the servers may not fetch the image at `url` (in words that follow the field's name: "image URL ..."),
    or None. Sends nothing: it reads the URL and, for a name, asks `resolve` (the system's resolver, within
    RESOLVE_TIMEOUT_S) for its addresses; every one must be public unless `allow_private`. Blocks while it
    resolves: call it off an event loop (asyncio.to_thread)."""
    problem = shape_problem(url)
    if problem is not None or allow_private:
        return problem
    parts = urlsplit(url)
    host = parts.hostname or ""
    literal = literal_address(host)
    if literal is not None:
        addresses: list[IpAddress] = [literal]
    else:
        try:
            answered = (resolve or system_resolve)(host, parts.port)
            addresses = [ipaddress.ip_address(str(text).split("%")[0]) for text in answered]
        except TimeoutError:
            return f"names the host {host!r}, which did not resolve within {RESOLVE_TIMEOUT_S:g} s: try again"
        except (OSError, UnicodeError, ValueError):
            addresses = []
        if not addresses:
            return f"names the host {host!r}, which does not resolve: check the address"
    for address in addresses:
        kind = inside_kind(address)
        if kind is not None:
            return _refused(kind, address, host)
    return None
