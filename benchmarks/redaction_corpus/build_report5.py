"""Build the fifth report half (`report5/`) mechanically from two scanners' published test cases.

    python benchmarks/redaction_corpus/build_report5.py OSV_SCALIBR_GIT_DIR TRIVY_GIT_DIR

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 8, and its
output was committed without running the redactor on it. Sources (both Apache-2.0), read with `git show` at HEAD:
- google/osv-scalibr, Veles secret detectors: `veles/secrets/**/*_test.go`. Each test case's `input` and `want`
  expressions are evaluated (Go string literals, constants, `+`, `strings.Repeat`; cases using anything else are left
  out); a wanted secret's credential fields (keys, tokens, secrets, passwords; a URL field narrowed to its password)
  are marked where they occur in the input. Inputs whose `want` is empty are clean-line candidates.
- aquasecurity/trivy, secret scanner: `pkg/fanal/secret/testdata/*` marked where a finding's `Match` in
  `pkg/fanal/secret/scanner_test.go` (the line with the secret masked by `*`) lines up with a line of a test file.
Each kind's distinct values (up to CONTEXT_VALUES) are also placed in transcript contexts written for report5
(file formats and code idioms, prose, commands), rotating. Values that read as placeholders (build_report3's test)
and values already in another folder are left out. Clean lines: candidates holding no key-like token (a run of 16+
letters and digits mixing both: a near-miss key that a detector rejects for its checksum or length is still one for
a transcript redactor), then look-alikes drawn with a fixed seed from templates written for report5.
"""

from __future__ import annotations

import ast
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path

from build_report3 import existing_values
from build_report4 import Draw, Example, draw_lines, git, kebab, placeholder, write_half
from build_report4 import secret_entries as report4_secret_entries

OUT = Path(__file__).resolve().parent / "report5"
VELES = "veles/secrets"
TRIVY_TESTS = "pkg/fanal/secret"
CONTEXT_VALUES = 3
TRIVY_KINDS = {"rule1": "generic-secret"}  # the custom rule of trivy's test configuration
# Fields of a wanted secret that hold the credential (others: ids, e-mails, names, hosts, types).
CREDENTIAL_FIELD = re.compile(r"key|token|secret|pat$|password|passphrase|credential|private|fullurl|^value$", re.IGNORECASE)
NOT_CREDENTIAL_FIELD = re.compile(r"id$|email|name|hint|type|project|host|location|public|user", re.IGNORECASE)
KEY_LIKE = re.compile(r"(?=[A-Za-z0-9_+/-]*[0-9])(?=[A-Za-z0-9_+/-]*[A-Za-z])[A-Za-z0-9_+/-]{16,}")
USER_BEFORE = re.compile(r"user\W*$", re.IGNORECASE)  # a masked user name is not a credential
URL_PASSWORD = re.compile(r"://[^/\s:@]*:([^@\s/]+)@")


def holds_no_key(line: str) -> bool:
    """A source's negative example fit for a clean half: no key-like token, not a heredoc marker."""
    return not KEY_LIKE.search(line) and line not in {"<<<", ">>>"}


class GoExpression:
    """Evaluates the string expressions Go tests build inputs from: literals, constants, `+`, strings.Repeat."""

    TOKEN = re.compile(r'\s*(?:(?P<raw>`[^`]*`)|(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<int>\d+)|(?P<repeat>strings\.Repeat\()|(?P<name>[A-Za-z_]\w*)|(?P<plus>\+))')

    def __init__(self, constants: dict[str, str]):
        self.constants = constants

    def term(self, text: str, at: int) -> tuple[str, int] | None:
        m = self.TOKEN.match(text, at)
        if not m:
            return None
        if m.group("raw"):
            return m.group("raw")[1:-1], m.end()
        if m.group("str"):
            try:
                return ast.literal_eval(m.group("str")), m.end()
            except (ValueError, SyntaxError):
                return None
        if m.group("repeat"):
            inner = self.parse(text, m.end())
            count = re.compile(r"\s*,\s*(\d+)\s*\)").match(text, inner[1]) if inner else None
            return (inner[0] * int(count.group(1)), count.end()) if count else None
        if m.group("name") and m.group("name") in self.constants and not re.match(r"\s*[.(\[]", text[m.end() :]):
            return self.constants[m.group("name")], m.end()
        return None

    def parse(self, text: str, at: int) -> tuple[str, int] | None:
        """(value, end) of the expression starting at `at`, or None if it uses anything else."""
        first = self.term(text, at)
        if not first:
            return None
        value, at = first
        while m := re.compile(r"[ \t]*\+\s*").match(text, at):
            nxt = self.term(text, m.end())
            if not nxt:
                return None
            value, at = value + nxt[0], nxt[1]
        return value, at

    def complete(self, text: str, at: int) -> str | None:
        """The expression's value if it ends the field (a comma, a brace or the line's end follows)."""
        parsed = self.parse(text, at)
        if parsed and re.compile(r"[ \t]*(,|\}|\)|\n|//|$)").match(text, parsed[1]):
            return parsed[0]
        return None


