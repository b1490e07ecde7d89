"""``lookback serve``: the reader as a small HTTP JSON service for agents (the Pi extension).

- ``app``: ``ReaderApp.handle(method, target, authorization, body)`` does everything a
  request needs — routing, auth, JSON parsing, the engine call, caching, the manifest —
  and returns ``(status, payload, log_fields)``, testable without sockets;
- ``transport``: HTTP/1.1 on h11 on the user's Unix socket (peer uid checked) or TCP
  (keep-alive, bounded heads and bodies, one write per answer, no access log);
- ``guard``: the Host/Origin check in front of every request.

Tokens, the answer cache and manifest records are the application's
(``lookback.application``), shared with the MCP tools.

Logs: one JSON line per request on logger ``lookback.server`` with counts and timings
only — never request terms, paths, session files or evidence text.
"""

from lookback.application.auth import Grants, check_binding, is_loopback
from lookback.application.cache import AnswerCache
from lookback.application.errors import ApiError
from lookback.server.app import ReaderApp, encode
from lookback.server.transport import ReaderHTTPServer, make_server, serve_forever, warm_up

__all__ = ["AnswerCache", "ApiError", "Grants", "ReaderApp", "ReaderHTTPServer",
           "check_binding", "encode", "is_loopback", "make_server", "serve_forever", "warm_up"]
