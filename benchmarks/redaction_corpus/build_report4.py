"""Build the fourth report half (`report4/`) mechanically from three scanners' published test cases.

    python benchmarks/redaction_corpus/build_report4.py SECRETLINT_GIT_DIR RIPSECRETS_GIT_DIR WHISPERS_GIT_DIR WHISPERS_EXE

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 7, and its
output was committed without running the redactor on it. Sources, read with `git show`/`git archive` at their HEAD:
- secretlint/secretlint (MIT): each rule's `test/snapshots/ng.*` input, marked where the snapshot's `output.json`
  reports the finding (`range`), narrowed to the credential (a URL's password, a webhook's path, the value of an
  assignment, the PEM block of a private key); `ok.*` inputs are clean-line candidates;
- sirwart/ripsecrets (MIT): `test/one_per_line/*` (one secret a line, named by the file) and `test/one_per_file/*`,
  the value found by shape (assignment stripped, longest token, URL password, PEM block); `test/none` for clean lines;
- Skyscanner/whispers (Apache-2.0): `tests/fixtures/*`, marked where whispers 2.2.0 itself (the PyPI release, run on
  the fixtures) reports a secret's value on a line; the fixtures' "compliant" sections are clean-line candidates.
Each kind's first value is also placed in one transcript context (contexts written for report4, rotating). Values that
read as placeholders (build_report3.is_placeholder) and values already in another folder are left out. Clean lines
are the candidates holding no credential (those holding a real-looking key that the rule rejects for its own reasons
are left out by NEGATIVE_LINES_LEFT_OUT, chosen by reading) and look-alikes drawn with a fixed seed from templates
written for report4 (not report3's).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

from build_report3 import as_entry, existing_clean_lines, existing_values, is_placeholder, mark

OUT = Path(__file__).resolve().parent / "report4"
SECRETLINT_RULES = "packages/@secretlint"
# secretlint findings that are not credentials (ids, file names, home paths, the rule template, user patterns)
# or whose input is binary (PKCS#12 files).
SECRETLINT_NOT_CREDENTIALS = {
    "AWSAccountID", "AzureTenantId", "AzureClientId", "EXAMPLE_MESSAGE", "PATTERN", "FOUND_DOTENV_FILE", "HOMEDIR",
    "PrivateKeyP12",
}
# secretlint rules whose snapshots are about something else: comment directives that silence real secrets, user
# patterns, the rule template, file names, home paths, PKCS#12 files (binary).
SECRETLINT_NOT_RULES = {"filter-comments", "pattern", "example", "no-dotenv", "no-homedir", "gcp"}
# whispers rules that do not find credentials (sensitive file names, card numbers, account ids, comments, CORS,
# password hashes in .htpasswd).
WHISPERS_NOT_CREDENTIALS = {"file-known", "creditcard", "aws-account", "comment", "cors", "htpasswd"}
# Clean-line candidates left out, chosen by reading them: they hold a real-looking key that a rule rejects for its
# own reasons (prefix changed, one character too long, "encrypted", allow-listed), which a transcript redactor should
# still redact, or a password equal to its user name.
NEGATIVE_LINES_LEFT_OUT = re.compile(
    r"sk-ant-api0|ssk-ant|^ANY_KEY = |^AWS_SECRET_ACCESS_KEY = |AKIAIOSFODNN7SECRETS|gXX_wWPw|xhvs\.hWay|hvx\.hWay|"
    r"^sk-(proj|svcacct|admin)?-?[A-Za-z0-9]|^[xc]8f12fb8|APhb3zgjtx|H7Sgbba3afg|//(\w+):\1@|sk_live_ReTll|"
    r"ReTllpYQYfIZu2Jnf2lAPFjD|zq212Mzhardcoded|ap4assw0rd|notpath3: hardcoded"
)
VALUE = r"[A-Za-z0-9+/_\-.~]"


def placeholder(value: str) -> bool:
    """build_report3's placeholder test on a value's first 100 characters: in a long token a repeated run is chance."""
    return is_placeholder(value[:100])


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "-C", git_dir, *args], capture_output=True, text=True, check=True).stdout


def pem_span(text: str, start: int = 0, end: int | None = None) -> tuple[int, int] | None:
    m = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.DOTALL).search(text, start, len(text) if end is None else end)
    return m.span() if m else None


def credential_span(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The credential inside a finding's range: a PEM block, a URL's password, a webhook's path, an assignment's value."""
    found = text[start:end]
    if "PRIVATE KEY" in found:
        return pem_span(text, start, end)
    if "://" in found:
        if m := re.search(r"://[^/\s:@]*:([^@\s/]+)@", found):
            return start + m.start(1), start + m.end(1)
        if m := re.search(r"hooks\.slack\.com/services/(\S+)", found):
            return start + m.start(1), start + m.end(1)
        return None
    if m := re.search(r"[=:]\s*[\"'`]?(" + VALUE + r"+=*)[\"'`]?\s*$", found):
        return start + m.start(1), start + m.end(1)
    while start < end and text[start] in "\"'` ":
        start += 1
    while end > start and text[end - 1] in "\"'` ":
        end -= 1
    return start, end


