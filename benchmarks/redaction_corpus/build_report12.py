"""Build the twelfth report half (`report12/`) mechanically from a published leak benchmark and scanner tests.

    python benchmarks/redaction_corpus/build_report12.py LEAKY_REPO PRE_COMMIT_HOOKS TFSEC

(each argument a git directory of that project: Plazmaz/leaky-repo, pre-commit/pre-commit-hooks, aquasecurity/tfsec).

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 18, and its
output was committed without running the redactor on it. Sources, read with `git show`:
- Plazmaz/leaky-repo (MIT): a repository of fake leaked files made as a benchmark for secret scanners.
  `.leaky-meta/secrets.csv` names each leaking file with its count of "risk" and "informative" lines, and for some
  files (in a comment above the row) the fields that are risk. A line is a risk line when the file says so (a
  trailing `# Risk`/`# Sensitive` comment, or a `# Risk`, `// Security Risk!` or `<!-- Risk -->` comment on the line
  above), when its key is one of the fields the CSV names as risk, or, in a line the file does not call
  `Informative`, when its key names a credential (CREDENTIAL_KEY, not NOT_CREDENTIAL_KEY). The value marked is the
  value the risk line assigns (an XML element's text or `password` attribute, a PHP `define`'s value, a `.netrc` or
  `.esmtprc` password, a URL's password, a call's password argument); the formats without keys are read by their
  layout (FORMAT_KINDS: `/etc/shadow`-style hash fields, `.pgpass`' last field, a SQL dump's bcrypt literals, a PEM
  block, a PuTTY key's private lines, a Rails `master.key`). The kind is the key's name in kebab case (the field's
  name in the source), or the format's. The lines of the leaking files that are not risk lines, name no credential
  and hold no key-like token are clean candidates.
- pre-commit/pre-commit-hooks (MIT): `tests/detect_aws_credentials_test.py` names, per test resource, the secrets
  `get_aws_secrets_from_file` must find; those values are marked in `testing/resources/<file>` (kind: the line's
  key). The resources the test expects to hold no secret are clean candidates.
- aquasecurity/tfsec (MIT): the documentation of the checks for plaintext secrets (TFSEC_CHECKS,
  `docs/checks/<provider>/<service>/<check>/index.md`): in each "Insecure Example" (which "will fail the <id>
  check"), the value of the assignment whose name the check is about (a credential-named attribute, environment
  variable or variable default), kind = the check id; the "Secure Example" lines are clean candidates.
Values are left out when build_report11's test rejects them (placeholders, short words, code references) or they are
already in other folders. Of the examples holding the same values of a kind, the first 2 are kept. Each kind's first
values (up to CONTEXT_VALUES) are also placed in transcript contexts written for report12, rotating. Clean lines: the
candidates above holding no key-like token (build_report5's test via build_report10's clean_fit) and no value this
half marks, then look-alikes drawn with a fixed seed from templates written for report12.
"""

from __future__ import annotations

import random
import re
import sys
from functools import partial
from pathlib import Path

from build_report4 import Draw, Example, draw_lines, git, kebab, pem_span, write_half
from build_report8 import lines_around
from build_report9 import merged
from build_report10 import URL_PASSWORD, clean_fit, fill_context, first_per_value, kind_name
from build_report11 import PUTTY_PRIVATE, kept_value, line_value, placed_entries, strip_quotes

