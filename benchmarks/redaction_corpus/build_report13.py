"""Build the thirteenth report half (`report13/`) mechanically from published test data of credential tools.

    python benchmarks/redaction_corpus/build_report13.py SHELL_PLUGINS AGE SOPS GOLANG_CRYPTO

(each argument a git directory of that project: 1Password/shell-plugins, FiloSottile/age, getsops/sops,
golang/crypto).

Kept so that the half can be rebuilt and audited: it was run beside version 19's rules, and its output was written
without running the redactor on it. Sources, read with `git show`:
- 1Password/shell-plugins (MIT): per plugin (`plugins/<name>/`), its credential types declare which fields are
  secret (`Secret: true`); its importer tests name the values the importer must find in those fields
  (`fieldname.<Field>: "<value>"` in an expected candidate). Those values are marked wherever the plugin's tests and
  test fixtures hold them (the environment variables and config files the importer reads); kind = plugin and field
  in kebab case. Fixture lines holding none of them and assigning no credential-named key are clean candidates.
- FiloSottile/age (BSD-3-Clause), getsops/sops (MPL-2.0), golang/crypto (BSD-3-Clause): keys whose own format says
  they are private, in any text file (tests, test data, docs): age identities (`AGE-SECRET-KEY-1…`, marked in their
  line), armored PGP private key blocks and PEM private key blocks (marked whole; kind from the header).
Values are left out when build_report11's test rejects them (placeholders, short words, code references), when they
hold the word `example` (the plugins' documented example keys, `…EXAMPLE`), or when they are already in other
folders. Of the examples holding the same values of a kind, the first 2 are kept. Each kind's first values (up to
CONTEXT_VALUES, single-line only) are also placed in transcript contexts written for report13, rotating. Clean
lines: the candidates above holding no key-like token (build_report5's test via build_report10's clean_fit) and no
value this half marks, then look-alikes drawn with a fixed seed from templates written for report13.
"""

from __future__ import annotations

import random
import re
import sys
from functools import partial
from pathlib import Path

from build_report4 import Draw, Example, draw_lines, git, kebab, write_half
from build_report8 import lines_around
from build_report9 import merged
from build_report10 import clean_fit, fill_context, first_per_value, kind_name
from build_report11 import kept_value, placed_entries
from build_report12 import CREDENTIAL_KEY, KEY_OF_LINE

OUT = Path(__file__).resolve().parent / "report13"
SEED = 13130
CONTEXT_VALUES = 2
PLUGINS = "plugins"
SECRET_FIELD = re.compile(r"Name:\s*fieldname\.(\w+),(?:(?!Name:).)*?Secret:\s*true", re.S)
AGE_SECRET_KEY = re.compile(r"AGE-SECRET-KEY-1[02-9AC-HJ-NP-Z]{58}")
PGP_PRIVATE_KEY = re.compile(r"-----BEGIN PGP PRIVATE KEY BLOCK-----\n.*?\n-----END PGP PRIVATE KEY BLOCK-----", re.S)
PEM_PRIVATE_KEY = re.compile(r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY)-----\n(?:[A-Za-z0-9+/=:, -]*\n)*?-----END \1-----")
EXAMPLE_WORD = re.compile(r"(?i)example")
FIELD_VALUE = re.compile(r'fieldname\.(\w+):\s*"((?:[^"\\]|\\.)+)"')


def show(git_dir: str, path: str) -> str:
    return git(git_dir, "show", f"HEAD:{path}")


def plugin_files(git_dir: str) -> dict[str, list[str]]:
    """plugin folder -> its files (`plugins/<name>/...`)."""
    files: dict[str, list[str]] = {}
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD", PLUGINS).splitlines():
        parts = path.split("/")
        if len(parts) >= 3:
            files.setdefault(parts[1], []).append(path)
    return files


