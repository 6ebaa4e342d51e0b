"""Build the sixth report half (`report6/`) mechanically from one scanner's published rule examples.

    python benchmarks/redaction_corpus/build_report6.py TITUS_GIT_DIR NOSEYPARKER_GIT_DIR KINGFISHER_GIT_DIR

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 9, and its
output was committed without running the redactor on it. Source (Apache-2.0), read with `git show` at its HEAD:
- praetorian-inc/titus: `pkg/rule/rules/*.yml`. Titus's rules descend from Nosey Parker's and Kingfisher's, which
  report3 already drew on, so every example and negative example that either of them holds at the commits report3
  used (their git directories are the 2nd and 3rd arguments, checked against those commits) is left out: only the
  examples titus wrote or that those projects added later remain, and no value of another folder repeats.
Each credential rule's remaining `examples` are kept as written, the secret marked where the rule's own pattern
captures it (build_report3's marking: the password group of user/password rules, quotes left out, a webhook's path);
each kind's first values (up to CONTEXT_VALUES) are also placed in transcript contexts written for report6
(rotating over chat answers, service and deploy files, commands and code not used by earlier halves). Values that
read as placeholders (build_report3's test) are left out. Clean lines: the remaining negative examples holding no
key-like token (build_report5's test) and look-alikes drawn with a fixed seed from templates written for report6.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import regex

from build_report3 import NOT_CREDENTIALS, SKIPPED_RULES, existing_values, kind_of, load_rules, secret_spans
from build_report4 import Draw, Example, draw_lines, write_half
from build_report5 import KEY_LIKE
from build_report5 import in_context as report5_in_context
from build_report5 import secret_entries as report5_secret_entries

OUT = Path(__file__).resolve().parent / "report6"
TITUS_RULES = "pkg/rule/rules"
REPORT3_SOURCES = {
    "praetorian-inc/noseyparker": ("2e6e7f36ce36619852532bbe698d8cb7a26d2da7", "crates/noseyparker/data/default/builtin/rules"),
    "mongodb/kingfisher": ("ee7c0db3ef87575768f817820c24736249ffcdef", "data/rules"),
}
CONTEXT_VALUES = 2


def report3_texts(noseyparker_dir: str, kingfisher_dir: str) -> set[str]:
    """Every example and negative example of the rules report3 read, at the commits it read them."""
    texts: set[str] = set()
    for (name, (commit, folder)), git_dir in zip(REPORT3_SOURCES.items(), (noseyparker_dir, kingfisher_dir)):
        head, rules = load_rules(git_dir, folder)
        if head != commit:
            raise SystemExit(f"{name} must be checked out at {commit} (found {head})")
        for rule in rules:
            texts.update(text.strip() for text in [*(rule.get("examples") or []), *(rule.get("negative_examples") or [])])
    return texts


# Titus names its capture groups: these names hold a credential (others name hosts, ports, users, ids, paths).
CREDENTIAL_GROUPS = {
    "token", "key", "secret", "webhook", "password", "client_secret", "secret_key", "api_key", "account_key",
    "access_token", "access_key", "webhook_token", "token_secret", "session_token", "server_key", "rum_token",
    "mws_token", "device_token", "bearer_token", "appsync_key", "application_key",
}


def credential_rule(rule: dict) -> bool:
    """A rule describing a credential: not hidden, not named for an id or a host (build_report3's list has
    `Hostname` but not `Host`), not skipped by build_report3."""
    return (
        rule.get("visible", True) is not False
        and not NOT_CREDENTIALS.search(rule["name"])
        and not re.search(r"\bHost\b", rule["name"])
        and rule["id"] not in SKIPPED_RULES
    )


URL_CREDENTIALS = re.compile(r"://[^/\s:@]*:([^\s/]+)@[^@\s/]+")  # the password runs to the URL's last `@`
WEBHOOK_PATH = re.compile(r"https?://[^/\s]+/(?:hooks|webhooks?)/(\S+)")  # a webhook URL: its path is the secret
NAMED_CAPTURE = re.compile(r"[A-Za-z_]\w*[ \t]*:[ \t]+[\"']")  # `secure: "<value>`: the name is not the credential
USER_PASSWORD_ARGUMENT = re.compile(r"(?:-u|--user)\s+$")


def narrowed(text: str, span: tuple[int, int]) -> tuple[int, int]:
    """A capture holding a whole URL or a `user:password` argument narrowed to the password, a webhook URL to its
    path, a `name: "value` to the value (the convention)."""
    start, end = span
    if "://" in text[start:end] and (m := URL_CREDENTIALS.search(text, start)) and m.start() < end:
        return m.span(1)
    if m := WEBHOOK_PATH.match(text, start, end):
        return m.start(1), end
    if m := NAMED_CAPTURE.match(text, start, end):
        return m.end(), end
    if USER_PASSWORD_ARGUMENT.search(text[:start]) and ":" in text[start:end]:
        return text.index(":", start) + 1, end
    return span


def credential_groups(pattern: regex.Pattern) -> tuple[int, ...]:
    """The named groups holding the credential (a user/password/host rule marks its password, not its host)."""
    return tuple(sorted(index for name, index in pattern.groupindex.items() if name in CREDENTIAL_GROUPS))


def titus_examples(rules: list[dict], seen: set[str]) -> tuple[list[Example], list[str]]:
    """(kind, example, spans, path) per example not in `seen`; the unseen negative examples' lines."""
    examples, negatives = [], []
    for rule in rules:
        if not credential_rule(rule):
            continue
        pattern = regex.compile(rule["pattern"])
        for example in rule.get("examples") or []:
            if example.strip() in seen:
                continue
            if spans := secret_spans(rule, pattern, example, credential_groups(pattern)):
                spans = sorted({narrowed(example, span) for span in spans})
                examples.append((kind_of(rule), example.rstrip("\n"), spans, f"{rule['path']} ({rule['id']})"))
        for negative in rule.get("negative_examples") or []:
            if negative.strip() not in seen:
                negatives += negative.splitlines()
    return examples, negatives


