"""Finding credentials in text, fast enough to run on every evidence excerpt.

The patterns come from ``detect-secrets`` (Yelp), a well-kept detector library: each
of its regex plugins carries a ``denylist`` of compiled patterns. Its own scanner is
too slow for the query path (about 18 ms for a 2 KB excerpt, mostly entropy plugins
and per-line bookkeeping), so this module runs the plugins' regexes directly, behind
a two-level ``Gate`` per detector:

- ``anchors``: literals (lowercase) every match contains; when none occurs in the
  text the detector's regexes are not run at all. Most excerpts contain no anchor of
  most detectors. One Aho-Corasick pass (``pyahocorasick``, C) finds every anchor a
  text holds: a substring scan per anchor (about 70) was half the cost of a text;
- ``window``: for patterns that are costly per position (IBM/Cloudant/SoftLayer
  keyword forms, Telegram, Discord), a cheap regex for the part every match
  contains; the pattern is then searched only near its matches, in windows that keep
  a 1 MB text linear;
- ``window_starts``: the literals every ``window`` match starts with. The window
  pattern is then tried only where one of them occurs (the anchor automaton gives
  their offsets) instead of at every position: the same matches, found without a
  regex pass over the whole text;
- ``token_run`` / ``alnum_run``: the length of the run of token characters
  (``[A-Za-z0-9_-]``) or of letters and digits every match contains (IBM's 44-character
  key, Cloudant's 24 letters…). Their anchors (``key``, ``token``, ``ac``, ``:``) occur
  in most texts, but such runs are rare in prose and code, and finding whether one
  exists costs two C-speed byte passes (``bytes.translate``, then a substring test),
  against ~0.25 ms per 2 KB for these detectors' regexes and windows. Every non-ASCII
  character counts as a run character (Unicode digits, word characters and case-folded
  letters match beyond ASCII), so the test only ever lets more texts through, never
  fewer;
- ``anchored``: for patterns that start where their ``window`` pattern does (the
  credential-name assignments, headers, commands), the pattern is tried only at the
  window's matches (``match``, bounded by the window's end), not searched through the
  window: the same findings, without running a case-insensitive alternation at every
  position of a text dense with ``key =``.

Patterns run over the whole text with ``re.MULTILINE`` (their ``^``/``$`` mean line
start/end, as in detect-secrets' line scanner). Not used: the entropy plugins and the
keyword plugin (they flag hashes, UUIDs and ordinary code), the public-IP plugin (not
a secret), Artifactory's pattern (it matches plain capitalised words such as
``APACHEKAFKA``) and the JWT pattern, replaced by a boundary-anchored one because it
backtracks quadratically on long base64 runs (minutes for 1 MB of ``eyJeyJ…``).

``EXTRA_PATTERNS`` covers what detect-secrets 1.5 misses, after gitleaks' rule list
(config/gitleaks.toml, read as a catalogue of facts): current OpenAI/Anthropic ``sk-…``
keys, GitHub fine-grained tokens, Google API keys, JWTs (after ``=`` too), PEM headers
such as ``ENCRYPTED PRIVATE KEY``, unquoted AWS secret keys, prefixed tokens
(``TOKEN_FORMATS``: Hugging Face, npm, Google OAuth ``ya29.``, Stripe test keys…),
credential-name assignments in env, shell, code, YAML and JSON form (``_ENV_NAME``,
``_CODE_NAME``: ``PGPASSWORD=…``, ``STRIPE_API_KEY=…``, ``SECRET_KEY = '…'``),
``--password``/``--token`` flags, ``Authorization: Bearer``/``Basic`` and API-key
headers, commands that take a password (``COMMAND_PATTERNS``: ``mysql -p…``, ``docker
login -p``, ``redis-cli -a``, ``aws configure set``, ``curl -u``, ``.netrc``) and
password-only URLs (``redis://:password@host``). What is a value and what is a
reference depends on the syntax: the shell never evaluates ``a.b.c``, code does
(``_SHELL_LITERAL``, ``_CODE_LITERAL``, ``_QUOTED_LITERAL``).

Issue 29 added, with their sources (``TOKEN_FORMATS``, ``KEYWORD_VALUES``,
``detector_sources``; the gitleaks rules taken are vendored in tests/secret_rules/ and
tests/test_secret_sources.py holds the two in agreement): Vault, Doppler, New Relic,
Pulumi, Supabase, Alibaba, Tencent, Mailgun, Stripe webhook, Okta, Groq, xAI, Perplexity,
Tailscale, 1Password, Terraform Cloud and Azure SAS shapes; a private key's body without
its BEGIN line (``_KEY_BODY_STARTS``); JWTs wrapped over lines; values of low entropy
caught by their shape (``sk-secret123456``, ``ghp_`` and 20 characters, any opaque token
after ``Authorization: Bearer``, quoted words joined that name no placeholder). And
``find_secrets`` decodes base64 and percent-encoded runs once and searches them too
(``_encoded_runs``: found with byte passes, so the cost stays linear).

Findings carry the detector name and offsets only: the secret text is never copied out.
"""

from __future__ import annotations

import base64
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import unquote

import ahocorasick

#: Window searched on each side of a ``Gate.window`` match. A windowed pattern is found
#: when its match lies within one window of that match (the longest windowed match,
#: Cloudant's keyword form with a 64-character key, is under 100 characters).
TRIGGER_WINDOW = 256
#: Longest merged window (see ``_trigger_windows``).
MAX_WINDOW = 4096

#: Detector type of a private key; callers classify it above other secrets.
PRIVATE_KEY = "Private Key"


@dataclass(frozen=True)
class Gate:
    """When a detector's regexes are worth running (see the module docstring)."""

    anchors: tuple[str, ...]
    window: str | None = None
    token_run: int = 0
    alnum_run: int = 0
    window_starts: tuple[str, ...] = ()
    anchored: bool = False


_KEYWORDS = ("key", "pwd", "pw", "pass", "token")
_KEYWORD = r"(?:key|pwd|pw|pass|password|token)"

