"""Build the third report half (`report3/`) mechanically from two scanners' published rule examples.

    python benchmarks/redaction_corpus/build_report3.py NOSEYPARKER_GIT_DIR KINGFISHER_GIT_DIR

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change, and its output was
committed without running the redactor on it. Sources (both Apache-2.0), read with `git show` at fixed commits:
- praetorian-inc/noseyparker: `crates/noseyparker/data/default/builtin/rules/*.yml`;
- mongodb/kingfisher: `data/rules/*.yml` (a fixed-seed sample of vendors Nosey Parker has no rule for).
Each credential rule's `examples` are kept as written, the secret marked where the rule's own pattern captures it,
and its first value is also placed in one transcript context (prose, shell, env, JSON, YAML, table, URL, header,
docker, .env block), rotating. Values that read as placeholders are left out of both files. Clean lines are the
rules' `negative_examples` that hold no credential (chosen by reading them, listed in NEGATIVES_KEPT) and look-alikes
drawn with a fixed seed (git SHAs, UUIDs, digests, base64 images, documented placeholders, code).
"""

from __future__ import annotations

import base64
import hashlib
import random
import re
import subprocess
import sys
import uuid
from pathlib import Path

import regex
import yaml

OUT = Path(__file__).resolve().parent / "report3"
NOSEYPARKER_RULES = "crates/noseyparker/data/default/builtin/rules"
KINGFISHER_RULES = "data/rules"
KINGFISHER_SAMPLE = 70
NOT_CREDENTIALS = re.compile(
    r"\bID\b(?<!Key ID)|Identifier|Username|Domain|Bucket|Resource Name|Recipient|Public Access Token|Password Hash|"
    r"Crumb|Search URL|Hostname|Email|Account Name|Region|Project",
    re.IGNORECASE,
)
# Rules with several capture groups: which groups hold the credential (default: the last group that matched).
SECRET_GROUPS = {"np.mongodb.1": (2,), "np.postgres.1": (2,), "kingfisher.blynk.9": (2,), "np.aws.6": (1, 2)}
# Rules whose examples cannot be marked by a capture group (a whole URL or connection string) or match nothing.
SKIPPED_RULES = {
    "np.generic.10", "kingfisher.generic.8", "kingfisher.credentials.1", "kingfisher.twitter.v2.1", "kingfisher.uri.1",
    "kingfisher.youtube.1", "kingfisher.privkey.1", "kingfisher.privkey.2",
    "kingfisher.weak_password.1",  # bare words such as `password123` on a line of their own: nothing marks them
}
# negative_examples read one by one: those holding no credential (others hold a real-looking key the rule rejects
# for its own reasons, e.g. length, and a transcript redactor should still redact them).
NEGATIVES_KEPT = {
    "np.aws.1": (0, 1, 2, 3, 4), "np.aws.2": (1, 2, 3), "np.s3.1": (0, 1), "np.s3.2": (0, 1, 2),
    "np.azure.1": (0, 1, 2, 3, 4, 5, 6, 7), "np.azure.2": (0,), "np.databricks.1": (0,), "np.generic.2": (0,),
    "np.generic.3": (0, 1, 2), "np.generic.4": (1,), "np.generic.5": (4, 6, 7, 8, 9, 10, 11, 12, 13),
    "np.generic.6": (0, 1, 2), "np.gcs.1": (0,), "np.gcs.2": (0, 1), "np.hashicorp.1": (1, 2, 3),
    "np.hashicorp.2": (1,), "np.hashicorp.3": (1,), "np.heroku.1": (0,), "np.jenkins.1": (0,), "np.jwt.1": (0,),
    "np.kubernetes.1": (0,), "np.newrelic.1": (0,), "np.newrelic.2": (1,), "np.odbc.1": (0, 1, 2, 4, 5, 6),
    "np.okta.1": (0, 1), "np.reactapp.1": (0,), "np.reactapp.2": (0, 1), "np.sonarqube.1": (0, 1, 2, 3),
    "np.twitch.1": (2,), "kingfisher.odbc.1": (0, 1, 2, 4, 5, 6), "kingfisher.rabbitmq.1": (0, 1),
}
QUOTES = "\"'\\`"
# A capture that is a whole webhook URL (Slack, Microsoft Teams) is marked from its secret path on, as the corpus
# convention says (fixed after version 6's measurement; report3/secrets.txt was re-marked the same way).
WEBHOOK_URL = re.compile(r"https?://[^/\s]+/(?:services|webhook|webhookb2)/(?P<path>\S+)")  # a capture that includes its quotes is marked without them
PLACEHOLDER_WORDS = {"password", "passwd", "secret", "changeme", "mypass", "pass123", "admin", "root", "example", "token"}


