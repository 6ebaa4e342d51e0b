"""Build the sixteenth report half (`report16/`) mechanically from the published test cases of two shell-history
secret filters, a secret scanner and a log secret filter.

    python benchmarks/redaction_corpus/build_report16.py SHELLCLEAR ATUIN SEKRETBARILO ALLOY

(the arguments git directories of rusty-ferris-club/shellclear, atuinsh/atuin, vshuraeff/sekretbarilo and
grafana/alloy).

Kept so that the half can be rebuilt and audited: it was run beside version 23's rules, and its output was written
without running the redactor on it. Sources, read with `git show` at HEAD:
- rusty-ferris-club/shellclear (Apache-2.0), `shellclear/tests/suites_sensitive_patterns/*.yaml`: each case
  (`{name, test, expected}`; the test asserts that the pattern's secret group captures `expected` in `test`) is an
  example, `expected` marked where it first occurs in `test` (as the source writes it, also where the pattern stops
  inside a longer token); of an `expected` written `user:password`, the password. Kind = the file's pattern id.
- atuinsh/atuin (MIT), `crates/atuin-client/src/secrets.rs`: each `SECRET_PATTERNS` entry `(name, regex, test)`,
  whose test asserts that the regex matches each test value, bare and embedded in `some random text {s} some more
  random text` (both forms are examples). The secret is marked where the regex matches it (Python's `regex`
  module); where the match is an environment variable's name (followed by `=`), the value after the `=`; where it is
  a command (`atuin login`), the values of its `-p` and `-k` options. Kind = the entry's name.
- vshuraeff/sekretbarilo (MIT), a secret scanner for git workflows and coding agents:
  `tests/scanner_tests.rs`: each `assert_detected(path, b"...", "rule-id")` whose line is a byte-string literal
  (lines built with `format!` are left out) is an example. Its secret is marked where the rule's `regex` in
  `src/config/rules.toml` (compiled with Python's `regex` module) captures it: its `secret_group`, else the match.
  A rule whose regex Python rejects, or a line it does not match in Python, gives nothing. Kind = the rule id.
  Lines of `assert_not_detected(path, b"...")` are clean candidates.
  `tests/false_positive_tests.rs`: the test functions asserting no findings (`assert_no_findings`, or
  `findings.is_empty()` not negated, and no `assert_detected`); their string literals, less file paths and
  assertion messages (holding `{`), are clean candidates (a literal holding several lines gives each line).
- grafana/alloy (Apache-2.0), `internal/component/loki/secretfilter/testhelper/testhelper.go`: each `FakeSecrets`
  entry (`{Name, Value}`, Value a `+` join of Go string literals), which the component's tests expect redacted from
  a log line. The example is the test log's message line with the value in it (`"message": "This is a simple log
  message with a secret value VALUE !`, as `TestLogs` builds it); the value is marked whole, less a leading
  `word:` label (`token:`). Kind = its `Name`.
A captured span is narrowed to its credential (credential_span: quotes around it dropped; of a URL holding
`user:password@`, the password). A span that is only a PEM armour line (`-----BEGIN ... PRIVATE KEY-----` without a
body; sekretbarilo flags the header) is left out: there is no key in it to redact; so is a value that is only
shellclear's own name (`shellclear`, `SHELLCLEAR`, `shellclaer`), the dummy its tests assign to variables, and a
command substitution (`` `cat /tmp/secret` ``, `$(cat /tmp/secret)`), a code reference build_report11's test lets
through. Left out of the secrets: values
build_report11's test rejects (placeholders, short words, code references) and values found (plain substring
search) in another folder's `secrets.txt`. Of the examples holding the same values of a kind, the first 2 are kept.
Each kind's first values (up to CONTEXT_VALUES, single-line only) are also placed in transcript contexts written for
report16, rotating.
Clean candidates lose lines holding a value this half marks, lines assigning a credential-named key
(build_report12's CREDENTIAL_KEY) and lines holding a key-like token (build_report10's clean_fit). Then look-alikes
drawn with a fixed seed from templates written for report16.
"""