#: Gates of the detect-secrets plugins used, by their ``secret_type``.
GATES: dict[str, Gate] = {
    "AWS Access Key": Gate(("akia", "asia", "abia", "acca", "a3t", "aws")),
    "Azure Storage Account access key": Gate(("accountkey=",)),
    "Basic Auth Credentials": Gate(("://",)),
    "Cloudant Credentials": Gate(
        ("cloudant", *_KEYWORDS),
        rf"cl(?:ou(?:dant)?)?[_-]?(?:api)?{_KEYWORD}|cloudant\.com",
        alnum_run=24,  # [0-9a-f]{64} or [a-z]{24}, case-insensitive
    ),
    "Discord Bot Token": Gate((".",), r"\.[a-z0-9_-]{6}\.[a-z0-9_-]{27}", token_run=27),
    "GitHub Token": Gate(("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    "GitLab Token": Gate(
        ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "gr1348941", "glcbt-", "glimt-")
        + ("glptt-", "glagent-", "gloas-")
    ),
    "IBM Cloud IAM Key": Gate(
        _KEYWORDS,
        rf"{_KEYWORD}[\"'\]]* *(?:[=:]| )",
        token_run=44,
        window_starts=("key", "pw", "pass", "token"),
    ),
    "IBM COS HMAC Credentials": Gate(
        ("secret",), r"secret[-_]?(?:access)?[-_]?key", alnum_run=48
    ),
    "Mailchimp Access Key": Gate(("-us",), alnum_run=32),
    "NPM tokens": Gate(("_authtoken",), r"_authtoken="),
    "OpenAI Token": Gate(("t3blbkfj",), r"t3blbkfj"),
    "Private Key": Gate(("private key", "putty-user-key-file")),
    "PyPI Token": Gate(("pypi-ag",)),
    "SendGrid API Key": Gate(("sg.",)),
    "Slack Token": Gate(("xox", "hooks.slack.com")),
    "SoftLayer Credentials": Gate(
        ("softlayer", *_KEYWORDS),
        rf"s(?:l|oftlayer)[_-]?(?:api)?[_-]?{_KEYWORD}|api\.softlayer\.com",
        alnum_run=64,
    ),
    "Square OAuth Secret": Gate(("sq0csp-",)),
    "Stripe Access Key": Gate(("sk_live_", "rk_live_")),
    "Telegram Bot Token": Gate((":",), r"[0-9]:[a-z0-9_-]{35}", token_run=35),
    "Twilio API Key": Gate(("ac", "sk"), r"(?:ac|sk)[a-z0-9]{32}", alnum_run=34),
}

#: Where an assigned value ends: whitespace, a closing quote or bracket, a separator.
_VALUE_END = r"(?=[\s\"'`,;})\]]|$)"
#: Where a command-line word ends.
_WORD_END = r"(?=[\s\"'`;|&)]|$)"

# What a value is NOT, whatever the syntax (each a lookahead over the value's start;
# gitleaks' global allowlist and detect-secrets' keyword plugin exclude the same):
#: a number, a run of one placeholder character (``xxxxxx``, ``******``), ``true``…
_NOT_FILLER = (
    r"(?!\d+(?:[\"'`]|" + _VALUE_END + "))"
    r"(?!(?:x+|X+|\*+|\.+|#+|-+|_+|0+)(?:[\"'`]|" + _VALUE_END + "))"
    r"(?!(?i:true|false|none|null|nil|undefined)(?:[\"'`]|" + _VALUE_END + "))"
)
#: Words that make lowercase words joined a placeholder (``your-api-key-here``), where
#: without one they are a value (``"super-secret-value"``).
_PLACEHOLDER_WORDS = (
    "your", "here", "example", "placeholder", "dummy", "fake", "sample", "changeme",
    "change", "replace", "redacted", "insert", "enter", "goes", "todo", "foo", "bar", "not",
    "unset",
)
#: a placeholder: ``YOUR_API_KEY``, ``TOKEN`` (capitals), ``your-api-key`` (lowercase
#: words joined, one of them a placeholder word), an elided value (``sk-ant-...``), a
#: path (``/home/me``, ``~/.netrc``, ``./key``: ``PWD=/home/me``).
_NOT_PLACEHOLDER = (
    r"(?![^\s\"'`]{0,80}?(?:\.\.\.|\u2026))"
    r"(?![A-Z]+(?:_[A-Z]+)*(?:[\"'`]|" + _VALUE_END + "))"
    r"(?!(?=[a-z]+(?:[-_][a-z]+)+(?:[\"'`]|" + _VALUE_END + "))[a-z_-]{0,80}?(?<![a-z])(?:"
    + "|".join(_PLACEHOLDER_WORDS) + r")(?![a-z]))"
    r"(?!(?:~?/|\.{1,2}/))"
)
#: lowercase words joined, in code or YAML unquoted: a name (``mode: read-write``).
_NOT_WORDS = r"(?![a-z]+(?:[-_][a-z]+)+" + _VALUE_END + ")"
#: a type name in a declaration (``password: string``, ``secret: Optional[str]``).
_NOT_TYPE = (
    r"(?!(?i:string|number|boolean|bool|str|bytes|optional|required|secretstr)"
    r"(?:[\"'`]|(?![\w.-])))"
)
#: A quoted literal of 6+ characters: what is between the quotes is the value, whatever
#: it holds, unless it is a template or reference (``"${X}"``, ``"{{ x }}"``, ``"<x>"``,
#: ``"%(x)s"``) or one of the above. No whitespace: quoted prose is not a credential.
_QUOTED_LITERAL = (
    r"(?P<quote>[\"'`])(?![$<{%])" + _NOT_FILLER + _NOT_PLACEHOLDER + _NOT_TYPE
    + r"[^\s\"'`]{6,}(?P=quote)"
)
#: An unquoted literal of 6+ characters in shell or env syntax (``NAME=value``,
#: ``--flag=value``): the shell never evaluates ``a.b.c`` or ``my_value``, so only
#: ``$`` expansions, templates and the above are not literals.
_SHELL_LITERAL = (
    r"(?![$<{%])" + _NOT_FILLER + _NOT_PLACEHOLDER
    + r"[^\s\"'`$<>{}()\[\],;]{6,}" + _VALUE_END
)
#: An unquoted literal of 6+ characters in code or YAML (``password = value``,
#: ``secret: value``). Not one, besides the above: references — a dotted name whose
#: first part has no digit (``process.env.X``, ``self.password``; ``abc123.def456`` is
#: a value), a call or subscript (cut by the character class), a snake_case or
#: camelCase name (``token = next_token``, ``key = apiKey``).
_CODE_LITERAL = (
    _NOT_FILLER + _NOT_PLACEHOLDER + _NOT_WORDS + _NOT_TYPE
    + r"(?![A-Za-z_$][A-Za-z_$]*(?:\.[A-Za-z_$][\w$]*)+" + _VALUE_END + ")"
    r"(?![a-z][a-z0-9]*(?:_[a-z0-9]+)+" + _VALUE_END + ")"
    r"(?![a-z]+(?:[A-Z][a-z]*)*" + _VALUE_END + ")"
    r"[^\s\"'`$<>{}()\[\],;]{6,}" + _VALUE_END
)
#: A value on a command line that only ever holds a credential (``-p<pw>`` of mysql,
#: ``redis-cli -a <pw>``): 3+ characters, quoted or not, not an expansion.
_COMMAND_VALUE = (
    r"(?:\"(?![$<{%])[^\"\n]{3,}\"|'(?![$<{%])[^'\n]{3,}'"
    r"|(?![$<{%\"'])[^\s\"'`$<>;|&]{3,}" + _WORD_END + ")"
)
#: An opaque token (a bearer token, an API key in a header): 16+ token characters with
#: a digit (prose and placeholders such as ``YOUR_TOKEN`` have none).
_OPAQUE_TOKEN = r"(?![$<{%])(?=[\w.~+/=-]{0,300}\d)[\w.~+/-]{16,}=*"

