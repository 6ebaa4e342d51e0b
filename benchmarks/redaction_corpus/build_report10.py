"""Build the tenth report half (`report10/`) mechanically from three projects' published secret-scanner tests.

    python benchmarks/redaction_corpus/build_report10.py LEAKTK_PATTERNS FAKE_LEAKS GOSEC GGSHIELD

(each argument a git directory of that project).

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 14, and its
output was committed without running the redactor on it. Sources, read with `git show` at their HEAD:
- leaktk/patterns (MIT) and leaktk/fake-leaks (MIT): the expected results of LeakTK's scanner test
  (`testdata/leaktk-scanner-results.yaml` in patterns: each finding's rule, file, `match` and `secret`, the rule's own
  capture) over the fake-leaks fixture files. Each finding's `match` is found in its file (the n-th finding of the
  same match in a file at its n-th occurrence; a match the file does not hold is left out) and the `secret` marked
  inside it, narrowed to the credential (a URL's password, a webhook's path after `/webhook/`, a registry config's
  `auth` values; quotes out). A span found by a generic rule and a vendor's rule is kept under the vendor's (generic
  rules rank: authorization header, URL user and password, JSON web token, generic secret). Left out: the
  `semgrep-rules-examples/` folder (copied from Semgrep's rules, not MIT), files that cite an outside repository as
  their source (copied snippets, licence unknown), rules that are not credentials (build_report3's list, controlled
  unclassified information, htpasswd files, PKCS#12 files, vulnerable workflows), and findings on a line that the
  fixture's comment right above calls a placeholder or non-secret value. Clean candidates: lines of the fixtures'
  `invalid/` and `benign/` folders, and lines right after a comment that calls them a placeholder or non-secret value
  or says they should not match (a fixed-seed draw of these, so the 3,000 placeholder lines of one file do not
  outweigh the rest); never a line a finding falls on.
- securego/gosec (Apache-2.0): the G101 (hard-coded credentials) samples, `testutils/g101_samples.go`: in each sample
  gosec expects an issue in, the string literals that are not placeholders, under 8 characters or holding spaces
  (map keys, field names and user names drop out this way), marked (a `Bearer: ` prefix left out); the kind is the
  gosec secret pattern (`rules/hardcoded_credentials.go`) the value matches, else `gosec-hardcoded-credential`.
  Samples expecting no issue are clean candidates.
- GitGuardian/ggshield (MIT): the unit tests' recorded API answers (`tests/unit/cassettes/*.yaml`): each scanned
  document of a request is marked where the answer's matches of type `apikey` or `password` fall (`index_start` to
  `index_end`, inclusive; a key across a diff's lines: its body marked line by line, after the `+`, and not placed
  in a context); documents the API found nothing in are clean candidates.
Of the examples holding the same values of a kind, the first EXAMPLES_PER_VALUE are kept (LeakTK's general test file
repeats a few values under many names). Each kind's first values (up to CONTEXT_VALUES) are also placed in transcript
contexts written for report10, rotating. Values that read as placeholders (build_report3's test) and values already
in other folders are left out. Clean lines: the candidates above holding no key-like token (build_report5's test) and
no URL password that is not a placeholder, then look-alikes drawn with a fixed seed from templates written for
report10.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import regex
import yaml

from build_report3 import NOT_CREDENTIALS, existing_values
from build_report4 import Draw, Example, draw_lines, git, placeholder, write_half
from build_report4 import secret_entries as report4_secret_entries
from build_report5 import holds_no_key
from build_report8 import lines_around
from build_report9 import merged

OUT = Path(__file__).resolve().parent / "report10"
SEED = 10100
LEAKTK_RESULTS = "testdata/leaktk-scanner-results.yaml"
GOSEC_SAMPLES = "testutils/g101_samples.go"
GOSEC_PATTERNS = "rules/hardcoded_credentials.go"
GGSHIELD_CASSETTES = "tests/unit/cassettes"
EXAMPLES_PER_VALUE = 2
CONTEXT_VALUES = 2
PLACEHOLDER_LINES_DRAWN = 150
# LeakTK rules that do not find credentials (beside build_report3's list).
LEAKTK_NOT_CREDENTIALS = re.compile(r"Controlled Unclassified|Htpasswd|PKCS|Vulnerable", re.IGNORECASE)
# Generic rules, from most to least specific: a span a vendor's rule also finds is kept under the vendor's.
GENERIC_RANK = {"authorization-header": 1, "url-user-and-password": 2, "json-web-token": 3, "generic-secret": 4}
# A fixture copied from another repository names it (`# https://github.com/owner/repo/blob/<sha>/...`, `#source:`);
# three fixture trees are copies of other projects' files (GitHub's API description, a JDK test, a kernel-ark stub key).
OUTSIDE_SOURCE = re.compile(r"github\.com/[^/\s]+/[^/\s]+/blob/[0-9a-f]{7,}|#\s*source:", re.IGNORECASE)
COPIED_TREES = ("semgrep-rules-examples/", "github/invalid/should-not-match-github-spec/", "pki/invalid/upstream-jdk-test/", "pki/invalid/cki-project-kernel-ark-key/")
# A fixture comment saying the next line is not a secret (`notsecret` tags mark real-looking allow-listed keys: not these).
NOT_SECRET_COMMENT = re.compile(r"^\s*(?:#|//).*(?:placeholder|non-secret|should ?n[o']?t|shouldn't|not match|ignore|benign|invalid)", re.IGNORECASE)
REGISTRY_AUTH = re.compile(r'auth\\*"\s*:\s*\\*"([^"\\]+)')
URL_PASSWORD = re.compile(r"://[^/\s:@]*:([^@\s/]+)@")
WEBHOOK_PATH = re.compile(r"/(?:webhook|hooks)/(\S+)")
GO_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def kind_name(name: str) -> str:
    """A rule or type name in kebab case, as written (`GitHub Personal Access Token` -> `github-personal-access-token`)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def show(git_dir: str, path: str) -> str | None:
    """A file's text at HEAD, None for a binary file."""
    data = subprocess.run(["git", "-C", git_dir, "show", f"HEAD:{path}"], capture_output=True, check=True).stdout
    return None if b"\0" in data else data.decode("utf-8", errors="replace")


