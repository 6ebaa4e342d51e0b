"""Build the eleventh report half (`report11/`) mechanically from published infrastructure-as-code and code scanner tests.

    python benchmarks/redaction_corpus/build_report11.py KICS BANDIT TALISMAN CREDENTIAL_DIGGER CFN_NAG CODEQL CODEQL_GO NO_SECRETS

(each argument a git directory of that project: KICS a clone of Checkmarx/kics or of its fork DataDog/kics, whose
files read here are Checkmarx's, unchanged; CODEQL a clone of github/codeql or of its former name Semmle/ql; CODEQL_GO
a clone of github/codeql-go, read at the last commit holding its tests).

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 16, and its
output was committed without running the redactor on it. Sources, read with `git show`:
- Checkmarx/kics (Apache-2.0): the query tests of `assets/queries/common/passwords_and_secrets/` (each finding of
  `test/positive_expected_result.json`: query name, file, line) and of the queries that flag a literal credential in
  CloudFormation, Terraform, Ansible and ARM templates (KICS_CREDENTIAL_QUERIES). A passwords-and-secrets finding is
  marked where its rule's own regular expression (`regex_rules.json`) matches on the finding's line: for a
  `name = value` rule the group its entropy check reads, else its last group that matched; for a token rule the
  whole match; quotes out, a URL narrowed to its password and a webhook URL to its path; a private key's whole PEM
  block, a PuTTY key's private lines. A finding of the other queries (and of multi-line rules that name a value
  line) is marked at the value its line assigns. A finding on a line that assigns no value (a parent key such as
  `Variables:`) is left out, and so are rules that name no credential (an OAuth client id, a certificate id, a secret
  template). A span two rules find is kept under the vendor's rule, not the generic one. Clean candidates: the lines
  of the same queries' `negative*` files.
- PyCQA/bandit (Apache-2.0): `examples/hardcoded-passwords.py`, the functional test's example for B105/B106/B107:
  each `# Possible hardcoded password: '<value>'` comment names the value, marked on the code line below it that
  holds it; the kind is the check that fires on that line's shape (a `def` default: B107, a call's keyword
  argument: B106, else B105). The lines after its `# ... but not:` comments are clean candidates.
- thoughtworks/talisman (MIT): the detector tests' contents that a test expects to fail the scan
  (`detector/filecontent/filecontent_detector_test.go`: key-like tokens of the base64 tests;
  `detector/pattern/pattern_detector_test.go`: an XML element's text; its other values are the typed-out words
  `UnsafeString`, `randomStringGoesHere`, `appropriate`, left out); contents expected to pass are clean candidates.
- SAP/credential-digger (Apache-2.0): `tests/file_scanner_tests_folder/`: the discovery lines
  `tests/integration_tests/test_file_scanner.py` expects that assign a value (marked); its other lines (the file
  calls them false positives) and the files expected to hold no discovery are clean candidates.
- stelligent/cfn_nag (MIT): the password rule specs (`spec/custom_rules/*_spec.rb` with `password_rule_test_sets`):
  in each test template the shared helper (`spec/password_rule_spec_helper.rb`) says must fail, the value of the
  rule's (sub-)property or of a parameter's `Default` is marked, the example being the template entry holding it (a
  rule is about a property of one resource type); templates that must pass are clean candidates.
- CodeQL (MIT; github/codeql, and github/codeql-go for Go): the query tests for hard-coded credentials and keys
  (CODEQL_TESTS, CODEQL_GO_TESTS): the string literals at the locations each `.expected` row names (its `#select`
  rows where it has that section), quotes out, a connection string narrowed to its password; rows naming a user name
  are left out; the kind is the query's `@id`. Test lines commented `// OK` or `# OK` are clean candidates.
- nickdeis/eslint-plugin-no-secrets (MIT): `tests/lib/rules/no-secrets.ts`: the string literals of each `invalid`
  case expecting a HIGH_ENTROPY error (an `Authorization: Basic` header's credentials under the test's own `Basic
  Auth` pattern); the `valid` cases' lines are clean candidates.
Values are left out when they read as placeholders (build_report3's test, on a PEM block's body only its length and
typed-out words; `change_me`-style phrases), are short words (under 8 characters without a key-like run, as
build_report9), are code references or name patterns (`var.x`, `{{...}}`, `!Ref`, a trailing `*`), are base64 of a PEM
header over a placeholder body (`someKey`), or are already in other folders. Of the examples holding the same values
of a kind, the first EXAMPLES_PER_VALUE are kept; a generic kind keeps at most GENERIC_CAP secrets (a fixed-seed
draw). Each kind's first values (up to CONTEXT_VALUES) are also placed in transcript contexts written for report11,
rotating. Clean lines: the candidates above holding no key-like token (build_report5's test), no URL password that is
not a placeholder and no value this half marks as a secret, then look-alikes drawn with a fixed seed from templates
written for report11.
"""

from __future__ import annotations

import ast
import base64
import binascii
import json
import random
import re
import sys
from functools import partial
from pathlib import Path

import regex

from build_report3 import NOT_CREDENTIALS, WEBHOOK_URL, existing_values
from build_report4 import Draw, Example, draw_lines, git, kebab, pem_span, placeholder, write_half
from build_report4 import secret_entries as report4_secret_entries
from build_report5 import KEY_LIKE
from build_report8 import lines_around
from build_report9 import merged
from build_report10 import URL_PASSWORD, clean_fit, fill_context, first_per_value, kind_name