#: Names that hold a credential (detect-secrets' keyword list, gitleaks' generic-api-key
#: keywords), as the last part of a variable or key name after any prefix
#: (``PGPASSWORD``, ``clientSecret``) …
_SECRET_NAME_ENDS = ("password", "passwd", "passphrase", "secret", "token")
#: … short ones only as a whole ``_``-separated part (``DB_PASS``, not ``bypass``) …
_SECRET_NAME_PARTS = ("pass", "pwd", "pw")
#: … and ``key`` only after one of these (``STRIPE_API_KEY``, ``secretKey``; not
#: ``sort_key``, ``primary_key``).
_SECRET_KEY_PREFIXES = (
    "api", "access", "secret", "private", "auth", "client", "service", "account",
    "signing", "encryption", "master",
)


def _name_pattern(case: Callable[[str], str]) -> str:
    """The credential names as one branch that starts at the keyword (a match begins
    where the trigger window's pattern does; lookbehinds check what comes before)."""
    whole = [f"{case(part)}(?<![A-Za-z0-9]{case(part)})" for part in _SECRET_NAME_PARTS]
    key = case("key")
    after = "|".join(f"(?<={case(prefix)}{sep}{key})"
                     for prefix in _SECRET_KEY_PREFIXES for sep in ("_", ""))
    return "(?:" + "|".join([*map(case, _SECRET_NAME_ENDS), *whole, f"{key}(?:{after})"]) + ")"


_CODE_NAME = "(?i:" + _name_pattern(str) + ")"
#: An environment variable: capitals, ``=`` with no space (``export``, ``.env``,
#: ``docker run -e``, compose lists). ``PWD`` alone is the working directory, so only
#: ``X_PWD`` counts.
_ENV_NAME = _name_pattern(str.upper).replace(
    "PWD(?<![A-Za-z0-9]PWD)", "PWD(?<=_PWD)") + "="
#: What the trigger window finds on lowered text: a match of either name pattern
#: begins where this one does (both start at the keyword).
_NAME_TRIGGER = r"(?:pass(?:word|wd|phrase)?|pwd|pw|secret|token|key)[\"'\]]{0,2}[ \t]*[:=]"
#: ``=``, ``:``, ``:=``, ``=>`` (not ``==``), after an optional closing quote/bracket.
_ASSIGN = r"[\"'\]]{0,2}[ \t]*(?::=|=>|[:=])(?!=)[ \t]*"

#: Credential flags of any command (``--password <pw>``, ``--token=<t>``, ``--api-key``):
#: after ``=`` the value is a literal; after a space it must look like one (a digit, a
#: symbol or a dotted word), as prose ("pass --token instead") does not.
_FLAG = (
    r"--(?i:(?:[a-z0-9]+-)*(?:password|passwd|pass|pwd|token|secret|api-?key|access-?key"
    r"|secret-?key|private-?key|auth-?token|client-?secret))"
    r"(?:=(?:" + _QUOTED_LITERAL + "|" + _SHELL_LITERAL.replace("{6,}", "{4,}") + ")"
    r"|[ \t]+(?:(?P<flagquote>[\"'])(?![$<{%])[^\"'\n]{4,}(?P=flagquote)"
    r"|(?![-$<{%])(?![A-Z_]+" + _WORD_END + r")(?!(?:~?/|\.{1,2}/))"
    r"(?=[^\s\"'`]{0,100}?(?:[0-9!@#%^&*+=~]|[A-Za-z][.][A-Za-z0-9]))"
    r"[^\s\"'`$<>;|&]{4,}" + _WORD_END + "))"
)

#: Between a command's name and its option: the rest of the command, bounded.
_COMMAND_GAP = r"[^\n|;&]{0,200}?"
#: Commands whose options take a password: (the words that trigger a search, the
#: trigger pattern, the pattern). Each pattern starts where its trigger does, which
#: is tried only where one of the words occurs (``Gate.anchored``).
COMMAND_PATTERNS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    # mysql -p<pw> (a separate ``-p`` prompts; ``-P`` is the port)
    (("mysql", "mariadb"), r"(?:mysql(?:dump|admin)?|mariadb(?:-dump|-admin)?)\b",
     r"(?<![\w-])(?i:mysql(?:dump|admin)?|mariadb(?:-dump|-admin)?)\b" + _COMMAND_GAP
     + r"[ \t]-p(?=[^\s-])" + _COMMAND_VALUE),
    (("docker", "podman", "nerdctl", "buildah", "skopeo"),
     r"(?:docker|podman|nerdctl|buildah|skopeo)[ \t]+login\b",
     r"(?i)(?<![\w-])(?:docker|podman|nerdctl|buildah|skopeo)[ \t]+login\b" + _COMMAND_GAP
     + r"[ \t](?:-p|--password)(?:=|[ \t]+)" + _COMMAND_VALUE),
    (("redis-cli",), r"redis-cli\b", r"(?i)(?<![\w-])redis-cli\b" + _COMMAND_GAP
     + r"[ \t](?:-a|--pass)(?:=|[ \t]+)" + _COMMAND_VALUE),
    (("sshpass",), r"sshpass\b",
     r"(?i)(?<![\w-])sshpass\b" + _COMMAND_GAP + r"[ \t]-p[ \t]*" + _COMMAND_VALUE),
    (("aws",), r"aws[ \t]+configure[ \t]+set\b",
     r"(?i)(?<![\w-])aws[ \t]+configure[ \t]+set[ \t]+(?:[\w-]+\.)?"
     r"aws_(?:secret_access_key|session_token)[ \t]+" + _COMMAND_VALUE),
    (("curl",), r"curl\b", r"(?i)(?<![\w-])curl\b" + _COMMAND_GAP
     + r"[ \t](?:-u|--user)(?:=|[ \t]*)[\"']?[^\s:\"'$<]{1,100}:" + _COMMAND_VALUE),
    # .netrc: machine <host> [login <user>] password <pw>, on one line or several; a
    # host without a dot needs the login ("machine learning password reset" is prose)
    (("machine",), r"machine[ \t]",
     r"(?i)(?<![\w-])machine[ \t]+(?:[\w-]+\.[\w.-]+(?:\s+(?:login|account|port)[ \t]+\S+)"
     r"{0,3}|\S+(?:\s+(?:login|account|port)[ \t]+\S+){1,3})\s+password[ \t]+"
     + _COMMAND_VALUE),
)

