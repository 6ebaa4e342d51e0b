"""Build the eighth report half (`report8/`) mechanically from two scanners' published rule tests.

    python benchmarks/redaction_corpus/build_report8.py TWOMS_GIT_DIR CUSTOM_PATTERNS_GIT_DIR

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 11, and its
output was committed without running the redactor on it. Sources, read with `git show` at their HEAD:
- Checkmarx/2ms (Apache-2.0): `engine/rules/ruledefine/*_test.go`, each rule test's `truePositives` and
  `falsePositives` (Go string literals, evaluated as build_report5 does; an element built any other way is left
  out; of the examples holding the same values, the first EXAMPLES_PER_VALUE). The secret is marked where the rule's own regex captures it, as gitleaks (which 2ms runs) does: the rule's
  `SecretGroup`, else its first non-empty group, else the whole match; the regex is the rule file's Go expression
  evaluated here (`regexp.MustCompile`, 2ms's `generateSemiGenericRegex`/`generateUniqueTokenRegex` and their
  alphabet helpers, `utils.MergeRegexps`, `+`); a rule whose regex cannot be evaluated is left out. Captures are
  narrowed as build_report6 does (a URL's password, a webhook's path).
- advanced-security/secret-scanning-custom-patterns (MIT): each credential pattern's `test: data` (marked at its
  `start_offset`/`end_offset`) and its `expected` matches in the test files beside it (marked at their offsets;
  the example is the lines holding the match); a match holding a whole connection string, SAS or URL is narrowed
  to its password or signature.
Rules that do not describe a credential are left out by name (build_report3's list, hosts, client ids, PII, IP
addresses, e-mails, internal URLs, public keys, action pins). Each kind's first values (up to CONTEXT_VALUES) are also
placed in transcript contexts written for report8, rotating. Values that read as placeholders (build_report3's test)
and values already in other folders are left out. Clean lines: the rules' false positives and the custom patterns'
non-credential test files holding no key-like token (build_report5's test), then look-alikes drawn with a fixed seed
from templates written for report8.
"""

from __future__ import annotations

import random
import re
import sys
from functools import partial
from pathlib import Path

import regex
import yaml

from build_report3 import NOT_CREDENTIALS, existing_values
from build_report4 import Draw, Example, draw_lines, git, kebab, placeholder, write_half
from build_report5 import GoExpression, go_constants, holds_no_key
from build_report5 import in_context as report5_in_context
from build_report5 import secret_entries as report5_secret_entries
from build_report6 import narrowed

OUT = Path(__file__).resolve().parent / "report8"
TWOMS_RULES = "engine/rules/ruledefine"
CUSTOM_FOLDERS = ("common", "configs", "database", "generic", "jwt", "password_store", "rsa", "uri", "vendors")
# custom patterns that are not credentials (hosts, ids, addresses, public keys, pins, PII), and the common-password
# list: bare words on lines of their own, which nothing marks (as report3 left out Kingfisher's weak passwords).
CUSTOM_NOT_CREDENTIALS = {
    "common_passwords_shortlist", "azure_sql_connection_string", "github_actions_sha_checker", "uuids", "ssh_public_key", "hardcoded_internal_emails",
    "hardcoded_internal_urls", "any_ipv4_addresses", "ghcr_typos",
}
# 2ms rules named for something that is not a credential (beside build_report3's list).
TWOMS_NOT_CREDENTIALS = re.compile(r"Client-Id|ClientId|Client-ID|\bHost\b|Public|Account-Id", re.IGNORECASE)
# Many 2ms tests place one value in gitleaks' ~80 sample templates (which the tuning side already holds): a value's
# first examples are kept, so no kind outweighs the others.
EXAMPLES_PER_VALUE = 2
CONTEXT_VALUES = 2