OUT = Path(__file__).resolve().parent / "report11"
SEED = 11110
EXAMPLES_PER_VALUE = 2
CONTEXT_VALUES = 2
GENERIC_CAP = 40
KICS_QUERIES = "assets/queries"
KICS_SECRETS = "common/passwords_and_secrets"
# kics queries whose findings are literal credentials in templates (the others named for passwords or keys check
# policies, rotation, references or exposure of endpoints, not a value).
KICS_CREDENTIAL_QUERIES = (
    "ansible/aws/hardcoded_aws_access_key",
    "ansible/aws/hardcoded_aws_access_key_in_lambda",
    "ansible/aws/user_data_contains_encoded_private_key",
    "azureResourceManager/hardcoded_securestring_parameter_default_value",
    "cloudFormation/aws/alexa_skill_plaintext_client_secret_exposed",
    "cloudFormation/aws/amplify_app_access_token_exposed",
    "cloudFormation/aws/amplify_app_basic_auth_config_password_exposed",
    "cloudFormation/aws/amplify_app_oauth_token_exposed",
    "cloudFormation/aws/amplify_branch_basic_auth_config_password_exposed",
    "cloudFormation/aws/directory_service_microsoft_ad_password_set_to_plaintext_or_default_ref",
    "cloudFormation/aws/directory_service_simple_ad_password_exposed",
    "cloudFormation/aws/dms_endpoint_mongo_db_settings_password_exposed",
    "cloudFormation/aws/dms_endpoint_password_exposed",
    "cloudFormation/aws/docdb_cluster_master_password_in_plaintext",
    "cloudFormation/aws/hardcoded_aws_access_key_in_lambda",
    "cloudFormation/aws/iam_user_login_profile_password_is_in_plaintext",
    "cloudFormation/aws/refresh_token_is_exposed",
    "cloudFormation/aws/user_data_contains_encoded_private_key",
    "terraform/aws/hardcoded_aws_access_key",
    "terraform/aws/hardcoded_aws_access_key_in_lambda",
    "terraform/aws/user_data_contains_encoded_private_key",
)
# passwords-and-secrets rules that name no credential: an OAuth client id, an AWS certificate id, a secret template
# (the non-secret fields a generated secret starts from).
KICS_NOT_CREDENTIALS = {"Google OAuth", "AWS Certificate", "CloudFormation Secret Template"}
KICS_PREFIX = "Passwords And Secrets - "
# Generic rules (a span a vendor's rule also finds is kept under the vendor's).
GENERIC_KINDS = {
    "generic-password", "generic-secret", "generic-token", "generic-api-key", "generic-access-key",
    "generic-private-key", "password-in-url", "generic-password-on-yaml-files-when-value-in-tuple",
    "hardcoded-password-string", "password-keywords",
}
# The value a line assigns: after `:` or `=`, quoted or not, up to a trailing comma or comment.
LINE_VALUE = re.compile(r"""[:=]\s*(?P<q>['"]?)(?P<v>[^'"\s,#][^'"]*?)(?P=q)\s*,?\s*(?:#.*)?$""")
CODE_REFERENCE = re.compile(r"\b(?:var|local|data|module|self|aws_\w+)\.[A-Za-z_]|\{\{|\$\{|!Ref\b|!Sub\b|\*$")  # `*$`: a name pattern
PLACEHOLDER_PHRASE = re.compile(r"(?i)change[_ -]?me|replace[_ -]?me|to[_ -]?do\b")
ASSIGNMENT_RULE = re.compile(r"\[:=\]|\(:\|=\)")  # a rule matching `name: value` or `name = value`
PUTTY_PRIVATE = re.compile(r"Private-Lines: \d+\r?\n((?:[A-Za-z0-9+/=]+\r?\n)*[A-Za-z0-9+/=]+)")
BASE64_VALUE = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
BANDIT_EXAMPLE = "examples/hardcoded-passwords.py"
BANDIT_COMMENT = re.compile(r"^\s*# Possible hardcoded password: '(.*)'\s*$")
TALISMAN_TESTS = ("detector/filecontent/filecontent_detector_test.go", "detector/pattern/pattern_detector_test.go")
TALISMAN_WORDS = re.compile(r"UnsafeString|randomStringGoesHere|appropriate")
DIGGER_FOLDER = "tests/file_scanner_tests_folder"
DIGGER_TEST = "tests/integration_tests/test_file_scanner.py"
CFN_NAG_HELPER = "spec/password_rule_spec_helper.rb"
CFN_NAG_SPECS = "spec/custom_rules"
CFN_NAG_TEMPLATES = "spec/test_templates"
CODEQL_GO_TESTS = "ql/test/query-tests/Security/CWE-798"
CODEQL_TESTS = (
    "csharp/ql/test/query-tests/Security Features/CWE-798",
    "csharp/ql/test/query-tests/Security Features/CWE-321/HardcodedSymmetricEncryptionKey",
    "java/ql/test/query-tests/security/CWE-798/semmle/tests",
    "javascript/ql/test/query-tests/Security/CWE-798",
    "python/ql/test/query-tests/Security/CWE-798",
)
CODEQL_USER = re.compile(r"\| (?:name|user ?name|user) \||user name|user id", re.IGNORECASE)
CONNECTION_PASSWORD = re.compile(r"(?i)\b(?:password|pwd)=([^;]+)")
NO_SECRETS_TEST = "tests/lib/rules/no-secrets.ts"


