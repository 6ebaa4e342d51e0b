"""Build the fifteenth report half (`report15/`) mechanically from the published test cases of three secret scanners.

    python benchmarks/redaction_corpus/build_report15.py OCTARINE DEEPSECRETS BETTERLEAKS

(the arguments git directories of octarinesec/secret-detector, avito-tech/deepsecrets and betterleaks/betterleaks).

Kept so that the half can be rebuilt and audited: it was run beside version 21's rules, and its output was written
without running the redactor on it. Sources, read with `git show` at HEAD:
- octarinesec/secret-detector (Apache-2.0), `pkg/detectors/*/*_test.go`: each detector's `testCases`
  (`{name, input, expectDetection}`, Go string literals; inputs built by a function call are left out). An input
  expected detected is an example; its value is marked where the detector's value sits in it (OCTARINE_VALUE: the
  part after `AccountKey=`, after `Basic `/`Bearer `, inside the quotes after `aws`, the URL's password, the value
  after a keyword's separator, after `_authToken=`; else the whole input). Kind = the detector's `SecretType` in
  kebab case. Also `pkg/tests/scanner_test.go`'s `input` map, each entry written `key=value` (the form the
  detector tests' `TestScanWithKey` feeds), kind from its detector (OCTARINE_SCANNER_KEYS). Inputs expected not
  detected are clean candidates.
- avito-tech/deepsecrets (MIT), `tests/fixtures/regex_checks.txt` with `tests/core/engines/regex/test_regex.py`: the
  test expects 9 findings, in file order: the two lines under `# S0`, the five key blocks under `# S1` to `# S5`,
  and the first two lines under `# S19`. Kind = the rule's `name` in `deepsecrets/rules/regexes.json`, kebab case.
  A key block is marked whole, a URL's password alone. The other lines of the file are clean candidates.
- betterleaks/betterleaks (MIT), `cmd/generate/config/rules/*.go`: per rule, its `Regex` rebuilt in Python from its
  Go expression (`regexp.MustCompile`, `utils.GenerateUniqueTokenRegex`, `utils.GenerateSemiGenericRegex`,
  `utils.MergeRegexps` over string literals and the `utils` character-class helpers, as `utils/generate.go` and
  `utils/patterns.go` write them; a rule whose expression uses anything else is left out), and its `tps` and `fps`
  elements that are string literals (or `+` joins of them; generated samples are left out). In each `tps` literal
  the secret is marked where the rule's regex captures it (its `SecretGroup`, else group 1, else the match).
  Kind = the rule id. Rules marked `SkipReport: true` (components of a composite rule, e.g. a cloud name, which
  betterleaks never reports alone) give no secrets. `fps` literals are clean candidates.
A captured span is narrowed to its credential (build_report15's credential_span: quotes around it dropped; of a
URL holding `user:password@`, the password; of a Slack webhook URL, its path, as report8 marks it, to the path's
end where betterleaks' regex stops at 56 characters; of curl's `-u user:password`, the password). Left out of the secrets: values build_report11's test rejects (placeholders, short words, code references) and
values found (plain substring search) in another folder's `secrets.txt`. Of the examples holding the same values of
a kind, the first 2 are kept. Each kind's first values (up to CONTEXT_VALUES, single-line only) are also placed in
transcript contexts written for report15, rotating.
Clean candidates lose lines holding a value this half marks, lines assigning a credential-named key
(build_report12's CREDENTIAL_KEY) and lines holding a key-like token (build_report10's clean_fit). Then look-alikes
drawn with a fixed seed from templates written for report15.
"""

from __future__ import annotations

import ast
import json
import random
import re
import sys
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

import regex

from build_report4 import Draw, Example, draw_lines, git, write_half
from build_report8 import SLACK_WEBHOOK
from build_report9 import merged
from build_report10 import clean_fit, fill_context, first_per_value, kind_name
from build_report11 import kept_value, placed_entries
from build_report12 import CREDENTIAL_KEY, KEY_OF_LINE

OUT = Path(__file__).resolve().parent / "report15"
SEED = 15150
CONTEXT_VALUES = 2

