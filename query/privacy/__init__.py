"""Privacy: the one gate every path that returns session text passes.

Classification by markers and detected secrets, and the per-provider policy.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "Classification": "policy",
    "ClassificationResult": "policy",
    "PrivacyPolicy": "policy",
    "PrivacySettingsError": "policy",
    "Verdict": "policy",
    "classify": "policy",
    "classify_spans": "policy",
    "classify_source": "policy",
    "excluded_record": "policy",
    "granted": "policy",
    "without_markers": "policy",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