def is_placeholder(value: str) -> bool:
    """Typed-out alphabets and digit runs, repeated characters, variables and words: not credentials."""
    lowered = value.lower()
    letters, digits = re.sub(r"[^a-z]", "", lowered), re.sub(r"[^0-9]", "", lowered)
    runs = ("abcdefghijklmnopqrstuvwxyz", 5), ("zyxwvutsrqponmlkjihgfedcba", 5), ("0123456789", 6), ("9876543210", 6)
    return (
        len(value) < 6
        or value.endswith(":")
        or any(run[i : i + size] in text for run, size in runs for text in (lowered, letters, digits) for i in range(len(run) - size + 1))
        or re.fullmatch(r"[a-z_]*(password|passwd|secret|token|key)[a-z_]*", lowered) is not None
        or re.search(r"(.)\1{5}|(.{4,}).*\2.*\2", value) is not None
        or re.search(r"x{4}|xyz|deadbeef|example|your|placeholder|sample|dummy|fake|\$|\{|<|%\w+%", lowered) is not None
        or lowered.strip("'\"") in PLACEHOLDER_WORDS
    )


def git_files(git_dir: str, folder: str) -> tuple[str, dict[str, str]]:
    commit = subprocess.run(["git", "-C", git_dir, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    names = subprocess.run(["git", "-C", git_dir, "ls-tree", "--name-only", f"HEAD:{folder}"], capture_output=True, text=True, check=True).stdout.split()
    files = {}
    for name in sorted(names):
        if name.endswith(".yml"):
            files[f"{folder}/{name}"] = subprocess.run(["git", "-C", git_dir, "show", f"HEAD:{folder}/{name}"], capture_output=True, text=True, check=True).stdout
    return commit, files


def load_rules(git_dir: str, folder: str) -> tuple[str, list[dict]]:
    commit, files = git_files(git_dir, folder)
    rules = []
    for path, text in files.items():
        for rule in yaml.safe_load(text).get("rules") or []:
            rules.append(rule | {"path": path})
    return commit, rules


def kind_of(rule: dict) -> str:
    return re.sub(r"[^a-z0-9]+", "-", rule["name"].lower()).strip("-")


def secret_spans(rule: dict, pattern: regex.Pattern, text: str, chosen: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """The credential's spans: the `chosen` groups, else the rule's SECRET_GROUPS, else the last group that matched."""
    spans = []
    for m in pattern.finditer(text):
        groups = chosen or SECRET_GROUPS.get(rule["id"]) or ([max(i for i in range(1, pattern.groups + 1) if m.group(i) is not None)] if any(m.groups()) else [])
        for group in groups:
            if m.group(group) is None:
                continue
            start, end = m.span(group)
            while start < end and text[start] in QUOTES:
                start += 1
            while end > start and text[end - 1] in QUOTES:
                end -= 1
            if webhook := WEBHOOK_URL.match(text, start, end):  # the credential is the path, not the host
                start = webhook.start("path")
            if not is_placeholder(text[start:end]):
                spans.append((start, end))
    return sorted(set(spans))


def mark(text: str, kind: str, spans: list[tuple[int, int]]) -> str:
    out, position = [], 0
    for start, end in spans:
        if start < position:
            continue
        out += [text[position:start], f"⟦{kind}:{text[start:end]}⟧"]
        position = end
    return "".join(out) + text[position:]


def as_entry(text: str) -> str:
    text = text.rstrip("\n")
    return f"<<<\n{text}\n>>>" if "\n" in text else text


CONTEXTS = (
    "I rotated the {name} this morning; the new one is {value} and it is already in the CI settings.",
    "export {env}={value}",
    'curl -sS -H "Authorization: Bearer {value}" https://api.internal.example.net/v1/status',
    '{{"{lower}": "{value}", "timeout_seconds": 30, "retries": 3}}',
    "<<<\nservice:\n  name: ingest-worker\n  {lower}: \"{value}\"\n  replicas: 2\n>>>",
    "| {name} | {value} | production | rotated 2024-11-02 |",
    "https://hooks.internal.example.net/ingest?source=ci&{lower}={value}&retry=1",
    "X-Api-Key: {value}",
    "docker run --rm -e {env}={value} ghcr.io/acme/worker:1.4.2",
    "<<<\nAPP_ENV=production\n{env}={value}\nLOG_LEVEL=info\n>>>",
    "python deploy.py --region eu-west-1 --{lower_dash} {value} --dry-run",
    "Sure, I added it to settings.py: `{env} = \"{value}\"`, then restarted the dev server.",
)


def in_context(rule: dict, kind: str, value: str, index: int) -> str:
    env = re.sub(r"[^A-Z0-9]+", "_", rule["name"].upper()).strip("_")
    template = CONTEXTS[index % len(CONTEXTS)]
    marked = f"⟦{kind}:{value}⟧"
    return template.format(name=rule["name"], env=env, lower=env.lower(), lower_dash=env.lower().replace("_", "-"), value=marked)


def secret_entries(rules: list[tuple[str, str, dict]], used_values: set[str]) -> tuple[list[str], dict[str, int]]:
    """Per source file, a `## ---` header then each rule's examples and one context entry."""
    lines: list[str] = []
    kinds: dict[str, int] = {}
    seen_examples: set[str] = set()
    context_index = 0
    for source, commit, rule in rules:
        pattern = regex.compile(rule["pattern"])
        kind = kind_of(rule)
        block: list[str] = []
        first_value = None
        for example in rule.get("examples") or []:
            if example in seen_examples:
                continue
            seen_examples.add(example)
            spans = [span for span in secret_spans(rule, pattern, example) if example[span[0] : span[1]] not in used_values]
            if not spans or "⟦" in example or "⟧" in example:
                continue
            block.append(as_entry(mark(example, kind, spans)))
            kinds[kind] = kinds.get(kind, 0) + len(spans)
            first_value = first_value or example[spans[0][0] : spans[0][1]]
        if first_value and "\n" not in first_value:
            block.append(in_context(rule, kind, first_value, context_index))
            kinds[kind] += 1
            context_index += 1
        if block:
            lines += ["", f"## --- {kind}  (source: {source} {rule['path']}, rule {rule['id']}, examples literal + one context)", *block]
    return lines, kinds


def negative_lines(rules: list[tuple[str, str, dict]]) -> list[str]:
    lines: list[str] = []
    for _source, _commit, rule in rules:
        for index in NEGATIVES_KEPT.get(rule["id"], ()):
            for line in rule["negative_examples"][index].splitlines():
                if line.strip() and not line.startswith("## ") and line not in lines:
                    lines.append(line)
    return lines


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed: each category a few templates over random values."""
    def hexs(n: int) -> str:
        return "".join(rng.choice("0123456789abcdef") for _ in range(n))

    def uid() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    def png_base64(n: int) -> str:
        raw = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(rng.getrandbits(8) for _ in range(n))
        return base64.b64encode(raw).decode()

    def sha512_integrity() -> str:
        return "sha512-" + base64.b64encode(hashlib.sha512(hexs(16).encode()).digest()).decode()

    groups: dict[str, list] = {
        "git SHAs and refs": [
            lambda: f"commit {hexs(40)}",
            lambda: f"Merge: {hexs(7)} {hexs(7)}",
            lambda: f"HEAD is now at {hexs(7)} Fix flaky retry test in the uploader",
            lambda: f"git cherry-pick {hexs(40)}",
            lambda: f'  "sha": "{hexs(40)}",',
            lambda: f"[main {hexs(7)}] Bump version to 2.{rng.randint(0, 9)}.{rng.randint(0, 20)}",
            lambda: f"{hexs(40)}\trefs/heads/release/{rng.randint(1, 9)}.x",
            lambda: f"Submodule path 'vendor/lib': checked out '{hexs(40)}'",
        ],
        "UUIDs and request ids": [
            lambda: f"request_id={uid()} status=200 duration_ms={rng.randint(3, 900)}",
            lambda: f'  "id": "{uid()}",',
            lambda: f"Trace ID: {uid()}",
            lambda: f"| {uid()} | running | 3/3 |",
            lambda: f"az group show --subscription {uid()} --name rg-prod",
            lambda: f"INFO  job {uid()} finished in {rng.randint(1, 60)}s",
        ],
        "digests and checksums": [
            lambda: f"{hexs(64)}  dist/app-{rng.randint(1, 9)}.{rng.randint(0, 9)}.0.tar.gz",
            lambda: f"docker pull ghcr.io/acme/api@sha256:{hexs(64)}",
            lambda: f"md5: {hexs(32)}",
            lambda: f'      "integrity": "{sha512_integrity()}",',
            lambda: f'ETag: "{hexs(32)}"',
            lambda: f"Digest: sha256:{hexs(64)}",
            lambda: f"sha1sum: {hexs(40)}  setup.exe",
            lambda: f"  resolved \"https://registry.yarnpkg.com/left-pad/-/left-pad-1.3.0.tgz#{hexs(40)}\"",
        ],
        "base64 images and data": [
            lambda: f'<img src="data:image/png;base64,{png_base64(90)}" alt="logo">',
            lambda: f"background: url(data:image/png;base64,{png_base64(60)});",
            lambda: f'"thumbnail": "data:image/png;base64,{png_base64(120)}"',
        ],
        "documented placeholders": [
                "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
                "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "export OPENAI_API_KEY=<your-api-key>",
                'GITHUB_TOKEN="${{ secrets.GITHUB_TOKEN }}"',
                "api_key: YOUR_API_KEY_HERE",
                "Authorization: Bearer <token>",
                "STRIPE_SECRET_KEY=sk_live_...",
                "password: ********",
                "DATABASE_URL=postgres://user:<password>@localhost:5432/app",
                "token = os.environ[\"SLACK_BOT_TOKEN\"]",
        ],
        "code and prose about secrets": [
                "password = getpass.getpass(\"Password: \")",
                "api_key = settings.API_KEY",
                "if not token: raise RuntimeError(\"set GITLAB_TOKEN first\")",
                "The token expires after 90 days, so rotate it before the release.",
                "const secret = process.env.JWT_SECRET ?? fail(\"JWT_SECRET missing\");",
                "Use `gh auth login` instead of pasting a personal access token.",
                "def rotate_key(client, key_id: str) -> None:",
                "kubectl get secret db-credentials -o jsonpath='{.data.password}' | base64 -d",
                "We store the API key in Vault under secret/data/ci/deploy.",
                "password_hash = bcrypt.hashpw(password.encode(), bcrypt.gensalt())",
                "headers = {\"Authorization\": f\"Bearer {token}\"}",
                "ssh-keygen -t ed25519 -C \"ci@example.com\" -f ~/.ssh/deploy_key",
        ],
        "ids, versions and logs": [
            lambda: f"i-{hexs(17)} t3.medium running eu-west-1b",
            lambda: f"arn:aws:lambda:eu-west-1:{rng.randint(10**11, 10**12 - 1)}:function:thumbnailer",
            lambda: f"Successfully built {hexs(12)}",
            lambda: f"pid={rng.randint(100, 99999)} level=info msg=\"cache hit\" key=user:{rng.randint(1, 99999)}",
            lambda: f"session {hexs(16)} closed after {rng.randint(1, 300)} messages",
            lambda: f"npm notice shasum: {hexs(40)}",
        ],
    }
    lines: list[str] = []
    for category, makers in groups.items():
        lines.append(f"## --- drawn look-alikes: {category}")
        if all(isinstance(maker, str) for maker in makers):
            lines += makers
            continue
        drawn: list[str] = []
        while len(drawn) < max(len(makers) * 4, 18):
            line = rng.choice(makers)()
            if line not in drawn:
                drawn.append(line)
        lines += drawn
    return lines


def existing_clean_lines(corpus: Path, built: str = "report3") -> set[str]:
    """Every clean line of the other folders than the one being built."""
    return {line for path in corpus.glob("*/clean.txt") if path.parent.name != built for line in path.read_text(encoding="utf-8").splitlines()}


def existing_values(corpus: Path, built: str = "report3") -> set[str]:
    """Every marked value of the other folders, so no secret of the folder being built repeats one."""
    marker = re.compile(r"⟦[a-z0-9-]+:([^⟧]+)⟧")
    return {m.group(1) for path in corpus.glob("*/secrets.txt") if path.parent.name != built for m in marker.finditer(path.read_text(encoding="utf-8"))}


def main(noseyparker_dir: str, kingfisher_dir: str) -> None:
    np_commit, np_rules = load_rules(noseyparker_dir, NOSEYPARKER_RULES)
    kf_commit, kf_rules = load_rules(kingfisher_dir, KINGFISHER_RULES)

    def credential(rule: dict) -> bool:
        return rule.get("visible", True) is not False and not NOT_CREDENTIALS.search(rule["name"]) and rule["id"] not in SKIPPED_RULES

    np_vendors = {rule["id"].split(".")[1] for rule in np_rules}
    kf_new = [rule for rule in kf_rules if credential(rule) and rule["id"].split(".")[1] not in np_vendors]
    rng = random.Random(20261124)
    kf_sample = sorted(rng.sample(kf_new, KINGFISHER_SAMPLE), key=lambda rule: rule["id"])
    chosen = [("praetorian-inc/noseyparker", np_commit, r) for r in np_rules if credential(r)]
    chosen += [("mongodb/kingfisher", kf_commit, r) for r in kf_sample]
    secrets, kinds = secret_entries(chosen, existing_values(OUT.parent))
    negatives = negative_lines([("praetorian-inc/noseyparker", np_commit, r) for r in np_rules] + [("mongodb/kingfisher", kf_commit, r) for r in kf_rules])
    header = (
        f"## REPORT3 half, secrets: built by build_report3.py from praetorian-inc/noseyparker@{np_commit} and\n"
        f"## mongodb/kingfisher@{kf_commit} (both Apache-2.0). Never tuned on. {sum(kinds.values())} secrets, {len(kinds)} kinds."
    )
    OUT.mkdir(exist_ok=True)
    (OUT / "secrets.txt").write_text(header + "\n" + "\n".join(secrets) + "\n", encoding="utf-8")
    seen_elsewhere = existing_clean_lines(OUT.parent)
    clean = [
        "## REPORT3 half, clean look-alikes: must come out of redact() unchanged. Never tuned on.",
        f"## --- scanner negative examples holding no credential (noseyparker@{np_commit}, kingfisher@{kf_commit}, negative_examples)",
        *(line for line in [*negatives, *drawn_lookalikes(random.Random(316))] if line not in seen_elsewhere),
    ]
    (OUT / "clean.txt").write_text("\n".join(clean) + "\n", encoding="utf-8")
    print(f"{sum(kinds.values())} secrets of {len(kinds)} kinds; {sum(1 for line in clean if not line.startswith('## '))} clean lines")


if __name__ == "__main__":
    main(*sys.argv[1:3])
