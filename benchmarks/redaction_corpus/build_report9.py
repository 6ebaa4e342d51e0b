"""Build the ninth report half (`report9/`) mechanically from four projects' published secret examples.

    python benchmarks/redaction_corpus/build_report9.py HORUSEC IBM_DETECT_SECRETS CHECKOV DEVSKIM REPO_SUPERVISOR EARLYBIRD

(each argument a git directory of that project).

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 12, and its
output was committed without running the redactor on it. Sources, read with `git show` at their HEAD (six
projects, because each publishes few examples):
- ZupIT/horusec (Apache-2.0): the leaks engine's rules (`internal/services/engines/leaks/rules.go`, each rule's
  `Expressions`, Go raw strings) and their `UnsafeExample`/`SafeExample` samples (`samples.go`). Each expression's
  match in a rule's unsafe sample marks the credential inside it (build_report4's `credential_span`: an assignment's
  value, a URL's password, a webhook's path; a private key's whole PEM block); the example is the lines holding it.
  Rules that do not describe a credential (client ids, the service-account type marker, certificates) are left out
  by name; the safe samples' lines are clean candidates.
- IBM/detect-secrets (Apache-2.0), only its IBM-specific plugins' tests (`tests/plugins/{box,db2,gh_enterprise}_test.py`):
  each `test_analyze_line` case flagged True marks its `token` where the test names one, else the payload's longest
  key-like run (build_report5's test); cases flagged False are clean candidates.
- bridgecrewio/checkov (Apache-2.0): `tests/secrets/sanity/secrets/true_positive.json` (each value marked),
  `tests/secrets/sanity/non_secrets/true_negative.json` (clean candidates), and the private keys of
  `tests/secrets/build_log_prefix/` (in each file the key's lines from BEGIN to END, each marked after its log prefix).
- microsoft/DevSkim (MIT): `rules/default/security/privacy/secrets.json`, each rule's `must-match` (marked by its
  regex's match, narrowed as above) and `must-not-match` (clean candidates).
- auth0/repo-supervisor (MIT): the secrets its CLI test (`test/integration/src/cli.js`, JSON response) expects in
  the fixture files, each marked where it stands as a value (an object key, or a value under an `_ID` name, is left
  out: not a credential); the JWT and the reported code blob of `test/fixtures/integration/awslambda.json`.
- americanexpress/earlybird (Apache-2.0): `config/rules/{content,password-secret}.yaml`, each `key` or
  `password-secret` rule's `Example` marked by its `Pattern` (narrowed as above; bare words left out).
Each kind's first values (up to CONTEXT_VALUES) are also placed in transcript contexts written for report9, rotating.
Values that read as placeholders (build_report3's test) and values already in other folders are left out. Clean
lines: the candidates above holding no key-like token (build_report5's test), then look-alikes drawn with a fixed
seed from templates written for report9.
"""

from __future__ import annotations

import ast
import json
import random
import re
import string
import sys
from functools import partial
from pathlib import Path

import regex
import yaml
from build_report3 import NOT_CREDENTIALS, existing_values
from build_report4 import (
    Draw,
    Example,
    credential_span,
    draw_lines,
    git,
    kebab,
    pem_span,
    placeholder,
    write_half,
)
from build_report5 import KEY_LIKE, holds_no_key
from build_report5 import in_context as report5_in_context
from build_report5 import secret_entries as report5_secret_entries
from build_report8 import lines_around

OUT = Path(__file__).resolve().parent / "report9"
HORUSEC_LEAKS = "internal/services/engines/leaks"
IBM_PLUGIN_TESTS = ("box", "db2", "gh_enterprise")  # the plugins Yelp/detect-secrets does not have
CHECKOV_SECRETS = "tests/secrets"
DEVSKIM_SECRETS = "rules/default/security/privacy/secrets.json"
# horusec rules that do not describe a credential: a service account's `"type"` marker, WordPress's host/name/salt
# defines. Its "AWS Manager ID" is an access key id (AKIA...), a credential in every half, though named an ID.
HORUSEC_NOT_CREDENTIALS = re.compile(r"Service Account|Wordpress", re.IGNORECASE)
HORUSEC_CREDENTIAL_IDS = {"AWS Manager ID"}
QUOTED_VALUE = re.compile(r"(?:[=:(]|=>)\s*(['\"])(.+?)\1")
XML_ELEMENT_TEXT = re.compile(r"<(\w+)>([^<]+)</\1>")
AUTHORIZATION_CREDENTIALS = re.compile(r"\b(?:Basic|Bearer|token)\s+([A-Za-z0-9+/=._~-]+)")
EARLYBIRD_RULES = ("config/rules/content.yaml", "config/rules/password-secret.yaml")
EARLYBIRD_CREDENTIALS = {"key", "password-secret"}
REPO_SUPERVISOR_RESULT = re.compile(r"const msg = '(\{\"result\":\[\{\"filepath.*?)';")
# a finding in a key's position (an object key) or under an id's name is not a credential
OBJECT_KEY = re.compile(r"['\"]?\s*:")
ID_NAME = re.compile(r"_ID=$", re.IGNORECASE)
CONTEXT_VALUES = 2
FORMAT_MASK = re.compile(r"[aA0-]+")  # earlybird writes a key's shape as `aaaAaA0A0a…`: a placeholder
PRIVATE_KEY_LINES = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.DOTALL)