#: Prefixed token formats detect-secrets lacks: (name, pattern, anchors — lowercase
#: literals every match contains —, source). The source is ``gitleaks:<rule id>`` (its
#: config/gitleaks.toml; the rules taken are vendored with their commit and date in
#: tests/secret_rules/gitleaks.json, and tests/test_secret_sources.py holds the two in
#: agreement) or ``vendor:<page>`` (the issuer's documentation) where gitleaks has no rule.
#: Patterns may be broader than their source (a shorter length an issuer documents, no
#: keyword context where the prefix alone is specific), never narrower.
TOKEN_FORMATS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("Hugging Face Token", r"hf_(?<![\w-]hf_)[A-Za-z0-9]{30,}(?![\w-])"
     r"|api_org_(?<![\w-]api_org_)[A-Za-z0-9]{30,}(?![\w-])",
     ("hf_", "api_org_"),
     "gitleaks:huggingface-access-token gitleaks:huggingface-organization-api-token"),
    ("NPM Token", r"npm_(?<![\w-]npm_)[A-Za-z0-9]{36}(?![\w-])", ("npm_",),
     "gitleaks:npm-access-token"),
    ("Google OAuth Access Token", r"ya29\.(?<![\w-]ya29\.)[\w-]{20,}", ("ya29.",),
     "vendor:developers.google.com/identity/protocols/oauth2"),
    ("Stripe Key", r"(?:sk|rk)_(?:test|live|prod)_(?<![\w-]\w\w_\w{4}_)[A-Za-z0-9]{10,99}",
     ("sk_test_", "rk_test_", "sk_prod_", "rk_prod_"), "gitleaks:stripe-access-token"),
    ("Stripe Webhook Secret", r"whsec_(?<![\w-]whsec_)[A-Za-z0-9]{24,}", ("whsec_",),
     "vendor:docs.stripe.com/webhooks"),
    ("DigitalOcean Token", r"do[opr]_v1_(?<![\w-]do\w_v1_)[a-f0-9]{64}",
     ("dop_v1_", "doo_v1_", "dor_v1_"),
     "gitleaks:digitalocean-pat gitleaks:digitalocean-access-token "
     "gitleaks:digitalocean-refresh-token"),
    ("Databricks Token", r"dapi(?<![\w-]dapi)[a-f0-9]{32}(?!\w)", ("dapi",),
     "gitleaks:databricks-api-token"),
    ("Shopify Token", r"shp(?:at|ca|pa|ss)_(?<![\w-]shp\w\w_)[a-fA-F0-9]{32}",
     ("shpat_", "shpca_", "shppa_", "shpss_"),
     "gitleaks:shopify-access-token gitleaks:shopify-custom-access-token "
     "gitleaks:shopify-private-app-access-token gitleaks:shopify-shared-secret"),
    ("Grafana Token",
     r"glc_(?<![\w-]glc_)[A-Za-z0-9+/]{32,}={0,2}|glsa_(?<![\w-]glsa_)[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}",
     ("glc_", "glsa_"),
     "gitleaks:grafana-cloud-api-token gitleaks:grafana-service-account-token"),
    ("PlanetScale Token", r"pscale_(?<![\w-]pscale_)(?:pw|tkn|oauth)_[\w.-]{32,64}", ("pscale_",),
     "gitleaks:planetscale-api-token gitleaks:planetscale-oauth-token "
     "gitleaks:planetscale-password"),
    ("Age Secret Key", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
     ("age-secret-key-1",), "gitleaks:age-secret-key"),
    ("Postman API Key", r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}", ("pmak-",),
     "gitleaks:postman-api-token"),
    ("Linear API Key", r"lin_api_[A-Za-z0-9]{40}", ("lin_api_",), "gitleaks:linear-api-key"),
    ("Atlassian API Token", r"ATATT3[\w=-]{186}", ("atatt3",), "gitleaks:atlassian-api-token"),
    ("Heroku API Key", r"HRKU-AA[\w-]{58}", ("hrku-aa",), "gitleaks:heroku-api-key-v2"),
    # Short classic GitHub tokens: the shape, not the length (``ghp_`` and 20+ characters).
    ("GitHub Token", r"gh[pousr]_(?<![\w-]gh[pousr]_)(?![xX]{20,}(?![A-Za-z0-9]))"
     r"[A-Za-z0-9]{20,}(?![\w-])", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
     "gitleaks:github-pat gitleaks:github-oauth gitleaks:github-app-token "
     "gitleaks:github-refresh-token"),
    # Vault's documented service tokens are shorter than gitleaks' 90 characters.
    ("HashiCorp Vault Token", r"hv[sbr]\.(?<![\w.-]hv[sbr]\.)[\w-]{24,300}(?![\w-])",
     ("hvs.", "hvb.", "hvr."), "gitleaks:vault-service-token gitleaks:vault-batch-token"),
    ("Terraform Cloud Token", r"(?i:[a-z0-9]{14})\.atlasv1\.[\w=-]{60,}", ("atlasv1",),
     "gitleaks:hashicorp-tf-api-token"),
    ("Doppler Token",
     r"dp\.(?<![\w.-]dp\.)(?:pt|st|ct|sa|scim|audit)\.(?:[a-z0-9_-]{1,40}\.)?"
     r"[A-Za-z0-9]{40,44}(?![\w-])", ("dp.",),
     "gitleaks:doppler-api-token vendor:docs.doppler.com/reference/auth-token-formats"),
    ("New Relic Key",
     r"(?i:NRAK-(?<![\w-]NRAK-)[a-z0-9]{27}|NRII-(?<![\w-]NRII-)[a-z0-9-]{32}"
     r"|NRJS-(?<![\w-]NRJS-)[a-f0-9]{19})(?![\w-])", ("nrak-", "nrii-", "nrjs-"),
     "gitleaks:new-relic-user-api-key gitleaks:new-relic-insert-key "
     "gitleaks:new-relic-browser-api-token"),
    ("Pulumi Token", r"pul-(?<![\w-]pul-)[a-f0-9]{40}(?![\w-])", ("pul-",),
     "gitleaks:pulumi-api-token"),
    ("Supabase Key", r"sbp_(?<![\w-]sbp_)[a-f0-9]{40}(?![\w-])"
     r"|sb_secret_(?<![\w-]sb_secret_)[\w-]{20,}", ("sbp_", "sb_secret_"),
     "vendor:supabase.com/docs/guides/api/api-keys"),
    ("Alibaba Cloud Access Key", r"LTAI(?<![\w-]LTAI)[A-Za-z0-9]{12,20}(?![\w-])", ("ltai",),
     "gitleaks:alibaba-access-key-id"),
    ("Tencent Cloud Secret Id", r"AKID(?<![\w-]AKID)[A-Za-z0-9]{32}(?![\w-])", ("akid",),
     "vendor:cloud.tencent.com/document/product/598/40488"),
    ("Mailgun Key", r"(?<![\w-])(?:pub)?key-(?=[a-z0-9]{0,31}\d)[a-z0-9]{32}(?![\w-])",
     ("key-",), "gitleaks:mailgun-private-api-token gitleaks:mailgun-pub-key"),
    ("Groq API Key", r"gsk_(?<![\w-]gsk_)[A-Za-z0-9]{40,}(?![\w-])", ("gsk_",),
     "vendor:console.groq.com/docs/api-keys"),
    ("xAI API Key", r"xai-(?<![\w-]xai-)[A-Za-z0-9]{60,}(?![\w-])", ("xai-",),
     "vendor:docs.x.ai/docs/api-reference"),
    ("Perplexity API Key", r"pplx-(?<![\w-]pplx-)[A-Za-z0-9]{40,}(?![\w-])", ("pplx-",),
     "gitleaks:perplexity-api-key"),
    ("Tailscale Key", r"tskey-(?<![\w-]tskey-)(?:[a-z]+-)?[A-Za-z0-9]{4,}-?[A-Za-z0-9]{16,}",
     ("tskey-",), "vendor:tailscale.com/kb/1085/auth-keys"),
    ("1Password Secret",
     r"A3-(?<![\w-]A3-)[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}"
     r"-[A-Z0-9]{5}-[A-Z0-9]{5}(?![\w-])|ops_(?<![\w-]ops_)eyJ[A-Za-z0-9+/]{250,}={0,3}",
     ("a3-", "ops_ey"),
     "gitleaks:1password-secret-key gitleaks:1password-service-account-token"),
    ("Azure Shared Access Key",
     r"(?i:SharedAccessKey)=[A-Za-z0-9+/]{40,}={0,2}"
     r"|(?<=[?&;])sig=(?=[A-Za-z0-9%+/]{0,200}(?:%2[BbFf]|%3[Dd]|\d))[A-Za-z0-9%+/]{30,}",
     ("sharedaccesskey=", "sig="),
     "vendor:learn.microsoft.com/azure/storage/common/storage-sas-overview"),
)

