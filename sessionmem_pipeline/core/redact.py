"""Secret redaction: find credentials in text and replace them with typed placeholders (`[REDACTED:aws-key]`).

Runs once, in the transform stage before chunking, so chunks, embeddings, topics, summaries and every output are
built from redacted text (ARCHITECTURE.md). Two kinds of evidence are used:

- shape: provider keys with a recognisable prefix (AKIA…, sk-…, sk-ant-…, ghp_…, xoxb-…, sk_test_…,
  AIza…), PEM private-key blocks and JWTs are redacted wherever they appear;
- context: a value assigned to a secret-like name (`DB_PASSWORD=…`, `"api_key": "…"`, `--token …`,
  `<password>…</password>`), a password inside a URL (`scheme://user:PASS@host`, user and host kept), an
  `Authorization:` header, `curl -u user:PASS`, `mysql -pPASS`. These are all typed `password`, except AWS
  secret access keys (`aws-key`): the placeholder says "a credential was here", the name beside it says which.

Context rules also look at the value, so code that only *handles* secrets stays untouched:
`token = request.headers.get("Authorization")`, `api_key=os.environ["OPENAI_API_KEY"]`,
`password_hash = bcrypt.hash(pw)`, `"${DB_PASSWORD}"`, `<your-api-key>`. Generic names (`cache_key`, `sort_key`)
only count when the value looks random. Known blind spots, on purpose: a bare lowercase word assigned in code
(`password = hunter`) reads as a variable, and a literal word `password` as a value reads as a placeholder.

Redacting is idempotent: a placeholder is never matched again, so redacting twice equals redacting once.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

KIND_AWS = "aws-key"
KIND_OPENAI = "openai-key"
KIND_ANTHROPIC = "anthropic-key"
KIND_GITHUB = "github-token"
KIND_SLACK = "slack-token"
KIND_STRIPE = "stripe-key"
KIND_GOOGLE = "google-api-key"
KIND_PRIVATE_KEY = "private-key"
KIND_JWT = "jwt"
KIND_PASSWORD = "password"
SECRET_KINDS = (
    KIND_AWS,
    KIND_OPENAI,
    KIND_ANTHROPIC,
    KIND_GITHUB,
    KIND_SLACK,
    KIND_STRIPE,
    KIND_GOOGLE,
    KIND_PRIVATE_KEY,
    KIND_JWT,
    KIND_PASSWORD,
)

REDACTION_VERSION = 1
"""Bump whenever a rule changes what is redacted: the ingest stage re-redacts every stored session."""

PLACEHOLDER_RE = re.compile(r"\[REDACTED:[a-z-]+\]")


def placeholder(kind: str) -> str:
    """The text that replaces a secret of this kind."""
    return f"[REDACTED:{kind}]"


@dataclass(frozen=True)
class SecretMatch:
    """Where a secret sits in a text, and what kind it is."""

    kind: str
    start: int
    end: int


# ---- value judgements shared by the context rules --------------------------------------------------------------

_VALUE_REFERENCE = re.compile(  # ${VAR}, $VAR, $(cmd), %(x)s, %s, {{ var }}, {% %}, <%= %>, %VAR%, {name}
    r"""^\$|\$\{|\$\(|%\(\w+\)|%[sdr]\b|\{\{|\{%|<%|^%\w+%$|\{[A-Za-z_][\w.\[\]'"]*\}"""
)
_VALUE_CODE = re.compile(
    r"os\.environ|getenv|process\.env|ENV\[|System\.getenv|Deno\.env|import\.meta\.env|secrets\.|settings\.|config\["
)
_VALUE_PLACEHOLDER = re.compile(
    r"""^[^A-Za-z0-9]*\*{3,}[^A-Za-z0-9]*$|^(?:<[^<>]*>|x{3,}|X{3,}|\.{3,}|…|-+|_+|\?+|#+)$"""  # masks, blanks
    r"""|(?:\.\.\.|…)$"""  # a shortened example: `sk_test_...`
    r"""|your[-_ ]?(?:own[-_ ]?)?(?:api|secret|access|auth|personal|app|db|database|real)?[-_ ]?"""
    r"""(?:key|token|secret|password|pass|pat)"""
    r"""|^replace[-_ ]?(?:me|this)"""  # REPLACE_ME is a blank to fill; `changeme` is a (weak) password
    r"""|placeholder|redacted"""
    r"""|^(?:example|value|dummy|none|null|nil|undefined|true|false|yes|no|on|off)$"""
    r"""|^(?:password|passwd|pass|pwd|secret|token|key|api[-_]?key|string|str|optional|required|bool)$""",
    re.IGNORECASE,
)
_VALUE_PATH = re.compile(  # where a credential is kept, not the credential
    r"^(?:~|\.{1,2})?/\S*$|^[A-Za-z]:\\|\.(?:json|pem|key|p12|pfx|crt|cer|txt|ya?ml|env|toml|ini)$"
)
_VALUE_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_TYPE_WORDS = frozenset(
    "str string bytes int integer bool boolean any optional secretstr secretbytes none null object unknown "
    "text varchar char list dict mapping sequence uuid float double number decimal date datetime".split()
)
_NOT_CREDENTIAL_CHARS = re.compile(r"[\s\[\]{}\\|<>\"'`]")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9+/=_.~-]+")
_HEX_OR_UUID = re.compile(r"^(?:[0-9a-fA-F]{8,}|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})$")


def _is_excluded_value(value: str) -> bool:
    """True for values that are plainly not a secret: empty, placeholders, references, code, paths, URLs."""
    value = value.strip()
    return (
        not value
        or value.startswith("[REDACTED")
        or bool(_VALUE_REFERENCE.search(value))
        or bool(_VALUE_CODE.search(value))
        or bool(_VALUE_PLACEHOLDER.search(value))
        or bool(_VALUE_PATH.search(value))
        or bool(_VALUE_URL.match(value))
    )


def _looks_random(value: str) -> bool:
    """A token-like value: long, no spaces, letters and digits, high character entropy; not a hex digest or UUID."""
    if len(value) < 16 or not _TOKEN_CHARS.fullmatch(value) or _HEX_OR_UUID.match(value):
        return False
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if not (has_digit and has_alpha):
        return False
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return entropy >= 3.3


def _looks_like_credential(value: str) -> bool:
    """A value that could be a key or token (not a word, label, regex or template): for names like `token`,
    `secret`, `api_key`, where code is full of non-secret values (`end_token = '}'`, `token = r"[a-z]+"`)."""
    if len(value) < 8 or _NOT_CREDENTIAL_CHARS.search(value):
        return False
    has_digit = any(c.isdigit() for c in value)
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return has_digit or (len(value) >= 16 and mixed_case)


def _looks_like_code(value: str, following: str) -> bool:
    """An unquoted value that reads as a variable, attribute, call or type rather than a literal."""
    if following[:1] in ("(", "[", "."):
        return True
    if _DOTTED.fullmatch(value):
        return True
    if value.lower() in _TYPE_WORDS:
        return True
    if not _IDENTIFIER.fullmatch(value):
        return False
    return not any(c.isdigit() for c in value) or ("_" in value and value.islower())  # `pw`, `s3_client`


def _is_prose(value: str) -> bool:
    """Quoted prose (labels, help texts, messages) rather than a credential."""
    words = value.split()
    if len(words) < 2:
        return False
    lowered = value.lower()
    return len(words) >= 5 or any(w in lowered for w in ("password", "token", "secret", "key", "enter", "invalid"))


# ---- secret-like names ------------------------------------------------------------------------------------------

_PASSWORD_SUFFIXES = ("password", "passwd", "passphrase")
_PASSWORD_LAST = frozenset({"pwd", "pass", "pw"})  # only as the name's last part: DB_PASS, MYSQL_PWD
_STRONG_SUFFIXES = (*_PASSWORD_SUFFIXES, "secret", "token", "credential", "credentials", "apikey")
_KEY_QUALIFIERS = frozenset(
    "api secret access private auth encryption signing master license client app service account webhook "
    "subscription admin session hmac jwt crypt encrypt decrypt cipher aes deploy".split()
)
_NOT_SECRET_AFTER = frozenset(
    "length len min max limit limits count counts ttl expiry expires expiration expire expired timeout url uri urls "
    "endpoint host file files path paths dir directory name names type types kind id ids arn prefix suffix header "
    "headers hash hashed digest policy policies regex regexp pattern field fields env var variable size format mode "
    "enabled required optional hint label prompt placeholder help text message msg error errors description desc "
    "title tooltip caption question location provider source version rotation usage budget counter index idx "
    "strategy validator validation input widget lifetime age manager class method stdin command cmd helper store "
    "schema model test check strength score reset encoding algorithm alg scheme style color re".split()
)
_NOT_SECRET_BEFORE = frozenset(
    "is has show hide use should can allow enable disable require needs validate verify check hash hashed max min "
    "num total page next prev continuation cursor sync public no skip ignore mask masked redact redacted forgot "
    "invalid wrong bad missing empty".split()
)
_CAMEL_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])|([A-Z]+)([A-Z][a-z])")

_NONE, _WEAK, _STRONG = 0, 1, 2


def _name_parts(name: str) -> list[str]:
    """`config.dbPassword` -> ["db", "password"]: the words of a name's last dotted segment (`token.tag` is
    an attribute of a token, not a token)."""
    last_segment = name.rstrip(".").rsplit(".", 1)[-1]
    spaced = _CAMEL_BOUNDARY.sub(lambda m: f"{m[1] or m[3]}_{m[2] or m[4]}", last_segment)
    return [part for part in re.split(r"[_\-\s]+", spaced.lower()) if part]


def _is_password_name(name: str) -> bool:
    parts = _name_parts(name)
    return any(p.endswith(_PASSWORD_SUFFIXES) for p in parts) or (bool(parts) and parts[-1] in _PASSWORD_LAST)


def _name_strength(name: str) -> int:
    """How strongly a name says its value is a credential: 2 (password, token, api_key), 1 (a generic `*_key`), 0."""
    parts = _name_parts(name)
    best, last_index = _NONE, -1
    for index, part in enumerate(parts):
        if part.endswith(_STRONG_SUFFIXES) or (part in _PASSWORD_LAST and index == len(parts) - 1):
            strength = _STRONG
        elif part == "key":
            strength = _STRONG if index and parts[index - 1] in _KEY_QUALIFIERS else _WEAK
        elif part.endswith("key") and part[:-3] in _KEY_QUALIFIERS:
            strength = _STRONG
        else:
            continue
        best, last_index = max(best, strength), index
    if best == _NONE:
        return best
    if any(part in _NOT_SECRET_AFTER for part in parts[last_index + 1 :]):
        return _NONE
    if any(part in _NOT_SECRET_BEFORE for part in parts[:last_index]):
        return _NONE
    return best


def _names_a_secret(value: str, name: str) -> bool:
    """A value that names a secret instead of being one: `"DELETE_SECRET"`, `"api_token"`, `"challengePassword"`."""
    lowered = value.lower()
    if lowered == name.lower() or lowered in _name_parts(name):
        return True
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        return False
    parts = _name_parts(value.replace(".", "_"))
    names_one = any(p.endswith(_STRONG_SUFFIXES) or p in ("key", "keys", "pass", "pwd") for p in parts)
    type_like = bool(re.fullmatch(r"(?:[A-Z][A-Za-z0-9]*){2,}", value))  # `Ed25519PrivateKey`; not `Password123`
    return names_one and (type_like or not any(c.isdigit() for c in value))


# ---- rules --------------------------------------------------------------------------------------------------------

Accept = Callable[[re.Match[str]], bool]


def _always(_: re.Match[str]) -> bool:
    return True


@dataclass(frozen=True)
class _Rule:
    """One way to recognise a secret. `groups`: the match groups that may hold the secret (first that matched)."""

    kind: str
    pattern: re.Pattern[str]
    groups: tuple[int | str, ...] = (0,)
    accept: Accept = _always


def _has_letter_and_digit(m: re.Match[str]) -> bool:
    token = m.group(0)
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token.split("-", 1)[-1])


def _accept_literal(m: re.Match[str], group: str = "value") -> bool:
    return not _is_excluded_value(m.group(group))


def _accept_authorization(m: re.Match[str]) -> bool:
    value = m.group("value")
    if _is_excluded_value(value):
        return False
    return bool(m.group("scheme")) or _looks_random(value)


def _accept_flag(m: re.Match[str]) -> bool:
    value = m.group("value")
    if _name_strength(m.group("name")) != _STRONG or _is_excluded_value(value):
        return False
    return not _looks_like_code(value, "") or _looks_random(value)


def _accept_xml(m: re.Match[str]) -> bool:
    return _name_strength(m.group("name")) == _STRONG and not _is_excluded_value(m.group("value"))


_KV_VALUE_GROUPS = ("v_esc", "v_dq", "v_sq", "v_bt", "v_bare")
_YAML_INDENT = re.compile(r"[ \t]*(?:-[ \t]+)?")


def _is_env_style(m: re.Match[str]) -> bool:
    """`DB_PASSWORD=hunter2`, `Password=…;`: a tight `=` after an upper-case name, as in .env files, shells,
    connection strings; unlike a keyword argument (`password=pw`), its bare value is a literal."""
    name = m.group("name")
    tight = m.group("sep") == "=" and not m.group("sp1") and not m.group("sp2")
    return tight and (not any(c.islower() for c in name) or name[:1].isupper())


def _is_yaml_literal(m: re.Match[str]) -> bool:
    """`password: changeme` alone on its line: YAML, where a bare word is a string, not a variable."""
    if m.group("sep") != ":" or m.group("kq"):
        return False
    text, window = m.string, 120  # look no further than a YAML line's indent and trailing comment
    newline_before = text.rfind("\n", max(0, m.start() - window), m.start())
    if newline_before == -1 and m.start() > window:
        return False
    newline_after = text.find("\n", m.end(), m.end() + window)
    if newline_after == -1 and len(text) > m.end() + window:
        return False
    rest = text[m.end() : newline_after if newline_after != -1 else len(text)].strip()
    return (not rest or rest.startswith("#")) and bool(_YAML_INDENT.fullmatch(text, newline_before + 1, m.start()))


def _accept_assignment(m: re.Match[str]) -> bool:
    """A value assigned to a secret-like name, judged by the form of the assignment and the value's look."""
    name = m.group("name")
    strength = _name_strength(name)
    if strength == _NONE:
        return False
    group = next(g for g in _KV_VALUE_GROUPS if m.group(g) is not None)
    value = m.group(group)
    if _is_excluded_value(value) or _names_a_secret(value, name):
        return False
    if m.group("sep") == ":" and (m.group("sp1") or not (m.group("sp2") or group != "v_bare")):
        return False  # `Pass :meth:`, `input:TokenStream`: not a key-value pair
    env_style = group == "v_bare" and _is_env_style(m)
    if group == "v_bare" and not env_style:
        if value.isdigit() and len(value) < 6:
            return False  # ports, counts, lifetimes
        following = m.string[m.end() : m.end() + 1]
        if _looks_like_code(value, following) and not _is_yaml_literal(m):
            return False
    if strength == _WEAK:
        return "/" not in value and _looks_random(value)  # not `key = "datasets/2019/part-0.parquet"`
    if _is_password_name(name) or env_style:
        return group == "v_bare" or not _is_prose(value)
    return _looks_like_credential(value)


_QUOTED_VALUE = (
    r"""(?:[rbuRBU]?\\"(?P<v_esc>[^"\\\n]{1,400})\\\""""
    r"""|[rbuRBU]?"(?P<v_dq>(?:[^"\\\n]|\\.){1,400})\""""
    r"""|[rbuRBU]?'(?P<v_sq>[^'\n]{1,400})'"""
    r"""|`(?P<v_bt>[^`\n]{1,400})`"""
    r"""|(?P<v_bare>[^\s"'`,;&|()<>{}\[\]\\=][^\s"'`,;&|()<>{}\[\]\\]{0,400}))"""
)

_RULES: tuple[_Rule, ...] = (
    _Rule(
        KIND_PRIVATE_KEY,
        re.compile(
            r"-----BEGIN[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:[\s\S]{0,12000}?-----END[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-----"
            r"|(?:\s|\\n)+[A-Za-z0-9+/=\s\\:,-]{40,})"  # a block cut short (trimmed output): its base64 body
        ),
    ),
    _Rule(KIND_AWS, re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b")),
    _Rule(
        KIND_AWS,
        re.compile(
            r"(?i)(?:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_.-]?access[_.-]?key)"
            r"\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
            r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
        ("value",),
    ),
    _Rule(KIND_ANTHROPIC, re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    _Rule(KIND_OPENAI, re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"), accept=_has_letter_and_digit),
    _Rule(KIND_GITHUB, re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b|\bgithub_pat_[A-Za-z0-9_]{22,255}")),
    _Rule(
        KIND_SLACK,
        re.compile(r"\bxox[abposre]-[0-9A-Za-z-]{10,}|\bxapp-\d-[0-9A-Za-z-]{10,}"
                   r"|hooks\.slack\.com/(?:services|workflows|triggers)/(?P<hook>[A-Za-z0-9/_-]{16,})"),
        ("hook", 0),
    ),
    _Rule(KIND_STRIPE, re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}|\bwhsec_[A-Za-z0-9+/=]{20,}")),
    _Rule(
        KIND_GOOGLE,
        re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])|\bGOCSPX-[A-Za-z0-9_-]{20,}|\bya29\.[0-9A-Za-z_-]{20,}"),
    ),
    _Rule(KIND_JWT, re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*")),
    _Rule(  # scheme://user:PASS@host keeps user and host
        KIND_PASSWORD,
        re.compile(
            r"\b[A-Za-z][A-Za-z0-9+.-]{1,30}://[^\s:/@'\"<>]{0,256}:(?P<value>[^\s@/'\"<>]{1,256})@(?=[\w.\[-])"
        ),
        ("value",),
        _accept_literal,
    ),
    _Rule(
        KIND_PASSWORD,
        re.compile(
            r"(?i)\b(?:proxy-)?authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
            r"(?P<scheme>(?:bearer|basic|token|bot|digest|apikey|sso-key)[ \t]+)?"
            r"(?P<value>[A-Za-z0-9._~+/=-]{8,4096})"
        ),
        ("value",),
        _accept_authorization,
    ),
    _Rule(  # curl -u user:PASS, --user user:PASS
        KIND_PASSWORD,
        re.compile(r"(?:^|\s)(?:-u|--user)[ \t]+[\"']?[^\s:\"']{1,256}:(?P<value>[^\s\"']{1,256})"),
        ("value",),
        _accept_literal,
    ),
    _Rule(  # mysql -pPASS
        KIND_PASSWORD,
        re.compile(r"\bmysql(?:dump|admin|sh)?\b[^\n|;&]{0,200}?[ \t]-p(?P<value>[^\s\"'-][^\s\"']{0,256})"),
        ("value",),
        _accept_literal,
    ),
    _Rule(
        KIND_PASSWORD,
        re.compile(r"<(?P<name>[A-Za-z_][\w.-]{0,60})>(?P<value>[^<>\s]{1,400})</(?P=name)>"),
        ("value",),
        _accept_xml,
    ),
    _Rule(  # --password hunter2 (the `--name=value` form is an assignment)
        KIND_PASSWORD,
        re.compile(
            r"(?:^|\s)--?(?P<name>[A-Za-z][A-Za-z0-9-]{1,60})[ \t]+[\"']?"
            r"(?P<value>[^\s\"'<>|&;$\\-][^\s\"'\\]{0,400})"
        ),
        ("value",),
        _accept_flag,
    ),
    _Rule(
        KIND_PASSWORD,
        re.compile(
            r"(?<![A-Za-z0-9_])"
            r"(?=[A-Za-z0-9_.-]{0,80}?(?i:pass|pwd|pw|secret|token|credential|key))"  # cheap pre-filter on the name
            r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,80})(?P<kq>\\?[\"']\]?)?"  # `"key": `, `["KEY"] = `
            r"(?P<sp1>[ \t]*)(?P<sep>:=|=>|=(?![=~])|:(?![:/=]))(?P<sp2>[ \t]*)" + _QUOTED_VALUE
        ),
        _KV_VALUE_GROUPS,
        _accept_assignment,
    ),
)


def _span(rule: _Rule, m: re.Match[str]) -> tuple[int, int] | None:
    for group in rule.groups:
        if m.group(group) is not None:
            return m.span(group)
    return None


def _candidates(rule: _Rule, text: str) -> Iterator[re.Match[str]]:
    """The rule's accepted matches. A rejected match gives its text back, so `-var="db_password=…"` is still seen
    after `var="…"` was judged not a secret."""
    position = 0
    while (m := rule.pattern.search(text, position)) is not None:
        span = _span(rule, m)
        if span is not None and span[0] < span[1] and rule.accept(m):
            yield m
            position = max(m.end(), m.start() + 1)
        else:
            position = m.start() + 1


def find_secrets(text: str) -> list[SecretMatch]:
    """Every secret in `text`, in order, non-overlapping; overlapping finds merge and keep the most specific kind."""
    placeholders = [m.span() for m in PLACEHOLDER_RE.finditer(text)]
    found: list[tuple[int, int, int, str]] = []  # start, end, priority, kind
    for priority, rule in enumerate(_RULES):
        for m in _candidates(rule, text):
            span = _span(rule, m)
            if span is None or any(start < span[1] and span[0] < end for start, end in placeholders):
                continue  # already redacted: keeps redaction idempotent
            found.append((span[0], span[1], priority, rule.kind))
    found.sort()
    merged: list[SecretMatch] = []
    best_priority = 0
    for start, end, priority, kind in found:
        if merged and start < merged[-1].end:
            last = merged[-1]
            if priority < best_priority:
                best_priority, kind_kept = priority, kind
            else:
                kind_kept = last.kind
            merged[-1] = SecretMatch(kind_kept, last.start, max(last.end, end))
        else:
            merged.append(SecretMatch(kind, start, end))
            best_priority = priority
    return merged


def redact(text: str) -> str:
    """`text` with every secret replaced by its typed placeholder; idempotent."""
    if not text:
        return text
    matches = find_secrets(text)
    if not matches:
        return text
    pieces: list[str] = []
    position = 0
    for match in matches:
        pieces.append(text[position : match.start])
        pieces.append(placeholder(match.kind))
        position = match.end
    pieces.append(text[position:])
    return "".join(pieces)