def marked_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The credential inside a rule's match: a whole PEM block when the match names a private key, a certificate
    never, a quoted value after a name (from its first letter or digit: a stray `^` before a key is not part of
    it), an XML element's text, an Authorization header's credentials, else build_report4's narrowing (an assignment's value, a URL's password, a webhook's path)."""
    found = text[start:end]
    if "CERTIFICATE" in found:
        return None
    if "PRIVATE KEY" in found:
        return pem_span(text, start)
    for shape in (XML_ELEMENT_TEXT, AUTHORIZATION_CREDENTIALS):
        if (m := shape.search(text, start, end)) and m.start() < end:
            return m.span(m.lastindex)
    line_end = text.find("\n", end)
    if "://" not in found and (m := QUOTED_VALUE.search(text, start, len(text) if line_end < 0 else line_end)) and m.start() < end:
        value_start = m.start(2)
        while value_start < m.end(2) and not text[value_start].isalnum():
            value_start += 1
        return value_start, m.end(2)
    return credential_span(text, start, end)


def example_of(kind: str, text: str, span: tuple[int, int], source: str) -> Example | None:
    """The lines holding the span as an example, unless its value reads as a placeholder or a format mask, or is a
    short word (fewer than 8 characters without a key-like run)."""
    lines, (start, end) = lines_around(text, *span)
    value = lines[start:end]
    if end <= start or placeholder(value) or FORMAT_MASK.fullmatch(value) or not KEY_LIKE.search(value) and len(value) < 8:
        return None
    return (kind, lines, [(start, end)], source)


def merged(examples: list[Example]) -> list[Example]:
    """Examples of one kind on the same lines joined into one holding all their spans (in first-seen order)."""
    joined: dict[tuple[str, str], Example] = {}
    for kind, text, spans, source in examples:
        _, _, before, _ = joined.get((kind, text), (kind, text, [], source))
        joined[(kind, text)] = (kind, text, sorted(set(before + spans)), source)
    return list(joined.values())


def horusec_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    rules_go = git(git_dir, "show", f"HEAD:{HORUSEC_LEAKS}/rules.go")
    samples = dict(re.findall(r"(?m)^\s*(\w+) = `(.*?)`", git(git_dir, "show", f"HEAD:{HORUSEC_LEAKS}/samples.go"), re.DOTALL))
    examples: list[Example] = []
    negatives: list[str] = []
    for body in re.split(r"(?m)^func ", rules_go)[1:]:
        name = re.search(r'Name:\s*"([^"]+)"', body)
        unsafe = re.search(r"UnsafeExample:\s*(\w+)", body)
        safe = re.search(r"SafeExample:\s*(\w+)", body)
        if not name or not unsafe:
            continue
        if safe and safe.group(1) in samples:
            negatives += samples[safe.group(1)].splitlines()
        if name.group(1) not in HORUSEC_CREDENTIAL_IDS and (NOT_CREDENTIALS.search(name.group(1)) or HORUSEC_NOT_CREDENTIALS.search(name.group(1))):
            continue
        text = samples.get(unsafe.group(1), "")
        spans = set()
        for expression in re.findall(r"regexp\.MustCompile\(`([^`]*)`\)", body):
            try:
                pattern = regex.compile(expression, regex.V1)
            except regex.error:
                continue
            for m in pattern.finditer(text):
                if span := marked_span(text, *m.span()):
                    spans.add(span)
        for span in sorted(spans):
            if example := example_of(kebab(name.group(1)), text, span, f"horusec {HORUSEC_LEAKS}/samples.go"):
                examples.append(example)
    return examples, negatives


def literal(node: ast.AST, constants: dict[str, object]) -> object:
    """A test case's value: constants, names of module constants, and `+` of those (nothing else is evaluated)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return constants[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return literal(node.left, constants) + literal(node.right, constants)
    if isinstance(node, ast.Tuple):
        return tuple(literal(element, constants) for element in node.elts)
    raise ValueError(ast.dump(node))