#: Secrets gitleaks finds by a keyword before the value (its ``generate.SemiGenericRegex``):
#: (name, keywords, value pattern, source).
KEYWORD_VALUES: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("Alibaba Cloud Secret", ("alibaba",), r"(?i:[a-z0-9]{30})", "gitleaks:alibaba-secret-key"),
    ("Mailgun Key", ("mailgun",), r"[a-h0-9]{32}-[a-h0-9]{8}-[a-h0-9]{8}",
     "gitleaks:mailgun-signing-key"),
    ("Okta Token", ("okta",), r"00[\w=-]{40}", "gitleaks:okta-access-token"),
)


def _keyword_value(keywords: tuple[str, ...], value: str) -> str:
    """gitleaks' keyword form: the keyword in a name, an assignment, the value, an end."""
    return (r"(?i:" + "|".join(keywords) + r")(?:[ \t\w.-]{0,20})[\s'\"]{0,3}"
            r"(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)[`'\"\s=]{0,5}" + value
            + r"(?=[`'\"\s;]|\\[nr]|$)")


#: API-key headers (gitleaks' curl-auth-header): ``X-Api-Key``, ``X-Auth-Token``,
#: ``X-Goog-Api-Key``, ``Api-Key``, ``Private-Token``… — how their names start, and the rest.
_HEADER_STARTS = ("x-", "api", "private-", "access-", "auth-")
_HEADER_REST = (
    r"(?:(?<=x-)(?:[a-z0-9]+-){0,3}(?:api-?key|key|token|secret|auth)"
    r"|(?<=api)(?:-?key|-token)|(?<=private-)token|(?<=access-)token|(?<=auth-)token)"
)

#: A JWT part: base64url, possessive (linear on long runs), over at most 4 line breaks.
_JWT_BREAK = r"(?:\\?\r?\n[ \t]*)"
_JWT_PART = r"[A-Za-z0-9_-]{4,}+(?:" + _JWT_BREAK + r"[A-Za-z0-9_-]++){0,4}+"
#: How a private key's DER starts, base64-encoded: PKCS#1 RSA (``30 82 .. .. 02 01 00 02
#: 8x``), PKCS#8 with rsaEncryption and its key as an OCTET STRING (a public key has a BIT
#: STRING there), PKCS#8 EC and Ed25519, SEC1 EC (P-256, P-384, P-521), encrypted PKCS#8
#: (PBES2) and OpenSSH's ``openssh-key-v1``.
_KEY_BODY_STARTS = (  # (pattern, an anchor every match holds)
    (r"MII[A-Za-z0-9+/]{3}IBAAK[BC]", "ibaak"),
    (r"MII[A-Za-z0-9+/]{3}IBADANBgkqhkiG9w0BAQEFAAS", "bgkqhkig9w0baqefaas"),
    (r"MIG[A-Za-z0-9+/]AgEAMBMGByqGSM49AgEG", "ageambmgbyqgsm49ageg"),
    (r"MC4CAQAwBQYDK2VwBCIEI", "mc4caqawbqydk2vwbciei"),
    (r"MHcCAQEEI", "mhccaqeei"), (r"MIGkAgEBBD", "migkagebbd"), (r"MIHcAgEBBE", "mihcagebbe"),
    (r"MII[A-Za-z0-9+/]{5}BgkqhkiG9w0BBQ0w", "bgkqhkig9w0bbq0w"),
    (r"b3BlbnNzaC1rZXktdjE", "b3blbnnzac1rzxktdje"),
)
#: A token after ``Authorization: Bearer`` (or ``Token``, ``SSWS``): there the name says
#: what it is, so no digit is needed, only 16+ token characters that are no placeholder.
_HEADER_TOKEN = (
    r"(?-i:(?![$<{%])(?![A-Z]+(?:_[A-Z]+)*(?![\w.~+/-]))(?![a-z]+(?:[-_][a-z]+)+(?![\w.~+/-]))"
    r"(?![xX*.]+(?![\w.~+/-])))[\w.~+/-]{16,}=*"
)