class GoRegex:
    """Evaluates the Go expressions 2ms builds its rule regexes from, to the regex text they produce."""

    TOKEN = re.compile(
        r"(?:\s|//[^\n]*)*(?:(?P<raw>`[^`]*`)|(?P<str>\"(?:[^\"\\\n]|\\.)*\")|(?P<list>\[\]string\{)|(?P<name>[A-Za-z_][\w.]*)"
        r"|(?P<punct>[()+,}])|(?P<int>\d+))"
    )
    ALPHABETS = {
        "Numeric": "[0-9]{%s}", "Hex": "[a-f0-9]{%s}", "AlphaNumeric": "[a-z0-9]{%s}",
        "AlphaNumericExtendedShort": "[a-z0-9_-]{%s}", "AlphaNumericExtended": r"[a-z0-9=_\-]{%s}",
        "AlphaNumericExtendedLong": r"[a-z0-9\/=_\+\-]{%s}",
    }
    IDENTIFIER_PREFIX, IDENTIFIER_SUFFIX = r"[\w.-]{0,50}?(?:", r")(?:[ \t\w.-]{0,20})[\s'\"]{0,3}"
    XML_SUFFIX = r")(?:[0-9a-z\-_\t .]{0,20})(?:<\/key>\s{0,10}<string)?(?:[\s|']|[\s|\"]){0,3}"
    OPERATOR = r"(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"
    SECRET_PREFIX, SECRET_SUFFIX = r"[\x60'\"\s=]{0,20}(", r")(?:[\x60'\"\s;]|\\[nr]|$)"
    XML_SECRET_SUFFIX = r")(?:['|\"|\n|\r|\s|\x60|;]|\\n|\\r|$|\s{0,10}<\/string>)"

    def __init__(self, source: str):
        self.source = source
        self.variables: dict[str, object] = {}
        for _ in range(3):  # variables defined from variables
            for m in re.finditer(r"(?m)^var\s+([A-Za-z_]\w*)\s*=\s*", source):
                try:
                    self.variables[m.group(1)] = self.parse(m.end())[0]
                except (ValueError, KeyError, IndexError):
                    pass

    def token(self, at: int) -> tuple[str, str, int]:
        m = self.TOKEN.match(self.source, at)
        if not m:
            raise ValueError(f"cannot read {self.source[at:at + 30]!r}")
        return m.lastgroup, m.group(m.lastgroup), m.end()

    def parse(self, at: int) -> tuple[object, int]:
        value, at = self.term(at)
        while (tok := self.token(at))[0] == "punct" and tok[1] == "+":
            more, at = self.term(tok[2])
            value = value + more
        return value, at

    def arguments(self, at: int, closing: str) -> tuple[list, int]:
        values: list = []
        while True:
            kind, text, after = self.token(at)
            if kind == "punct" and text == closing:
                return values, after
            if kind == "punct" and text == ",":
                at = after
                continue
            value, at = self.parse(at)
            values.append(value)

    def term(self, at: int) -> tuple[object, int]:
        kind, text, at = self.token(at)
        if kind == "raw":
            return text[1:-1], at
        if kind == "str":
            return text[1:-1].encode().decode("unicode_escape"), at
        if kind == "int":
            return text, at
        if kind == "list":
            return self.arguments(at, "}")
        if kind != "name":
            raise ValueError(f"unexpected {text!r}")
        if text in ("true", "false"):
            return text == "true", at
        if self.token(at)[1] != "(":
            return self.variables[text], at
        args, at = self.arguments(self.token(at)[2], ")")
        if text.endswith(".String"):  # a compiled regex's text
            return self.variables[text.removesuffix(".String")], at
        if m := re.compile(r"\s*\.\s*String\(\)").match(self.source, at):
            at = m.end()
        return self.call(text, args), at

    def call(self, name: str, args: list) -> object:
        if name in ("regexp.MustCompile", "regexp.MustCompilePOSIX"):
            return args[0]
        if name in self.ALPHABETS:
            return self.ALPHABETS[name] % args[0]
        if name == "Hex8_4_4_4_12":
            return r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        if name == "utils.MergeRegexps":
            return "|".join(args)
        if name == "append":
            return args[0] + args[1:]
        if name == "generateUniqueTokenRegex":
            return ("(?i)" if args[1] else "") + r"\b(" + args[0] + self.SECRET_SUFFIX
        if name in ("generateSemiGenericRegex", "generateSemiGenericRegexIncludingXml"):
            xml = name.endswith("Xml")
            identifiers = self.IDENTIFIER_PREFIX + "|".join(args[0]) + (self.XML_SUFFIX if xml else self.IDENTIFIER_SUFFIX)
            head = "(?i)" + identifiers if args[2] else r"[\w.-]{0,50}?(?i:" + identifiers + ")"
            return head + self.OPERATOR + self.SECRET_PREFIX + args[1] + (self.XML_SECRET_SUFFIX if xml else self.SECRET_SUFFIX)
        raise ValueError(f"unknown function {name}")