OUT = Path(__file__).resolve().parent / "report12"
SEED = 12120
CONTEXT_VALUES = 2
LEAKY_CSV = ".leaky-meta/secrets.csv"
# leaky-repo files read by their layout, not by a key: path -> kind
FORMAT_KINDS = {
    "etc/shadow": "shadow-password-hash",
    "proftpdpasswd": "proftpd-password-hash",
    "web/var/www/public_html/.htpasswd": "htpasswd-password-hash",
    "db/.pgpass": "pgpass-password",
    "db/dump.sql": "bcrypt-password-hash",
    "misc-keys/putty-example.ppk": "putty-private-key",
    "web/ruby/config/master.key": "rails-master-key",
}
RISK_NOTE = re.compile(r"(?:#|//|<!--)\s*(?:Security )?(?:Risk|Sensitive)\b")
INFORMATIVE_NOTE = re.compile(r"(?:#|//|<!--)\s*(?:Informative|Not positive)\b")
COMMENT_ONLY = re.compile(r"^\s*(?:#|//|<!--)")
CREDENTIAL_KEY = re.compile(r"(?i)pass|secret|token|api_?key|auth$|^_auth|key_base|app_key|_key$|_salt$")
NOT_CREDENTIAL_KEY = re.compile(r"(?i)(?:_id|user(?:name)?|email|host|url|field|path|file|method|region|changed)$|^(?:promptfor|keyboard|always|ssh_?key_?path|sslpemkey|sshprivatekey|sshpublickey|privatekey|save)")
KEY_OF_LINE = re.compile(r"""^\s*(?:export\s+|\$)?["']?([A-Za-z_][\w.\-]*)["']?\s*(?:=|:)""")
XML_TEXT = re.compile(r"<(\w+)[^>]*>([^<]+)</\1>")
XML_PASSWORD = re.compile(r"""\b(password)="([^"]*)\"""")
PHP_DEFINE = re.compile(r"""define\(\s*'(\w+)',\s*'(.*)'\s*\);""")
NETRC_PASSWORD = re.compile(r"""\b(password)\s+"?([^"\s]+)"?""")
GIT_CREDENTIAL = re.compile(r"^https?://[^\s:]*:(\S+)@[^@\s]+$")  # a `.git-credentials` line (its user name may hold `@`)
CALL_PASSWORD = re.compile(r"""\.(login)\(\s*'[^']*',\s*'([^']+)'""")
NPM_TOKEN = re.compile(r"(_authToken)=(\S+)")
PRE_COMMIT_TEST = "tests/detect_aws_credentials_test.py"
PRE_COMMIT_RESOURCES = "testing/resources"
TFSEC_DOCS = "docs/checks"
# tfsec checks about a plaintext credential in a template (the others named for secrets check encryption, expiry,
# rotation or password policies, not a value).
TFSEC_CHECKS = (
    "aws/autoscaling/no-secrets-in-user-data",
    "aws/autoscaling/no-sensitive-info",
    "aws/ec2/no-secrets-in-launch-template-user-data",
    "aws/ec2/no-secrets-in-user-data",
    "aws/ec2/no-sensitive-info",
    "aws/ecs/no-plaintext-secrets",
    "azure/compute/no-secrets-in-custom-data",
    "cloudstack/compute/no-sensitive-info",
    "general/secrets/no-plaintext-exposure",
    "github/actions/no-plain-text-action-secrets",
    "google/compute/disk-encryption-no-plaintext-key",
    "openstack/compute/no-plaintext-password",
)
TFSEC_NAME = r"\w*(?:PASSWORD|password|pass|SECRET|secret|TOKEN|token|raw_key|plaintext_value)\w*"
TFSEC_ASSIGNMENT = re.compile(rf"""\b({TFSEC_NAME})\s*=\s*\\?"([^"\\]+)\\?\"""")
TFSEC_ENV_JSON = re.compile(rf""""name":\s*"({TFSEC_NAME})",\s*"value":\s*"([^"]+)\"""")
TFSEC_VARIABLE = re.compile(rf"""variable\s+"({TFSEC_NAME})\"""")


def show(git_dir: str, path: str) -> str:
    return git(git_dir, "show", f"HEAD:{path}")


def leaky_manifest(text: str) -> dict[str, tuple[int, set[str]]]:
    """`.leaky-meta/secrets.csv`: path -> (its count of risk lines, the fields a `# Risk: a, b` comment above names)."""
    manifest: dict[str, tuple[int, set[str]]] = {}
    fields: set[str] = set()
    for row in text.splitlines():
        if m := re.match(r"#\s*Risk:\s*(.+)$", row):
            fields = {re.sub(r"\(.*?\)", "", field).split()[-1].lower() for field in m.group(1).split(",") if field.strip()}
            fields |= {"pass"} if "password" in fields else set()
        elif row.strip() and not row.startswith("#"):
            path, risk, _ = row.strip().lstrip("/").rsplit(",", 2)
            manifest[path] = (int(risk), fields)
            fields = set()
    return manifest