def ibm_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    examples: list[Example] = []
    negatives: list[str] = []
    for plugin in IBM_PLUGIN_TESTS:
        path = f"tests/plugins/{plugin}_test.py"
        tree = ast.parse(git(git_dir, "show", f"HEAD:{path}"))
        constants: dict[str, object] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    constants[node.targets[0].id] = literal(node.value, constants)
                except (ValueError, KeyError, TypeError):
                    pass
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef) or function.name != "test_analyze_line":
                continue
            for decorator in function.decorator_list:
                if not (isinstance(decorator, ast.Call) and len(decorator.args) == 2 and isinstance(decorator.args[1], ast.List)):
                    continue
                for element in decorator.args[1].elts:
                    try:
                        case = literal(element, constants)
                    except (ValueError, KeyError, TypeError):
                        continue
                    *token, payload, flagged = case
                    if not flagged:
                        negatives += payload.splitlines()
                        continue
                    if token:
                        spans = [(m.start(), m.end()) for m in re.finditer(re.escape(token[0]), payload)]
                    else:
                        runs = sorted(KEY_LIKE.finditer(payload), key=lambda m: m.end() - m.start(), reverse=True)
                        spans = [(runs[0].start(), runs[0].end() + len(payload[runs[0].end() :]) - len(payload[runs[0].end() :].lstrip("=")))] if runs else []
                    for span in spans:
                        if example := example_of(f"ibm-{kebab(plugin)}", payload, span, f"IBM/detect-secrets {path}"):
                            examples.append(example)
    return examples, negatives


def checkov_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    examples: list[Example] = []
    positives = f"{CHECKOV_SECRETS}/sanity/secrets/true_positive.json"
    text = git(git_dir, "show", f"HEAD:{positives}")
    for key, value in json.loads(text).items():
        line = next(line for line in text.splitlines() if f'"{key}"' in line)
        start = line.index(f'"{value}"', line.index(f'"{key}"') + len(key) + 2) + 1
        if example := example_of(f"checkov-{kebab(key)}", line, (start, start + len(value)), f"checkov {positives}"):
            examples.append(example)
    logs = f"{CHECKOV_SECRETS}/build_log_prefix"
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", logs).split():
        text = git(git_dir, "show", f"HEAD:{path}")
        for block in PRIVATE_KEY_LINES.finditer(text):
            lines, _ = lines_around(text, *block.span())
            rows = lines.splitlines()
            column = rows[0].index("-----BEGIN")
            spans, at = [], len(rows[0]) + 1
            for row in rows[1:-1]:  # the key's body: its BEGIN and END lines are not secret
                spans.append((at + column, at + len(row)))
                at += len(row) + 1
            examples.append(("private-key-in-a-log", lines, spans, f"checkov {path}"))
    negatives = git(git_dir, "show", f"HEAD:{CHECKOV_SECRETS}/sanity/non_secrets/true_negative.json").splitlines()
    return examples, negatives


def devskim_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    examples: list[Example] = []
    negatives: list[str] = []
    for rule in json.loads(git(git_dir, "show", f"HEAD:{DEVSKIM_SECRETS}")):
        patterns = [regex.compile(p["pattern"], regex.V1 | regex.IGNORECASE) for p in rule["patterns"] if p["type"] == "regex"]
        for text in rule.get("must-match") or []:
            for pattern in patterns:
                for m in pattern.finditer(text):
                    span = marked_span(text, *m.span())
                    if span and (example := example_of(f"devskim-{rule['id'].lower()}", text, span, f"DevSkim {DEVSKIM_SECRETS}")):
                        examples.append(example)
        for text in rule.get("must-not-match") or []:
            negatives += text.splitlines()
    return examples, negatives


