"""Build the fourteenth report half (`report14/`) mechanically from the published test samples of Samsung/CredSweeper.

    python benchmarks/redaction_corpus/build_report14.py CREDSWEEPER

(the argument a git directory of Samsung/CredSweeper).

Kept so that the half can be rebuilt and audited: it was run beside version 19's rules, and its output was written
without running the redactor on it. Source, read with `git show` (MIT):
- `tests/data/output.json`: the findings CredSweeper's default run (its filters and its ML validation, the run the
  tests count as SAMPLES_POST_CRED_COUNT) must report over `tests/samples/`: per finding its rule, severity and
  line data (sample path, line number, value). Each finding's values are located in the sample's real line (at the
  reported offset, else the value's first occurrence in the line) and marked there; a finding spanning several lines
  becomes a block of those lines (a PEM private key is marked whole, from its first value to its last). Kind = the
  rule name in kebab case. Left out: findings of severity `info` (CredSweeper's own label for what is reported but
  is not a credential: UUIDs, S3 bucket and Firebase domains, …), values that are a JSON or YAML member themselves
  (the `"kty": …` line a JWK finding reports beside the key), values build_report11's test rejects (placeholders,
  short words, code references), and values found (plain substring search) in another folder's `secrets.txt`.
- Clean candidates: the lines of the samples CredSweeper expects nothing (or only false positives) from: text
  samples without a default finding whose name says they are negative (`_n`, `.n.`, `_fp`, `false`, `_f`) or
  which no run of the tests reports anything in, minus lines holding a value any of the tests' expected outputs
  (`tests/data/*.json`) reports, lines assigning a credential-named key (build_report12's CREDENTIAL_KEY), lines
  holding a key-like token (build_report5's test via build_report10's clean_fit) and lines holding a value this half
  marks.
Of the examples holding the same values of a kind, the first 2 are kept. Each kind's first values (up to
CONTEXT_VALUES, single-line only) are also placed in transcript contexts written for report14, rotating. Then
look-alikes drawn with a fixed seed from templates written for report14.
"""

from __future__ import annotations

import json
import random
import re
import sys
from functools import partial
from pathlib import Path

from build_report4 import Draw, Example, draw_lines, git, write_half
from build_report8 import lines_around
from build_report9 import merged
from build_report10 import clean_fit, fill_context, first_per_value, kind_name
from build_report10 import show as text_of
from build_report11 import kept_value, placed_entries
from build_report12 import CREDENTIAL_KEY, KEY_OF_LINE

OUT = Path(__file__).resolve().parent / "report14"
SEED = 14140
CONTEXT_VALUES = 2
SAMPLES = "tests/samples"
EXPECTED = "tests/data"
DEFAULT_RUN = "tests/data/output.json"  # DATA_TEST_CFG's run without options: filters and ML validation on
NOT_CREDENTIAL_SEVERITY = "info"
NEGATIVE_NAME = re.compile(r"_n$|\.n\.|_fp$|false|_f$", re.IGNORECASE)
MEMBER_VALUE = re.compile(r"""^["']?[\w-]+["']?\s*:\s""")  # a value that is itself a `"name": value` member
WHOLE_BLOCK = re.compile(r"PEM|Private Key", re.IGNORECASE)


def sample_texts(git_dir: str) -> dict[str, str]:
    """Every text sample (path as the findings write it, `./tests/samples/…`) -> its text with `\\n` line ends."""
    texts = {}
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", SAMPLES).splitlines():
        text = text_of(git_dir, path)
        if text is not None:
            texts[f"./{path}"] = text.replace("\r\n", "\n")
    return texts


def located(text: str, line_num: int, start: int, value: str) -> tuple[int, int] | None:
    """A finding's value in the sample: at its reported offset in line `line_num` (1-based), else its first
    occurrence in that line; None when the line does not hold it (a value decoded or rewritten by the scanner)."""
    lines = text.split("\n")
    if not value or not 0 < line_num <= len(lines):
        return None
    line_start = sum(len(line) + 1 for line in lines[: line_num - 1])
    line = lines[line_num - 1]
    at = start if 0 <= start and line[start : start + len(value)] == value else line.find(value)
    return None if at < 0 else (line_start + at, line_start + at + len(value))


