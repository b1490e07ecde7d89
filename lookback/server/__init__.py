"""``lookback serve``: the reader as a small HTTP JSON service for agents (the Pi extension).

- ``app``: ``ReaderApp.handle(method, target, authorization, body)`` does everything a
  request needs — routing, auth, JSON parsing, the engine call, caching, the manifest —
  and returns ``(status, payload, log_fields)``, testable without sockets;
- ``transport``: HTTP/1.1 on h11 on the user's Unix socket (peer uid checked) or TCP
  (keep-alive, bounded heads and bodies, one write per answer, no access log);
- ``auth``: bearer tokens and their project grants, the rule that TCP needs them;
- ``cache``: the answer cache keyed by request and index watermark;
- ``records``: manifest records written off the request path.

Logs: one JSON line per request on logger ``lookback.server`` with counts and timings
only — never request terms, paths, session files or evidence text.
"""

from lookback.server.app import ReaderApp, encode
from lookback.server.auth import Grants, check_binding, is_loopback
from lookback.server.cache import AnswerCache
from lookback.server.errors import ApiError
from lookback.server.transport import ReaderHTTPServer, make_server, serve_forever, warm_up

__all__ = ["AnswerCache", "ApiError", "Grants", "ReaderApp", "ReaderHTTPServer",
           "check_binding", "encode", "is_loopback", "make_server", "serve_forever", "warm_up"]