def earlybird_examples(git_dir: str) -> list[Example]:
    """Each key or password rule's `Example`, marked by the rule's `Pattern` (narrowed as above); an example that is
    a bare word on a line of its own is left out (nothing marks it, as report3 left out Kingfisher's weak passwords)."""
    examples: list[Example] = []
    for path in EARLYBIRD_RULES:
        for rule in yaml.safe_load(git(git_dir, "show", f"HEAD:{path}"))["rules"]:
            text = rule.get("Example") or ""
            if rule.get("Category") not in EARLYBIRD_CREDENTIALS or not re.search(r"[=:<]", text):
                continue
            try:
                pattern = regex.compile(rule["Pattern"], regex.V1)
            except regex.error:
                continue
            for m in pattern.finditer(text):
                span = marked_span(text, *m.span())
                if span and (example := example_of(f"earlybird-{kebab(rule['Caption'])}", text, span, f"earlybird {path}")):
                    examples.append(example)
    return examples


def repo_supervisor_examples(git_dir: str) -> list[Example]:
    """Each secret the CLI test expects in its fixture files, marked where it stands as a value (narrowed as above);
    the lambda fixture's JWT and the blob it reports findings in, marked as their quoted values."""
    examples: list[Example] = []
    test = "test/integration/src/cli.js"
    for found in json.loads(REPO_SUPERVISOR_RESULT.search(git(git_dir, "show", f"HEAD:{test}")).group(1))["result"]:
        path = found["filepath"].removeprefix("./")
        text = git(git_dir, "show", f"HEAD:{path}")
        for secret in found["secrets"]:
            for m in re.finditer(re.escape(secret), text):
                name = secret[: secret.index("=") + 1] if "=" in secret else text[max(0, m.start() - 20) : m.start()]
                if OBJECT_KEY.match(text, m.end()) or ID_NAME.search(name):
                    continue
                span = credential_span(text, *m.span())
                if span and (example := example_of("repo-supervisor-entropy-secret", text, span, f"repo-supervisor {path}")):
                    examples.append(example)
    path = "test/fixtures/integration/awslambda.json"
    text = git(git_dir, "show", f"HEAD:{path}")
    for name, kind in (("JWT", "repo-supervisor-jwt"), ("getBlob", "repo-supervisor-entropy-secret")):
        line_start = text.index(f'"{name}"')
        line, _ = lines_around(text, line_start, line_start)
        value = json.loads("{" + line.strip().rstrip(",") + "}")[name]
        if name == "getBlob":  # a line of code: the secret is its string literal
            value = re.search(r'"(.+)"', value).group(1)
        start = text.index(value, line_start)
        if example := example_of(kind, text, (start, start + len(value)), f"repo-supervisor {path}"):
            examples.append(example)
    return examples