def note_of(lines: list[str], number: int, note: re.Pattern) -> bool:
    """The line carries the note, or the nearest non-blank line above is a comment carrying it."""
    if note.search(lines[number]):
        return True
    above = next((lines[i] for i in range(number - 1, -1, -1) if lines[i].strip()), "")
    return bool(COMMENT_ONLY.match(above) and note.search(above))


def risk_value(line: str) -> tuple[str, tuple[int, int]] | None:
    """The key and the value span a line assigns, by its shape."""
    for pattern in (PHP_DEFINE, CALL_PASSWORD, NPM_TOKEN, XML_PASSWORD, NETRC_PASSWORD):
        if m := pattern.search(line):
            return m.group(1), m.span(2)
    if m := XML_TEXT.search(line):
        return m.group(1), m.span(2)
    for pattern in (GIT_CREDENTIAL, URL_PASSWORD):
        if m := pattern.search(line):
            return "url-password", m.span(1)
    statement = line.rstrip().removesuffix(";")  # a PHP assignment's `;` (the value's offsets do not change)
    if (key := KEY_OF_LINE.match(statement)) and (span := line_value(statement, key.end() - 1, len(statement))):
        return key.group(1), span
    return None


def format_spans(path: str, text: str) -> list[tuple[int, int]]:
    """The credentials of a leaky-repo file read by its layout."""
    kind = FORMAT_KINDS.get(path)
    if kind and kind.endswith("password-hash") and kind != "bcrypt-password-hash":
        return [m.span(1) for m in re.finditer(r"(?m)^[^:\n]+:([^:*!\n][^:\n]+)", text)]
    if kind == "pgpass-password":
        return [m.span(1) for m in re.finditer(r"(?m)^[^#\n][^\n]*:([^:\n]+)$", text)]
    if kind == "bcrypt-password-hash":
        return [m.span(1) for m in re.finditer(r"'(\$2[aby]\$\d\d\$[./A-Za-z0-9]{53})'", text)]
    if kind == "putty-private-key":
        m = PUTTY_PRIVATE.search(text)
        if not m:
            return []
        start, end = m.span(1)
        if text[end : end + 1] in ("-", ":"):  # the match ran into the `Private-MAC:` line's name
            end = text.rfind("\n", start, end)
        return [(start, end)]
    if kind == "rails-master-key":
        return [m.span() for m in re.finditer(r"\S+", text)][:1]
    return []


def leaky_examples(git_dir: str) -> tuple[list[Example], list[str], list[str]]:
    """Risk lines of leaky-repo's files (see the module's docstring); non-risk lines naming no credential are clean
    candidates. Also returns, per file, a note where the risk lines found differ from the CSV's count."""
    manifest = leaky_manifest(show(git_dir, LEAKY_CSV))
    examples: list[Example] = []
    negatives: list[str] = []
    notes: list[str] = []
    source = "leaky-repo"
    for path, (risk_count, fields) in manifest.items():
        text = show(git_dir, path)
        if "\0" in text:
            continue
        if "PRIVATE KEY-----" in text:
            span = pem_span(text)
            if span and kept_value(text[span[0] : span[1]]):
                header = re.match(r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY)-----", text[span[0] :]).group(1)
                examples.append((kind_name(header), text[span[0] : span[1]], [(0, span[1] - span[0])], f"{source} {path}"))
            continue
        if path in FORMAT_KINDS:
            found = format_spans(path, text)
            for start, end in found:
                if kept_value(text[start:end]):
                    lines, span = lines_around(text, start, end)
                    examples.append((FORMAT_KINDS[path], lines, [span], f"{source} {path}"))
            if path != "misc-keys/putty-example.ppk":
                marked_lines = {text.count("\n", 0, start) for start, _ in found}
                negatives += [line for number, line in enumerate(text.splitlines()) if number not in marked_lines]
            if len({text.count("\n", 0, s) for s, _ in found}) != risk_count and path != "db/dump.sql":
                notes.append(f"{path}: {len(found)} found, CSV {risk_count}")
            continue
        lines = text.splitlines()
        risk_lines = 0
        for number, line in enumerate(lines):
            if COMMENT_ONLY.match(line):
                negatives.append(line)
                continue
            found = risk_value(line)
            key = found[0] if found else ""
            if note_of(lines, number, RISK_NOTE):
                risk = True
            elif fields:
                risk = key.lower() in fields
            else:
                risk = bool(key) and not note_of(lines, number, INFORMATIVE_NOTE) and bool(CREDENTIAL_KEY.search(key)) and not NOT_CREDENTIAL_KEY.search(key)
            if not risk or not found:
                if not (key and CREDENTIAL_KEY.search(key)):
                    negatives.append(line)
                continue
            risk_lines += 1
            start, end = strip_quotes(line, *found[1])
            if end > start and kept_value(line[start:end]):
                kind = "url-password" if key == "url-password" else kebab(key.lstrip("_$"))
                examples.append((kind, line, [(start, end)], f"{source} {path}"))
        if risk_lines != risk_count:
            notes.append(f"{path}: {risk_lines} risk lines found, CSV {risk_count}")
    return merged(examples), negatives, notes