# ---------------------------------------------------------------- octarinesec/secret-detector
OCTARINE_DETECTORS = "pkg/detectors"
OCTARINE_SCANNER_TEST = "pkg/tests/scanner_test.go"
GO_STRING = r'(?:"(?:[^"\\\n]|\\.)*"|`[^`]*`)'
OCTARINE_CASE = re.compile(r"\{\s*(" + GO_STRING + r")\s*,\s*(" + GO_STRING + r")\s*,\s*(true|false)\s*\}")
OCTARINE_TYPE = re.compile(r'(?m)^\s*\w*[sS]ecretType\s*=\s*"([^"]+)"|SecretType\(\) string \{\s*return "([^"]+)"')
OCTARINE_VALUE = {  # test file -> where the detector's value sits in the input (group 1)
    "azure/storage_key_detector_test.go": re.compile(r"AccountKey=(\S+)"),
    "basicauth/basic_auth_detector_test.go": re.compile(r"(?i)basic\s+([A-Za-z0-9+/=_,.~-]+)"),
    "bearerauth/bearer_auth_detector_test.go": re.compile(r"(?i)bearer\s+([A-Za-z0-9+/=_,.~-]+)"),
    "aws/aws_secret_key_detector_test.go": re.compile(r"""["']([^"']+)["']"""),
    "generic/url_password_detector_test.go": re.compile(r"://[^\s/]*:([^:@/\s]+)@"),
    "keyword/keyword_detector_test.go": re.compile(r"""(?::=|=|:)\s*["']?([^"'\s]+)["']?\s*$"""),
    "npm/npm_token_detector_test.go": re.compile(r"_authToken=(\S+)"),
}
OCTARINE_SCANNER_KEYS = {  # scanner_test.go's input keys -> the detector test file of their type
    "artifactory": "artifactory/artifactory_detector_test.go", "awsClientId": "aws/aws_client_id_detector_test.go",
    "awsKey": "aws/aws_secret_key_detector_test.go", "mws": "aws/mws_key_detector_test.go",
    "azure": "azure/storage_key_detector_test.go", "basicAuth": "basicauth/basic_auth_detector_test.go",
    "bearerAuth": "bearerauth/bearer_auth_detector_test.go", "high_entropy_str": "generic/high_entropy_string_detector_test.go",
    "url": "generic/url_password_detector_test.go", "github": "github/github_detector_test.go",
    "jwt": "jwt/jwt_detector_test.go", "secretKeyword": "keyword/keyword_detector_test.go",
    "mailchimp": "mailchimp/mailchimp_detector_test.go", "npm": "npm/npm_token_detector_test.go",
    "pk": "privatekey/private_key_detector_test.go", "sendgrid": "sendgrid/sendgrid_detector_test.go",
    "slack": "slack/slack_detector_test.go", "slack_webhook": "slack/slack_detector_test.go",
    "square": "square/square_detector_test.go", "stripe": "stripe/stripe_detector_test.go",
    "twilio": "twilio/twilio_auth_detector_test.go",
}


def go_string(literal: str) -> str:
    """A Go string literal's value (raw backticks as written; interpreted strings by Python's compatible escapes)."""
    return literal[1:-1] if literal.startswith("`") else ast.literal_eval(literal)


def octarine_span(test: str, text: str) -> tuple[int, int] | None:
    shape = OCTARINE_VALUE.get(test)
    if shape is None:
        return (0, len(text)) if text.strip() else None
    m = shape.search(text)
    return m.span(1) if m else None


def octarine_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    examples: list[Example] = []
    negatives: list[str] = []
    kinds: dict[str, str] = {}
    tests = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", OCTARINE_DETECTORS).splitlines() if p.endswith("_test.go") and "/helpers/" not in p and "/tests/" not in p]
    for path in tests:
        test = path[len(OCTARINE_DETECTORS) + 1 :]
        detector = git(git_dir, "show", f"HEAD:{path.replace('_test.go', '.go')}")
        kinds[test] = kind_name(next(name for name in OCTARINE_TYPE.search(detector).groups() if name))
        for _, literal, expected in OCTARINE_CASE.findall(git(git_dir, "show", f"HEAD:{path}")):
            text = go_string(literal)
            if expected == "false":
                negatives += text.split("\n")
                continue
            span = octarine_span(test, text)
            if span:
                examples.append((kinds[test], text, [span], f"secret-detector {path}"))
    scanner = git(git_dir, "show", f"HEAD:{OCTARINE_SCANNER_TEST}")
    keys = dict(re.findall(r'(?m)^\s*(\w+Key)\s*=\s*"(\w+)"', scanner))
    body = scanner[scanner.index("input = map[string]string{") :]
    body = body[: body.index("\n\t}")]
    for const, literal in re.findall(r"(?m)^\s*(\w+):\s*(" + GO_STRING + r"),", body):
        key = keys[const]
        test = OCTARINE_SCANNER_KEYS[key]
        value = go_string(literal)
        text = f"{key}={value}"
        span = octarine_span(test, value)
        if span:
            examples.append((kinds[test], text, [(span[0] + len(key) + 1, span[1] + len(key) + 1)], f"secret-detector {OCTARINE_SCANNER_TEST}"))
    return examples, negatives