def kebab(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", name).lower()).strip("-")


def secretlint_examples(git_dir: str) -> tuple[list[tuple[str, str, list[tuple[int, int]], str]], list[str]]:
    """(kind, text, spans, source path) per ng snapshot finding group; clean candidates from ok snapshots."""
    files = git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", SECRETLINT_RULES).splitlines()
    examples, negatives = [], []
    for path in sorted(files):
        m = re.match(rf"{re.escape(SECRETLINT_RULES)}/secretlint-rule-([^/]+)/test/snapshots/(ng|ok)[^/]*/(input[^/]*|output\.json)$", path)
        if not m or m.group(1).startswith("preset") or m.group(1) in SECRETLINT_NOT_RULES:
            continue
        if m.group(2) == "ok" and m.group(3).startswith("input") and not path.endswith(".p12"):  # PKCS#12: binary
            negatives += git(git_dir, "show", f"HEAD:{path}").splitlines()
        if m.group(2) != "ng" or m.group(3) != "output.json":
            continue
        output = json.loads(git(git_dir, "show", f"HEAD:{path}"))
        text = output.get("sourceContent", "")
        by_kind: dict[str, list[tuple[int, int]]] = {}
        for message in output["messages"]:
            if message.get("messageId") in SECRETLINT_NOT_CREDENTIALS:
                continue
            span = credential_span(text, *message["range"])
            if span and not placeholder(text[span[0] : span[1]]):
                by_kind.setdefault(kebab(message["messageId"]), []).append(span)
        for kind, spans in by_kind.items():
            examples.append((kind, text, sorted(set(spans)), path.rsplit("/", 1)[0]))
    return examples, negatives


def token_span(line: str) -> tuple[int, int] | None:
    """ripsecrets lines carry one secret, unmarked: a URL's password, or the longest token after any assignment."""
    if m := re.search(r"://[^/\s:@]*:([^@\s/]+)@", line):
        return m.span(1)
    offset = 0
    if m := re.match(r"""\s*(export\s+)?[\w\[\]'".-]+\s*[:=]+\s*""", line):
        offset = m.end()
    tokens = list(re.finditer(r"[A-Za-z0-9+/_\-.~=`^\\]{12,}" if offset else VALUE + r"{12,}=*", line[offset:]))
    if not tokens:
        return None
    best = max(tokens, key=lambda t: len(t.group()))
    return offset + best.start(), offset + best.end()


def ripsecrets_examples(git_dir: str) -> tuple[list[tuple[str, str, list[tuple[int, int]], str]], list[str]]:
    examples = []
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", "test").splitlines():
        text = git(git_dir, "show", f"HEAD:{path}")
        name = path.rsplit("/", 1)[1]
        if path.startswith("test/one_per_line/"):
            for line in text.splitlines():
                span = token_span(line)
                if span and not placeholder(line[span[0] : span[1]]):
                    examples.append((kebab(name), line, [span], path))
        elif path.startswith("test/one_per_file/"):
            span = pem_span(text) or (re.search(r"AKIA[A-Z0-9]{16}", text).span() if "AKIA" in text else None)
            if span:
                examples.append((kebab(name), text.rstrip("\n"), [span], path))
    return examples, git(git_dir, "show", "HEAD:test/none").splitlines()


def whispers_examples(git_dir: str, whispers: str) -> tuple[list[tuple[str, str, list[tuple[int, int]], str]], list[str]]:
    """Run whispers on its own fixtures: each reported value marked on its line; compliant sections as clean candidates."""
    examples, negatives = [], []
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", git_dir, "archive", "HEAD", "tests/fixtures"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "x", "-C", tmp], input=archive, check=True)
        subprocess.run([whispers, "-o", f"{tmp}/found.json", "tests/fixtures"], cwd=tmp, capture_output=True)
        found = json.loads(Path(f"{tmp}/found.json").read_text())
        flagged: dict[str, set[int]] = {}
        for secret in found:
            flagged.setdefault(secret["file"], set()).add(secret["line"])
            if secret["rule_id"] in WHISPERS_NOT_CREDENTIALS or placeholder(str(secret["value"])):
                continue
            lines = Path(tmp, secret["file"]).read_text(errors="replace").splitlines()
            line = lines[secret["line"] - 1] if 0 < secret["line"] <= len(lines) else ""
            value = str(secret["value"])
            at = line.find(value)
            if at >= 0 and f"://{value}@" in line and ":" in value:  # `user:password` of a URL: the password
                at, value = at + value.index(":") + 1, value.split(":", 1)[1]
            if at >= 0:
                examples.append((f"whispers-{secret['rule_id']}", line, [(at, at + len(value))], secret["file"]))
        for path in sorted(Path(tmp, "tests/fixtures").rglob("*")):
            if not path.is_file():
                continue
            lines = path.read_text(errors="replace").splitlines()
            relative = str(path.relative_to(tmp))
            if not any(re.search(r"non-?compliant", line, re.IGNORECASE) for line in lines):
                continue
            for number, line in enumerate(lines, start=1):
                if re.search(r"non-?compliant", line, re.IGNORECASE):
                    break
                if number not in flagged.get(relative, set()) and not re.search(r"compliant", line, re.IGNORECASE):
                    negatives.append(line)
    return examples, negatives


CONTEXTS = (
    "I checked the {name} you pasted: `{value}` works against staging, so I'll move it into the vault next.",
    '$env:{env} = "{value}"',
    "<<<\napiVersion: v1\nkind: Secret\nmetadata:\n  name: app-credentials\nstringData:\n  {lower}: {value}\n>>>",
    'resp = requests.get(url, headers={{"Authorization": "Token {value}"}}, timeout=10)',
    "<<<\n[default]\nregion = eu-central-1\n{lower} = {value}\n>>>",
    "heroku config:set {env}={value} --app billing-api",
    "<<<\n        env:\n          - name: {env}\n            value: \"{value}\"\n>>>",
    "<<<\n[tool.deploy]\ntarget = \"prod\"\n{lower} = \"{value}\"\n>>>",
    "Error: request to https://api.internal.example.org/v2/jobs failed (401) with {lower}={value}; retrying in 5s",
    'npx wrangler secret put {env} <<< "{value}"',
    "<<<\n| variable | value |\n|---|---|\n| `{env}` | `{value}` |\n>>>",
    'setx {env} "{value}"',
)


def in_context(kind: str, value: str, index: int) -> str:
    env = re.sub(r"[^A-Z0-9]+", "_", kind.upper()).strip("_")
    return CONTEXTS[index % len(CONTEXTS)].format(name=kind.replace("-", " "), env=env, lower=env.lower(), value=f"⟦{kind}:{value}⟧")


Example = tuple[str, str, list[tuple[int, int]], str]  # kind, text, secret spans, source path


def first_value_in_context(values: list[str]) -> list[str]:
    """Report4 places a kind's first value in one context (unless it spans lines)."""
    return values[:1] if values and "\n" not in values[0] else []


def secret_entries(
    examples: list[Example],
    used_values: set[str],
    place: Callable[[str, str, int], str] = in_context,
    chosen: Callable[[list[str]], list[str]] = first_value_in_context,
    skipped: Callable[[str], bool] = lambda text: text.strip() in ("<<<", ">>>"),
    note: str = "examples literal + one context",
    sort_kinds: bool = False,
) -> tuple[list[str], dict[str, int]]:
    """Per kind, a `## ---` header naming the sources, its examples, then the `chosen` of its distinct values
    (in order) each `place`d in a transcript context."""
    by_kind: dict[str, list[tuple[str, list[tuple[int, int]], str]]] = {}
    for kind, text, spans, source in examples:
        by_kind.setdefault(kind, []).append((text, spans, source))
    lines: list[str] = []
    kinds: dict[str, int] = {}
    seen_texts: set[str] = set()
    context_index = 0
    for kind, items in sorted(by_kind.items()) if sort_kinds else by_kind.items():
        block, sources, values = [], [], []
        for text, spans, source in items:
            spans = [span for span in spans if text[span[0] : span[1]] not in used_values]
            if not spans or text in seen_texts or "⟦" in text or "⟧" in text or skipped(text):
                continue
            seen_texts.add(text)
            block.append(as_entry(mark(text, kind, spans)))
            kinds[kind] = kinds.get(kind, 0) + len(spans)
            sources.append(source)
            values += [text[a:b] for a, b in spans if text[a:b] not in values]
        for value in chosen(values):
            block.append(place(kind, value, context_index))
            kinds[kind] += 1
            context_index += 1
        if block:
            lines += ["", f"## --- {kind}  (sources: {', '.join(sorted(set(sources)))}; {note})", *block]
    return lines, kinds


class Draw:
    """Random values for look-alike templates, all from one seeded generator."""

    def __init__(self, rng: random.Random):
        self.rng = rng

    def pick(self, alphabet: str, n: int) -> str:
        return "".join(self.rng.choice(alphabet) for _ in range(n))

    def hexs(self, n: int) -> str:
        return self.pick("0123456789abcdef", n)

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def b64(self, n: int) -> str:
        return base64.b64encode(bytes(self.rng.getrandbits(8) for _ in range(n))).decode()


def draw_lines(rng: random.Random, groups: dict[str, list], per_template: int, least: int) -> list[str]:
    """Per category, a `## ---` header, its fixed lines, then lines drawn from its templates (`per_template` a
    template, at least `least` a category)."""
    lines: list[str] = []
    for category, makers in groups.items():
        lines.append(f"## --- drawn look-alikes: {category}")
        drawn = [maker for maker in makers if isinstance(maker, str)]
        generated = [maker for maker in makers if not isinstance(maker, str)]
        while generated and len(drawn) < max(len(makers) * per_template, least):
            line = rng.choice(generated)()
            if line not in drawn:
                drawn.append(line)
        lines += drawn
    return lines


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report4."""
    draw = Draw(rng)
    hexs, uid, b64 = draw.hexs, draw.uid, draw.b64

    def jpeg_base64(n: int) -> str:
        return base64.b64encode(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01" + bytes(rng.getrandbits(8) for _ in range(n))).decode()

    groups: dict[str, list] = {
        "git output": [
            lambda: f"* {hexs(7)} (HEAD -> main, origin/main) Handle empty pages in the exporter",
            lambda: f"Updating {hexs(7)}..{hexs(7)}",
            lambda: f"Change-Id: I{hexs(40)}",
            lambda: f"gpg: using RSA key {hexs(40).upper()}",
            lambda: f"remote: Resolving deltas: 100% ({rng.randint(1, 400)}/{rng.randint(400, 900)}), done. {hexs(7)}",
            lambda: f"git rebase --onto main {hexs(12)}",
            lambda: f"  parent {hexs(40)}",
        ],
        "ids and request ids": [
            lambda: f"x-request-id: {uid()}",
            lambda: f'"correlationId": "{uid()}",',
            lambda: f"az account set --subscription {uid()}",
            lambda: f"trace_id={hexs(32)} span_id={hexs(16)} sampled=1",
            lambda: f"Sentry event {hexs(32)} captured for release api@2.{rng.randint(0, 9)}.{rng.randint(0, 9)}",
            lambda: f"  uid: {uid()}",
            lambda: f'  resourceVersion: "{rng.randint(10**6, 10**8)}"',
            lambda: f"/subscriptions/{uid()}/resourceGroups/rg-web/providers/Microsoft.Web/sites/shop-api",
        ],
        "checksums and lock files": [
            lambda: f"    --hash=sha256:{hexs(64)}",
            lambda: f"github.com/spf13/cobra v1.{rng.randint(1, 9)}.0 h1:{b64(32)}",
            lambda: f'checksum = "{hexs(64)}"',
            lambda: f"FROM python:3.11-slim@sha256:{hexs(64)}",
            lambda: f"  integrity sha512-{base64.b64encode(hashlib.sha512(hexs(8).encode()).digest()).decode()}",
            lambda: f"Restored cache from key: node-modules-{hexs(64)}",
            lambda: f'hash = "sha256-{b64(32)}"',
        ],
        "base64 media": [
            lambda: f'<img alt="avatar" src="data:image/jpeg;base64,{jpeg_base64(96)}">',
            lambda: f'  "icon": "data:image/svg+xml;base64,{base64.b64encode(b"<svg xmlns=" + bytes(rng.getrandbits(8) for _ in range(60))).decode()}",',
            lambda: f"src: url(data:font/woff2;base64,{base64.b64encode(b'wOF2' + bytes(rng.getrandbits(8) for _ in range(70))).decode()}) format('woff2');",
        ],
        "cloud resource ids": [
            lambda: f"vpc-{hexs(17)}",
            lambda: f"SecurityGroupIds: [sg-{hexs(17)}]",
            lambda: f"ImageId: ami-{hexs(17)}",
            lambda: f"arn:aws:iam::{rng.randint(10**11, 10**12 - 1)}:role/github-deploy",
            lambda: f"projects/shop-{rng.randint(100, 999)}/locations/europe-west1/keyRings/app/cryptoKeys/db",
            lambda: f"snap-{hexs(17)} completed 100%",
        ],
        "code and config naming secrets": [
            "const tokenRefreshIntervalMs = 300_000;",
            "def get_api_key(name: str) -> str:",
            "PASSWORD_MIN_LENGTH = 12",
            "      secretName: db-credentials",
            "            secretKeyRef: {name: api-keys, key: stripe}",
            'API_KEY_HEADER = "X-Api-Key"',
            "if (!process.env.SENTRY_AUTH_TOKEN) throw new Error(\"SENTRY_AUTH_TOKEN is not set\");",
            "token_type = response.json()[\"token_type\"]",
            "password_reset_url = reverse(\"password_reset_confirm\", args=[uid, token])",
            "aws secretsmanager get-secret-value --secret-id prod/api/stripe --query SecretString",
            "vault kv get -field=password secret/ci/registry",
            "op read \"op://Engineering/Deploy key/credential\"",
            "The reset link expires after an hour; ask the user to request a new one.",
            "Rotate the deploy key in the repository settings and revoke the old one afterwards.",
            "I didn't paste the token here; it's in 1Password under \"CI registry\".",
        ],
        "paths and URLs without credentials": [
            lambda: f"https://github.com/acme/shop/actions/runs/{rng.randint(10**9, 10**10)}/job/{rng.randint(10**10, 10**11)}",
            "~/.config/gcloud/application_default_credentials.json",
            "C:\\Users\\dev\\AppData\\Roaming\\npm\\node_modules\\typescript\\lib\\tsc.js",
            lambda: f"https://console.cloud.google.com/logs/query;cursorTimestamp=2026-11-0{rng.randint(1, 9)}T10:12:03Z?project=shop-{rng.randint(100, 999)}",
            lambda: f"https://sentry.io/organizations/acme/issues/{rng.randint(10**9, 10**10)}/?project={rng.randint(10**6, 10**7)}",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
        ],
    }
    return draw_lines(rng, groups, per_template=3, least=16)


def main(secretlint_dir: str, ripsecrets_dir: str, whispers_dir: str, whispers: str) -> None:
    commits = {name: git(d, "rev-parse", "HEAD").strip() for name, d in (("secretlint/secretlint", secretlint_dir), ("sirwart/ripsecrets", ripsecrets_dir), ("Skyscanner/whispers", whispers_dir))}
    sl_examples, sl_negatives = secretlint_examples(secretlint_dir)
    rs_examples, rs_negatives = ripsecrets_examples(ripsecrets_dir)
    wh_examples, wh_negatives = whispers_examples(whispers_dir, whispers)
    secrets, kinds = secret_entries(sl_examples + rs_examples + wh_examples, existing_values(OUT.parent, "report4"))
    write_half(
        OUT,
        commits,
        "MIT, MIT, Apache-2.0",
        secrets,
        kinds,
        [
            (f"secretlint negative examples holding no credential (secretlint@{commits['secretlint/secretlint']} ok snapshots)", sl_negatives),
            (f"ripsecrets negative examples holding no credential (ripsecrets@{commits['sirwart/ripsecrets']} test/none)", rs_negatives),
            (f"whispers compliant fixtures holding no credential (whispers@{commits['Skyscanner/whispers']})", wh_negatives),
        ],
        lambda line: not NEGATIVE_LINES_LEFT_OUT.search(line),
        drawn_lookalikes(random.Random(4044)),
    )


def write_half(
    out: Path,
    commits: dict[str, str],
    licences: str,
    secrets: list[str],
    kinds: dict[str, int],
    negatives: list[tuple[str, list[str]]],
    keep: Callable[[str], bool],
    lookalikes: list[str],
) -> None:
    """Write a report half: its secrets under a header naming the sources, then its clean lines (each source's
    candidates of 8 or more visible characters that `keep` keeps, then the look-alikes), none repeating a line of
    another folder."""
    header = (
        f"## {out.name.upper()} half, secrets: built by build_{out.name}.py from "
        + ", ".join(f"{name}@{commit}" for name, commit in commits.items())
        + f"\n## ({licences}). Never tuned on. {sum(kinds.values())} secrets, {len(kinds)} kinds."
    )
    out.mkdir(exist_ok=True)
    (out / "secrets.txt").write_text(header + "\n" + "\n".join(secrets) + "\n", encoding="utf-8")
    seen_elsewhere = existing_clean_lines(out.parent, out.name)
    clean = [f"## {out.name.upper()} half, clean look-alikes: must come out of redact() unchanged. Never tuned on."]
    for title, candidates in negatives:
        clean.append(f"## --- {title}")
        for line in candidates:
            if len(re.sub(r"\s", "", line)) >= 8 and not line.startswith("## ") and line not in clean and line not in seen_elsewhere and keep(line):
                clean.append(line)
    clean += [line for line in lookalikes if line.startswith("## ") or line not in seen_elsewhere]  # headers stay
    (out / "clean.txt").write_text("\n".join(clean) + "\n", encoding="utf-8")
    print(f"{sum(kinds.values())} secrets of {len(kinds)} kinds; {sum(1 for line in clean if not line.startswith('## '))} clean lines")


if __name__ == "__main__":
    main(*sys.argv[1:5])