def credsweeper_examples(git_dir: str, texts: dict[str, str], elsewhere: str) -> list[Example]:
    """The default run's findings (severity other than `info`), each marked in its sample's line, or in the block of
    lines it spans; kind = rule name in kebab case."""
    examples: list[Example] = []
    for finding in json.loads(git(git_dir, "show", f"HEAD:{DEFAULT_RUN}")):
        if finding["severity"] == NOT_CREDENTIAL_SEVERITY:
            continue
        kind = kind_name(finding["rule"])
        by_path: dict[str, list[tuple[int, int]]] = {}
        for data in finding["line_data_list"]:
            text = texts.get(data["path"])
            span = text is not None and located(text, data["line_num"], data["value_start"], data["value"])
            if span:
                by_path.setdefault(data["path"], []).append(span)
        for path, spans in by_path.items():
            text = texts[path]
            if WHOLE_BLOCK.search(finding["rule"]) and len({text.count("\n", 0, a) for a, _ in spans}) > 1:
                spans = [(min(a for a, _ in spans), max(b for _, b in spans))]  # a key over several lines, whole
            spans = sorted(set(spans))
            kept = [
                (a, b)
                for a, b in spans
                if kept_value(text[a:b]) and not MEMBER_VALUE.match(text[a:b]) and text[a:b] not in elsewhere
            ]
            if not kept:
                continue
            block, (first, _) = lines_around(text, min(a for a, _ in kept), max(b for _, b in kept))
            offset = kept[0][0] - first
            examples.append((kind, block, [(a - offset, b - offset) for a, b in kept], f"credsweeper {path[2:]}"))
    return merged(examples)


def reported_values(git_dir: str) -> set[str]:
    """Every value any of the tests' expected outputs reports (default, no ML, no filters, doc, depth runs)."""
    values = set()
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", EXPECTED).splitlines():
        if path.endswith(".json"):
            for finding in json.loads(git(git_dir, "show", f"HEAD:{path}")):
                values |= {data["value"] for data in finding["line_data_list"] if len(data["value"] or "") >= 4}
    return values


def negative_lines(git_dir: str, texts: dict[str, str], reported: set[str]) -> list[str]:
    """Lines of the text samples without a default finding that are named negative or reported by no run, holding
    no reported value and assigning no credential-named key."""
    found: dict[str, set[str]] = {}
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", EXPECTED).splitlines():
        if path.endswith(".json"):
            for finding in json.loads(git(git_dir, "show", f"HEAD:{path}")):
                for data in finding["line_data_list"]:
                    found.setdefault(path, set()).add(data["path"])
    lines = []
    for path, text in texts.items():
        if path in found.get(DEFAULT_RUN, set()):
            continue
        if not NEGATIVE_NAME.search(path.rsplit("/", 1)[-1]) and any(path in paths for paths in found.values()):
            continue
        for line in text.split("\n"):
            key = KEY_OF_LINE.match(line)
            if any(value in line for value in reported) or (key and CREDENTIAL_KEY.search(key.group(1))):
                continue
            lines.append(line)
    return lines