def secret_spans(text: str, start: int, secret: str) -> list[tuple[int, int]]:
    """The credential of a finding whose secret starts at `start`: a registry config's auth values, a URL's password
    or a webhook's path, else the secret without quotes around it."""
    end = start + len(secret)
    if "auths" in secret:
        return [m.span(1) for m in REGISTRY_AUTH.finditer(text, start, end)]
    if "://" in secret:
        for shape in (URL_PASSWORD, WEBHOOK_PATH):
            if m := shape.search(text, start, end):
                return [m.span(1)]
        return []
    while start < end and text[start] in "\"'`":
        start += 1
    while end > start and text[end - 1] in "\"'`":
        end -= 1
    return [(start, end)]


def clean_fit(line: str) -> bool:
    """A clean candidate: no key-like token (build_report5's test) and no URL password that is not a placeholder (a
    password a scanner skips for its own reasons, e.g. on localhost, is still one for a transcript redactor)."""
    return holds_no_key(line) and all(placeholder(m.group(1)) for m in URL_PASSWORD.finditer(line))


def line_of(text: str, at: int) -> int:
    return text.count("\n", 0, at)


def leaktk_examples(patterns_dir: str, fake_dir: str) -> tuple[list[Example], list[str], list[str]]:
    """Examples marked by LeakTK's expected findings; clean candidates from invalid/benign fixtures and from lines the
    fixtures call placeholders."""
    results = yaml.safe_load(git(patterns_dir, "show", f"HEAD:{LEAKTK_RESULTS}"))
    texts: dict[str, str | None] = {}
    for path in git(fake_dir, "ls-tree", "-r", "--name-only", "HEAD").splitlines():
        if not path.startswith(COPIED_TREES):
            text = show(fake_dir, path)
            texts[path] = None if text is None or OUTSIDE_SOURCE.search(text) else text
    seen: dict[tuple[str, str], int] = {}
    flagged: dict[str, set[int]] = {}
    claims: dict[str, list[tuple[int, int, int, int, str]]] = {}  # path -> (rank, order, start, end, kind)
    for order, result in enumerate(results):
        path, match, secret = result["location.path"], str(result["match"]), str(result["secret"])
        text = texts.get(path)
        if not text:
            continue
        nth = seen[(path, match)] = seen.get((path, match), 0) + 1
        at = -1
        for _ in range(nth):
            at = text.find(match, at + 1)
            if at < 0:
                break
        if at < 0:
            continue
        flagged.setdefault(path, set()).update(range(line_of(text, at), line_of(text, at + len(match)) + 1))
        description = result["rule.description"]
        inside = match.rfind(secret)
        if inside < 0 or NOT_CREDENTIALS.search(description) or LEAKTK_NOT_CREDENTIALS.search(description):
            continue
        kind = kind_name(description)
        for start, end in secret_spans(text, at + inside, secret):
            lines = text.splitlines()
            previous = lines[line_of(text, start) - 1] if line_of(text, start) > 0 else ""
            if end > start and not placeholder(text[start:end]) and not NOT_SECRET_COMMENT.search(previous):
                claims.setdefault(path, []).append((GENERIC_RANK.get(kind, 0), order, start, end, kind))
    examples: list[Example] = []
    for path, found in claims.items():
        text = texts[path]
        kept: list[tuple[int, int, str]] = []
        for _, _, start, end, kind in sorted(found):
            if not any(start < b and a < end for a, b, _ in kept):
                kept.append((start, end, kind))
        for start, end, kind in sorted(kept):
            lines, span = lines_around(text, start, end)
            examples.append((kind, lines, [span], f"leaktk fake-leaks/{path}"))
    negatives: list[str] = []
    after_comment: list[str] = []
    for path, text in texts.items():
        if not text or path.split("/")[-1].startswith("."):
            continue
        lines = text.splitlines()
        negative_file = bool({"invalid", "benign"} & set(path.split("/")[:-1]))
        for number, line in enumerate(lines):
            if number in flagged.get(path, set()):
                continue
            if negative_file:
                negatives.append(line)
            elif number > 0 and NOT_SECRET_COMMENT.search(lines[number - 1]) and line not in after_comment:
                after_comment.append(line)
    fit = [line for line in after_comment if clean_fit(line) and len(re.sub(r"\s", "", line)) >= 8]
    drawn = set(random.Random(SEED).sample(fit, min(PLACEHOLDER_LINES_DRAWN, len(fit))))
    return examples, negatives, [line for line in fit if line in drawn]