from __future__ import annotations

import ast
import random
import re
import sys
import tomllib
from functools import partial
from pathlib import Path

import regex

from build_report4 import Draw, Example, draw_lines, git, write_half
from build_report10 import fill_context, first_per_value, kind_name
from build_report11 import kept_value, placed_entries
from build_report15 import clean_keeper, other_halves

OUT = Path(__file__).resolve().parent / "report16"
SEED = 16160
CONTEXT_VALUES = 2

RULES = "src/config/rules.toml"
SCANNER_TESTS = "tests/scanner_tests.rs"
FALSE_POSITIVE_TESTS = "tests/false_positive_tests.rs"
RUST_STRING = r'b?"(?:[^"\\]|\\.)*"'
DETECTED = re.compile(r"assert_detected\(\s*(" + RUST_STRING + r")\s*,\s*(" + RUST_STRING + r")\s*,\s*(" + RUST_STRING + r")\s*,?\s*\)")
NOT_DETECTED = re.compile(r"assert_not_detected\(\s*(" + RUST_STRING + r")\s*,\s*(" + RUST_STRING + r")\s*,?\s*\)")
LITERAL = re.compile(RUST_STRING)
FILE_PATH = re.compile(r"^[\w./-]+\.[\w]+$|^[\w.-]*/[\w./-]*$")
PEM_ARMOUR = re.compile(r"^-----(?:BEGIN|END) [A-Z0-9 ]+-----$")
URL_PASSWORD = re.compile(r"://[^\s/:@]*:([^@\s/]+)@")


def rust_string(literal: str) -> str:
    """A Rust (byte) string literal's value (its escapes `\\"`, `\\\\`, `\\n`, `\\t` as Python reads them)."""
    literal = literal[1:] if literal.startswith("b") else literal
    literal = re.sub(r"\\\n\s*", "", literal)  # a line continuation
    return ast.literal_eval(literal)


def sekretbarilo_rules(git_dir: str) -> dict[str, tuple[regex.Pattern, int]]:
    rules = {}
    for rule in tomllib.loads(git(git_dir, "show", f"HEAD:{RULES}"))["rules"]:
        try:
            pattern = regex.compile(rule["regex"].replace(r"\z", r"\Z"))
        except Exception:  # noqa: BLE001 - a Rust construct Python's regex module rejects: the rule is left out
            continue
        rules[rule["id"]] = (pattern, int(rule.get("secret_group", 0)))
    return rules


def sekretbarilo_examples(git_dir: str) -> tuple[list[Example], list[str], list[str]]:
    rules = sekretbarilo_rules(git_dir)
    tests = git(git_dir, "show", f"HEAD:{SCANNER_TESTS}")
    examples: list[Example] = []
    for _, literal, rule_literal in DETECTED.findall(tests):
        rule_id, text = rust_string(rule_literal), rust_string(literal)
        if rule_id not in rules:
            continue
        pattern, group = rules[rule_id]
        spans = []
        for m in pattern.finditer(text):
            g = group if group <= pattern.groups and m.start(group) >= 0 else 0
            if m.end(g) > m.start(g):
                spans.append(m.span(g))
        if spans:
            examples.append((kind_name(rule_id), text, spans, f"sekretbarilo {SCANNER_TESTS}"))
    not_detected = [line for _, literal in NOT_DETECTED.findall(tests) for line in rust_string(literal).split("\n")]
    false_positives: list[str] = []
    for func in re.split(r"(?m)^#\[test\]", git(git_dir, "show", f"HEAD:{FALSE_POSITIVE_TESTS}"))[1:]:
        quiet = "assert_no_findings(" in func or re.search(r"(?<!!)findings\.is_empty\(\)", func)
        if not quiet or "assert_detected" in func or "!findings.is_empty()" in func:
            continue
        for literal in LITERAL.findall(func):
            value = rust_string(literal)
            if "{" in value or FILE_PATH.match(value):
                continue
            false_positives += value.split("\n")
    return examples, not_detected, false_positives