CONTEXTS = (
    "Found it: the build was using an old {name}. I swapped in {value} and the deploy went green.",
    "<<<\n# docker-compose.override.yml\nservices:\n  api:\n    environment:\n      - {env}={value}\n>>>",
    "fly secrets set {env}={value} --app acme-api",
    "<<<\n# appsettings.Development.json\n{{\n  \"{Camel}\": \"{value}\"\n}}\n>>>",
    "heroku config:set {env}='{value}' -a acme-staging",
    "vercel env add {env} production <<< '{value}'",
    "<<<\n# .env.production\nLOG_LEVEL=info\n{env}={value}\n>>>",
    "$ aws ssm put-parameter --name /acme/{lower} --type SecureString --value '{value}' --overwrite",
    "const {camel} = '{value}'; // TODO move to the secret store",
    "| {lower} | {value} | rotated last week |",
    "<<<\n[credentials]\n{dotted} = {value}\n>>>",
    "Step 4/9 : ENV {env}={value}",
)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report9."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    alnum, lower = string.ascii_letters + string.digits, string.ascii_lowercase
    vendor = partial(rng.choice, ["box", "db2", "heroku", "mailgun", "square", "stripe", "twilio", "linkedin", "paypal"])

    groups: dict[str, list] = {
        "references and empty values under key names": [
            lambda: f"fly secrets set {vendor().upper()}_API_KEY=\"$(op read op://prod/{vendor()}/key)\"",
            lambda: f"      - {vendor().upper()}_SECRET=${{{vendor().upper()}_SECRET:?set it in .env}}",
            lambda: f'  "{vendor()}ClientSecret": "#{{{vendor()}ClientSecret}}#",',
            lambda: f"heroku config:unset {vendor().upper()}_TOKEN -a acme-staging",
            lambda: f"const {vendor()}Key = process.env.{vendor().upper()}_KEY ?? '';",
        ],
        "build, deploy and VCS output": [
            lambda: f"Step {rng.randint(1, 9)}/9 : RUN npm ci --omit=dev ---> Using cache ---> {hexs(12)}",
            lambda: f"remote: Resolving deltas: 100% ({rng.randint(1, 99)}/{rng.randint(100, 200)}), done. {hexs(7)}..{hexs(7)}  main -> main",
            lambda: f"==> Uploading build {uid()} ({rng.randint(2, 60)} MB)",
            lambda: f"  \"sha\": \"{hexs(40)}\",",
            lambda: f"digest: sha256:{hexs(64)} size: {rng.randint(500, 5000)}",
        ],
        "ids, hashes and media": [
            lambda: f"trace_id={hexs(32)} span_id={hexs(16)}",
            lambda: f"<link rel=\"icon\" href=\"data:image/x-icon;base64,AAABAAEAEBAAAAEAIABoBAAAFgAAACgAAAAQAAAAIAAAAAEAIAAAAAAAAAQAA{b64(20)}\">",
            lambda: f"\"integrity\": \"sha512-{b64(86)}==\"",
            lambda: f"box folder id {rng.randint(10**10, 10**11)}, file version {rng.randint(10**11, 10**12)}",
            lambda: f"X-Request-Id: {pick(alnum, 20)}",
            lambda: f"db2 instance {pick(lower, 6)} (node {rng.randint(0, 9)}) log stream {uid()}",
        ],
        "code and prose that handle keys": [
            "Horusec flags hard-coded keys; move them to the vault and read them at startup.",
            "if not client_secret: raise ValueError('BOX_CLIENT_SECRET is not set')",
            "The Square access token starts with sq0atp- and must never be logged.",
            "password = getpass.getpass('DB2 password: ')",
            "Rotate the Mailgun key after the contractor leaves; old keys keep working until revoked.",
            "secret = vault.read('secret/data/stripe')['data']['data']['api_key']",
        ],
        "URLs without credentials": [
            lambda: f"https://app.box.com/folder/{rng.randint(10**10, 10**11)}",
            lambda: f"jdbc:db2://db2.{pick(lower, 5)}.internal:50000/SAMPLE:sslConnection=true;",
            lambda: f"https://dashboard.heroku.com/apps/acme-{pick(lower, 6)}/settings",
            lambda: f"https://squareup.com/dashboard/items/library?location={pick(alnum, 13)}",
        ],
    }
    return draw_lines(rng, groups, per_template=4, least=30)


def main(horusec_dir: str, ibm_dir: str, checkov_dir: str, devskim_dir: str, repo_supervisor_dir: str, earlybird_dir: str) -> None:
    horusec, horusec_negatives = horusec_examples(horusec_dir)
    ibm, ibm_negatives = ibm_examples(ibm_dir)
    checkov, checkov_negatives = checkov_examples(checkov_dir)
    devskim, devskim_negatives = devskim_examples(devskim_dir)
    supervisor = repo_supervisor_examples(repo_supervisor_dir)
    earlybird = earlybird_examples(earlybird_dir)
    secrets, kinds = report5_secret_entries(merged(horusec + ibm + checkov + devskim + supervisor + earlybird), existing_values(OUT.parent, "report9"), partial(report5_in_context, contexts=CONTEXTS), CONTEXT_VALUES)
    commits = {
        "ZupIT/horusec": git(horusec_dir, "rev-parse", "HEAD").strip(),
        "IBM/detect-secrets": git(ibm_dir, "rev-parse", "HEAD").strip(),
        "bridgecrewio/checkov": git(checkov_dir, "rev-parse", "HEAD").strip(),
        "microsoft/DevSkim": git(devskim_dir, "rev-parse", "HEAD").strip(),
        "auth0/repo-supervisor": git(repo_supervisor_dir, "rev-parse", "HEAD").strip(),
        "americanexpress/earlybird": git(earlybird_dir, "rev-parse", "HEAD").strip(),
    }
    write_half(
        OUT,
        commits,
        "Apache-2.0, MIT",
        secrets,
        kinds,
        [
            ("horusec leaks rules' safe samples holding no key-like token", horusec_negatives),
            ("IBM detect-secrets plugin tests' unflagged cases holding no key-like token", ibm_negatives),
            ("checkov's true-negative sanity file, lines holding no key-like token", checkov_negatives),
            ("DevSkim secrets rules' must-not-match holding no key-like token", devskim_negatives),
        ],
        holds_no_key,
        drawn_lookalikes(random.Random(9099)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:7])