def twoms_rules(git_dir: str) -> dict[str, tuple[str, regex.Pattern, int]]:
    """Rule function name -> (rule name, compiled regex, secret group) for each rule whose regex evaluates."""
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", TWOMS_RULES).split() if p.endswith(".go") and not p.endswith("_test.go")]
    source = "\n".join(git(git_dir, "show", f"HEAD:{path}") for path in sorted(paths))
    evaluator = GoRegex(source)
    rules = {}
    for m in re.finditer(r"(?m)^func (\w+)\(\) \*Rule \{(.*?)^\}", source, re.DOTALL):
        body = m.group(2)
        name = re.search(r'RuleName:\s*"([^"]+)"', body)
        field = re.search(r"\bRegex:\s*", body)
        if not name or not field:
            continue
        try:
            pattern = evaluator.parse(source.index(body) + field.end())[0]
            compiled = regex.compile(pattern.replace(r"\z", r"\Z"), regex.V1)
        except (ValueError, KeyError, IndexError, regex.error):
            continue
        group = re.search(r"SecretGroup:\s*(\d+)", body)
        rules[m.group(1)] = (name.group(1), compiled, int(group.group(1)) if group else 0)
    return rules


def go_string_list(text: str, field: str) -> list[str]:
    """The evaluable string elements of every `field: []string{...}` list in a Go test file."""
    values: list[str] = []
    for m in re.finditer(rf"\b{field}:\s*\[\]string\{{", text):
        evaluator, at = GoExpression(go_constants(text)), m.end()
        while True:
            at = re.compile(r"(?:\s|//[^\n]*)*").match(text, at).end()
            if text.startswith("}", at):
                break
            parsed = evaluator.parse(text, at)
            if parsed is None:
                break  # built another way: the rest of the list is left out
            values.append(parsed[0])
            at = re.compile(r"[ \t]*,?").match(text, parsed[1]).end()
    return values


def gitleaks_span(pattern: regex.Pattern, group: int, m: regex.Match) -> tuple[int, int]:
    """Where gitleaks finds the secret: the rule's group, else the first non-empty group, else the whole match."""
    if group:
        return m.span(group)
    return next((m.span(i) for i in range(1, pattern.groups + 1) if m.group(i)), m.span())


def twoms_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    rules = twoms_rules(git_dir)
    tests = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", TWOMS_RULES).split() if p.endswith("_test.go")]
    examples: list[Example] = []
    negatives: list[str] = []
    shown: dict[tuple[str, ...], int] = {}  # examples kept per set of values
    for path in sorted(tests):
        text = git(git_dir, "show", f"HEAD:{path}")
        called = re.search(r"TwomsToGitleaksRule\((\w+)\(\)\)", text)
        if not called or called.group(1) not in rules:
            continue
        name, pattern, group = rules[called.group(1)]
        if NOT_CREDENTIALS.search(name.replace("-", " ")) or TWOMS_NOT_CREDENTIALS.search(name):
            continue
        for example in go_string_list(text, "truePositives"):
            spans = []
            for m in pattern.finditer(example):
                start, end = credential_part(example, gitleaks_span(pattern, group, m))
                while start < end and example[start] in "\"'`":
                    start += 1
                while end > start and example[end - 1] in "\"'`":
                    end -= 1
                if end > start and not placeholder(example[start:end]):
                    spans.append((start, end))
            values = tuple(sorted({example[a:b] for a, b in spans}))
            shown[values] = shown.get(values, 0) + 1
            if spans and shown[values] <= EXAMPLES_PER_VALUE:
                examples.append((kebab(name), example.strip("\n"), sorted(set(spans)), f"2ms {path}"))
        for negative in go_string_list(text, "falsePositives"):
            negatives += negative.splitlines()
    return examples, negatives