CONTEXTS = (
    "Found it: the {name} in the old wiki page is {value}; I'll revoke it once the new one is deployed.",
    "<<<\n[Service]\nEnvironment=\"{env}={value}\"\nExecStart=/usr/local/bin/worker\n>>>",
    "<<<\nworker:\n  image: acme/worker:2.1\n  extraEnv:\n    {env}: {value}\n>>>",
    "aws ssm put-parameter --name /prod/{lower} --type SecureString --value {value} --overwrite",
    'os.environ.setdefault("{env}", "{value}")',
    "<<<\n    environment:\n      - {env}={value}\n      - TZ=UTC\n>>>",
    'pub const {env}: &str = "{value}";',
    "{env} ?= {value}",
    "<<<\n- hosts: workers\n  vars:\n    {lower}: {value}\n>>>",
    'INFO 2026-03-02T10:15:04Z config loaded {{"service": "ingest", "{lower}": "{value}"}}',
    'curl -X POST https://api.example.org/v1/jobs -d \'{{"{lower}": "{value}", "dry_run": true}}\'',
    "The tests were failing because `{env}` was unset; exporting `{env}={value}` fixed them locally.",
    "<<<\n@pytest.fixture\ndef client():\n    return Client({lower}=\"{value}\")\n>>>",
    "fly secrets set {env}={value} -a checkout-api",
)