def show(git_dir: str, path: str) -> str:
    return git(git_dir, "show", f"HEAD:{path}")


def strip_quotes(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start] in "\"'` \t":
        start += 1
    while end > start and text[end - 1] in "\"'` \t":
        end -= 1
    return start, end


def line_value(text: str, line_start: int, line_end: int) -> tuple[int, int] | None:
    """The value the line assigns (after its first `:` or `=`), without quotes, a trailing comma or comment."""
    line = text[line_start:line_end]
    for m in LINE_VALUE.finditer(line):
        if m.group("v").strip() and m.group("v").strip() not in ("{", "[", "|", ">"):
            start, end = strip_quotes(line, m.start("v"), m.end("v"))
            return line_start + start, line_start + end
    return None


def encoded_placeholder(value: str) -> bool:
    """A base64 value that decodes to a PEM header: judged by the key body after the header (a placeholder body such
    as `someKey`, or none, is not a key)."""
    if not BASE64_VALUE.fullmatch(value):
        return False
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    if "-----BEGIN" not in decoded:
        return False
    body = re.sub(r"-----(?:BEGIN|END)[A-Z ]*-----", "", decoded).strip()
    return placeholder(body)


def narrowed(text: str, start: int, end: int) -> tuple[int, int] | None:
    """A captured value without quotes, a URL narrowed to its password, a webhook URL to its path (to the URL's end)."""
    start, end = strip_quotes(text, start, end)
    found = text[start:end]
    if "://" in found:
        if m := URL_PASSWORD.search(text, start, end):
            return m.span(1)
        if m := WEBHOOK_URL.search(text, start):
            if m.start() < end:
                path_start, path_end = m.span("path")
                while path_end > path_start and text[path_end - 1] in "\"'`,;)":
                    path_end -= 1  # the quote and comma after a URL in JSON
                return path_start, path_end
        return None
    while end > start and not re.match(r"[A-Za-z0-9_\-+/=.!@#%&*?~^()]", text[end - 1]):
        end -= 1  # a rule that matches the character after the key (Stripe's `[^0-9a-zA-Z]`)
    return start, end


def pem_placeholder(value: str) -> bool:
    """A PEM block is judged by its body: under 64 base64 characters, or a typed-out word, is not a key (build_report3's
    repeated-run test reads a real OpenSSH body's `AAAA` runs as a placeholder, so it is not used on a PEM body)."""
    body = re.sub(r"\s", "", re.sub(r"-----(?:BEGIN|END)[A-Z ]*-----|^[A-Za-z-]+:.*$", "", value, flags=re.MULTILINE))
    return len(body) < 64 or re.search(r"x{4}|example|your|placeholder|sample|dummy|fake", body.lower()) is not None


def kept_value(value: str) -> bool:
    """Not a placeholder (build_report3's test; `change_me`-style phrases), not a short word (under 8 characters
    without a key-like run, as build_report9), not a code reference, not an encoded placeholder key."""
    if value.startswith("-----BEGIN"):
        return not pem_placeholder(value)
    return (
        bool(value)
        and not placeholder(value)
        and not PLACEHOLDER_PHRASE.search(value)
        and not (len(value) < 8 and not KEY_LIKE.search(value))
        and not CODE_REFERENCE.search(value)
        and not encoded_placeholder(value)
    )


def line_bounds(text: str, number: int) -> tuple[int, int] | None:
    """Start and end offsets of 1-based line `number`."""
    starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
    if not 0 < number <= len(starts):
        return None
    start = starts[number - 1]
    end = text.find("\n", start)
    return start, len(text) if end < 0 else end


def secrets_rule_span(rule: dict, pattern: regex.Pattern, text: str, line: tuple[int, int]) -> tuple[int, int] | None:
    """Where a passwords-and-secrets rule marks its credential on the finding's line."""
    start, end = line
    if "PRIVATE KEY" in rule["regex"]:
        block_start = text.rfind("-----BEGIN", 0, end)
        return pem_span(text, block_start) if block_start >= 0 else None
    if "PuTTY" in rule["regex"]:
        m = PUTTY_PRIVATE.search(text, start)
        return m.span(1) if m else None
    if "multiline" in rule:  # a value line named by the rule's line group (a password under `env:` or a tuple)
        if rule["name"] == "Heroku API Key":
            m = regex.search(r"\b[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}\b", text[start:end], regex.IGNORECASE)
            return (start + m.start(), start + m.end()) if m else None
        return line_value(text, start, end)
    m = pattern.search(text[start:end])  # on the line alone (a rule may anchor at `^`)
    if not m:
        return None
    group = 0  # a token rule (its groups are prefix alternatives): the whole match
    if ASSIGNMENT_RULE.search(rule["regex"]):  # a `name = value` rule: the entropy group, else the last group matched
        entropy = [entry["group"] for entry in rule.get("entropies", [])]
        group = entropy[0] if entropy else max((i for i in range(1, (pattern.groups or 0) + 1) if m.group(i)), default=0)
    return narrowed(text, start + m.start(group), start + m.end(group))