CONTEXTS = (
    "$ ./scripts/rotate-creds.sh --service payments --{dashed} {value} --confirm",
    "<<<\n# .env.staging (committed by mistake, see PR #412)\nAPP_URL=https://staging.shop.test\n{env}={value}\nQUEUE_DRIVER=redis\n>>>",
    '{{"type": "tool_use", "name": "set_env_var", "input": {{"name": "{env}", "value": "{value}", "scope": "preview"}}}}',
    "<<<\n# charts/api/values-prod.yaml\napi:\n  replicas: 3\n  {camel}: {value}\n  logLevel: warn\n>>>",
    "curl -sf -X POST https://deploy.shop.test/v3/releases -H 'Authorization: Token {value}' -d '{{\"ref\": \"main\"}}'",
    "user: ok so the {name} is {value} — can you wire it into the worker without committing it?",
    "<<<\n$ infisical secrets --env=prod --path=/api\n┌──────────────────┬──────────────────┐\n│ SECRET NAME      │ SECRET VALUE     │\n├──────────────────┼──────────────────┤\n│ {env} │ {value} │\n└──────────────────┴──────────────────┘\n>>>",
    "2026-04-11 09:32:18,442 DEBUG httpclient: sending headers={{'Accept': 'application/json', 'X-{camel}': '{value}'}}",
    "<<<\n$ aws secretsmanager get-secret-value --secret-id prod/{dashed} --query SecretString --output text\n{value}\n>>>",
    '<<<\n# /etc/systemd/system/shop-worker.service\n[Service]\nEnvironment="{env}={value}"\nExecStart=/opt/shop/bin/worker\n>>>',
    "echo -n '{value}' | gh secret set {env} --repo shop/api --env production",
    '<<<\n# ~/.config/shop/credentials.toml\n[profile.default]\n{lower} = "{value}"\nregion = "eu-central-1"\n>>>',
    "assistant: I found `{value}` hard-coded as the {name} in src/config.ts; I'll move it to an environment variable.",
    "<<<\nservices:\n  api:\n    image: shop/api:2.3\n    environment:\n      - {env}={value}\n>>>",
    "kubectl create secret generic {dashed} --from-literal={lower}={value} -n prod",
    "ERROR 2026-05-02T17:03:55Z auth rejected for client=ci-runner-7 ({lower}={value}): 401 Unauthorized",
)