# ---------------------------------------------------------------- avito-tech/deepsecrets
DEEPSECRETS_CHECKS = "tests/fixtures/regex_checks.txt"
DEEPSECRETS_RULES = "deepsecrets/rules/regexes.json"
DEEPSECRETS_EXPECTED = {"S0": None, "S1": None, "S2": None, "S3": None, "S4": None, "S5": None, "S19": 2}  # per test_regex.test_1
URL_PASSWORD = re.compile(r"://[^\s/:@]*:([^@\s/]+)@")


def deepsecrets_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    names = {rule["id"]: rule["name"] for rule in json.loads(git(git_dir, "show", f"HEAD:{DEEPSECRETS_RULES}"))}
    text = git(git_dir, "show", f"HEAD:{DEEPSECRETS_CHECKS}")
    examples: list[Example] = []
    negatives: list[str] = []
    for section in re.split(r"(?m)^(?=# S\d+\s*$)", text):
        head, _, body = section.partition("\n")
        rule = head[2:].strip()
        if rule not in DEEPSECRETS_EXPECTED:
            negatives += section.split("\n")
            continue
        kind = kind_name(names[rule])
        source = f"deepsecrets {DEEPSECRETS_CHECKS}"
        if "-----BEGIN" in body:
            block = body.strip("\n")
            examples.append((kind, block, [(0, len(block))], source))
            continue
        lines = [line for line in body.split("\n") if line.strip()]
        found = lines if DEEPSECRETS_EXPECTED[rule] is None else lines[: DEEPSECRETS_EXPECTED[rule]]
        for line in found:
            m = URL_PASSWORD.search(line)
            examples.append((kind, line, [m.span(1) if m else (0, len(line))], source))
        negatives += lines[len(found) :]
    return examples, negatives


# ---------------------------------------------------------------- betterleaks/betterleaks
BETTERLEAKS_RULES = "cmd/generate/config/rules"
CASE_INSENSITIVE = "(?i)"
OPERATOR = r"(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"
SECRET_PREFIX_UNIQUE = r"\b("
SECRET_PREFIX = r"[\x60'" + '"' + r"\s=]{0,5}("
SECRET_SUFFIX = r")(?:\\?['" + '"' + r"\x60]|[\s;]|\\[nr]|$)"
IDENTIFIER_SUFFIX = r")(?:[ \t\w.-]{0,20})[\s'" + '"' + r"]{0,3}"


class GoRegex(str):
    """A Go regular expression's source, as the rule builds it."""


def semi_generic(identifiers: list[str], secret: str, case_insensitive: bool) -> GoRegex:
    ids = "(?:" + "|".join(identifiers) + IDENTIFIER_SUFFIX
    head = CASE_INSENSITIVE + ids if case_insensitive else "(?i:" + ids + ")"
    return GoRegex(head + OPERATOR + SECRET_PREFIX + secret + SECRET_SUFFIX)


def unique_token(secret: str, case_insensitive: bool) -> GoRegex:
    return GoRegex((CASE_INSENSITIVE if case_insensitive else "") + SECRET_PREFIX_UNIQUE + secret + SECRET_SUFFIX)


GO_NAMES = {  # what a rule's expression may use (utils/generate.go, utils/patterns.go); anything else: left out
    "MustCompile": lambda s: GoRegex(s),
    "GenerateUniqueTokenRegex": unique_token,
    "GenerateSemiGenericRegex": semi_generic,
    "MergeRegexps": lambda *rs: GoRegex("|".join(rs)),
    "Numeric": lambda n: f"[0-9]{{{n}}}",
    "Hex": lambda n: f"[a-f0-9]{{{n}}}",
    "AlphaNumeric": lambda n: f"[a-z0-9]{{{n}}}",
    "AlphaNumericExtendedShort": lambda n: f"[a-z0-9_-]{{{n}}}",
    "AlphaNumericExtended": lambda n: f"[a-z0-9=_\\-]{{{n}}}",
    "AlphaNumericExtendedLong": lambda n: f"[a-z0-9\\/=_\\+\\-]{{{n}}}",
    "Hex8_4_4_4_12": lambda: "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "true": True,
    "false": False,
}
GO_TOKEN = re.compile(GO_STRING + r"|//[^\n]*|/\*.*?\*/", re.DOTALL)