def go_constants(text: str) -> dict[str, str]:
    constants: dict[str, str] = {}
    for _ in range(3):  # constants defined from constants
        evaluator = GoExpression(constants)
        for m in re.finditer(r"(?m)^\s*(?:const\s+|var\s+)?([A-Za-z_]\w*)\s*(?:string\s*)?(?::=|=)\s*", text):
            if (value := evaluator.complete(text, m.end())) is not None:
                constants[m.group(1)] = value
    return constants


def closing_brace(text: str, at: int) -> int:
    depth = 0
    for i in range(at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0 and text[i] == "}":
            return i
    return len(text)


def credential_value(field: str, value: str) -> str | None:
    if not CREDENTIAL_FIELD.search(field) or NOT_CREDENTIAL_FIELD.search(field):
        return None
    if "://" in value:
        m = URL_PASSWORD.search(value)
        return m.group(1) if m else None
    return value


def veles_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    """(kind, input, spans, path) per true-positive test case; inputs of negative cases as clean candidates."""
    examples, negatives = [], []
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", VELES).splitlines() if p.endswith("_test.go")]
    for path in sorted(paths):
        if "validator" in path:
            continue
        text = git(git_dir, "show", f"HEAD:{path}")
        evaluator = GoExpression(go_constants(text))
        folder = kebab(path[len(VELES) + 1 :].rsplit("/", 1)[0].replace("/", "-"))
        inputs = list(re.finditer(r"\binput:\s*", text))
        for index, m in enumerate(inputs):
            source = evaluator.complete(text, m.end())
            if source is None:
                continue
            case_end = inputs[index + 1].start() if index + 1 < len(inputs) else len(text)
            want = re.compile(r"\bwant:\s*").search(text, m.end(), case_end)
            body = text[want.end() : case_end] if want else ""
            if not want or body.startswith(("nil", "[]veles.Secret{}", "[]veles.Secret(nil)")):
                negatives += source.splitlines()
                continue
            if not body.startswith("[]veles.Secret{"):
                continue
            block = body[: closing_brace(body, body.index("{"))]
            for secret in re.finditer(r"(\w+)\.(\w+)\{", block):
                if secret.group(0) == "veles.Secret{":
                    continue
                kind = f"{folder}-{kebab(secret.group(2))}"  # the type alone can be generic (Credentials, Token)
                fields = block[secret.end() : closing_brace(block, secret.end() - 1)]
                spans = []
                for field in re.finditer(r"(\w+):\s*", fields):
                    value = evaluator.complete(fields, field.end())
                    credential = credential_value(field.group(1), value) if value else None
                    if credential and not placeholder(credential):
                        spans += [(found.start(), found.end()) for found in re.finditer(re.escape(credential), source)]
                if spans:
                    examples.append((kind, source, sorted(set(spans)), path))
    return examples, negatives


def trivy_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    """Each finding's masked `Match` lined up with the test files' lines: the masked runs are the secret."""
    tests = git(git_dir, "show", f"HEAD:{TRIVY_TESTS}/scanner_test.go")
    evaluator = GoExpression({})
    findings = []
    for m in re.finditer(r'RuleID:\s*"([^"]+)"', tests):
        match = re.compile(r"\bMatch:\s*").search(tests, m.end(), m.end() + 400)
        masked = evaluator.complete(tests, match.end()) if match else None
        if masked and "*" in masked and len(re.sub(r"\*+", "", masked).strip()) >= 4:  # anchored by its literal text
            findings.append((m.group(1), masked))
    examples, negatives = [], []
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", f"{TRIVY_TESTS}/testdata").splitlines():
        if not path.endswith((".txt", ".xml", ".json", ".md", ".env")):
            continue
        if "invalid-utf8" in path:  # binary on purpose
            continue
        text = git(git_dir, "show", f"HEAD:{path}")
        marked_lines = set()
        for rule, masked in findings:
            parts = re.split(r"(\*+)", masked)
            pattern = "".join(f"(.{{{len(part)}}})" if part.startswith("*") else re.escape(part) for part in parts)
            for line_number, line in enumerate(text.splitlines()):
                if (found := re.search(pattern, line)) and found.lastindex:
                    spans = [found.span(i) for i in range(1, found.lastindex + 1)]
                    spans = [span for span in spans if not placeholder(line[span[0] : span[1]]) and not USER_BEFORE.search(line[: span[0]])]
                    if spans and not any(line[a:b].strip("* ") == "" for a, b in spans):
                        examples.append((TRIVY_KINDS.get(rule, kebab(rule)), line, spans, path))
                        marked_lines.add(line_number)
        negatives += [line for n, line in enumerate(text.splitlines()) if n not in marked_lines]
    return examples, negatives


CONTEXTS = (
    "Heads up: the {name} for the sandbox tenant is {value}, please keep it out of the repo.",
    "<{camel}>{value}</{camel}>",
    "app.{dotted}={value}",
    'settings.set{Camel}("{value}");',
    'client = ApiClient(base_url="https://api.example.com", {lower}="{value}", timeout=30)',
    "    '{lower}' => '{value}',",
    'cfg := Config{{Endpoint: "https://api.example.com", {Camel}: "{value}"}}',
    "ENV {env}={value}",
    "<<<\njobs:\n  deploy:\n    env:\n      {env}: {value}\n>>>",
    'vault kv put secret/payments {lower}="{value}"',
    "DEBUG loaded settings: {{'{lower}': '{value}', 'debug': False}}",
    'config.{lower} = "{value}"',
    'const {camelLower} = "{value}";',
    '  "credentials": {{ "{camelLower}": "{value}" }},',
    "{lower} = \"{value}\"   # terraform.tfvars",
    "<<<\n<configuration>\n  <property name=\"{dotted}\" value=\"{value}\"/>\n</configuration>\n>>>",
)


def in_context(kind: str, value: str, index: int, contexts: tuple[str, ...] = CONTEXTS) -> str:
    """The `index`th of `contexts` (rotating), filled with the kind's words in several spellings and the value."""
    words = [w for w in re.split(r"[^a-z0-9]+", kind.lower()) if w]
    camel = "".join(w.capitalize() for w in words)
    return contexts[index % len(contexts)].format(
        name=" ".join(words), env="_".join(words).upper(), lower="_".join(words), dotted=".".join(words),
        Camel=camel, camel=camel[0].lower() + camel[1:], camelLower=camel[0].lower() + camel[1:], value=f"⟦{kind}:{value}⟧",
    )


def secret_entries(
    examples: list[Example],
    used_values: set[str],
    place: Callable[[str, str, int], str] = in_context,
    context_values: int = CONTEXT_VALUES,
) -> tuple[list[str], dict[str, int]]:
    """Per kind, a `## ---` header naming its sources, its examples, then its first `context_values` distinct
    one-line values each `place`d in a context."""
    return report4_secret_entries(
        examples,
        used_values,
        place=place,
        chosen=lambda values: [value for value in values if "\n" not in value][:context_values],
        skipped=lambda text: not text.strip() or bool({"<<<", ">>>"} & set(text.splitlines())),
        note="examples literal + contexts",
        sort_kinds=True,
    )


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report5."""
    draw = Draw(rng)
    hexs, uid, b64 = draw.hexs, draw.uid, draw.b64

    def env() -> str:
        return rng.choice(["STRIPE_SECRET_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "OPENAI_API_KEY", "SLACK_BOT_TOKEN", "SENDGRID_API_KEY", "NPM_TOKEN"])

    groups: dict[str, list] = {
        "documented placeholders and references": [
            lambda: f"{env()}=${{{env()}}}",
            lambda: f'  {env().lower()}: "${{{{ secrets.{env()} }}}}"',
            lambda: f"{env().lower()} = os.environ[\"{env()}\"]",
            lambda: f'"{env().lower()}": "<your-{env().lower().replace("_", "-")}>",',
            lambda: f"export {env()}=<paste-your-key-here>",
            lambda: f"{env()}=  # set in the CI secrets, never here",
            lambda: f"<password>${{env.{env()}}}</password>",
            lambda: f'password: "{{{{ vault_{env().lower()} }}}}"',
            lambda: f"{env().lower()}: !Ref {''.join(w.capitalize() for w in env().lower().split('_'))}Parameter",
            lambda: f"ENV {env()}=\"\"",
            lambda: f"{env()}=process.env.{env()}",
            lambda: f"spring.datasource.password=${{{env()}}}",
        ],
        "version control and build output": [
            lambda: f"commit {hexs(40)}",
            lambda: f"Merge: {hexs(7)} {hexs(7)}",
            lambda: f"[main {hexs(7)}] Fix token refresh race in the session store",
            lambda: f"Successfully built {hexs(12)}",
            lambda: f"digest: sha256:{hexs(64)} size: {rng.randint(500, 3000)}",
            lambda: f"  resolved \"https://registry.npmjs.org/lodash/-/lodash-4.17.{rng.randint(10, 21)}.tgz#{hexs(40)}\"",
            lambda: f"Downloading https://files.pythonhosted.org/packages/{hexs(2)}/{hexs(2)}/{hexs(60)}/requests-2.32.{rng.randint(0, 3)}-py3-none-any.whl",
        ],
        "identifiers and tracing": [
            lambda: f"request_id={uid()} status=200 duration_ms={rng.randint(3, 900)}",
            lambda: f"Job {uid()} finished in {rng.randint(2, 90)}s",
            lambda: f"  \"etag\": \"W/\\\"{hexs(16)}\\\"\",",
            lambda: f"traceparent: 00-{hexs(32)}-{hexs(16)}-01",
            lambda: f"session {hexs(24)} expired after 30 minutes of inactivity",
            lambda: f"  tenantId: {uid()}",
            lambda: f"container {hexs(64)} exited with code {rng.randint(0, 2)}",
        ],
        "checksums and media": [
            lambda: f"{hexs(64)}  dist/app-linux-amd64.tar.gz",
            lambda: f"md5: {hexs(32)}",
            lambda: f"<img src=\"data:image/png;base64,iVBORw0KGgo{b64(60)}\" />",
            lambda: f"sha1sum: {hexs(40)}",
            lambda: f'"integrity": "sha384-{b64(48)}"',
        ],
        "code and config that handle secrets": [
            "private static final String PASSWORD_FIELD = \"password\";",
            "if len(password) < MIN_PASSWORD_LENGTH: raise ValueError(\"password too short\")",
            "token = request.headers.get(\"Authorization\", \"\").removeprefix(\"Bearer \")",
            "$password = $_POST['password'] ?? '';",
            "user.set_password(form.cleaned_data[\"password1\"])",
            "func (c *Client) SetToken(token string) { c.token = token }",
            "api_key = getpass.getpass(\"API key: \")",
            "<input type=\"password\" name=\"password\" autocomplete=\"current-password\">",
            "ARG NPM_TOKEN",
            "RUN --mount=type=secret,id=npm_token NPM_TOKEN=$(cat /run/secrets/npm_token) npm ci",
            "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",
            "  secretKeyRef:",
            "keyring.set_password(\"sessionmem\", user, token)",
            "The token expired, so I ran `gh auth refresh` and the push went through.",
            "Stored the new key in the password manager and removed it from the shell history.",
            "credentials = service_account.Credentials.from_service_account_file(path)",
            "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
            "password: !vault |",
        ],
        "hosts, paths and URLs without credentials": [
            lambda: f"postgres://db.internal:5432/orders_{rng.randint(1, 9)}",
            lambda: f"https://storage.googleapis.com/build-artifacts-{rng.randint(100, 999)}/release/app.zip",
            "git@github.com:acme/payments.git",
            lambda: f"redis://cache-{rng.randint(1, 5)}.internal:6379/0",
            "/etc/ssl/private/server.key",
            "~/.aws/credentials",
            lambda: f"https://github.com/acme/payments/pull/{rng.randint(100, 9999)}/files",
            lambda: f"amqp://rabbitmq.internal:5672/{rng.choice(['orders', 'billing', 'events'])}",
        ],
    }
    return draw_lines(rng, groups, per_template=2, least=20)


def main(scalibr_dir: str, trivy_dir: str) -> None:
    commits = {name: git(d, "rev-parse", "HEAD").strip() for name, d in (("google/osv-scalibr", scalibr_dir), ("aquasecurity/trivy", trivy_dir))}
    veles, veles_negatives = veles_examples(scalibr_dir)
    trivy, trivy_negatives = trivy_examples(trivy_dir)
    secrets, kinds = secret_entries(veles + trivy, existing_values(OUT.parent, "report5"))
    write_half(
        OUT,
        commits,
        "both Apache-2.0",
        secrets,
        kinds,
        [
            (f"osv-scalibr Veles negative test inputs holding no key-like token (osv-scalibr@{commits['google/osv-scalibr']})", veles_negatives),
            (f"trivy secret test files' lines without a finding, holding no key-like token (trivy@{commits['aquasecurity/trivy']})", trivy_negatives),
        ],
        holds_no_key,
        drawn_lookalikes(random.Random(5055)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
