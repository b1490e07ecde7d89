"""The application: what a reader process answers and who keeps its indexes fresh,
whichever face asks (the HTTP reader ``lookback.server``, the MCP tools, the CLI).

- ``auth``: bearer tokens and their project grants, the rule that TCP needs them;
- ``errors``: the error answer with an HTTP status (``ApiError``) and the one 403;
- ``cache``: the answer cache keyed by request and index watermark;
- ``records``: manifest records written off the request path;
- ``nudges``: service-mode nudges published off the request path.
"""