def pre_commit_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    """The secrets `test_get_aws_secrets_from_file` expects in each resource, marked where its file holds them."""
    test = show(git_dir, PRE_COMMIT_TEST)
    body = test[test.index("def test_get_aws_secrets_from_env") :]
    expected = {m.group(1): set(re.findall(r"'([^']+)'", m.group(2))) for m in re.finditer(r"'([\w.]+)',\s*(\{[^}]*\}|set\(\))", body)}
    examples: list[Example] = []
    negatives: list[str] = []
    for name, values in expected.items():
        if not name.startswith("aws_config"):
            continue
        text = show(git_dir, f"{PRE_COMMIT_RESOURCES}/{name}")
        for line in text.splitlines():
            key = KEY_OF_LINE.match(line)
            span = line_value(line, key.end() - 1, len(line)) if key else None
            if span and line[span[0] : span[1]] in values:
                if kept_value(line[span[0] : span[1]]):
                    examples.append((kind_name(key.group(1)), line, [span], f"pre-commit-hooks {PRE_COMMIT_RESOURCES}/{name}"))
            elif not values:
                negatives.append(line)
    return examples, negatives


def tfsec_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    examples: list[Example] = []
    negatives: list[str] = []
    for check in TFSEC_CHECKS:
        path = f"{TFSEC_DOCS}/{check}/index.md"
        doc = show(git_dir, path)
        insecure = doc.split("### Insecure Example", 1)[1].split("### Secure Example", 1)[0]
        secure = doc.split("### Secure Example", 1)[1].split("### Links", 1)[0]
        check_id = re.search(r"will fail the (\S+) check", insecure).group(1)
        code = insecure[insecure.index("```") :]
        variable = ""
        for line in code.splitlines():
            if m := re.search(r'variable\s+"(\w+)"', line):
                variable = m.group(1)
            span = None
            if (m := TFSEC_ASSIGNMENT.search(line) or TFSEC_ENV_JSON.search(line)) and not m.group(1).endswith("_name"):
                span = m.span(2)  # (a `secret_name` names the secret, it does not hold it)
            elif variable and TFSEC_VARIABLE.search(f'variable "{variable}"') and (m := re.search(r'\bdefault\s*=\s*"([^"]+)"', line)):
                span = m.span(1)
            if span and kept_value(line[span[0] : span[1]]):
                examples.append((check_id, line, [span], f"tfsec {path}"))
        negatives += [line for line in secure.splitlines() if not line.startswith("```") and "will pass the" not in line]
    return examples, negatives


