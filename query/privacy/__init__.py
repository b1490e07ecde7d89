"""Privacy: the one gate every path that returns session text passes.

Classification by markers and detected secrets, and the per-provider policy.

The public API is ``_EXPORTS`` below: what other packages may use (tests/test_layers.py
checks it); everything else is this package's own. Each name is imported on first
use, so importing one module of the package stays cheap.
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "Classification": "policy",
    "PrivacyPolicy": "policy",
    "PrivacySettingsError": "policy",
    "classify": "policy",
    "classify_spans": "policy",
    "classify_source": "policy",
    "excluded_record": "policy",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
