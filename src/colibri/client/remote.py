"""A daemon over TCP (``Remote``): its addresses, token and CA; where a ``not_owner`` refusal
sends a client (``toward``), and the TLS failures said as what to do about them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from colibri.core.errors import ConfigError, NotOwner, TlsFailed
from colibri.endpoints import TcpAddress, parse_connect

if TYPE_CHECKING:
    import ssl

#: How long one TCP address is given to accept and finish the TLS handshake.
CONNECT_TIMEOUT = 10.0
#: How many ``not_owner`` answers a client follows before it gives up (daemons whose view of
#: who serves what is a moment behind may point at each other while a lease changes hands).
MAX_HOPS = 3


@dataclass(frozen=True, slots=True)
class Remote:
    """A daemon over TCP: its addresses (tried in turn), the token to act with, and the CA
    that signed its certificate (None: the system's trust store)."""

    addresses: tuple[TcpAddress, ...]
    token: str = field(repr=False)  # a secret: never in a repr, a log line or a traceback
    ca: str | None = None
    #: Plain TCP, without TLS: only to a loopback daemon run with ``--insecure-loopback``.
    insecure_loopback: bool = False

    @classmethod
    def parse(
        cls, connect: str, *, token: str, ca: str | None = None, insecure_loopback: bool = False
    ) -> Remote:
        addresses = tuple(parse_connect(connect))
        if insecure_loopback:
            exposed = [str(a) for a in addresses if not a.loopback]
            if exposed:
                raise ConfigError(
                    f"--insecure-loopback is for loopback addresses only, not {', '.join(exposed)}"
                )
        return cls(addresses, token, ca, insecure_loopback)

    def __str__(self) -> str:
        return ",".join(str(a) for a in self.addresses)

    def context(self) -> ssl.SSLContext | None:
        if self.insecure_loopback:
            return None
        from colibri.endpoints import client_context

        return client_context(self.ca)

    def past(self, address: str) -> Remote:
        """The same daemons, those after ``address`` (one that was just lost) tried first and
        it last: the next one given is where a board taken over is served from."""
        lost = [a for a in self.addresses if str(a) == address]
        if not lost:
            return self
        at = self.addresses.index(lost[0])
        order = (*self.addresses[at + 1 :], *self.addresses[:at], lost[0])
        return Remote(order, self.token, self.ca, self.insecure_loopback)

    def toward(self, refusal: NotOwner, hops: int) -> Remote | None:
        """Where to go at once after ``not_owner``: the address it names, then these again.
        None when it names none, or the hops are used up (the daemon named does not answer,
        or two daemons each point at the other): a takeover, to be waited out (``Takeover``).
        The refusal itself when its address is not one this remote may reach."""
        if refusal.address is None or hops >= MAX_HOPS:
            return None
        try:
            (owner,) = parse_connect(refusal.address)
        except (ConfigError, ValueError):
            raise refusal from None
        if self.insecure_loopback and not owner.loopback:
            raise refusal  # plain text goes to loopback only, whoever says otherwise
        if owner.unspecified:
            raise refusal  # a daemon listening on every interface: no host to go to
        rest = tuple(a for a in self.addresses if a != owner)
        return Remote((owner, *rest), self.token, self.ca, self.insecure_loopback)


def closed_early(exc: BaseException) -> bool:
    """Whether the daemon closed the connection before the TLS handshake was done (it turns
    away a throttled address so, and peers past its limit of handshakes)."""
    import ssl

    return isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError)) or (
        isinstance(exc, ssl.SSLError) and "EOF" in str(exc)
    )


def handshake_timed_out(seconds: float | None) -> str:
    return (
        f"connected, but the TLS handshake was not done within {seconds or CONNECT_TIMEOUT:g}s: "
        "the daemon or the network is slow (not a certificate problem); try again"
    )


def tls_failed(address: TcpAddress, exc: Exception) -> TlsFailed:
    if closed_early(exc):
        return TlsFailed(
            f"the daemon at {address} closed the connection before TLS was set up: it refuses "
            "this address for now (too many failed logins: wait a minute and check the token), "
            "or too many peers are connecting"
        )
    return TlsFailed(
        f"TLS with {address} failed: {getattr(exc, 'verify_message', None) or exc}; check "
        "--tls-ca (the CA that signed the daemon's certificate) and that the host name is one "
        "the certificate names"
    )