CONTEXTS = (
    "<<<\nuser: I committed config/master.key by accident, is that bad?\n$ cat config/master.key\n{value}\n>>>",
    'op item create --category=login --title="{name}" --vault=Infra "password={value}"',
    "aws configure set {lower} {value} --profile staging",
    "gh auth login --with-token <<< '{value}'",
    "<<<\n# ~/.npmrc\n@acme:registry=https://npm.acme.test/\n//npm.acme.test/:_authToken={value}\n>>>",
    "<<<\n<!-- ~/.m2/settings.xml -->\n<server>\n  <id>acme-releases</id>\n  <username>deployer</username>\n  <password>{value}</password>\n</server>\n>>>",
    "mc alias set minio-prod https://minio.acme.test:9000 admin {value}",
    "<<<\n$ rclone config show s3-backup\n[s3-backup]\ntype = s3\nprovider = Other\n{lower} = {value}\n>>>",
    "<<<\n$ sops -d secrets/prod.enc.yaml\n{lower}: {value}\nsops_version: 3.8.1\n>>>",
    "Pasting from #ops in Slack: \"heads up, the new {name} for staging is {value} — don't share outside the channel\"",
    "redis-cli -h cache.internal.acme.test -p 6380 -a '{value}' --no-auth-warning PING",
    '<<<\n{{\n  "name": "acme-staging",\n  "values": [\n    {{ "key": "{camel}", "value": "{value}", "type": "secret", "enabled": true }}\n  ]\n}}\n>>>',
    "<<<\n$ ansible-vault view group_vars/prod/vault.yml\nvault_{lower}: \"{value}\"\n>>>",
    "echo '{value}' | npx wrangler secret put {env}",
    "Before I forget, the {name} you asked for in the handover doc: {value}",
    "<<<\nassistant: Here is the line from your .env that leaked:\n{env}={value}\n>>>",
)


