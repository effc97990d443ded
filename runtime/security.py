"""``Security``: TLS and a shared token for clusters whose tasks span hosts.

By default the servers bind loopback and speak plaintext gRPC: nothing outside the host
can reach them (SECURITY.md at the repository's root says what they trust). A cluster
across hosts gives every server and client the same :class:`Security`:

- ``cert_chain`` and ``private_key`` (PEM): the server's TLS certificate and key; its
  clients and peers verify it against ``root_certificates`` (PEM: the CA, or the
  self-signed certificate itself). With them every channel is TLS.
- ``token``: a shared secret every gRPC call carries (``x-plab-token`` metadata) and
  every server checks before the call's handler runs
  (:class:`runtime.call_guard.CallGuard`; ``UNAUTHENTICATED`` otherwise). Over
  plaintext it keeps out whoever lacks it but can be read on the network: use it with
  TLS across hosts.
- ``server_name``: the name to check in the server's certificate when the address
  dialled is not in it (gRPC's ``ssl_target_name_override``; tests, IP addresses).

The local transports (Unix sockets, shared memory) take only processes of the server's
own user, with or without these; ``Server(local_sockets=False)`` turns them off.

>>> s = Security(token="s3cret")
>>> s.tls, s.token
(False, 's3cret')
>>> Security(cert_chain=b"-----BEGIN CERTIFICATE-----")
Traceback (most recent call last):
...
ValueError: TLS needs cert_chain and private_key together (the server's certificate and key)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import grpc

__all__ = ["Security", "secure_channel"]


@dataclass(frozen=True)
class Security:
    """TLS material and a shared token (see the module docstring); all optional."""

    token: str | None = None
    cert_chain: bytes | None = None
    private_key: bytes | None = None
    root_certificates: bytes | None = None
    server_name: str | None = None

    def __post_init__(self):
        if (self.cert_chain is None) != (self.private_key is None):
            raise ValueError("TLS needs cert_chain and private_key together (the server's "
                             "certificate and key)")
        if self.token is not None and (not isinstance(self.token, str) or not self.token
                                       or self.token != self.token.strip()):
            raise ValueError("the token must be a non-empty string without surrounding "
                             "whitespace")

    @classmethod
    def from_files(cls, *, token_file: "str | os.PathLike | None" = None,
                   cert: "str | os.PathLike | None" = None,
                   key: "str | os.PathLike | None" = None,
                   ca: "str | os.PathLike | None" = None,
                   server_name: str | None = None) -> "Security":
        """Read the token (its file's text, stripped) and the PEM files; ``ca``
        defaults to ``cert`` (a self-signed certificate is its own CA)."""
        read = lambda p: None if p is None else Path(p).read_bytes()  # noqa: E731
        token = Path(token_file).read_text().strip() if token_file is not None else None
        return cls(token=token, cert_chain=read(cert), private_key=read(key),
                   root_certificates=read(ca if ca is not None else cert),
                   server_name=server_name)

    @property
    def tls(self) -> bool:
        """True when channels and servers speak TLS."""
        return self.cert_chain is not None or self.root_certificates is not None

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """The server's TLS credentials, or None (plaintext)."""
        if self.cert_chain is None:
            return None
        return grpc.ssl_server_credentials([(self.private_key, self.cert_chain)])

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """A client's TLS credentials (verifying the server against
        ``root_certificates``), or None (plaintext)."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(root_certificates=self.root_certificates)


def secure_channel(address: str, options: Sequence[tuple[str, Any]],
                   security: Security | None) -> grpc.Channel:
    """A channel to ``address`` with ``options``: TLS when ``security`` has it, and
    every call carrying its token when it has one; plaintext without either."""
    options = list(options)
    credentials = security.channel_credentials() if security is not None else None
    if credentials is not None:
        if security.server_name:
            options.append(("grpc.ssl_target_name_override", security.server_name))
        channel = grpc.secure_channel(address, credentials, options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    if security is not None and security.token is not None:
        from runtime.call_guard import token_interceptor
        channel = grpc.intercept_channel(channel, token_interceptor(security.token))
    return channel