def shell_plugin_examples(git_dir: str) -> tuple[list[Example], list[str]]:
    """Per plugin: the fields its credential types declare `Secret: true`; the values its tests expect the importer to
    find in those fields (`fieldname.<Field>: "<value>"` in an expected candidate) are secrets, marked in every line
    of the plugin's tests and test fixtures that holds them (quoted in Go, as is in a fixture). Kind = plugin and
    field in kebab case. Fixture lines holding no such value and assigning no credential-named key (build_report12's
    CREDENTIAL_KEY) are clean candidates."""
    examples: list[Example] = []
    negatives: list[str] = []
    for plugin, paths in sorted(plugin_files(git_dir).items()):
        code = "\n".join(show(git_dir, p) for p in paths if p.endswith(".go") and not p.endswith("_test.go"))
        fields = set(SECRET_FIELD.findall(code))
        tests = {p: show(git_dir, p) for p in paths if p.endswith("_test.go")}
        fixtures = {p: show(git_dir, p) for p in paths if "/test-fixtures/" in p}
        values: dict[str, str] = {}
        for text in tests.values():
            for m in FIELD_VALUE.finditer(text):
                if m.group(1) in fields and "\\" not in m.group(2):
                    values.setdefault(m.group(2), f"{plugin}-{kebab(m.group(1))}")
        kept = {value: kind for value, kind in values.items() if kept_value(value) and not EXAMPLE_WORD.search(value)}
        for path, text in [*tests.items(), *fixtures.items()]:
            for line in text.splitlines():
                found = False
                for value in values:
                    needle = f'"{value}"' if path.endswith(".go") else value
                    at = line.find(needle)
                    if at < 0:
                        continue
                    found = True
                    start = at + (1 if path.endswith(".go") else 0)
                    if value in kept:
                        examples.append((kept[value], line, [(start, start + len(value))], f"shell-plugins {path}"))
                key = KEY_OF_LINE.match(line)
                if path in fixtures and not found and not (key and CREDENTIAL_KEY.search(key.group(1))):
                    negatives.append(line)
    return merged(examples), negatives


def key_format_examples(git_dir: str, source: str) -> list[Example]:
    """Keys whose format says they are private: an age identity (`AGE-SECRET-KEY-1…`, marked in its line), an
    armored PGP private key block and a PEM private key block (marked whole; kind from its header), in any text file
    of the repository."""
    examples: list[Example] = []
    for path in git(git_dir, "ls-tree", "-r", "--name-only", "HEAD").splitlines():
        try:
            text = show(git_dir, path)
        except Exception:  # a file `git show` cannot give as text
            continue
        if "\0" in text:
            continue
        for m in AGE_SECRET_KEY.finditer(text):
            if kept_value(m.group()):
                line, span = lines_around(text, *m.span())
                examples.append(("age-secret-key", line, [span], f"{source} {path}"))
        for m in PGP_PRIVATE_KEY.finditer(text):
            examples.append(("pgp-private-key", m.group(), [(0, len(m.group()))], f"{source} {path}"))
        for m in PEM_PRIVATE_KEY.finditer(text):
            if kept_value(m.group()):
                examples.append((kind_name(m.group(1)), m.group(), [(0, len(m.group()))], f"{source} {path}"))
    return examples


CONTEXTS = (
    "<<<\n$ kubectl get secret app-env -o yaml | grep {lower}\n  {lower}: (base64)\nuser: I decoded it by hand with base64 -d, it is {value}\n>>>",
    "<<<\n$ vault kv get secret/ci/{dashed}\n====== Data ======\nKey      Value\n---      -----\n{lower}    {value}\n>>>",
    "<<<\n# ~/.s3cfg\n[default]\nhost_base = s3.acme.test\n{lower} = {value}\nuse_https = True\n>>>",
    '<<<\n// ~/.docker/config.json (excerpt)\n{{\n  "auths": {{ "registry.acme.test": {{ "{camel}": "{value}" }} }}\n}}\n>>>',
    "origin\thttps://ci-bot:{value}@git.acme.test/platform/api.git (fetch)",
    "<<<\n# settings.py\nDATABASES = {{'default': {{'ENGINE': 'django.db.backends.postgresql', 'NAME': 'shop'}}}}\n{env} = '{value}'\nDEBUG = False\n>>>",
    "<<<\n// wp-config.php\ndefine( 'DB_NAME', 'blog' );\ndefine( '{env}', '{value}' );\n>>>",
    "<<<\n$ heroku config -a acme-api\n=== acme-api Config Vars\n{env}: {value}\nWEB_CONCURRENCY: 2\n>>>",
    "<<<\n$ doppler secrets --project api --config prd\n┌────────────┬──────────────┐\n│ NAME       │ VALUE        │\n│ {env} │ {value} │\n└────────────┴──────────────┘\n>>>",
    '<<<\n# prod.auto.tfvars\nregion = "eu-west-1"\n{lower} = "{value}"\n>>>',
    'firebase functions:config:set acme.{lower}="{value}"',
    '{{"tool": "http_request", "arguments": {{"url": "https://api.acme.test/v2/sync", "headers": {{"{camel}": "{value}"}}}}}}',
    "<<<\n[ci] 2026-03-02T10:14:07Z printenv (debug step)\n[ci] HOME=/home/runner\n[ci] {env}={value}\n[ci] CI=true\n>>>",
    "user: my teammate pasted the {name} in the PR description: {value} — should we rotate it?",
)