def in_context(kind: str, value: str, index: int) -> str:
    return report5_in_context(kind, value, index, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report6."""
    draw = Draw(rng)
    hexs, uid, b64, pick = draw.hexs, draw.uid, draw.b64, draw.pick
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

    def vendor() -> str:
        return rng.choice(["deepgram", "mistral", "replicate", "vercel", "grafana", "sendgrid", "cohere", "zendesk"])

    groups: dict[str, list] = {
        "references and empty values under key names": [
            lambda: f"{vendor().upper()}_API_KEY=${{{{ secrets.{vendor().upper()}_API_KEY }}}}",
            lambda: f'Environment="{vendor().upper()}_TOKEN=%{vendor()}_token%"',
            lambda: f"{vendor()}_api_key: {{{{ lookup('env', '{vendor().upper()}_API_KEY') }}}}",
            lambda: f'client = {vendor().capitalize()}(api_key=os.environ["{vendor().upper()}_API_KEY"])',
            lambda: f"aws ssm get-parameter --name /prod/{vendor()}_api_key --with-decryption",
            lambda: f"fly secrets unset {vendor().upper()}_API_KEY -a checkout-api",
            lambda: f"{vendor().upper()}_API_KEY=        # ask the platform team",
            lambda: f'    {vendor()}_token: "<set-me>"',
        ],
        "build, package and VCS output": [
            lambda: f"remote: Resolving deltas: 100% ({rng.randint(10, 900)}/{rng.randint(900, 999)}), done. {hexs(7)}..{hexs(7)}  main -> main",
            lambda: f"#12 writing image sha256:{hexs(64)} done",
            lambda: f"  \"sha512\": \"{b64(64)}\",",
            lambda: f"Fetched {rng.randint(2, 90)} MB in {rng.randint(1, 9)}s, checksum {hexs(40)}",
            lambda: f"go: downloading example.org/lib v1.{rng.randint(0, 9)}.{rng.randint(0, 9)}-0.20260101{rng.randint(100000, 999999)}-{hexs(12)}",
            lambda: f"HEAD is now at {hexs(7)} Rotate the staging key reference",
        ],
        "ids, hashes and media": [
            lambda: f"X-Request-Id: {uid()}",
            lambda: f"cache key: v2-deps-{hexs(40)}",
            lambda: f"<link rel=\"preload\" href=\"/assets/app.{hexs(8)}.js\" integrity=\"sha256-{b64(32)}\">",
            lambda: f"background: url(data:image/gif;base64,R0lGODlh{b64(45)});",
            lambda: f"trace_id={hexs(32)} span_id={hexs(16)}",
            lambda: f"Created pull request #{rng.randint(100, 9999)} from branch fix/{pick('abcdefghijklmnopqrstuvwxyz', 8)}",
            lambda: f"subnet-{hexs(17)} sg-{hexs(17)} vpc-{hexs(17)}",
        ],
        "code and prose that handle keys": [
            "if not api_key.startswith((\"sk-\", \"pk-\")): raise ValueError(\"unexpected key prefix\")",
            "const token = await secrets.get(\"deepgram/api-key\");",
            "Rotate the Replicate token every 90 days; the old one stays valid for an hour.",
            "redacted = re.sub(r\"(api_key=)[^&]+\", r\"\\1***\", url)",
            "Keys look like `mistral_` followed by 32 characters; never paste one into a ticket.",
            "func LoadToken() (string, error) { return os.Getenv(\"VERCEL_TOKEN\"), nil }",
            "The Grafana service account token lives in the team vault under grafana/ci.",
            "headers[\"Authorization\"] = f\"Bearer {self._token}\"",
        ],
        "hosts and URLs without credentials": [
            lambda: f"https://api.deepgram.com/v1/listen?model=nova-{rng.randint(2, 3)}&smart_format=true",
            lambda: f"https://{pick('abcdefghijklmnopqrstuvwxyz', 8)}.grafana.net/d/{pick(alnum, 9)}/overview",
            lambda: f"https://vercel.com/acme/web/deployments/{pick(alnum, 9)}",
            lambda: f"wss://stream.example.org/socket?room={rng.randint(1000, 9999)}",
        ],
    }
    return draw_lines(rng, groups, per_template=2, least=20)


def main(titus_dir: str, noseyparker_dir: str, kingfisher_dir: str) -> None:
    commit, rules = load_rules(titus_dir, TITUS_RULES)
    examples, negatives = titus_examples(rules, report3_texts(noseyparker_dir, kingfisher_dir))
    secrets, kinds = report5_secret_entries(examples, existing_values(OUT.parent, "report6"), in_context, CONTEXT_VALUES)
    write_half(
        OUT,
        {"praetorian-inc/titus": commit},
        "Apache-2.0",
        secrets,
        kinds,
        [(f"titus negative examples not in report3's sources, holding no key-like token (titus@{commit})", negatives)],
        lambda line: not KEY_LIKE.search(line) and line not in {"<<<", ">>>"},
        drawn_lookalikes(random.Random(6066)),
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])