SHELLCLEAR_SUITES = "shellclear/tests/suites_sensitive_patterns"
ATUIN_SECRETS = "crates/atuin-client/src/secrets.rs"
RUST_LITERAL = r'(?:r#*"[^"]*"#*|"(?:[^"\\]|\\.)*")'
ATUIN_ENTRY = re.compile(r"\(\s*(" + RUST_LITERAL + r")\s*,\s*(" + RUST_LITERAL + r")\s*,\s*TestValue::(Single\(.*?\)|Multiple\(&\[.*?\]\)),?\s*\)", re.DOTALL)
ATUIN_EMBED = "some random text {s} some more random text"
TRAILING_COMMENT = re.compile(r"(?<=[,)])[ \t]*//[^\n]*")  # a `// ...` comment after a `,` or `)` (not a URL's `//`)
COMMAND_SUBSTITUTION = re.compile(r"^(?:`[^`]*`|\$\([^)]*\))$")  # `cat file` / $(cat file): a code reference
PROJECT_NAME_PLACEHOLDER = re.compile(r"(?i)^shell?cl(?:ea|ae)r$")  # shellclear's own name, its dummy value
OPTION_VALUE = re.compile(r"""\s-[pk]\s+(?:"([^"]*)"|(\S+))""")


def rust_literal(literal: str) -> str:
    if literal.startswith("r"):
        return literal.lstrip("r").strip("#")[1:-1]
    return rust_string(literal)


def shellclear_examples(git_dir: str) -> list[Example]:
    import yaml

    examples: list[Example] = []
    for path in git(git_dir, "ls-tree", "--name-only", "HEAD", f"{SHELLCLEAR_SUITES}/").splitlines():
        if not path.endswith(".yaml"):
            continue
        kind = kind_name(Path(path).stem)
        for case in yaml.safe_load(git(git_dir, "show", f"HEAD:{path}")) or []:
            text, expected = str(case["test"]), str(case["expected"])
            if not expected or expected not in text:
                continue
            start = text.index(expected)
            if ":" in expected and re.fullmatch(r"[^:\s]+:[^:\s]+", expected):  # user:password, the password
                start += expected.index(":") + 1
                expected = expected.split(":", 1)[1]
            examples.append((kind, text, [(start, start + len(expected))], f"shellclear {path}"))
    return examples


def atuin_examples(git_dir: str) -> list[Example]:
    source = git(git_dir, "show", f"HEAD:{ATUIN_SECRETS}")
    source = source[source.index("SECRET_PATTERNS") : source.index("SECRET_PATTERNS_RE")]
    source = TRAILING_COMMENT.sub("", source)
    examples: list[Example] = []
    for name, expression, tests in ATUIN_ENTRY.findall(source):
        kind = kind_name(rust_literal(name))
        try:
            pattern = regex.compile(rust_literal(expression))
        except Exception:  # noqa: BLE001 - a Rust construct Python's regex module rejects: the entry is left out
            continue
        for value in (rust_literal(lit) for lit in re.findall(RUST_LITERAL, tests)):
            for text in (value, ATUIN_EMBED.format(s=value)):
                m = pattern.search(text)
                if not m:
                    continue
                if text[m.end() : m.end() + 1] == "=":  # an environment variable's name: its value
                    end = re.match(r"\S*", text[m.end() + 1 :]).end()
                    spans = [(m.end() + 1, m.end() + 1 + end)]
                elif re.search(r"\s", m.group(0)):  # a command: its -p and -k values
                    spans = [o.span(1) if o.group(1) is not None else o.span(2) for o in OPTION_VALUE.finditer(text, m.end())]
                else:
                    spans = [m.span()]
                if spans:
                    examples.append((kind, text, spans, f"atuin {ATUIN_SECRETS}"))
    return examples