def kics_examples(git_dir: str) -> tuple[list[Example], list[tuple[str, list[str]]]]:
    rules_file = json.loads(show(git_dir, f"{KICS_QUERIES}/{KICS_SECRETS}/regex_rules.json"))
    rules = {rule["name"]: (rule, regex.compile(rule["regex"])) for rule in rules_file["rules"]}
    claims: dict[str, list[tuple[int, int, int, int, str]]] = {}  # path -> (rank, order, start, end, kind)
    texts: dict[str, str] = {}
    negatives: list[tuple[str, list[str]]] = []
    order = 0
    for query in (KICS_SECRETS, *KICS_CREDENTIAL_QUERIES):
        folder = f"{KICS_QUERIES}/{query}/test"
        files = sorted(p.rsplit("/", 1)[1] for p in git(git_dir, "ls-tree", "--name-only", "HEAD", f"{folder}/").splitlines())
        positives = [name for name in files if name.startswith("positive") and not name.endswith("expected_result.json")]
        for finding in json.loads(show(git_dir, f"{folder}/positive_expected_result.json")):
            order += 1
            name = finding.get("fileName") or finding.get("filename") or (positives[0] if len(positives) == 1 else None)
            if name not in positives:
                continue
            path = f"{folder}/{name}"
            text = texts.setdefault(path, show(git_dir, path))
            line = line_bounds(text, finding["line"])
            if line is None:
                continue
            if query == KICS_SECRETS:
                rule_name = finding["queryName"].removeprefix(KICS_PREFIX)
                if rule_name in KICS_NOT_CREDENTIALS or rule_name not in rules:
                    continue
                span = secrets_rule_span(rules[rule_name][0], rules[rule_name][1], text, line)
                kind = kind_name(rule_name)
            else:
                span = line_value(text, *line)
                kind = kind_name(finding["queryName"])
            if span and span[1] > span[0] and kept_value(text[span[0] : span[1]]):
                claims.setdefault(path, []).append((int(kind in GENERIC_KINDS), order, *span, kind))
        lines: list[str] = []
        for name in files:
            if name.startswith("negative"):
                lines += show(git_dir, f"{folder}/{name}").splitlines()
        negatives.append((query, lines))
    examples: list[Example] = []
    for path, found in claims.items():
        kept: list[tuple[int, int, str]] = []
        for _, _, start, end, kind in sorted(found):
            if not any(start < b and a < end for a, b, _ in kept):
                kept.append((start, end, kind))
        for start, end, kind in sorted(kept):
            lines, span = lines_around(texts[path], start, end)
            examples.append((kind, lines, [span], f"kics {path.removeprefix(KICS_QUERIES + '/')}"))
    return examples, negatives


def bandit_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    lines = show(git_dir, BANDIT_EXAMPLE).splitlines()
    examples: list[Example] = []
    negatives: list[str] = []
    for number, line in enumerate(lines):
        if line.strip() == "# ... but not:":
            negatives += [row for row in lines[number + 1 : number + 3] if row.strip() and not row.lstrip().startswith("#")]
        m = BANDIT_COMMENT.match(line)
        if not m or not kept_value(m.group(1)):
            continue
        value = m.group(1)
        for code in lines[number + 1 : number + 6]:
            at = next((code.find(q + value + q) for q in "\"'" if q + value + q in code), -1)
            if code.lstrip().startswith("#") or at < 0:
                continue
            if code.lstrip().startswith("def "):
                kind = "hardcoded-password-default"
            elif re.search(r"\w\(.*\b\w+=$", code[:at]):
                kind = "hardcoded-password-funcarg"
            else:
                kind = "hardcoded-password-string"
            examples.append((kind, code, [(at + 1, at + 1 + len(value))], f"bandit {BANDIT_EXAMPLE}"))
            break
    return examples, negatives


def go_literal_contents(source: str, call: str) -> list[str]:
    """The string or raw-string literal contents passed as `[]byte(...)` to `call(filename, ...)`."""
    found = []
    for m in re.finditer(rf"{call}\(filename,\s*\[\]byte\(", source):
        rest = source[m.end() :]
        if rest.startswith("`"):
            found.append(rest[1 : rest.index("`", 1)])
        elif lit := re.match(r'"((?:[^"\\\n]|\\.)*)"\)', rest):
            found.append(ast.literal_eval(f'"{lit.group(1)}"'))
    return found


def talisman_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    """Contents a detector test expects to fail the scan, holding a key-like token (marked: the longest such token,
    or an XML element's text); contents expected to pass are clean candidates."""
    examples: list[Example] = []
    negatives: list[str] = []
    pattern_test = show(git_dir, TALISMAN_TESTS[1])
    for content in go_literal_contents(pattern_test, "shouldPassDetectionOfSecretPattern"):
        if TALISMAN_WORDS.search(content) or "PRIVATE KEY" in content:
            continue
        if m := re.search(r"<(\w+)>([^<]+)</\1>", content):
            if kept_value(m.group(2)):
                examples.append(("potential-secret-pattern", content, [m.span(2)], f"talisman {TALISMAN_TESTS[1]}"))
    for content in go_literal_contents(pattern_test, "shouldFailDetectionOfSecretPattern"):
        negatives += content.splitlines()
    filecontent_test = show(git_dir, TALISMAN_TESTS[0])
    constants: dict[str, str] = {}
    for m in re.finditer(r'const (\w+) string = ((?:"(?:[^"\\\n]|\\.)*"\s*\+?\s*)+)', filecontent_test):
        constants[m.group(1)] = "".join(ast.literal_eval(f'"{part}"') for part in re.findall(r'"((?:[^"\\\n]|\\.)*)"', m.group(2)))
    for test in re.split(r"\nfunc ", filecontent_test):
        fails = "assert.True(t, results.HasFailures()" in test and "base64" in test
        for name, value in constants.items():
            if re.search(rf"\[\]byte\({name}\)", test) and fails:
                for token in re.finditer(r"[A-Za-z0-9+/=_.\-]{20,}", value):
                    if kept_value(token.group()):
                        lines, span = lines_around(value, *token.span())
                        examples.append(("base64-encoded-text", lines, [span], f"talisman {TALISMAN_TESTS[0]}"))
    return examples, negatives