def gosec_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    source = git(git_dir, "show", f"HEAD:{GOSEC_PATTERNS}")
    patterns = [
        (m.group(1), regex.compile(m.group(2)))
        for m in re.finditer(r'name:\s*"([^"]+)",[^\n]*\n\s*regexp:\s*regexp\.MustCompile\(`([^`]+)`\)', source)
    ]
    samples = git(git_dir, "show", f"HEAD:{GOSEC_SAMPLES}")
    examples: list[Example] = []
    negatives: list[str] = []
    for sample in re.finditer(r"\{\[\]string\{((?:`[^`]*`\s*,?\s*)+)\},\s*(\d+),\s*gosec\.NewConfig\(\)\}", samples):
        for code in re.findall(r"`([^`]*)`", sample.group(1)):
            if sample.group(2) == "0":
                negatives += code.splitlines()
                continue
            for literal in GO_STRING.finditer(code):
                start, end = literal.span(1)
                if code.startswith("Bearer: ", start):
                    start += len("Bearer: ")
                value = code[start:end]
                if len(value) < 8 or re.search(r"\s", value) or placeholder(value):
                    continue
                kind = next((kind_name(name) for name, pattern in patterns if pattern.search(value)), "gosec-hardcoded-credential")
                lines, span = lines_around(code, start, end)
                examples.append((kind, lines, [span], f"gosec {GOSEC_SAMPLES}"))
    return examples, negatives