ALLOY_HELPER = "internal/component/loki/secretfilter/testhelper/testhelper.go"
ALLOY_SECRET = re.compile(r'\{\s*Name:\s*("[^"]*"),\s*Value:\s*((?:"(?:[^"\\\n]|\\.)*"\s*\+?\s*)+),?\s*\}')
ALLOY_LINE = '"message": "This is a simple log message with a secret value {value} !'


def alloy_examples(git_dir: str) -> list[Example]:
    helper = git(git_dir, "show", f"HEAD:{ALLOY_HELPER}")
    body = helper[helper.index("var FakeSecrets") : helper.index("var TestLogs")]
    examples: list[Example] = []
    for name, value in ALLOY_SECRET.findall(body):
        value = "".join(ast.literal_eval(part) for part in re.findall(r'"(?:[^"\\\n]|\\.)*"', value))
        text = ALLOY_LINE.format(value=value)
        start = text.index(value)
        label = re.match(r"[A-Za-z_]+:", value)
        examples.append((kind_name(ast.literal_eval(name)), text, [(start + (label.end() if label else 0), start + len(value))], f"alloy {ALLOY_HELPER}"))
    return examples


def credential_span(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """The credential in a captured span: without quotes around it; of a URL with `user:password@`, the password."""
    a, b = span
    while b - a >= 2 and text[a] == text[b - 1] and text[a] in "\"'":
        a, b = a + 1, b - 1
    if m := URL_PASSWORD.search(text, a, b):
        return m.span(1)
    return a, b


def kept_examples(examples: list[Example], elsewhere: str) -> list[Example]:
    """Each example's credentials (credential_span) that build_report11 keeps, that are not a bare PEM armour line,
    and that no other folder marks; examples left with none dropped."""
    kept = []
    for kind, text, spans, source in examples:
        spans = [credential_span(text, span) for span in spans]
        spans = [
            (a, b) for a, b in spans
            if kept_value(text[a:b]) and not PEM_ARMOUR.match(text[a:b].strip()) and not PROJECT_NAME_PLACEHOLDER.match(text[a:b])
            and not COMMAND_SUBSTITUTION.match(text[a:b])
            and text[a:b] not in elsewhere
        ]
        if spans:
            kept.append((kind, text, spans, source))
    return kept


CONTEXTS = (
    "<<<\ndiff --git a/docker-compose.yml b/docker-compose.yml\n--- a/docker-compose.yml\n+++ b/docker-compose.yml\n@@ -14,3 +14,4 @@ services:\n   billing:\n     environment:\n+      {env}: \"{value}\"\n       TZ: Europe/Lisbon\n>>>",
    "<<<\nRun ./ci/check-integration.sh\n+ echo \"using {env}={value}\"\nusing {env}={value}\nError: upstream returned 403 (Forbidden)\nError: Process completed with exit code 1.\n>>>",
    "<<<\n$ kubectl describe secret billing-{dashed} -n tern\nName:         billing-{dashed}\nNamespace:    tern\nType:         Opaque\nData\n====\n{lower}:  {value}\n>>>",
    '{{"type": "tool_use", "name": "bash", "input": {{"command": "./scripts/deploy.sh --env prod --{dashed} {value}"}}}}',
    "<<<\n# ~/.tern/credentials\n[default]\nregion = ap-southeast-2\n{lower} = {value}\n>>>",
    "<<<\n# config/credentials.yml.enc (decrypted with bin/rails credentials:show)\nproduction:\n  {lower}: {value}\nsecret_key_base_rotation: false\n>>>",
    '<<<\n// .vscode/settings.json\n{{\n  "editor.formatOnSave": true,\n  "tern.{camel}": "{value}"\n}}\n>>>',
    '<<<\n# tern/settings.py\nDEBUG = False\n{env} = "{value}"\nALLOWED_HOSTS = ["billing.tern.test"]\n>>>',
    '<<<\npackage billing\n\nconst {camel}Default = "{value}"\n>>>',
    'const {env}: &str = "{value}";',
    'resp = requests.get("https://api.tern.test/v1/invoices", headers={{"X-{camel}": "{value}"}}, timeout=5)',
    "user: please use this {name} for the smoke test: {value} (it's the sandbox one)",
    '<<<\n  # module.billing.aws_ssm_parameter.{lower} will be updated in-place\n  ~ resource "aws_ssm_parameter" "{lower}" {{\n      ~ value = (sensitive value) -> "{value}"\n    }}\n>>>',
    '<<<\n# /etc/systemd/system/tern-billing.service.d/override.conf\n[Service]\nEnvironment={env}={value}\n>>>',
    "<<<\n# group_vars/billing/vars.yml\nbilling_port: 8085\n{lower}: \"{value}\"\nbilling_workers: 4\n>>>",
)


in_context = partial(fill_context, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report16."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    digits = "0123456789"
    svc = partial(rng.choice, ["billing", "tern-api", "invoicer", "dunning", "tax-engine", "ledger-sync", "mailer"])
    who = partial(rng.choice, ["ilse", "tomas", "keiko", "obinna", "marta", "farid"])
    day = lambda: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"  # noqa: E731
    clock = lambda: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"  # noqa: E731

    groups: dict[str, list] = {
        "commit hashes in logs": [
            lambda: f"{hexs(7)} fix({svc()}): round tax before summing line items",
            lambda: f"HEAD is now at {hexs(7)} chore: bump {svc()} to 0.{rng.randint(1, 30)}.{rng.randint(0, 9)}",
            lambda: f"Merge: {hexs(7)} {hexs(7)}",
            lambda: f"remote: Resolving deltas: 100% ({rng.randint(10, 900)}/{rng.randint(900, 2000)}), done. {hexs(40)}",
            lambda: f"Successfully rebased and updated refs/heads/{who()}/{svc()}-retry onto {hexs(40)}.",
            lambda: f"cherry-picked from commit {hexs(40)}",
            lambda: f"bisect: first bad commit is {hexs(40)}",
        ],
        "container image digests": [
            lambda: f"ghcr.io/tern/{svc()}@sha256:{hexs(64)}",
            lambda: f"    Image ID:       docker-pullable://registry.tern.test/{svc()}@sha256:{hexs(64)}",
            lambda: f"#12 writing image sha256:{hexs(64)} done",
            lambda: f"{svc()}  {rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}  {hexs(12)}  {rng.randint(2, 9)} days ago  {rng.randint(40, 900)}MB",
            lambda: f"  digest: sha256:{hexs(64)}  size: {rng.randint(500, 9000)}",
        ],
        "UUIDs and trace ids": [
            lambda: f"[{day()} {clock()}] invoice.created id={uid()} customer={uid()}",
            lambda: f"trace_id={hexs(32)} span_id={hexs(16)} service={svc()}",
            lambda: f"  \"idempotencyKey\": \"{uid()}\",",
            lambda: f"X-Amzn-Trace-Id: Root=1-{hexs(8)}-{hexs(24)}",
            lambda: f"job {uid()} retried {rng.randint(1, 5)} times, giving up",
        ],
        "checksums": [
            lambda: f"SHA256 ({svc()}-{rng.randint(1, 4)}.{rng.randint(0, 9)}.tar.gz) = {hexs(64)}",
            lambda: f"{hexs(64)}  {svc()}_linux_amd64.zip",
            lambda: f"    checksum = \"{hexs(64)}\"",
            lambda: f"h1:{b64(32)}",
            lambda: f"integrity sha512-{b64(64)}",
            lambda: f"ETag: \"{hexs(32)}\"",
        ],
        "base64 of images and fonts": [
            lambda: f"background-image: url(data:image/gif;base64,R0lGODlhAQABAIAAA{b64(30)});",
            lambda: f"  \"icon\": \"data:image/svg+xml;base64,PHN2ZyB4bWxucz0i{b64(45)}\",",
            lambda: f"@font-face {{ src: url(data:font/woff2;base64,d09GMgABAAAAA{b64(51)}) }}",
            lambda: f"<img alt=\"logo\" src=\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAB{b64(36)}\">",
            lambda: f"thumbnail_{rng.randint(1, 99)}.jpg: {rng.randint(10, 300)} KB base64-encoded, attached to ticket #{rng.randint(1000, 9999)}",
        ],
        "documented placeholders": [
            "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "OPENAI_API_KEY=sk-...your-key-here",
            "STRIPE_SECRET_KEY=sk_test_<your-key>",
            "export GITHUB_TOKEN=<your personal access token>",
            "REDIS_URL=redis://:<password>@localhost:6379/0",
            "password: ********",
            "api_key: \"${{ secrets.BILLING_API_KEY }}\"",
            "SLACK_BOT_TOKEN=xoxb-your-bot-token",
            "client_secret: REPLACE_ME",
        ],
        "code reading secrets from the environment": [
            'api_key = os.environ["TERN_API_KEY"]',
            'const token = process.env.BILLING_TOKEN ?? "";',
            'password := os.Getenv("DUNNING_DB_PASSWORD")',
            'let secret = env::var("INVOICER_SECRET").unwrap_or_default();',
            'String token = System.getenv().get("MAILER_TOKEN");',
            "token = ENV.fetch('TAX_ENGINE_TOKEN')",
            '$apiKey = getenv("LEDGER_SYNC_API_KEY");',
            'secret = Rails.application.credentials.dig(:billing, :api_key)',
            "TOKEN=$(gcloud secrets versions access latest --secret=billing-token)",
        ],
        "prose about credentials": [
            "I rotated the billing key in the vendor console and updated the secret store; the old one stops working tonight.",
            "The redaction step runs before the transcript is saved, so tokens pasted into the chat never reach the disk.",
            "Don't paste the production password here; give me the name of the vault entry and I'll read it at deploy time.",
            "The 401 comes from an expired session token, not a wrong API key; re-running the login fixes it.",
            "We keep test fixtures free of real credentials: every key in tests/ is generated per run.",
            "A leaked deploy key was found by the scanner in an old branch; the branch was deleted and the key revoked.",
        ],
        "public keys": [
            lambda: f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{b64(32)} {who()}@laptop",
            lambda: f"ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBB{b64(48)} deploy@ci",
            "-----BEGIN PUBLIC KEY-----",
            "-----END PUBLIC KEY-----",
            lambda: f"SHA256:{b64(32).rstrip('=')} {who()}@tern.test (ED25519)",
            lambda: f"age1{pick('qpzry9x8gf2tvdw0s3jn54khce6mua7l', 58)}",
        ],
    }
    return draw_lines(rng, groups, per_template=5, least=30)


def main(shellclear_dir: str, atuin_dir: str, sekretbarilo_dir: str, alloy_dir: str) -> None:
    examples, not_detected, false_positives = sekretbarilo_examples(sekretbarilo_dir)
    examples = first_per_value(kept_examples(shellclear_examples(shellclear_dir) + atuin_examples(atuin_dir) + examples + alloy_examples(alloy_dir), other_halves(OUT)))
    secrets, kinds, marked = placed_entries(examples, OUT, in_context, CONTEXT_VALUES)
    write_half(
        OUT,
        {
            "rusty-ferris-club/shellclear": git(shellclear_dir, "rev-parse", "HEAD").strip(),
            "atuinsh/atuin": git(atuin_dir, "rev-parse", "HEAD").strip(),
            "vshuraeff/sekretbarilo": git(sekretbarilo_dir, "rev-parse", "HEAD").strip(),
            "grafana/alloy": git(alloy_dir, "rev-parse", "HEAD").strip(),
        },
        "Apache-2.0, MIT, MIT, Apache-2.0",
        secrets,
        kinds,
        [
            ("sekretbarilo scanner test lines asserted not detected", not_detected),
            ("sekretbarilo false-positive test lines (no finding asserted)", false_positives),
        ],
        clean_keeper(marked),
        drawn_lookalikes(random.Random(SEED)),
    )
    print("per kind:", ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))


if __name__ == "__main__":
    main(*sys.argv[1:5])