#: Patterns detect-secrets 1.5 lacks: (detector name, pattern, gate).
EXTRA_PATTERNS: tuple[tuple[str, str | tuple[str, ...], Gate], ...] = (
    # OpenAI (sk-, sk-proj-, sk-svcacct-) and Anthropic (sk-ant-) keys; needs a digit.
    # The shape, not the length: ``sk-secret123456`` is one too (a digit, 10+ characters;
    # not lowercase words joined, a package name: ``sk-learn-extra2``).
    ("OpenAI-style API Key", r"sk-(?<![\w-]sk-)(?=[\w-]{0,200}\d)"
     r"(?![a-z0-9]+(?:-[a-z0-9]+)+(?![\w-]))[A-Za-z0-9][\w-]{9,}",
     Gate(("sk-",))),
    ("GitHub Token", r"github_pat_[A-Za-z0-9_]{60,}", Gate(("github_pat_",))),
    ("Google API Key", r"AIza[0-9A-Za-z_\-]{35}", Gate(("aiza",))),
    # Header and payload are JSON objects, so both start with ``eyJ``. The token starts
    # at a boundary (``=`` is one: ``API_TOKEN=eyJ…``, ``--token=eyJ…``), and its parts
    # are base64url without ``=`` but for a padding end, so a run such as ``eyJ=eyJ=…``
    # costs one step per part. (detect-secrets' JWT regex is quadratic on such runs.)
    # A token wrapped over lines (a terminal's or a log's width) is one too: a part may
    # go on after a line break and indentation, at most a few times.
    (
        "JSON Web Token",
        r"(?<![A-Za-z0-9_-])eyJ" + _JWT_PART + r"={0,2}" + _JWT_BREAK + r"?\."
        + _JWT_BREAK + r"?eyJ" + _JWT_PART + r"={0,2}" + _JWT_BREAK + r"?\.",
        Gate(("eyj",)),
    ),
    (PRIVATE_KEY, r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----", Gate(("private key",))),
    # A key pasted without its BEGIN line: its END line, or a base64 body that starts as a
    # private key's DER does (``_KEY_BODY_STARTS``).
    (PRIVATE_KEY, r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----", Gate(("private key",))),
    (PRIVATE_KEY, r"(?<![A-Za-z0-9+/])(?:" + "|".join(p for p, _ in _KEY_BODY_STARTS) + r")"
     r"[A-Za-z0-9+/]{16}", Gate(tuple(anchor for _, anchor in _KEY_BODY_STARTS))),
    (
        "AWS Secret Access Key",
        r"(?i)aws_?secret_?access_?key[\"']?\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
        Gate(("secret",), r"aws_?secret_?access_?key"),
    ),
    # A name that holds a credential assigned a literal: ``DB_PASSWORD=Horse.Battery.Staple``
    # (env: the value is literal text), ``SECRET_KEY = '…'`` (quoted), ``client_secret:
    # 9f8e7d…`` (YAML, code: references are not literals) — see ``_SHELL_LITERAL``,
    # ``_QUOTED_LITERAL``, ``_CODE_LITERAL``.
    (
        "Secret Assignment",
        (
            _ENV_NAME + r"(?:" + _QUOTED_LITERAL + "|" + _SHELL_LITERAL + ")",
            _CODE_NAME + _ASSIGN + r"(?:" + _QUOTED_LITERAL + "|"
            + _CODE_LITERAL + ")",
        ),
        Gate(
            ("pass", "pwd", "pw", "secret", "token", "key"), _NAME_TRIGGER,
            window_starts=("pass", "pwd", "pw", "secret", "token", "key"), anchored=True,
        ),
    ),
    ("Credential Flag", _FLAG, Gate(("--",))),
    # ``Authorization: Bearer <token>`` (any opaque token, not only a JWT), ``Basic
    # <base64>``, and API-key headers (``X-Api-Key:``, ``X-Auth-Token:``, ``Private-Token:``).
    (
        "Bearer Token",
        r"(?i)\bbearer[ \t]+" + _OPAQUE_TOKEN,
        Gate(("bearer",), r"bearer[ \t]", window_starts=("bearer",), anchored=True),
    ),
    (
        "Authorization Header",
        r"(?i)\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:basic[ \t]+(?=[A-Za-z0-9+/]{0,200}"
        r"[0-9A-Z])[A-Za-z0-9+/]{12,}={0,2}|(?:bearer|token|bot|apikey|key|ssws)[ \t]+"
        + _HEADER_TOKEN + "|" + _OPAQUE_TOKEN + ")",
        Gate(("authorization",), r"authorization[\"']?[ \t]*[:=]",
             window_starts=("authorization",), anchored=True),
    ),
    (
        "Credential Header",
        r"(?i)(?:" + "|".join(f"{start}(?<![\\w-]{start})" for start in _HEADER_STARTS)
        + r")" + _HEADER_REST + r"[\"']?[ \t]*:[ \t]*[\"']?"
        + _OPAQUE_TOKEN.replace("{16,}", "{12,}"),
        Gate(("x-", "api-key", "apikey", "api-token", "private-token", "access-token",
              "auth-token"),
             r"(?:" + "|".join(_HEADER_STARTS) + r")" + _HEADER_REST + r"[\"']?[ \t]*:",
             window_starts=_HEADER_STARTS, anchored=True),
    ),
    *(("Command-line Password", pattern, Gate(words, trigger, window_starts=words,
                                              anchored=True))
      for words, trigger, pattern in COMMAND_PATTERNS),
    *((name, pattern, Gate(anchors)) for name, pattern, anchors, _ in TOKEN_FORMATS),
    *((name, _keyword_value(keywords, value), Gate(keywords))
      for name, keywords, value, _ in KEYWORD_VALUES),
    # ``redis://:password@host``: a URL with a password and no user name (detect-secrets'
    # basic-auth pattern needs a user before the colon).
    ("Password-only URL", r"(?i)\b[a-z][a-z0-9+.-]*://:[^\s/@:?#]{3,}@", Gate(("://:",))),
)


#: Where the patterns of ``EXTRA_PATTERNS`` not in ``TOKEN_FORMATS`` come from (see
#: ``TOKEN_FORMATS``; ``lookback`` marks the project's own rule, for shapes no maintained
#: source has: its cases are in tests/test_privacy.py).
_EXTRA_SOURCES = {
    "OpenAI-style API Key": "gitleaks:openai-api-key gitleaks:anthropic-api-key",
    "GitHub Token": "gitleaks:github-fine-grained-pat",
    "Google API Key": "gitleaks:gcp-api-key",
    "JSON Web Token": "gitleaks:jwt",
    PRIVATE_KEY: "gitleaks:private-key",
    "AWS Secret Access Key":
        "vendor:docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html",
    "Secret Assignment": "gitleaks:generic-api-key",
    "Credential Flag": "lookback",
    "Bearer Token": "gitleaks:curl-auth-header",
    "Authorization Header": "gitleaks:curl-auth-header",
    "Credential Header": "gitleaks:curl-auth-header",
    "Command-line Password": "gitleaks:curl-auth-user lookback",
    "Password-only URL": "lookback",
}


def detector_sources() -> dict[str, str]:
    """Detector name -> where its patterns come from: ``detect-secrets:<plugin>`` (the
    installed plugin's own regexes), ``gitleaks:<rule id>``, ``vendor:<page>`` or
    ``lookback``; a name several tables use lists every source."""
    sources: dict[str, list[str]] = {}
    entries = [(plugin.secret_type, f"detect-secrets:{plugin.__name__}")
               for plugin in _detect_secrets_plugins()]
    entries += [(name, source) for name, _, _, source in TOKEN_FORMATS]
    entries += [(name, source) for name, _, _, source in KEYWORD_VALUES]
    entries += list(_EXTRA_SOURCES.items())
    for name, source in entries:
        sources.setdefault(name, []).append(source)
    return {name: " ".join(found) for name, found in sources.items()}


@dataclass(frozen=True)
class SecretFinding:
    """Where a detector matched: its name and character offsets, never the text."""

    detector: str
    start: int
    end: int


@dataclass(frozen=True)
class _Detector:
    name: str
    patterns: tuple[re.Pattern[str], ...]
    anchors: tuple[str, ...]
    window: re.Pattern[str] | None
    token_run: int = 0
    alnum_run: int = 0
    window_starts: tuple[str, ...] = ()
    anchored: bool = False


def _detect_secrets_plugins() -> list[Any]:  # detect-secrets is untyped
    """The detect-secrets regex plugins Lookback uses (see the module docstring)."""
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.cloudant import CloudantDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
    from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.softlayer import SoftlayerDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.stripe import StripeDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    return [
        AWSKeyDetector, AzureStorageKeyDetector, BasicAuthDetector, CloudantDetector,
        DiscordBotTokenDetector, GitHubTokenDetector, GitLabTokenDetector,
        IbmCloudIamDetector, IbmCosHmacDetector, MailchimpDetector,
        NpmDetector, OpenAIDetector, PrivateKeyDetector, PypiTokenDetector,
        SendGridDetector, SlackDetector, SoftlayerDetector, SquareOAuthDetector,
        StripeDetector, TelegramBotTokenDetector, TwilioKeyDetector,
    ]  # fmt: skip


def _detector(name: str, patterns: list[re.Pattern[str]], gate: Gate) -> _Detector:
    window = re.compile(gate.window) if gate.window else None
    return _Detector(
        name, tuple(patterns), gate.anchors, window, gate.token_run, gate.alnum_run,
        gate.window_starts, gate.anchored,
    )


@cache
def detectors() -> tuple[_Detector, ...]:
    """All detectors, compiled once (importing detect-secrets costs ~0.2 s, so lazily)."""
    found = []
    for plugin in _detect_secrets_plugins():
        name = plugin.secret_type
        patterns = [re.compile(p.pattern, p.flags | re.MULTILINE) for p in plugin.denylist]
        found.append(_detector(name, patterns, GATES[name]))
    for name, pattern, gate in EXTRA_PATTERNS:
        alternatives = (pattern,) if isinstance(pattern, str) else pattern
        compiled = [re.compile(p, re.ASCII | re.MULTILINE) for p in alternatives]
        found.append(_detector(name, compiled, gate))
    return tuple(found)


def _window_matches(
    lowered: str, window: re.Pattern[str], starts: list[int] | None
) -> Iterator[re.Match[str]]:
    """What ``window.finditer(lowered)`` yields, trying only the offsets in ``starts``
    when given (every match starts at one of them; ascending)."""
    if starts is None:
        yield from window.finditer(lowered)
        return
    searched_to = 0
    for start in starts:
        if start < searched_to:  # inside the previous match: finditer resumes after it
            continue
        match = window.match(lowered, start)
        if match:
            searched_to = match.end()
            yield match


def _trigger_windows(
    lowered: str, window: re.Pattern[str], starts: list[int] | None = None
) -> list[tuple[int, int]]:
    """Search windows around every ``window`` match, merged while they overlap.

    A merged window stops growing at ``MAX_WINDOW`` characters, so even a pattern that
    backtracks does bounded work per window, and a text dense with matches costs about
    one pass per pattern.
    """
    return _merged_windows(_window_matches(lowered, window, starts), len(lowered))


def _merged_windows(matches: Iterable[re.Match[str]], length: int) -> list[tuple[int, int]]:
    windows: list[tuple[int, int]] = []
    for match in matches:
        low = max(0, match.start() - TRIGGER_WINDOW)
        high = min(length, match.end() + TRIGGER_WINDOW)
        if windows and low <= windows[-1][1] and high - windows[-1][0] <= MAX_WINDOW:
            windows[-1] = (windows[-1][0], high)
        else:
            windows.append((low, high))
    return windows


def _run_table(members: bytes) -> bytes:
    """A ``bytes.translate`` table: ``members`` and every non-ASCII byte to ``x``, the rest
    to a space (a UTF-8 byte of 0x80 or above only ever belongs to a non-ASCII character)."""
    return bytes(
        ord("x") if byte >= 0x80 or byte in members else ord(" ") for byte in range(256)
    )


_ALNUM = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_TOKEN_TABLE = _run_table(_ALNUM + b"_-")
_ALNUM_TABLE = _run_table(_ALNUM)


class _Runs:
    """Whether ``text`` holds a run of N token (or alphanumeric) characters, computed on
    first use: a non-ASCII character counts as one or more run characters, never fewer."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._maps: dict[bytes, bytes] = {}

    def has(self, table: bytes, length: int) -> bool:
        mapped = self._maps.get(table)
        if mapped is None:
            encoded = self._text.encode("utf-8", "surrogatepass")
            mapped = self._maps[table] = encoded.translate(table)
        return b"x" * length in mapped


@cache
def _anchor_automaton() -> ahocorasick.Automaton:
    """Every anchor and window start of two or more characters, for one Aho-Corasick
    pass over a text."""
    automaton = ahocorasick.Automaton()
    for detector in detectors():
        for word in (*detector.anchors, *detector.window_starts):
            if len(word) > 1:
                automaton.add_word(word, word)
    automaton.make_automaton()
    return automaton


def _find_anchors(lowered: str) -> dict[str, list[int]]:
    """Where each anchor and window start occurs in ``lowered`` (ascending offsets): one
    automaton pass instead of one substring scan per anchor (about 70 scans, most of
    them of texts that hold no anchor). A one-character anchor gets a ``memchr`` test
    and no offsets (none is a window start)."""
    found: dict[str, list[int]] = {}
    for end, word in _anchor_automaton().iter(lowered):
        found.setdefault(word, []).append(end - len(word) + 1)
    for anchor in _single_character_anchors():
        if anchor in lowered:
            found.setdefault(anchor, [])
    return found


@cache
def _single_character_anchors() -> tuple[str, ...]:
    return tuple(sorted({a for d in detectors() for a in d.anchors if len(a) == 1}))


@cache
def _detectors_by_anchor() -> dict[str, tuple[int, ...]]:
    """Anchor -> the positions in ``detectors()`` of the detectors it gates."""
    positions: dict[str, list[int]] = {}
    for position, detector in enumerate(detectors()):
        for anchor in detector.anchors:
            positions.setdefault(anchor, []).append(position)
    return {anchor: tuple(found) for anchor, found in positions.items()}


def _starts(detector: _Detector, found: dict[str, list[int]]) -> list[int] | None:
    """The offsets where ``detector``'s window may match, or None to try them all."""
    if not detector.window_starts:
        return None
    return sorted({offset for word in detector.window_starts for offset in found.get(word, ())})


def _first_match(
    detector: _Detector, text: str, lowered: str, found: dict[str, list[int]], runs: _Runs
) -> SecretFinding | None:
    # The run tests first: they are cheaper than scanning the text for each anchor.
    if detector.token_run and not runs.has(_TOKEN_TABLE, detector.token_run):
        return None
    if detector.alnum_run and not runs.has(_ALNUM_TABLE, detector.alnum_run):
        return None
    if not any(anchor in found for anchor in detector.anchors):
        return None
    if detector.window is None:
        spans = [(0, len(text))]
    elif detector.anchored:
        return _anchored_match(detector, text, lowered, found)
    else:
        spans = _trigger_windows(lowered, detector.window, _starts(detector, found))
    for low, high in spans:
        for pattern in detector.patterns:
            match = pattern.search(text, low, high)
            if match:
                return SecretFinding(detector.name, *match.span())
    return None


def _anchored_match(
    detector: _Detector, text: str, lowered: str, found: dict[str, list[int]]
) -> SecretFinding | None:
    """What searching each trigger window finds, for patterns that can only match where
    the window pattern does: each is tried there (``match``, bounded by the window's
    end as the search is), not at every position of the window."""
    assert detector.window is not None
    matches = list(_window_matches(lowered, detector.window, _starts(detector, found)))
    offsets = [match.start() for match in matches]
    for low, high in _merged_windows(matches, len(lowered)):
        inside = offsets[bisect_left(offsets, low):bisect_left(offsets, high)]
        for pattern in detector.patterns:
            for offset in inside:
                match = pattern.match(text, offset, high)
                if match:
                    return SecretFinding(detector.name, *match.span())
    return None


def _lowered(text: str) -> str:
    """``text.lower()`` with offsets kept (a few characters change length when lowered)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(char.lower()[:1] or char for char in text)
    return lowered


def find_plain_secrets(text: str) -> list[SecretFinding]:
    """The first match of every detector that fires on ``text`` as written, in text order.

    One finding per detector is enough to classify a text (the whole evidence message
    is withheld anyway) and keeps the cost bounded for texts full of matches.
    """
    lowered = _lowered(text)
    found = _find_anchors(lowered)
    runs = _Runs(text)
    # Only detectors with an anchor in the text can match: most texts hold the anchors
    # of a few of the ~55 detectors, so the others cost nothing.
    by_anchor = _detectors_by_anchor()
    gated = sorted({position for anchor in found for position in by_anchor.get(anchor, ())})
    every = detectors()
    findings = (
        _first_match(every[position], text, lowered, found, runs) for position in gated
    )
    return sorted((f for f in findings if f), key=lambda f: (f.start, f.detector))


#: A run that may be base64 (standard or URL-safe) of a credential: 20+ characters (15+
#: bytes decoded), bounded (a credential is short; an inline image is not one).
MIN_ENCODED_RUN = 20
MAX_ENCODED_RUN = 8192
#: ``bytes.translate`` table: base64 characters to ``x``, every other byte to a space.
_BASE64_TABLE = bytes(
    ord("x") if chr(byte).isascii() and (chr(byte).isalnum() or chr(byte) in "+/_-")
    else ord(" ") for byte in range(256))
#: A percent-escape, and the run around it (a URL-encoded query, form or cookie).
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_WORD_TABLE = bytes(ord(" ") if chr(byte) in " \t\n\r\f\v\"'<>`" else ord("x")
                    for byte in range(256))
#: Base64 of text has digits and both cases; identifiers, hex digests, UUIDs and paths
#: mostly lack one of them, so they are not decoded.
_HAS_DIGIT = re.compile(r"[0-9]")
_HAS_UPPER = re.compile(r"[A-Z]")
_HAS_LOWER = re.compile(r"[a-z]")


def _base64_text(run: str) -> str | None:
    """``run`` decoded when it is base64 of printable text, else None."""
    if not (_HAS_DIGIT.search(run) and _HAS_UPPER.search(run) and _HAS_LOWER.search(run)):
        return None
    body = run.rstrip("=")
    if len(body) % 4 == 1:
        return None
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4),
                               altchars=b"-_" if "-" in body or "_" in body else None)
        decoded = raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded if decoded.isprintable() or _mostly_printable(decoded) else None


def _mostly_printable(text: str) -> bool:
    return sum(char.isprintable() or char in "\n\r\t" for char in text) >= 0.95 * len(text)


def _base64_runs(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of base64 characters (with its ``=`` padding) of 20 to
    8,192 characters. Found on bytes, one per character (``?`` for non-ASCII): two C
    passes and a step per run, not a regex attempt at every position."""
    mapped = text.encode("ascii", "replace").translate(_BASE64_TABLE)
    wanted = b"x" * MIN_ENCODED_RUN
    position = mapped.find(wanted)
    while position >= 0:
        end = mapped.find(b" ", position)
        end = len(mapped) if end < 0 else end
        while end < len(text) and end - position < MAX_ENCODED_RUN + 2 and text[end] == "=":
            end += 1
        if end - position <= MAX_ENCODED_RUN + 2:
            yield position, end
        position = mapped.find(wanted, end)


def _encoded_runs(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, decoded text) of each base64 or percent-encoded run of ``text``."""
    for start, end in _base64_runs(text):
        decoded = _base64_text(text[start:end])
        if decoded:
            yield start, end, decoded
    searched_to, words = 0, b""
    for escape in _PERCENT.finditer(text) if "%" in text else ():
        if escape.start() < searched_to:
            continue  # inside the run already decoded
        # The run around it: separators are spaces in ``words`` (a byte per character).
        words = words or text.encode("ascii", "replace").translate(_WORD_TABLE)
        start = words.rfind(b" ", 0, escape.start()) + 1
        end = words.find(b" ", escape.end())
        searched_to = end = len(words) if end < 0 else end
        if end - start <= MAX_ENCODED_RUN:
            yield start, end, unquote(text[start:end])


def find_secrets(text: str,
                 finder: Callable[[str], list[SecretFinding]] = find_plain_secrets,
                 ) -> list[SecretFinding]:
    """The first match of every detector that fires on ``text``, in text order: as
    written, or inside a base64- or URL-encoded run (decoded once; the finding then spans
    the encoded run). ``finder`` searches one text as written."""
    findings = finder(text)
    found = {finding.detector for finding in findings}
    for start, end, decoded in _encoded_runs(text):
        for finding in finder(decoded):
            if finding.detector not in found:
                found.add(finding.detector)
                findings.append(SecretFinding(finding.detector, start, end))
    return sorted(findings, key=lambda f: (f.start, f.detector))