def digger_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    test = show(git_dir, DIGGER_TEST)
    expected = {m.group(1): [int(n) for n in re.findall(r"\d+", m.group(2))] for m in re.finditer(r"param\(file_path='([^']+)',\s*expected_discoveries=\[([^\]]*)\]", test)}
    examples: list[Example] = []
    negatives: list[str] = []
    for name, numbers in expected.items():
        text = show(git_dir, f"{DIGGER_FOLDER}/{name}") if not name.endswith(".png") else ""
        for number, line in enumerate(text.splitlines(), start=1):
            span = line_value(line, 0, len(line)) if number in numbers else None
            if span and kept_value(line[span[0] : span[1]]):
                examples.append(("password-keywords", line, [span], f"credential-digger {DIGGER_FOLDER}/{name}"))
            else:
                negatives.append(line)
    return examples, negatives


def cfn_nag_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    """cfn_nag's password rule specs: each spec names a resource type, a property and a sub-property; the shared
    helper (`spec/password_rule_spec_helper.rb`) names the test templates and which of them must fail. In a failing
    template, the value of the (sub-)property or of a parameter's `Default` is marked, the example being the template
    entry holding it (a rule is about a property of one resource type); passing templates are clean candidates."""
    helper = show(git_dir, CFN_NAG_HELPER)
    sets = helper[helper.index("def password_rule_test_sets") :]
    sets = dict(re.findall(r"'([^']+)': '(pass|fail)'", sets[: sets.index("end")]))
    examples: list[Example] = []
    negatives: list[str] = []
    specs = git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", CFN_NAG_SPECS).splitlines()
    for spec_path in sorted(specs):
        spec = show(git_dir, spec_path)
        if "password_rule_test_sets" not in spec:
            continue
        fields = dict(re.findall(r"^(resource_type|password_property|sub_property_name|test_template_type) = '?([^'\n]*)'?$", spec, re.MULTILINE))
        rule = spec_path.rsplit("/", 1)[1].removesuffix("_spec.rb")
        if NOT_CREDENTIALS.search(rule):
            continue
        kind = kebab(rule.removesuffix("Rule"))
        resource = fields["resource_type"].removeprefix("AWS::").replace("::", "_").lower()
        names = [fields["password_property"]] + ([fields["sub_property_name"]] if fields["sub_property_name"] != "nil" else [])
        snake = "_".join(re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name).replace(" ", "_").lower() for name in names)
        keys = re.compile(rf"^\s*-?\s*['\"]?(?:{names[-1]}|Default)['\"]?\s*:", re.MULTILINE)
        for description, result in sets.items():
            template_type = fields["test_template_type"]
            path = f"{CFN_NAG_TEMPLATES}/{template_type}/{resource}/{resource}_{snake}_{description.replace(' ', '_').lower()}.{template_type}"
            text = show(git_dir, path)
            if result == "pass":
                negatives += text.splitlines()
                continue
            for m in keys.finditer(text):
                line_end = text.find("\n", m.start())
                span = line_value(text, m.start(), len(text) if line_end < 0 else line_end)
                if span and kept_value(text[span[0] : span[1]]):
                    examples.append((kind, *template_entry(text, *span), f"cfn_nag {path}"))
    return examples, negatives


def template_entry(text: str, start: int, end: int) -> tuple[str, list[tuple[int, int]]]:
    """The lines of the template entry holding [start, end): from the resource's or parameter's logical name (the
    nearest line above indented two spaces or less) to the value's line; the span inside them."""
    first = text.rfind("\n", 0, start) + 1
    while first > 0:
        above = text.rfind("\n", 0, first - 1) + 1
        line = text[above : first - 1]
        first = above
        if line.strip() and len(line) - len(line.lstrip()) <= 2:
            break
    last = text.find("\n", end)
    last = len(text) if last < 0 else last
    return text[first:last], [(start - first, end - first)]