def go_value(expression: str):
    """A Go expression over string literals and GO_NAMES, evaluated; None when it uses anything else."""
    literals: list[str] = []

    def stash(m: re.Match) -> str:
        if m.group(0).startswith("/"):
            return " "
        literals.append(go_string(m.group(0)))
        return f"_S[{len(literals) - 1}]"

    code = GO_TOKEN.sub(stash, expression)
    code = re.sub(r"\b(?:regexp|utils)\.", "", code)
    code = re.sub(r"\[\]string\{", "[", code).replace("}", "]")
    code = re.sub(r",\s*\)", ")", code)
    code = code.strip().rstrip(",")
    if not code or re.search(r"\b(?!_S\b)(?!(?:" + "|".join(GO_NAMES) + r")\b)[A-Za-z_]\w*", code):
        return None
    try:
        return eval(code, {"__builtins__": {}}, {**GO_NAMES, "_S": literals})  # noqa: S307 - names vetted above
    except Exception:  # noqa: BLE001 - an expression this builder cannot evaluate is left out
        return None


def balanced(text: str, start: int, open_: str, close: str) -> int:
    """The index just past the bracket closing the one at `start`, skipping string literals and comments."""
    depth, i = 0, start
    while i < len(text):
        m = GO_TOKEN.match(text, i)
        if m:
            i = m.end()
            continue
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def top_level_items(body: str) -> list[str]:
    """A Go list body split at its top-level commas."""
    items, depth, i, start = [], 0, 0, 0
    while i < len(body):
        m = GO_TOKEN.match(body, i)
        if m:
            i = m.end()
            continue
        c = body[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
        i += 1
    items.append(body[start:])
    return [item for item in items if GO_TOKEN.sub(lambda m: " " if m.group(0).startswith("/") else "_", item).strip()]


def list_literals(func: str, name: str) -> list[str]:
    """The string-literal elements of `name := []string{…}` and `name = append(name, …)` in a rule function."""
    values = []
    for m in re.finditer(rf"\b{name}\s*:?=\s*(\[\]string\{{|append\({name},)", func):
        open_ = "{" if m.group(1).endswith("{") else "("
        start = m.end() - 1 if open_ == "{" else m.start(1) + len("append")
        end = balanced(func, start, open_, "}" if open_ == "{" else ")")
        body = func[start + 1 : end - 1]
        if open_ == "(":
            body = body[len(name) + 1 :] if body.startswith(name) else body.split(",", 1)[-1]
        for item in top_level_items(body):
            value = go_value(item)
            if isinstance(value, str) and not isinstance(value, GoRegex):
                values.append(value)
    return values


def python_regex(source: str):
    try:
        return regex.compile(source.replace(r"\z", r"\Z"))
    except Exception:  # noqa: BLE001 - a Go construct Python's regex module rejects: the rule is left out
        return None


def betterleaks_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    examples: list[Example] = []
    negatives: list[str] = []
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", BETTERLEAKS_RULES).splitlines():
        if not path.endswith(".go") or path.endswith("_test.go"):
            continue
        for func in re.split(r"(?m)^func ", git(git_dir, "show", f"HEAD:{path}"))[1:]:
            rule_id = re.search(r'RuleID:\s*"([^"]+)"', func)
            at = re.search(r"\n\s*Regex:\s*", func)
            if not rule_id or not at:
                continue
            i, depth = at.end(), 0
            while i < len(func):  # the expression runs to the first top-level comma
                m = GO_TOKEN.match(func, i)
                if m:
                    i = m.end()
                    continue
                if func[i] in "([{":
                    depth += 1
                elif func[i] in ")]}":
                    depth -= 1
                elif func[i] == "," and depth == 0:
                    break
                i += 1
            source = go_value(func[at.end() : i])
            pattern = python_regex(source) if isinstance(source, str) else None
            negatives += [line for fp in list_literals(func, "fps") for line in fp.split("\n")]
            if pattern is None or re.search(r"\n\s*SkipReport:\s*true", func):  # SkipReport: a composite's component, not reported
                continue
            group = re.search(r"SecretGroup:\s*(\d+)", func)
            group = int(group.group(1)) if group else (1 if pattern.groups else 0)
            for tp in list_literals(func, "tps"):
                spans = []
                for m in pattern.finditer(tp):
                    g = group if group <= (pattern.groups or 0) and m.start(group) >= 0 else 0
                    if m.end(g) > m.start(g):
                        spans.append(m.span(g))
                if spans:
                    examples.append((kind_name(rule_id.group(1)), tp, spans, f"betterleaks {path}"))
    return examples, negatives


# ---------------------------------------------------------------- the half
WEBHOOK_PATH_RUN = re.compile(r"[A-Za-z0-9+/_-]*")
USER_AND_PASSWORD = {"curl-auth-user"}  # rules capturing `user:password`, whose secret is the password


def credential_span(kind: str, text: str, span: tuple[int, int]) -> tuple[int, int]:
    """The credential in a captured span: without quotes around it; of a URL with `user:password@`, the password;
    of a Slack webhook URL, its path (to the path's end); of a `user:password` pair (USER_AND_PASSWORD), the password (the user when the password is empty)."""
    a, b = span
    while b - a >= 2 and text[a] == text[b - 1] and text[a] in "\"'`":
        a, b = a + 1, b - 1
    if m := URL_PASSWORD.search(text, a, b):
        return m.span(1)
    if m := SLACK_WEBHOOK.match(text, a, b):  # report8's convention: a Slack webhook URL's path
        path = WEBHOOK_PATH_RUN.match(text, m.end())  # to the path's end (betterleaks' regex stops at 56 characters)
        return m.end(), max(b, path.end())
    if kind in USER_AND_PASSWORD and ":" in text[a:b]:
        colon = text.index(":", a, b)
        user, password = (a, colon), (colon + 1, b)
        a, b = password if password[1] > password[0] else user
        while b - a >= 2 and text[a] == text[b - 1] and text[a] in "\"'":
            a, b = a + 1, b - 1
    return a, b


def kept_examples(examples: list[Example], elsewhere: str) -> list[Example]:
    """Each example's credentials (credential_span) that build_report11 keeps and no other folder marks; examples
    left with none dropped."""
    kept = []
    for kind, text, spans, source in examples:
        spans = [credential_span(kind, text, span) for span in spans]
        spans = [(a, b) for a, b in spans if kept_value(text[a:b]) and text[a:b] not in elsewhere]
        if spans:
            kept.append((kind, text, spans, source))
    return kept


CONTEXTS = (
    "<<<\ndiff --git a/deploy/.env.production b/deploy/.env.production\n--- a/deploy/.env.production\n+++ b/deploy/.env.production\n@@ -7,2 +7,3 @@ LOG_LEVEL=info\n+{env}={value}\n METRICS_PORT=9464\n>>>",
    "  512  export {env}='{value}' && make integration-test",
    '<<<\n# infra/envs/prod/terraform.tfvars\nregion        = "us-west-2"\n{lower} = "{value}"\ninstance_type = "m6i.large"\n>>>',
    "<<<\njobs:\n  e2e:\n    runs-on: ubuntu-24.04\n    env:\n      {env}: {value}\n    steps:\n      - uses: actions/checkout@v4\n>>>",
    '{{"tool": "write_file", "arguments": {{"path": "settings/local.json", "content": "{{\\"{camel}\\": \\"{value}\\"}}"}}}}',
    "$ curl -s https://api.orbit-pay.test/v2/balance -H 'X-{camel}: {value}' | jq .available",
    ">>> requests.post(f\"{{BASE}}/v1/jobs\", headers={{\"{dashed}\": \"{value}\"}}, json=payload, timeout=10)",
    "user: here's the {name} from the vendor portal, {value} — please add it to the staging config only",
    "<<<\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ledger-settings\ndata:\n  {env}: \"{value}\"\n>>>",
    "<<<\n# ~/.pypirc\n[distutils]\nindex-servers = internal\n\n[internal]\nrepository = https://pkgs.orbit-pay.test/simple/\n{lower} = {value}\n>>>",
    "[2026-09-14 03:12:44] worker.settings INFO loaded config: {{'queue': 'ledger', '{lower}': '{value}', 'batch': 50}}",
    "<<<\nIn [7]: client = LedgerClient(\n   ...:     endpoint=\"https://ledger.orbit-pay.test\",\n   ...:     {lower}=\"{value}\",\n   ...: )\n>>>",
    "$ docker run --rm -e {env}={value} -p 8443:8443 orbitpay/ledger:1.14.2",
    "assistant: The failing test reads the {name} from fixtures/settings.yaml, where it is hard-coded as `{value}`; I'll swap it for an env lookup.",
    "<<<\n# .npmrc\n@orbit:registry=https://npm.orbit-pay.test/\n//npm.orbit-pay.test/:{camel}={value}\nstrict-ssl=true\n>>>",
    "vault kv put secret/ledger/prod {lower}='{value}' rotated_by=ci",
)


in_context = partial(fill_context, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report15."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    digits = "0123456789"
    svc = partial(rng.choice, ["ledger", "payouts", "kyc", "fx-rates", "notifier", "reconciler", "statements"])
    who = partial(rng.choice, ["amara", "jonas", "priya", "santiago", "wei", "noor"])
    day = lambda: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"  # noqa: E731
    clock = lambda: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"  # noqa: E731

    groups: dict[str, list] = {
        "git output with SHAs": [
            lambda: f"commit {hexs(40)}",
            lambda: f"* {hexs(7)} (origin/{svc()}) refactor: split the {svc()} client",
            lambda: f"[main {hexs(7)}] test({svc()}): cover the empty-batch path",
            lambda: f"Reverts commit {hexs(40)}.",
            lambda: f"index {hexs(7)}..{hexs(7)} 100644",
            lambda: f"Co-authored-by: {who().capitalize()} <{who()}@orbit-pay.test>",
            lambda: f"Your branch is ahead of 'origin/main' by {rng.randint(1, 9)} commits; last {hexs(12)}",
        ],
        "UUIDs and request ids": [
            lambda: f"{day()}T{clock()}Z level=info msg=\"request done\" request_id={uid()} status=200",
            lambda: f"    \"requestId\": \"{uid()}\",",
            lambda: f"traceparent: 00-{hexs(32)}-{hexs(16)}-01",
            lambda: f"x-request-id: {hexs(32)}",
            lambda: f"payout {uid()} moved to state SETTLED",
            lambda: f"cf-ray: {hexs(16)}-FRA",
        ],
        "digests": [
            lambda: f"sha256:{hexs(64)}",
            lambda: f"FROM python:3.12-slim@sha256:{hexs(64)}",
            lambda: f"{hexs(40)}  dist/{svc()}-{rng.randint(1, 5)}.{rng.randint(0, 20)}.0.whl",
            lambda: f"  resolved \"https://registry.yarnpkg.com/{svc()}/-/{svc()}-1.{rng.randint(0, 9)}.{rng.randint(0, 9)}.tgz#{hexs(40)}\"",
            lambda: f"Digest: sha256:{hexs(64)}",
            lambda: f"md5 ({svc()}.csv) = {hexs(32)}",
        ],
        "base64 image and binary data": [
            lambda: f"![chart](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAA{b64(48)})",
            lambda: f"\"avatar\": \"data:image/jpeg;base64,/9j/4AAQSkZJRgABAgAAAQ{b64(39)}\",",
            lambda: f"src: url('data:font/woff;base64,d09GRgABAAAAA{b64(54)}') format('woff');",
            lambda: f"<image href=\"data:image/webp;base64,UklGR{b64(33)}\"/>",
            lambda: f"attachment statement-{rng.randint(100, 999)}.pdf (application/pdf, {rng.randint(30, 700)} KB, base64)",
        ],
        "documented placeholders": [
            "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE",
            "# see https://docs.aws.amazon.com/IAM/latest/UserGuide/security-creds.html for AKIAIOSFODNN7EXAMPLE",
            'ANTHROPIC_API_KEY="sk-ant-..."',
            "GITLAB_TOKEN=glpat-xxxxxxxxxxxxxxxxxxxx",
            "DATABASE_URL=postgres://USER:PASSWORD@HOST:5432/DBNAME",
            "api_token: <paste-your-token-here>",
            'secret_key = "${SECRET_KEY}"',
            "Authorization: Basic <base64(user:password)>",
            "TWILIO_AUTH_TOKEN=your_auth_token",
            "token = {{ vault_ledger_token }}",
        ],
        "code reading secrets from the environment": [
            'ledger_token = os.getenv("LEDGER_TOKEN")',
            'const apiKey = process.env["ORBIT_API_KEY"];',
            'secret, err := os.LookupEnv("PAYOUTS_SECRET")',
            'password = keyring.get_password("ledger", username)',
            "let token = std::env::var(\"NOTIFIER_TOKEN\").expect(\"NOTIFIER_TOKEN unset\");",
            'String key = System.getenv("KYC_API_KEY");',
            "creds = boto3.Session().get_credentials().get_frozen_credentials()",
            "if [ -z \"${DEPLOY_KEY:-}\" ]; then echo 'DEPLOY_KEY missing' >&2; exit 1; fi",
            'client = Ledger(token=settings.LEDGER_TOKEN)',
        ],
        "CLI output with ids": [
            lambda: f"arn:aws:lambda:eu-west-1:{pick(digits, 12)}:function:{svc()}-handler",
            lambda: f"{svc()}-{hexs(9)}-{pick('bcdfghjklmnpqrstvwxz2456789', 5)}   2/2     Running   1 ({rng.randint(2, 40)}h ago)   {rng.randint(2, 30)}d",
            lambda: f"projects/orbit-{pick(digits, 6)}/locations/europe-west1/services/{svc()}",
            lambda: f"sg-{hexs(17)}  {svc()}-sg  vpc-{hexs(8)}",
            lambda: f"Run ID {rng.randint(10000000000, 99999999999)} · workflow ci.yml · {rng.randint(1, 30)}m ago",
            lambda: f"subscription {uid()} (Orbit Pay – Prod)",
        ],
        "prose about credentials": [
            "The token in the old commit was revoked this morning, so the leak is contained; I'll still purge it from history.",
            "Store the signing key in the KMS and let the service ask for signatures; it never needs the raw key.",
            "I won't echo the secret back in the logs; the config loader now prints only the last four characters.",
            "Your test uses a fake key on purpose; the scanner allowlist entry keeps CI green without hiding real leaks.",
            "Passwords belong in the password manager, not in the README; I replaced the line with a link to the vault.",
            "The webhook signature check failed because the shared secret differs between staging and production.",
        ],
    }
    return draw_lines(rng, groups, per_template=5, least=30)


def other_halves(out: Path) -> str:
    """Every other folder's `secrets.txt`, joined: a value found there (plain substring search) is left out."""
    return "\n".join(
        path.read_text(encoding="utf-8") for path in sorted(out.parent.glob("*/secrets.txt")) if path.parent != out
    )


def clean_keeper(marked: Iterable[str]) -> Callable[[str], bool]:
    """Whether a clean candidate is kept: a line clean_fit accepts, holding no value this half marks and assigning
    no credential-named key."""
    def keep(line: str) -> bool:
        key = KEY_OF_LINE.match(line)
        return clean_fit(line) and not any(value in line for value in marked) and not (key and CREDENTIAL_KEY.search(key.group(1)))

    return keep


def main(octarine_dir: str, deepsecrets_dir: str, betterleaks_dir: str) -> None:
    octarine, octarine_negatives = octarine_examples(octarine_dir)
    deepsecrets, deepsecrets_negatives = deepsecrets_examples(deepsecrets_dir)
    betterleaks, betterleaks_negatives = betterleaks_examples(betterleaks_dir)
    examples = first_per_value(kept_examples(merged(octarine + deepsecrets + betterleaks), other_halves(OUT)))
    secrets, kinds, marked = placed_entries(examples, OUT, in_context, CONTEXT_VALUES)
    write_half(
        OUT,
        {
            "octarinesec/secret-detector": git(octarine_dir, "rev-parse", "HEAD").strip(),
            "avito-tech/deepsecrets": git(deepsecrets_dir, "rev-parse", "HEAD").strip(),
            "betterleaks/betterleaks": git(betterleaks_dir, "rev-parse", "HEAD").strip(),
        },
        "Apache-2.0, MIT, MIT",
        secrets,
        kinds,
        [
            ("secret-detector test inputs expected not detected", octarine_negatives),
            ("deepsecrets regex_checks.txt lines no finding is expected on", deepsecrets_negatives),
            ("betterleaks rule false-positive literals (fps)", betterleaks_negatives),
        ],
        clean_keeper(marked),
        drawn_lookalikes(random.Random(SEED)),
    )
    print("per kind:", ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))


if __name__ == "__main__":
    main(*sys.argv[1:4])
