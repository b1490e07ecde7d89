"""Who may ask what: bearer tokens granting projects, and the rule that TCP needs them.

Without ``server.tokens`` the reader listens only on its user's Unix socket
(``lookback.local_reader``), where the peer's uid is checked: any TCP port, loopback
included, is open to every account on the machine. With tokens, every request needs
``Authorization: Bearer <token>``; a token grants a list of projects (folder names or
cwds) or ``"*"``, and the highest privacy classification its answers may hold
(``privacy``; default: what an unnamed remote provider sees). A request's ``provider`` is
the client's claim: it narrows what the grant allows, never widens it.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any

from lookback.application.errors import ApiError
from lookback.errors import UserError
from lookback.index.layout import project_key
from lookback.query.privacy import Classification
from lookback.settings import TokenGrant


@dataclass(frozen=True)
class Grant:
    """What one token may do: read and write ``projects`` (None: all), and receive text
    classified up to ``privacy`` (None: what an unnamed remote provider may see)."""

    projects: frozenset[str] | None
    privacy: Classification | None = None


class Grants:
    """Which bearer token may see which projects (``server.tokens``)."""

    def __init__(self, tokens: Any, namespace: str = "") -> None:
        if tokens in (None, {}):
            tokens = {}
        if not isinstance(tokens, dict):
            raise UserError("server.tokens must map each token to a list of projects or \"*\"")
        self._grants: dict[str, Grant] = {}
        for index, (token, projects) in enumerate(tokens.items()):
            if not isinstance(token, str) or len(token) < 8:
                raise UserError("server.tokens: every token must be a string of 8+ characters")
            if not _sendable(token):
                # An HTTP header is bytes; clients send (and this reader reads) a token as
                # ASCII. One outside it could never be matched: say so now, not with 401s.
                raise UserError(f"server.tokens: token #{index + 1} has a character outside "
                                "printable ASCII (letters, digits, punctuation; no spaces): "
                                "HTTP clients cannot send it in a header. Use e.g. "
                                "`openssl rand -hex 32`.")
            self._grants[token] = _grant(projects, namespace, token_index=index)

    @property
    def required(self) -> bool:
        return bool(self._grants)

    def lookup(self, authorization: str | None) -> Grant:
        """The token's grant; raises 401 when the header names no token."""
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and presented.strip():
            # Headers arrive decoded as latin-1: these are the bytes the client sent.
            presented_bytes = presented.strip().encode("latin-1", "replace")
            for token, projects in self._grants.items():
                if hmac.compare_digest(token.encode("ascii"), presented_bytes):
                    return projects
        raise ApiError(401, "unauthorized", "a valid Authorization: Bearer token is required")


def _sendable(token: str) -> bool:
    """Printable ASCII without spaces: what a bearer token can be in every client."""
    return all("!" <= character <= "~" for character in token)


def _grant(value: Any, namespace: str, token_index: int) -> Grant:
    if not isinstance(value, TokenGrant):
        return Grant(_project_names(value, namespace, token_index))
    privacy = None
    if value.privacy:
        try:
            privacy = Classification.parse(value.privacy)
        except ValueError as error:
            raise UserError(f"server.tokens: token #{token_index + 1}: {error}") from None
    return Grant(_project_names(value.projects, namespace, token_index), privacy)


def _project_names(projects: Any, namespace: str, token_index: int) -> frozenset[str] | None:
    if projects == "*" or (isinstance(projects, list | tuple) and "*" in projects):
        return None
    if not isinstance(projects, list) or not all(isinstance(p, str) for p in projects):
        raise UserError(f"server.tokens: token #{token_index + 1} must grant a list of "
                        "project names or cwds, or \"*\"")
    return frozenset(project_key(p, namespace) if p.startswith(("/", "\\")) else p
                     for p in projects)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, grants: Grants) -> None:
    """Refuse TCP unless tokens protect the service: every local account can reach a TCP
    port, loopback included."""
    if not grants.required:
        raise UserError(
            f"refusing to listen on {host} over TCP without tokens: any account on this "
            "machine (and beyond it, off loopback) could read your history there. Configure "
            "[server.tokens] in the settings file (token = [\"project\", ...] or \"*\") to "
            "serve TCP; without tokens, `lookback serve` listens on your private Unix socket "
            "(leave out --host/--port and server.host) and `lookback mcp` serves on stdio.")