def codeql_examples(git_dir: str, commit: str, tests: tuple[str, ...], source: str) -> tuple[list[Example], list[str]]:
    """CodeQL query tests for hard-coded credentials and keys: in each `.expected` file (its `#select` rows when it
    has such a section), the string literals at the locations a row names (`file:line:column:line:column`, 1-based,
    inclusive), narrowed to the value (quotes out; a connection string's password); a row naming a user name (a
    `name`/`user` parameter or label) is left out. The kind is the query's `@id` (`.qlref` -> `.ql`). Lines of the
    test files commented `// OK` or `# OK` are clean candidates."""
    examples: list[Example] = []
    texts: dict[str, str] = {}
    for folder in tests:
        language = folder.split("/")[0] if not folder.startswith("ql/") else ""
        src = f"{language}/ql/src" if language else "ql/src"
        for name in git(git_dir, "ls-tree", "--name-only", commit, f"{folder}/").splitlines():
            if not name.endswith(".expected"):
                continue
            query = git(git_dir, "show", f"{commit}:{name.removesuffix('.expected')}.qlref").strip()
            query_id = re.search(r"@id\s+(\S+)", git(git_dir, "show", f"{commit}:{src}/{query}")).group(1)
            expected = git(git_dir, "show", f"{commit}:{name}")
            rows = expected.split("#select", 1)[1] if "#select" in expected else expected
            for row in rows.splitlines():
                if CODEQL_USER.search(row):
                    continue
                for at in re.finditer(r"([\w.]+):(\d+):(\d+):(\d+):(\d+)", row):
                    path = f"{folder}/{at.group(1)}"
                    text = texts.setdefault(path, git(git_dir, "show", f"{commit}:{path}"))
                    starts = [0] + [m.end() for m in re.finditer(r"\n", text)]
                    first, first_col, last, last_col = map(int, at.groups()[1:])
                    if last > len(starts):
                        continue
                    begin, finish = starts[first - 1] + first_col - 1, starts[last - 1] + last_col
                    quote = text[begin : begin + 1]
                    if quote not in ("\"", "'", "`") or text[finish - 1 : finish] != quote or quote in text[begin + 1 : finish - 1]:
                        continue  # not one string literal (an expression, a variable)
                    begin, finish = strip_quotes(text, begin, finish)
                    if m := CONNECTION_PASSWORD.search(text, begin, finish):
                        begin, finish = m.span(1)
                    if kept_value(text[begin:finish]):
                        lines, span = lines_around(text, begin, finish)
                        examples.append((kind_name(query_id), lines, [span], f"{source} {path}"))
    negatives = [line for text in texts.values() for line in text.splitlines() if re.search(r"(?://|#)\s*OK\b", line)]
    return merged(examples), negatives


def no_secrets_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    """eslint-plugin-no-secrets' rule test: in each `invalid` case expecting a HIGH_ENTROPY error, the string
    literals' contents are marked (an `Authorization: Basic` header's credentials under the test's own `Basic Auth`
    pattern); the `valid` cases' code lines are clean candidates."""
    source = show(git_dir, NO_SECRETS_TEST)
    constants = {m.group(1): m.group(2) for m in re.finditer(r"^const (\w+) =\s*`([^`]*)`;", source, re.MULTILINE | re.DOTALL)}
    constants |= {m.group(1): m.group(2) for m in re.finditer(r"^const (\w+) =\s*\"((?:[^\"\\]|\\.)*)\";", source, re.MULTILINE)}
    valid = source[source.index("valid: [") : source.index("invalid: [")]
    invalid = source[source.index("invalid: [") :]
    examples: list[Example] = []
    for case in re.finditer(r"code:\s*(?:(\w+)|`([^`]*)`)(.*?)\}\s*,", invalid, re.DOTALL):
        code = constants.get(case.group(1) or "", case.group(2) or "")
        if "HIGH_ENTROPY_MSG" not in case.group(3):
            continue
        for literal in re.finditer(r"([\"'])((?:(?!\1).)+)\1", code):
            start, end = literal.span(2)
            kind = "high-entropy"
            if basic := re.search(r"Authorization: Basic (\S+)", literal.group(2)):
                start, end, kind = start + basic.start(1), start + basic.end(1), "basic-auth"
            if kept_value(code[start:end]):
                lines, span = lines_around(code, start, end)
                examples.append((kind, lines.strip("\n"), [span], f"eslint-plugin-no-secrets {NO_SECRETS_TEST}"))
    negatives = []
    for case in re.finditer(r"code:\s*(?:(\w+)|`([^`]*)`)", valid):
        negatives += constants.get(case.group(1) or "", case.group(2) or "").splitlines()
    return examples, negatives


def capped(examples: list[Example], rng: random.Random) -> list[Example]:
    """A generic kind's examples cut to at most GENERIC_CAP secrets by a fixed-seed draw (order kept)."""
    out = []
    for kind in dict.fromkeys(kind for kind, *_ in examples):
        items = [example for example in examples if example[0] == kind]
        if kind in GENERIC_KINDS and sum(len(spans) for _, _, spans, _ in items) > GENERIC_CAP:
            chosen = set(rng.sample(range(len(items)), GENERIC_CAP))
            items = [item for index, item in enumerate(items) if index in chosen]
        out += items
    return out


CONTEXTS = (
    "kubectl create secret generic {dashed} --from-literal={lower}={value} -n payments",
    'psql "postgresql://svc_{lower}:{value}@db.internal.acme.test:5432/orders?sslmode=require"',
    "npm config set //npm.pkg.acme.test/:_authToken={value}",
    "<<<\n# ~/.netrc\nmachine api.acme.test\n  login ci-bot\n  password {value}\n>>>",
    '<<<\n# charts/gateway/values.yaml\nauth:\n  existingSecret: ""\n  {camel}: "{value}"\n>>>',
    "curl -u deploy:{value} https://nexus.acme.test/service/rest/v1/status",
    '<<<\n# ~/.zshrc\nexport PATH="$HOME/.local/bin:$PATH"\nexport {env}="{value}"\n>>>',
    '<<<\n# .gitlab-ci.yml\nvariables:\n  DOCKER_DRIVER: overlay2\n  {env}: "{value}"\n>>>',
    "Rotate it today: the {name} {value} went out in last night's merge, so anyone with read access has seen it.",
    '<<<\nIn [3]: os.environ["{env}"] = "{value}"\nIn [4]: client = acme.Client(region="eu-north-1")\n>>>',
    "docker run -d -e {env}='{value}' -p 8080:8080 acme/gateway:2.3",
    "<<<\n# ~/.pgpass\ndb.internal.acme.test:5432:orders:svc_orders:{value}\n>>>",
    "terraform apply -var '{lower}={value}' -auto-approve",
    "<<<\n### health check (api.http)\nGET https://api.acme.test/v2/health\nAuthorization: Bearer {value}\n>>>",
    'os.Setenv("{env}", "{value}")',
    "Can you double-check this {name} before I paste it into the runbook? {value}",
)