in_context = partial(fill_context, CONTEXTS)


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report13."""
    hexs, uid, b64, pick = (getattr(Draw(rng), name) for name in ("hexs", "uid", "b64", "pick"))
    upper, lower, digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz", "0123456789"
    app = partial(rng.choice, ["billing", "search", "webhooks", "ledger", "media", "notifier", "gateway"])
    day = lambda: f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"  # noqa: E731

    groups: dict[str, list] = {
        "CLI output without values": [
            lambda: f"secret/{app()}-env created (type Opaque, {rng.randint(1, 9)} data keys)",
            lambda: f"created_time       {day()}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
            lambda: f"Setting config vars and restarting acme-{app()}... done, v{rng.randint(10, 400)}",
            lambda: f"✔ Functions config updated for project acme-{app()} ({rng.randint(1, 9)} keys)",
            lambda: f"Login Succeeded (registry.acme.test, credential helper: {rng.choice(['osxkeychain', 'pass', 'secretservice'])})",
            lambda: f"Plan: {rng.randint(0, 9)} to add, {rng.randint(0, 9)} to change, {rng.randint(0, 3)} to destroy.",
        ],
        "ids and settings under key-like names": [
            lambda: f"secret_name = \"{app()}-db-credentials\"",
            lambda: f"token_expiry_minutes: {rng.choice([15, 30, 60, 120])}",
            lambda: f"  \"credsStore\": \"{rng.choice(['desktop', 'osxkeychain', 'pass'])}\",",
            lambda: f"DOPPLER_CONFIG=prd_{app()} DOPPLER_PROJECT={app()}",
            lambda: f"password_reset_timeout = {rng.choice([3600, 86400, 259200])}",
            lambda: f"api_key_id = \"{uid()}\"",
        ],
        "hashes and fingerprints": [
            lambda: f"image: registry.acme.test/{app()}@sha256:{hexs(64)}",
            lambda: f"commit {hexs(40)} (tag: v{rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)})",
            lambda: f"checksum/config: {hexs(64)}",
            lambda: f"\"x-request-id\": \"{uid()}\"",
            lambda: f"Content-MD5: {b64(16)}",
        ],
        "documented placeholders and references": [
            "define( 'DB_PASSWORD', getenv('WORDPRESS_DB_PASSWORD') );",
            "SECRET_KEY = os.environ[\"DJANGO_SECRET_KEY\"]",
            "secret_key = <your secret key>",
            'db_password = var.db_password',
            "heroku config:set STRIPE_KEY=$(op read op://prod/stripe/key)",
            "doppler run -- ./bin/server",
            '"auths": { "ghcr.io": {} },',
            "firebase functions:config:get > .runtimeconfig.json",
        ],
        "prose about credentials": [
            "A Kubernetes Secret is only base64-encoded, so anyone who can read the object can read the value.",
            "`heroku config` prints values in full; use `heroku config:get NAME` only when you really need one.",
            "Remove the credentials from the remote URL and use a credential helper instead of rewriting history twice.",
            "Docker stores registry logins in config.json unless credsStore points at a helper.",
            "Terraform keeps sensitive variables out of plan output, but they still end up in the state file.",
            "The CI log masks registered secrets, but printenv in a debug step can still leak values that were never registered.",
        ],
        "URLs without credentials": [
            lambda: f"https://git.acme.test/platform/{app()}.git",
            lambda: f"https://console.firebase.google.com/project/acme-{app()}/functions/logs",
            lambda: f"https://dashboard.doppler.com/workplace/{hexs(20)}/projects/{app()}",
            lambda: f"s3://acme-{app()}-backups/{day()}/dump.sql.gz",
            lambda: f"https://vault.acme.test:8200/ui/vault/secrets/secret/show/ci/{app()}",
        ],
    }
    return draw_lines(rng, groups, per_template=3, least=20)


def main(shell_plugins_dir: str, age_dir: str, sops_dir: str, crypto_dir: str) -> None:
    plugins, plugin_negatives = shell_plugin_examples(shell_plugins_dir)
    keys = key_format_examples(age_dir, "age") + key_format_examples(sops_dir, "sops") + key_format_examples(crypto_dir, "golang-crypto")
    examples = first_per_value(merged(plugins + keys))
    secrets, kinds, marked = placed_entries(examples, OUT, in_context, CONTEXT_VALUES)
    commits = {
        "1Password/shell-plugins": git(shell_plugins_dir, "rev-parse", "HEAD").strip(),
        "FiloSottile/age": git(age_dir, "rev-parse", "HEAD").strip(),
        "getsops/sops": git(sops_dir, "rev-parse", "HEAD").strip(),
        "golang/crypto": git(crypto_dir, "rev-parse", "HEAD").strip(),
    }
    write_half(
        OUT,
        commits,
        "MIT, BSD-3-Clause, MPL-2.0, BSD-3-Clause",
        secrets,
        kinds,
        [("shell-plugins test fixtures, lines holding no expected credential", plugin_negatives)],
        lambda line: clean_fit(line) and not any(value in line for value in marked),
        drawn_lookalikes(random.Random(SEED)),
    )
    print("per kind:", ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())))


if __name__ == "__main__":
    main(*sys.argv[1:5])
