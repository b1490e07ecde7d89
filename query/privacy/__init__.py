"""Privacy: the one gate every path that returns session text passes.

Classification by markers and detected secrets, and the per-provider policy.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookback.query import lazy_exports

# What a type checker sees (``X as X``: re-exported); at run time each name loads on
# first use (``_EXPORTS``). tests/test_layers.py keeps the two the same.
if TYPE_CHECKING:
    from lookback.query.privacy.policy import Classification as Classification
    from lookback.query.privacy.policy import ClassificationResult as ClassificationResult
    from lookback.query.privacy.policy import PrivacyPolicy as PrivacyPolicy
    from lookback.query.privacy.policy import PrivacySettingsError as PrivacySettingsError
    from lookback.query.privacy.policy import Verdict as Verdict
    from lookback.query.privacy.policy import classify as classify
    from lookback.query.privacy.policy import classify_source as classify_source
    from lookback.query.privacy.policy import classify_spans as classify_spans
    from lookback.query.privacy.policy import excluded_record as excluded_record
    from lookback.query.privacy.policy import granted as granted
    from lookback.query.privacy.policy import without_markers as without_markers

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