in_context = partial(fill_context, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report14."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    digits = "0123456789"
    svc = partial(rng.choice, ["checkout", "catalog", "invoices", "search", "mailer", "thumbnails", "audit"])
    who = partial(rng.choice, ["mira", "tomasz", "ade", "lena", "kofi", "yuki"])
    day = lambda: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"  # noqa: E731
    clock = lambda: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"  # noqa: E731

    groups: dict[str, list] = {
        "git and CI output with ids": [
            lambda: f"{hexs(7)} fix({svc()}): retry on 429 from the upstream",
            lambda: f"Merge: {hexs(7)} {hexs(7)}",
            lambda: f"HEAD is now at {hexs(7)} chore: bump {svc()} to v{rng.randint(1, 4)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
            lambda: f"✓ Deploy {svc()} · {rng.randint(1000000000, 9999999999)} · main · {rng.randint(1, 59)}m{rng.randint(0, 59)}s",
            lambda: f"remote: Resolving deltas: 100% ({rng.randint(10, 900)}/{rng.randint(900, 2000)}), completed with {rng.randint(1, 40)} local objects.",
            lambda: f"   {hexs(7)}..{hexs(7)}  main -> main",
            lambda: f"Signed-off-by: {who().capitalize()} <{who()}@shop.test>",
        ],
        "UUIDs and request ids": [
            lambda: f"trace_id={hexs(32)} span_id={hexs(16)} sampled=1",
            lambda: f"  \"correlationId\": \"{uid()}\",",
            lambda: f"[{day()} {clock()}] INFO request {uid()} completed in {rng.randint(3, 900)}ms",
            lambda: f"X-Amzn-Trace-Id: Root=1-{hexs(8)}-{hexs(24)}",
            lambda: f"order_id: {uid()}",
            lambda: f"Idempotency-Key: {uid()}",
        ],
        "hashes and checksums": [
            lambda: f"{hexs(64)}  {svc()}-linux-amd64.tar.gz",
            lambda: f"      \"integrity\": \"sha512-{b64(64)}\",",
            lambda: f"sha1sum: {hexs(40)}",
            lambda: f"{svc()}==2.{rng.randint(0, 9)}.{rng.randint(0, 9)} --hash=sha256:{hexs(64)}",
            lambda: f"ETag: \"{hexs(32)}\"",
            lambda: f"go.sum: golang.org/x/text v0.{rng.randint(3, 20)}.0 h1:{b64(32)}",
        ],
        "base64 media and data": [
            lambda: f"<img alt=\"logo\" src=\"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA{b64(45)}\">",
            lambda: f"  background: url(data:image/gif;base64,R0lGODlhAQABAIAAA{b64(24)});",
            lambda: f"font/woff2;base64,d09GMgABAAAAA{b64(60)}",
            lambda: f"\"thumbnail\": \"/9j/4AAQSkZJRgABAQ{b64(42)}\"",
            lambda: f"Content-Transfer-Encoding: base64 (attachment invoice-{rng.randint(1000, 9999)}.pdf, {rng.randint(20, 900)} KB)",
        ],
        "documented placeholders": [
            "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            'OPENAI_API_KEY="<your-api-key>"',
            "export GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
            "STRIPE_SECRET_KEY=sk_test_your_key_here",
            'token: "${{ secrets.NPM_TOKEN }}"',
            "password: ${DB_PASSWORD:?set DB_PASSWORD first}",
            "api_key = \"REPLACE_WITH_YOUR_KEY\"",
            "Authorization: Bearer <token>",
            "SLACK_WEBHOOK_URL=https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        ],
        "code that handles secrets without holding them": [
            'api_key = os.environ["SHOP_API_KEY"]',
            'token := os.Getenv("GITHUB_TOKEN")',
            'const secret = process.env.JWT_SECRET ?? fail("JWT_SECRET is not set");',
            'password = getpass.getpass("Vault password: ")',
            'headers["Authorization"] = f"Bearer {token}"',
            "if not settings.STRIPE_KEY: raise ImproperlyConfigured(\"STRIPE_KEY missing\")",
            "let creds = Credentials::from_env().context(\"reading AWS credentials\")?;",
            "secret = client.access_secret_version(name=f\"{parent}/secrets/db-password/versions/latest\").payload.data",
            "echo \"::add-mask::$DEPLOY_TOKEN\"",
        ],
        "CLI output with ids": [
            lambda: f"    \"Account\": \"{pick(digits, 12)}\",",
            lambda: f"{svc()}-{hexs(10)}-{pick('bcdfghjklmnpqrstvwxz2456789', 5)}   1/1     Running   0          {rng.randint(1, 59)}m",
            lambda: f"{hexs(12)}   shop/{svc()}:latest   \"/entrypoint.sh\"   {rng.randint(2, 50)} minutes ago   Up {rng.randint(2, 50)} minutes",
            lambda: f"arn:aws:iam::{pick(digits, 12)}:role/{svc()}-task-role",
            lambda: f"i-{hexs(17)}  t3.medium  running  eu-central-1{rng.choice('abc')}",
            lambda: f"Created key pair {svc()}-ci (fingerprint {':'.join(hexs(2) for _ in range(16))})",
            lambda: f"Secret version {rng.randint(2, 40)} of projects/{pick(digits, 12)}/secrets/{svc()}-db-password created.",
        ],
        "prose about credentials": [
            "The scanner flagged the test fixture, but the value is a documented example key, so I left it.",
            "Rotate the token first, then remove it from history; rewriting history alone does not revoke anything.",
            "I moved the Stripe key to the secrets manager and the app now reads it at start-up.",
            "Never paste a private key into the chat; give me the path to the file and I will read it locally.",
            "The 401 means the token expired, not that it leaked; request a new one from the console.",
            "Tip: `git secrets --scan-history` walks every commit, so expect it to take a while on this repository.",
        ],
    }
    return draw_lines(rng, groups, per_template=5, least=30)


def main(credsweeper_dir: str) -> None:
    elsewhere = "\n".join(
        path.read_text(encoding="utf-8") for path in sorted(OUT.parent.glob("*/secrets.txt")) if path.parent != OUT
    )
    texts = sample_texts(credsweeper_dir)
    examples = first_per_value(credsweeper_examples(credsweeper_dir, texts, elsewhere))
    secrets, kinds, marked = placed_entries(examples, OUT, in_context, CONTEXT_VALUES)
    write_half(
        OUT,
        {"Samsung/CredSweeper": git(credsweeper_dir, "rev-parse", "HEAD").strip()},
        "MIT",
        secrets,
        kinds,
        [("CredSweeper negative samples, lines holding no reported value", negative_lines(credsweeper_dir, texts, reported_values(credsweeper_dir)))],
        lambda line: clean_fit(line) and not any(value in line for value in marked),
        drawn_lookalikes(random.Random(SEED)),
    )
    print("per kind:", ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))


if __name__ == "__main__":
    main(*sys.argv[1:2])