def lines_around(text: str, start: int, end: int) -> tuple[str, tuple[int, int]]:
    """The whole lines holding [start, end), and the span inside them."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    last = len(text) if last < 0 else last
    return text[first:last], (start - first, end - first)


CREDENTIAL_PARAMETER = re.compile(r"(?i)(?:password|pwd|sig|X-Amz-Signature)=([^;&\s\"']+)")
SLACK_WEBHOOK = re.compile(r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/")  # then the secret path


def credential_part(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """A match holding a whole connection string, SAS or presigned URL narrowed to its password or signature, a
    Slack webhook URL to its path, a `user:password` after `://` to the password (the convention), else
    build_report6's narrowing."""
    start, end = span
    if m := CREDENTIAL_PARAMETER.search(text, start, end):
        return m.span(1)
    if m := SLACK_WEBHOOK.match(text, start, end):
        return m.end(), end
    if text[:start].endswith("://") and ":" in text[start:end]:
        return text.index(":", start) + 1, end
    return narrowed(text, span)


def custom_pattern_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    examples: list[Example] = []
    used_files: set[str] = set()
    for folder in CUSTOM_FOLDERS:
        patterns = yaml.safe_load(git(git_dir, "show", f"HEAD:{folder}/patterns.yml"))["patterns"]
        for pattern in patterns:
            for expected in pattern.get("expected") or []:
                used_files.add(f"{folder}/{expected['name']}")
            if pattern["type"] in CUSTOM_NOT_CREDENTIALS:
                continue
            kind = pattern["type"].replace("_", "-")
            tests = pattern.get("test") or []
            for test in [tests] if isinstance(tests, dict) else tests:
                data = test.get("data") or ""
                end = test.get("end_offset")
                end = len(data.rstrip("\n")) if end in (None, -1) else end
                examples.append((kind, data.rstrip("\n"), [(test.get("start_offset") or 0, end)], f"custom-patterns {folder}/patterns.yml"))
            for expected in pattern.get("expected") or []:
                text = git(git_dir, "show", f"HEAD:{folder}/{expected['name']}").encode()
                start = len(text[: expected["start_offset"]].decode(errors="replace"))
                end = len(text[: expected["end_offset"]].decode(errors="replace"))
                example, span = lines_around(text.decode(errors="replace"), start, end)
                examples.append((kind, example, [span], f"custom-patterns {folder}/{expected['name']}"))
    kept = []
    for kind, text, spans, source in examples:
        spans = [span for span in (credential_part(text, span) for span in spans) if not placeholder(text[span[0] : span[1]].strip("\"'`"))]
        if spans:
            kept.append((kind, text, spans, source))
    files = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD").splitlines() if p.split("/")[0] in CUSTOM_FOLDERS]
    negatives = []
    for path in sorted(files):
        if path not in used_files and not path.endswith((".yml", ".md", ".csv", ".py", ".keystore")) and "/" in path:
            negatives += git(git_dir, "show", f"HEAD:{path}").splitlines()
    return kept, negatives


CONTEXTS = (
    "OK, I found the culprit: the {name} in `.envrc` was stale. The working one is {value}, now in 1Password too.",
    "<<<\n# ~/.config/acme/credentials\n[default]\n{lower} = {value}\n>>>",
    "railway variables --set {env}={value}",
    "<<<\napiVersion: v1\nkind: ConfigMap\ndata:\n  {env}: \"{value}\"\n>>>",
    'let {camel} = "{value}".to_string();',
    "pulumi config set --secret {camel} {value}",
    "<<<\n[tool.acme]\n{lower} = \"{value}\"\nretries = 3\n>>>",
    "Traceback: requests.exceptions.HTTPError: 401 Client Error for url: https://api.example.io/v2/items ({lower}={value})",
    "doppler secrets set {env}=\"{value}\" --project web",
    'System.setProperty("{dotted}", "{value}");',
    "<<<\n$ cat .env.local\nNODE_ENV=development\n{env}={value}\n>>>",
    "| {env} | `{value}` | set by the deploy job |",
    'process.env.{env} ??= "{value}";',
    "netlify env:set {env} {value}",
)