in_context = partial(fill_context, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report12."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    lower, digits = "abcdefghijklmnopqrstuvwxyz", "0123456789"
    app = partial(rng.choice, ["invoices", "catalog", "checkout", "mailer", "metrics", "auth-proxy", "scheduler"])
    day = lambda: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"  # noqa: E731

    groups: dict[str, list] = {
        "CLI output without values": [
            lambda: f"Added `minio-{app()}` successfully.",
            lambda: f"Secret {app().upper().replace('-', '_')}_TOKEN updated on worker {app()} (deployment {uid()})",
            lambda: f"Item created in vault Infra: {app()} login (id {pick(lower + digits, 26)})",
            lambda: f"✓ Logged in to github.com account ci-{app()} (keyring)",
            lambda: f"[profile staging] region = eu-central-1, output = json (updated {day()})",
            lambda: f"Transferred:   {rng.randint(1, 900)} MiB / {rng.randint(900, 2000)} MiB, {rng.randint(1, 99)}%, {rng.randint(1, 40)} MiB/s, ETA {rng.randint(1, 59)}s",
            lambda: f"PONG (latency {rng.randint(1, 9)}.{rng.randint(0, 99):02d} ms, db{rng.randint(0, 15)})",
        ],
        "ids and settings under key-like names": [
            lambda: f'  "key": "{app()}_base_url", "value": "https://{app()}.acme.test", "type": "default",',
            lambda: f"  <id>acme-{rng.choice(['releases', 'snapshots', 'mirror'])}</id>",
            lambda: f"sops: kms arn=arn:aws:kms:eu-central-1:{rng.randint(10**11, 10**12 - 1)}:alias/sops-{app()} created_at={day()}T{rng.randint(0, 23):02d}:00:00Z",
            lambda: f"secret_key_rotation_days: {rng.choice([30, 60, 90, 180])}",
            lambda: f"token_ttl = \"{rng.randint(1, 72)}h\"",
            lambda: f"password_min_length={rng.choice([12, 14, 16, 20])} password_history={rng.randint(3, 24)}",
            lambda: f"REDIS_TLS_PORT={rng.choice([6380, 6390, 16379])} REDIS_DB={rng.randint(0, 15)}",
        ],
        "hashes and fingerprints": [
            lambda: f"SHA256:{b64(32).rstrip('=')} ci-{app()}@acme.test (ED25519)",
            lambda: f"  \"etag\": \"W/\\\"{hexs(32)}\\\"\",",
            lambda: f"{hexs(40)} refs/heads/release/{rng.randint(1, 9)}.{rng.randint(0, 30)}",
            lambda: f"sha512sum: {hexs(128)}  {app()}.tar.gz",
            lambda: f"integrity sha1-{b64(20)}",
        ],
        "documented placeholders and references": [
            "RAILS_MASTER_KEY=<contents of config/master.key>",
            "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
            "<password>${env.MAVEN_REPO_PASSWORD}</password>",
            'op read "op://Infra/redis/password"',
            "aws configure set aws_secret_access_key \"$(vault kv get -field=secret aws/ci)\"",
            "redis-cli -a \"$REDIS_PASSWORD\" --no-auth-warning INFO keyspace",
            'wrangler secret put API_TOKEN   # paste the value when prompted',
            "vault_db_password: !vault |",
            "secret_access_key = ENC[AES256_GCM,data:...,type:str]",
        ],
        "prose about credentials": [
            "The master key only decrypts credentials.yml.enc, so rotate it together with the encrypted file.",
            "Slack's secret scanning revoked the token within a minute of the paste, so nothing else is needed.",
            "sops keeps the keys in plain text and encrypts only the values, which is why the diff still shows field names.",
            "Postman marks a variable as secret only in the UI; the exported JSON still holds the value, so don't commit it.",
            "rclone obscures passwords in its config, but obscuring is reversible, so treat the file as secret anyway.",
            "After `gh auth login` the token lives in the system keyring, not in ~/.config/gh/hosts.yml.",
            "Use `mc alias set` with --api S3v4 and read the secret from stdin instead of the command line.",
            "Ansible only decrypts the vault in memory; the file on disk stays encrypted unless you run `ansible-vault decrypt`.",
        ],
        "URLs without credentials": [
            lambda: f"https://dash.cloudflare.com/{hexs(32)}/workers/services/view/{app()}/production/settings",
            lambda: f"redis://cache.internal.acme.test:6380/{rng.randint(0, 15)}",
            lambda: f"https://minio.acme.test:9001/browser/{app()}-backups",
            lambda: f"https://start.1password.com/open/i?a={pick('ABCDEFGHIJKLMNOPQRSTUVWXYZ234567', 26)}&h=acme.1password.com",
            lambda: f"https://acme.slack.com/archives/C0{pick('ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789', 9)}/p{rng.randint(10**15, 10**16 - 1)}",
        ],
    }
    return draw_lines(rng, groups, per_template=3, least=20)


def main(leaky_dir: str, pre_commit_dir: str, tfsec_dir: str) -> None:
    leaky, leaky_negatives, notes = leaky_examples(leaky_dir)
    pre_commit, pre_commit_negatives = pre_commit_examples(pre_commit_dir)
    tfsec, tfsec_negatives = tfsec_examples(tfsec_dir)
    for note in notes:
        print("leaky-repo count differs:", note)
    examples = first_per_value(merged(leaky + pre_commit + tfsec))
    secrets, kinds, marked = placed_entries(examples, OUT, in_context, CONTEXT_VALUES)
    commits = {
        "Plazmaz/leaky-repo": git(leaky_dir, "rev-parse", "HEAD").strip(),
        "pre-commit/pre-commit-hooks": git(pre_commit_dir, "rev-parse", "HEAD").strip(),
        "aquasecurity/tfsec": git(tfsec_dir, "rev-parse", "HEAD").strip(),
    }
    write_half(
        OUT,
        commits,
        "MIT, MIT, MIT",
        secrets,
        kinds,
        [
            ("leaky-repo leaking files, lines that are not risk lines and name no credential", leaky_negatives),
            ("pre-commit-hooks AWS config resources expected to hold no secret", pre_commit_negatives),
            ("tfsec plaintext-secret checks' secure examples", tfsec_negatives),
        ],
        lambda line: clean_fit(line) and not any(value in line for value in marked),
        drawn_lookalikes(random.Random(SEED)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