def ggshield_examples(git_dir: str) -> tuple[list[Example], list[str], set[str]]:
    """Examples marked at the API's credential matches; clean candidates; the body lines of keys split by a diff (a
    line of a key is not placed in a context)."""
    examples: list[Example] = []
    negatives: list[str] = []
    key_lines: set[str] = set()
    paths = [p for p in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", GGSHIELD_CASSETTES).splitlines() if p.endswith(".yaml")]
    for path in sorted(paths):
        for interaction in (yaml.safe_load(git(git_dir, "show", f"HEAD:{path}")) or {}).get("interactions", []):
            body, answer = interaction["request"].get("body"), interaction["response"].get("body")
            answer = answer.get("string") if isinstance(answer, dict) else None
            if not body or not answer or "policy_break" not in answer:
                continue
            try:
                documents, scans = json.loads(body), json.loads(answer)
            except (json.JSONDecodeError, TypeError):
                continue
            documents = documents if isinstance(documents, list) else [documents]
            scans = scans if isinstance(scans, list) else [scans]
            for document, scan in zip(documents, scans):
                text = document.get("document", "") if isinstance(document, dict) else ""
                if not scan.get("policy_breaks"):
                    negatives += text.splitlines()
                for found in scan.get("policy_breaks", []):
                    kind = kind_name(found["type"])
                    for match in found["matches"]:
                        if match["type"] not in ("apikey", "password"):
                            continue
                        start, end = match["index_start"], match["index_end"] + 1
                        if text[start:end] != match["match"] or placeholder(match["match"]):
                            continue
                        lines, (a, b) = lines_around(text, start, end)
                        if "\n+" not in match["match"]:
                            examples.append((kind, lines, [(a, b)], f"ggshield {path}"))
                            continue
                        spans, at = [], 0
                        for row in lines.splitlines():  # a key across diff lines: its body line by line, after the `+`
                            row_start, row_end = max(a, at), min(b, at + len(row))
                            if row_start == at and row.startswith("+"):
                                row_start += 1
                            if row_start < row_end and not lines[row_start:row_end].startswith("-----"):
                                spans.append((row_start, row_end))
                                key_lines.add(lines[row_start:row_end])
                            at += len(row) + 1
                        examples.append((kind, lines, spans, f"ggshield {path}"))
    return examples, negatives, key_lines


def first_per_value(examples: list[Example]) -> list[Example]:
    """Of the examples holding the same values of a kind, the first EXAMPLES_PER_VALUE."""
    shown: dict[tuple[str, tuple[str, ...]], int] = {}
    kept = []
    for kind, text, spans, source in examples:
        values = (kind, tuple(sorted({text[a:b] for a, b in spans})))
        shown[values] = shown.get(values, 0) + 1
        if shown[values] <= EXAMPLES_PER_VALUE:
            kept.append((kind, text, spans, source))
    return kept


CONTEXTS = (
    "Before you paste it anywhere else: the {name} from the old notebook cell is {value}. I moved it into the team vault.",
    "$ acmectl auth login --{dashed} {value} --profile staging",
    "<<<\n# .env.test\nPORT=8080\n{env}={value}\nFEATURE_FLAGS=beta\n>>>",
    '{{"service": "ingest", "{camel}": "{value}", "retries": 2}}',
    "<<<\n# config/credentials.yml (after `rails credentials:show`)\n{lower}: {value}\nregion: eu-west-3\n>>>",
    "| `{env}` | staging | `{value}` | owner: platform |",
    "<<<\n> POST /v1/events HTTP/1.1\n> Host: api.acme.test\n> X-Auth-Token: {value}\n>>>",
    "https://status.acme.test/api/ping?{lower}={value}&format=json",
    '<<<\nresource "acme_integration" "ci" {{\n  name = "ci"\n  {lower} = "{value}"\n}}\n>>>',
    "<<<\n      - run: ./scripts/smoke.sh\n        env:\n          {env}: {value}\n>>>",
    '>>> acme.configure({lower}="{value}")',
    "az keyvault secret set --vault-name kv-acme --name {dashed} --value '{value}'",
    "docker build --build-arg {env}={value} -t acme/api:dev .",
    "<<<\ndiff --git a/.env.ci b/.env.ci\n@@ -3,0 +4 @@\n+{env}={value}\n>>>",
    "gcloud secrets versions add {dashed} --data-file=- <<< '{value}'",
    "I tested the {name} you sent ({value}) with a read-only call and it answered 200.",
)


def fill_context(contexts: tuple[str, ...], kind: str, value: str, index: int) -> str:
    """The `index`th of `contexts` (rotating), filled with the kind's words in several spellings and the value
    (report11 to report13 use it with their own contexts)."""
    words = [w for w in re.split(r"[^a-z0-9]+", kind.lower()) if w]
    camel = "".join(w.capitalize() for w in words)
    return contexts[index % len(contexts)].format(
        name=" ".join(words), env="_".join(words).upper(), lower="_".join(words), dashed="-".join(words),
        camel=camel[0].lower() + camel[1:], value=f"⟦{kind}:{value}⟧",
    )


in_context = partial(fill_context, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report10."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    lower, digits = "abcdefghijklmnopqrstuvwxyz", "0123456789"
    vendor = partial(rng.choice, ["groq", "nvidia", "sendgrid", "shopify", "gitlab", "sonarqube", "dynatrace", "notion", "tines"])

    groups: dict[str, list] = {
        "git and CI output": [
            lambda: f"HEAD is now at {hexs(7)} Bump the scanner patterns to {rng.randint(1, 9)}.{rng.randint(0, 30)}.0",
            lambda: f"Run actions/checkout@{hexs(40)}",
            lambda: f"Cache restored from key: Linux-pnpm-store-{hexs(64)}",
            lambda: f" {rng.randint(1, 40)} files changed, {rng.randint(1, 400)} insertions(+), {rng.randint(0, 90)} deletions(-) [{hexs(7)}]",
            lambda: f" * branch            {hexs(40)} -> FETCH_HEAD",
            lambda: f"##[group]Run ./gradlew publish (attempt {rng.randint(1, 3)}, job {rng.randint(10**9, 10**10)})",
            lambda: f"Pipeline #{rng.randint(10**8, 10**9)} passed for {hexs(8)} on main",
        ],
        "ids and names under key-like names": [
            lambda: f'  "keyId": "{uid()}",',
            lambda: f"api_key_id: {uid()}",
            lambda: f"secret_name: projects/{rng.randint(10**11, 10**12)}/secrets/{vendor()}-api-key/versions/{rng.randint(1, 9)}",
            lambda: f'token_expires_at = "2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"',
            lambda: f"{vendor().upper()}_TOKEN_TTL_SECONDS={rng.choice([900, 3600, 86400])}",
            lambda: f"password_policy_id={rng.randint(1000, 9999)} min_length={rng.randint(12, 20)}",
            lambda: f'<add key="{vendor().capitalize()}SecretName" value="{vendor()}-prod-{pick(lower, 4)}" />',
        ],
        "digests and checksums": [
            lambda: f"{hexs(64)}  {vendor()}-cli_{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}_linux_amd64.tar.gz",
            lambda: f"ETag: \"{hexs(32)}\"",
            lambda: f"golang.org/x/crypto v0.{rng.randint(20, 40)}.0/go.mod h1:{b64(32)}",
            lambda: f"Digest: sha256:{hexs(64)}",
            lambda: f"  sha1: {hexs(40)}",
        ],
        "base64 media": [
            lambda: f'<img alt="spinner" src="data:image/gif;base64,R0lGODlhEAAQAPQAAP///wAAAPDw8IqKiuDg4EZGRnp6egAAAFhYWCQkJKysrL6+vhQUFJycnAQEBDY2NmhoaAAAAAAAAAAAACH/C05FVFNDQVBFMi4wAwEAAAAh/h{b64(30)}">',
            lambda: f"  background: url(data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAABAAAAAQ{b64(36)}) no-repeat;",
        ],
        "documented placeholders": [
            lambda: f"{vendor().upper()}_API_KEY=<paste the key from the {vendor()} console>",
            "NVIDIA_API_KEY=nvapi-...",
            "GROQ_API_KEY=gsk_... # create one at console.groq.com/keys",
            lambda: f'  token: "{{{{ .Values.{vendor()}.token }}}}"',
            "SENDGRID_API_KEY=SG.xxxxxxxx.yyyyyyyy",
            lambda: f"export {vendor().upper()}_TOKEN=\"$({vendor()} auth print-token)\"",
            "ftp://anonymous@ftp.acme.test/pub/",
            "token: glpat-<redacted>",
        ],
        "code and prose about keys": [
            "LeakTK flags the token even in a patch file, so rotate it before the merge request lands.",
            "if (!apiKey.startsWith('nvapi-')) throw new Error('not an NVIDIA API key');",
            "The SendGrid key is shown once; after that the console only lists its name.",
            "secret := os.Getenv(\"SONAR_TOKEN\") // never hard-code it, gosec G101 will flag it",
            "Shopify custom app tokens start with shpca_ and admin API tokens with shpat_.",
            "I removed the Dynatrace token from the notebook output and cleared the cell history.",
            "Vault AppRole logins need a role_id and a secret_id; only the secret_id is sensitive.",
            "ggshield secret scan pre-commit found nothing in the staged files.",
            "redact(token) replaces all but the last four characters with asterisks.",
        ],
        "URLs without credentials": [
            lambda: f"https://gitlab.com/acme/api/-/pipelines/{rng.randint(10**8, 10**9)}",
            lambda: f"https://huggingface.co/acme/{pick(lower, 6)}-{rng.randint(1, 9)}b/resolve/main/config.json",
            lambda: f"https://{pick(lower, 5)}-{pick(lower, 4)}-{rng.randint(1000, 9999)}.tines.com/stories/{rng.randint(10**4, 10**5)}",
            lambda: f"https://sonarcloud.io/project/overview?id=acme_{pick(lower, 6)}",
            lambda: f"https://app.snowflake.com/{pick(lower, 7)}/{pick(lower + digits, 8)}/worksheets",
        ],
    }
    return draw_lines(rng, groups, per_template=3, least=20)


def main(patterns_dir: str, fake_dir: str, gosec_dir: str, ggshield_dir: str) -> None:
    leaktk, leaktk_negatives, leaktk_placeholders = leaktk_examples(patterns_dir, fake_dir)
    gosec, gosec_negatives = gosec_examples(gosec_dir)
    ggshield, ggshield_negatives, key_lines = ggshield_examples(ggshield_dir)
    examples = first_per_value(merged(leaktk + gosec + ggshield))
    secrets, kinds = report4_secret_entries(
        examples,
        existing_values(OUT.parent, "report10"),
        place=in_context,
        chosen=lambda values: [value for value in values if "\n" not in value and value not in key_lines][:CONTEXT_VALUES],
        skipped=lambda text: not text.strip() or bool({"<<<", ">>>"} & set(text.splitlines())),
        note="examples literal + contexts",
        sort_kinds=True,
    )
    commits = {
        "leaktk/patterns": git(patterns_dir, "rev-parse", "HEAD").strip(),
        "leaktk/fake-leaks": git(fake_dir, "rev-parse", "HEAD").strip(),
        "securego/gosec": git(gosec_dir, "rev-parse", "HEAD").strip(),
        "GitGuardian/ggshield": git(ggshield_dir, "rev-parse", "HEAD").strip(),
    }
    write_half(
        OUT,
        commits,
        "MIT, MIT, Apache-2.0, MIT",
        secrets,
        kinds,
        [
            ("LeakTK fake-leaks invalid/ and benign/ fixtures, lines without a finding, holding no key-like token", leaktk_negatives),
            (f"LeakTK fake-leaks lines its comments call placeholders or non-secrets (drawn, seed {SEED}), holding no key-like token", leaktk_placeholders),
            ("gosec G101 samples expecting no issue, lines holding no key-like token", gosec_negatives),
            ("ggshield cassettes' documents the API found nothing in, lines holding no key-like token", ggshield_negatives),
        ],
        clean_fit,
        drawn_lookalikes(random.Random(SEED)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