in_context = partial(report5_in_context, contexts=CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report8."""
    draw = Draw(rng)
    hexs, uid, b64, pick = draw.hexs, draw.uid, draw.b64, draw.pick
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    lower = "abcdefghijklmnopqrstuvwxyz"

    def vendor() -> str:
        return rng.choice(["anthropic", "sentry", "datadog", "okta", "grafana", "alibaba", "clojars", "codecov", "railway"])

    groups: dict[str, list] = {
        "references and empty values under key names": [
            lambda: f"railway variables --set {vendor().upper()}_TOKEN='${{{{shared.{vendor().upper()}_TOKEN}}}}'",
            lambda: f"pulumi config set --secret {vendor()}Token  # value typed at the prompt",
            lambda: f"{vendor().upper()}_API_KEY=op://Engineering/{vendor()}/credential",
            lambda: f'let token = std::env::var("{vendor().upper()}_TOKEN").expect("{vendor().upper()}_TOKEN not set");',
            lambda: f"doppler secrets get {vendor().upper()}_API_KEY --plain --project web",
            lambda: f'  {vendor()}_api_key = "" # filled in by CI',
        ],
        "build, package and VCS output": [
            lambda: f"   Compiling acme-{pick(lower, 6)} v0.{rng.randint(1, 9)}.{rng.randint(0, 20)} (registry+https://github.com/rust-lang/crates.io-index)",
            lambda: f"checksum = \"{hexs(64)}\"",
            lambda: f"Merge made by the 'ort' strategy. {hexs(40)}",
            lambda: f"  resolved \"https://registry.yarnpkg.com/lodash/-/lodash-4.17.{rng.randint(10, 21)}.tgz#{hexs(40)}\"",
            lambda: f"Successfully built {hexs(12)}",
            lambda: f"poetry.lock: content-hash = \"{hexs(64)}\"",
        ],
        "ids, hashes and media": [
            lambda: f"event_id: {hexs(32)}",
            lambda: f"dd.trace_id={rng.randint(10**18, 10**19)} dd.span_id={rng.randint(10**18, 10**19)}",
            lambda: f"<img alt=\"logo\" src=\"data:image/webp;base64,UklGR{b64(45)}\">",
            lambda: f"\"integrity\": \"sha384-{b64(48)}\"",
            lambda: f"session_id={uid()} user_id={rng.randint(1000, 99999)}",
            lambda: f"okta user id 00u{pick(alnum, 17)}",
            lambda: f"Request ID: req_{pick(alnum, 24)}",
        ],
        "code and prose that handle keys": [
            "Anthropic keys start with `sk-ant-` and are shown once; store them in the vault right away.",
            "let api_key = secrets.get(\"sentry/auth-token\")?;",
            "DD_API_KEY must be set in the agent's environment, not in datadog.yaml committed to git.",
            "if token.len() < 40 { return Err(Error::InvalidToken); }",
            "The Okta SSWS token belongs to a service user; revoke it under Security > API > Tokens.",
            "masked = key[:4] + \"*\" * (len(key) - 4)",
            "Rotate the Clojars deploy token after every release manager change.",
            "export SENTRY_AUTH_TOKEN=\"$(op read op://ci/sentry/token)\"",
        ],
        "URLs without credentials": [
            lambda: f"https://sentry.io/organizations/acme/issues/{rng.randint(10**9, 10**10)}/?project={rng.randint(10**6, 10**7)}",
            lambda: f"https://app.datadoghq.com/dashboard/{pick(lower, 3)}-{pick(lower, 3)}-{pick(lower, 3)}/overview",
            lambda: f"https://acme.okta.com/app/UserHome?fromLogin=true&iss={hexs(20)}",
            lambda: f"https://clojars.org/acme/{pick(lower, 7)}/versions/{rng.randint(1, 9)}.{rng.randint(0, 20)}.0",
        ],
    }
    return draw_lines(rng, groups, per_template=4, least=30)


def main(twoms_dir: str, custom_patterns_dir: str) -> None:
    twoms, twoms_negatives = twoms_examples(twoms_dir)
    custom, custom_negatives = custom_pattern_examples(custom_patterns_dir)
    secrets, kinds = report5_secret_entries(twoms + custom, existing_values(OUT.parent, "report8"), in_context, CONTEXT_VALUES)
    commits = {
        "Checkmarx/2ms": git(twoms_dir, "rev-parse", "HEAD").strip(),
        "advanced-security/secret-scanning-custom-patterns": git(custom_patterns_dir, "rev-parse", "HEAD").strip(),
    }
    write_half(
        OUT,
        commits,
        "Apache-2.0, MIT",
        secrets,
        kinds,
        [
            (f"2ms false positives holding no key-like token (2ms@{commits['Checkmarx/2ms']})", twoms_negatives),
            ("custom patterns' test files without a credential match, holding no key-like token", custom_negatives),
        ],
        holds_no_key,
        drawn_lookalikes(random.Random(8088)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