in_context = partial(fill_context, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report11."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    lower, digits = "abcdefghijklmnopqrstuvwxyz", "0123456789"
    service = partial(rng.choice, ["orders", "billing", "gateway", "ledger", "search", "notify", "reports"])
    account = partial(rng.randint, 10**11, 10**12 - 1)

    groups: dict[str, list] = {
        "kubectl, helm and terraform output": [
            lambda: f"secret/{service()}-db created",
            lambda: f"{service()}-credentials   Opaque   {rng.randint(1, 6)}      {rng.randint(2, 300)}d",
            lambda: f"helm upgrade --install {service()} ./charts/{service()} --set image.tag={hexs(7)} --wait",
            lambda: f"  # aws_secretsmanager_secret_version.{service()} will be updated in-place (id: arn:aws:secretsmanager:eu-west-1:{account()}:secret:{service()}-{pick(lower + digits, 6)}|terraform-{rng.randint(10**19, 10**20)})",
            lambda: f"      ~ secret_string = (sensitive value)",
            lambda: f"Apply complete! Resources: {rng.randint(0, 9)} added, {rng.randint(0, 9)} changed, 0 destroyed. (run {uid()})",
            lambda: f"pod/{service()}-{hexs(10)}-{pick(lower + digits, 5)}   1/1     Running   0          {rng.randint(1, 59)}m",
        ],
        "ids and settings under key-like names": [
            lambda: f'  "clientRequestToken": "{uid()}",',
            lambda: f"kms_key_id = \"arn:aws:kms:eu-west-1:{account()}:key/{uid()}\"",
            lambda: f"password_last_used: 2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            lambda: f"  PasswordLength: {rng.choice([16, 20, 24, 32])}",
            lambda: f'  "secretVersionId": "{uid()}",',
            lambda: f"token_endpoint: https://login.acme.test/{uid()}/oauth2/v2.0/token",
            lambda: f"access_key_last_rotated={rng.randint(1, 89)}d key_age_days={rng.randint(1, 89)}",
            lambda: f"      SecretId: !Sub 'arn:aws:secretsmanager:${{AWS::Region}}:${{AWS::AccountId}}:secret:{service()}/db'",
        ],
        "digests and checksums": [
            lambda: f'<script src="https://cdn.acme.test/app.{hexs(8)}.js" integrity="sha384-{b64(48)}" crossorigin="anonymous"></script>',
            lambda: f'  "md5Hash": "{b64(16)}",',
            lambda: f"x-goog-hash: crc32c={b64(4)}",
            lambda: f"{hexs(128)}  {service()}-{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}.zip",
            lambda: f"ContentMD5: {b64(16)}",
            lambda: f"  checksum/config: {hexs(64)}",
        ],
        "base64 media and blobs": [
            lambda: f'<link rel="preload" as="image" href="data:image/webp;base64,UklGRlYAAABXRUJQVlA4IEoAAADQAQCdASoBAAEAAUAmJaQAA3AA/v3AgAA{b64(24)}">',
            lambda: f"  src: url(data:font/woff;base64,d09GRgABAAAAA{b64(40)}) format('woff');",
            lambda: f'  "thumbnail": "data:image/gif;base64,R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==", "id": {rng.randint(1, 9999)}',
        ],
        "documented placeholders and references": [
            "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
            'client_secret: "<client-secret>"',
            'password: "{{ vault_db_password }}"',
            "      MasterUserPassword: !Ref DBPassword",
            '      "defaultValue": "[parameters(\'adminPassword\')]"',
            'export TF_VAR_db_password="$(op read op://infra/db/password)"',
            "api_key: ${API_KEY:?set API_KEY}",
            lambda: f"  password = var.{service()}_{rng.choice(['dev', 'stage', 'prod'])}_db_password",
            lambda: f"      AuthToken: '{{{{resolve:secretsmanager:{service()}/{rng.choice(['redis', 'cache', 'queue'])}:SecretString:token}}}}'",
            lambda: f"{service().upper()}_{rng.choice(['API', 'BOT', 'CI', 'DEPLOY'])}_TOKEN=changeme",
        ],
        "code and prose about keys": [
            "KICS flags a password in a CloudFormation default; pass it with NoEcho and a dynamic reference instead.",
            "bandit B105 fires on a string compared with a variable named password, even in tests.",
            "if token is None: raise RuntimeError('DEPLOY_TOKEN is not set; ask #platform for access')",
            "The DMS endpoint reads its password from Secrets Manager now, so the template holds only the ARN.",
            "secret_value = client.get_secret_value(SecretId=secret_arn)['SecretString']",
            "I removed the access key from the Lambda environment and attached a role instead.",
            "Talisman blocked the push because of a base64 blob in the fixture; it was a PNG, so I added it to .talismanrc.",
            "password_field = forms.CharField(widget=forms.PasswordInput, min_length=12)",
            "Amplify reads the OAuth token only when the app is created; rotating it means updating the app.",
        ],
        "URLs without credentials": [
            lambda: f"https://eu-west-1.console.aws.amazon.com/secretsmanager/secret?name={service()}%2Fdb&region=eu-west-1",
            lambda: f"https://portal.azure.com/#@acme.test/resource/subscriptions/{uid()}/resourceGroups/rg-{service()}/overview",
            lambda: f"postgresql://db.internal.acme.test:5432/{service()}?sslmode=require&application_name={service()}",
            lambda: f"https://gitlab.acme.test/platform/{service()}/-/settings/ci_cd#js-cicd-variables-settings",
            lambda: f"https://{service()}.amplifyapp.com/?build={rng.randint(100, 999)}",
        ],
    }
    return draw_lines(rng, groups, per_template=3, least=20)



def placed_entries(examples: list[Example], out: Path, place, context_values: int) -> tuple[list[str], list[str], set[str]]:
    """The half's entries (each example literal, then its kind's first single-line values placed by `place`), its
    kinds, and every value it marks (a clean candidate holding one is not clean); report12 and report13 use it too."""
    secrets, kinds = report4_secret_entries(
        examples,
        existing_values(out.parent, out.name),
        place=place,
        chosen=lambda values: [value for value in values if "\n" not in value][:context_values],
        skipped=lambda text: not text.strip() or bool({"<<<", ">>>"} & set(text.splitlines())),
        note="examples literal + contexts",
        sort_kinds=True,
    )
    return secrets, kinds, {m.group(1) for m in re.finditer(r"⟦[a-z0-9-]+:([^⟧]+)⟧", "\n".join(secrets))}


def main(kics_dir: str, bandit_dir: str, talisman_dir: str, digger_dir: str, cfn_nag_dir: str, codeql_dir: str, codeql_go_dir: str, no_secrets_dir: str) -> None:
    kics, kics_negatives = kics_examples(kics_dir)
    bandit, bandit_negatives = bandit_examples(bandit_dir)
    talisman, talisman_negatives = talisman_examples(talisman_dir)
    digger, digger_negatives = digger_examples(digger_dir)
    cfn_nag, cfn_nag_negatives = cfn_nag_examples(cfn_nag_dir)
    codeql_commit = git(codeql_dir, "rev-parse", "HEAD").strip()
    codeql, codeql_negatives = codeql_examples(codeql_dir, codeql_commit, CODEQL_TESTS, "codeql")
    codeql_go_commit = git(codeql_go_dir, "rev-list", "-1", "HEAD", "--", CODEQL_GO_TESTS).strip()
    if not git(codeql_go_dir, "ls-tree", "--name-only", codeql_go_commit, f"{CODEQL_GO_TESTS}/"):
        codeql_go_commit = git(codeql_go_dir, "rev-parse", codeql_go_commit + "^").strip()  # emptied when it moved into github/codeql
    codeql_go, codeql_go_negatives = codeql_examples(codeql_go_dir, codeql_go_commit, (CODEQL_GO_TESTS,), "codeql-go")
    no_secrets, no_secrets_negatives = no_secrets_examples(no_secrets_dir)
    found = kics + bandit + talisman + digger + cfn_nag + codeql + codeql_go + no_secrets
    examples = capped(first_per_value(merged(found)), random.Random(SEED))
    # a candidate holding a value this half marks as a secret (a negative test reusing a positive's literal) is not clean
    secrets, kinds, marked = placed_entries(examples, OUT, in_context, CONTEXT_VALUES)
    # the last commit touching the files read (in DataDog's fork: a Checkmarx commit, the fork changed none of them)
    kics_read = [f"{KICS_QUERIES}/{query}/test" for query in (KICS_SECRETS, *KICS_CREDENTIAL_QUERIES)]
    kics_read.append(f"{KICS_QUERIES}/{KICS_SECRETS}/regex_rules.json")
    commits = {
        "Checkmarx/kics": git(kics_dir, "log", "-1", "--format=%H", "HEAD", "--", *kics_read).strip(),
        "PyCQA/bandit": git(bandit_dir, "rev-parse", "HEAD").strip(),
        "thoughtworks/talisman": git(talisman_dir, "rev-parse", "HEAD").strip(),
        "SAP/credential-digger": git(digger_dir, "rev-parse", "HEAD").strip(),
        "stelligent/cfn_nag": git(cfn_nag_dir, "rev-parse", "HEAD").strip(),
        "github/codeql (Semmle/ql)": codeql_commit,
        "github/codeql-go": codeql_go_commit,
        "nickdeis/eslint-plugin-no-secrets": git(no_secrets_dir, "rev-parse", "HEAD").strip(),
    }
    write_half(
        OUT,
        commits,
        "Apache-2.0, Apache-2.0, MIT, Apache-2.0, MIT, MIT, MIT, MIT",
        secrets,
        kinds,
        [
            *((f"kics {query} negative tests, lines holding no key-like token", lines) for query, lines in kics_negatives),
            ("bandit hardcoded-passwords example, lines after `... but not:`", bandit_negatives),
            ("talisman detector tests' contents expected to pass, lines holding no key-like token", talisman_negatives),
            ("credential-digger scanner test files, lines without an expected discovery or named false positives", digger_negatives),
            ("cfn_nag password rules' passing test templates, lines holding no key-like token", cfn_nag_negatives),
            ("codeql hard-coded credential and key tests, lines commented `// OK`", codeql_negatives),
            ("codeql-go hard-coded credentials test, lines commented `// OK`", codeql_go_negatives),
            ("eslint-plugin-no-secrets valid cases, lines holding no key-like token", no_secrets_negatives),
        ],
        lambda line: clean_fit(line) and not any(value in line for value in marked),
        drawn_lookalikes(random.Random(SEED)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:9])
