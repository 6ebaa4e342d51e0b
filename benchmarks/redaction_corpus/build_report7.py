"""Build the seventh report half (`report7/`) mechanically from one vendor's published key formats.

    python benchmarks/redaction_corpus/build_report7.py SECURITY_UTILITIES_GIT_DIR

Kept so that the half can be rebuilt and audited: it was run once, before any redactor change of version 10, and its
output was committed without running the redactor on it. Source (MIT), read with `git show` at its HEAD:
- microsoft/security-utilities: `GeneratedRegexPatterns/PreciselyClassifiedSecurityKeys.json`, the published
  pattern of each precisely classified key (Azure service keys in their identifiable and legacy annotated formats,
  Entra client secrets, Databricks, Azure DevOps, NuGet, npm and GitHub's secret-scanning sample token). The
  project's own tests draw their true positives from these formats at random (`GenerateTruePositiveExamples`); so
  does this builder, with a fixed seed: each pattern is parsed (Python's regular-expression parser) and a match
  drawn from it, checked by searching the pattern in the drawn text; the credential is the pattern's own `refine`
  group. Optional parts outside that group are left out; where a pattern needs context before the key (an account
  name, a host), the drawn context is kept as the example line.
Each kind gets EXAMPLES drawn matches as written, and each of their values is also placed in a transcript context
written for report7 (rotating over deploy commands, .NET and Azure configuration, code, logs and chat answers).
Values that read as placeholders (build_report3's test) and values already in other folders are left out. Clean
lines: look-alikes drawn with a fixed seed from templates written for report7 (Azure ids, references and
configuration without a key, build and package output, hashes and media, code and prose about keys, URLs without
credentials). The source has no literal negative examples (its false positives are drawn in code too).
"""

from __future__ import annotations

import json
import random
import re
import re._constants as sre
import re._parser as sre_parse
import subprocess
import sys
from pathlib import Path

from build_report3 import existing_values
from build_report4 import Draw, Example, draw_lines, placeholder, write_half
from build_report4 import secret_entries as report4_secret_entries
from build_report5 import in_context as report5_in_context

OUT = Path(__file__).resolve().parent / "report7"
PATTERNS = "GeneratedRegexPatterns/PreciselyClassifiedSecurityKeys.json"
EXAMPLES = 2
FILLER = "abcdefghijklmnopqrstuvwxyz0123456789"  # what a lone `.` draws
NAMES = ("orders", "billing", "catalog", "ingest")  # what `.+` draws, followed by `;`
BOUNDARY = " ;,\"'"  # what a negated class before or after the key draws


class Drawer:
    """Draws one match of a parsed pattern, recording where the `refine` group falls."""

    def __init__(self, rng: random.Random, refine: int, any_case: bool):
        self.rng, self.refine, self.any_case = rng, refine, any_case
        self.span: tuple[int, int] | None = None

    def draw(self, items, out: list[str], inside: bool) -> None:
        for op, arg in items:
            if op is sre.LITERAL:
                out.append(chr(arg))
            elif op is sre.ANY:
                out.append(self.rng.choice(FILLER))
            elif op is sre.IN:
                out.append(self.from_class(arg))
            elif op is sre.NOT_LITERAL:
                out.append(next(c for c in BOUNDARY if ord(c) != arg))
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                low, high, body = arg
                if list(body) == [(sre.ANY, None)]:
                    out.append(f"{self.rng.choice(NAMES)};")  # `.+` between a name and a key: one setting
                    continue
                if low == 0 and not inside:
                    continue  # optional parts outside the credential are left out
                for _ in range(self.rng.randint(low, min(high, low + 3))):
                    self.draw(body, out, inside)
            elif op is sre.SUBPATTERN:
                group, _, _, body = arg
                start = len("".join(out))
                self.draw(body, out, inside or group == self.refine)
                if group == self.refine:
                    self.span = (start, len("".join(out)))
            elif op is sre.BRANCH:
                self.draw(self.rng.choice(arg[1]), out, inside)
            elif op is sre.AT:
                continue
            else:
                raise ValueError(f"unsupported pattern element {op}")

    def from_class(self, members) -> str:
        if members and members[0][0] is sre.NEGATE:
            excluded = set()
            for op, arg in members[1:]:
                excluded |= {chr(arg)} if op is sre.LITERAL else {chr(c) for c in range(arg[0], arg[1] + 1)} if op is sre.RANGE else set()
            return self.rng.choice([c for c in BOUNDARY if c not in excluded])
        chars = []
        for op, arg in members:
            chars += [chr(arg)] if op is sre.LITERAL else [chr(c) for c in range(arg[0], arg[1] + 1)] if op is sre.RANGE else []
        if self.any_case and {"+", "/"} & set(chars):  # a case-blind base64 class: keys of both cases
            chars = sorted(set(chars) | {c.swapcase() for c in chars})
        return self.rng.choice([c for c in chars if c != "\\"])  # a backslash only escapes in the scanned text


def drawn_match(pattern: str, rng: random.Random) -> tuple[str, tuple[int, int]]:
    """A text the pattern finds, with the span of its `refine` group (drawn again until the pattern agrees)."""
    parsed = sre_parse.parse(pattern)
    compiled = re.compile(pattern)
    for _ in range(100):
        drawer = Drawer(rng, parsed.state.groupdict["refine"], bool(parsed.state.flags & re.IGNORECASE))
        out: list[str] = []
        drawer.draw(parsed, out, False)
        text = "".join(out).strip(BOUNDARY)
        if drawer.span is None:
            continue
        value = "".join(out)[drawer.span[0] : drawer.span[1]]
        found = compiled.search(text)
        if found and found.group("refine") == value:
            return text, found.span("refine")
    raise ValueError(f"no match drawn for {pattern}")


def kebab(name: str) -> str:
    return re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", name)).lower()


def format_examples(git_dir: str, rng: random.Random) -> tuple[str, list[Example]]:
    commit = subprocess.run(["git", "-C", git_dir, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    rules = json.loads(subprocess.run(["git", "-C", git_dir, "show", f"HEAD:{PATTERNS}"], capture_output=True, text=True, check=True).stdout)
    examples: list[Example] = []
    for rule in rules:
        for _ in range(EXAMPLES):
            text, span = drawn_match(rule["Pattern"], rng)
            if not placeholder(text[span[0] : span[1]]):
                examples.append((kebab(rule["Name"]), text, [span], f"{PATTERNS} ({rule['Id']} {rule['Name']})"))
    return commit, examples


CONTEXTS = (
    "az functionapp config appsettings set -g rg-orders -n orders-fn --settings {env}={value}",
    '<<<\n{{\n  "IsEncrypted": false,\n  "Values": {{\n    "{env}": "{value}",\n    "FUNCTIONS_WORKER_RUNTIME": "dotnet-isolated"\n  }}\n}}\n>>>',
    'dotnet user-secrets set "{Camel}:Key" "{value}" --project src/Orders.Api',
    "param {camel} string = '{value}'",
    '<<<\nvariables:\n  - name: {env}\n    value: {value}\n  - name: buildConfiguration\n    value: Release\n>>>',
    'private const string {Camel} = "{value}";',
    "Here's the value from the portal's Keys blade: {value} (key 1; key 2 stays as the fallback).",
    "+    {lower} = \"{value}\"",
    'warn: Orders.Api.Startup[0] using {name} {value} from configuration',
    "<<<\n[azure]\nregion = westeurope\n{lower} = {value}\n>>>",
    '$Headers = @{{ "{Camel}" = "{value}" }}',
    "kubectl set env deployment/orders {env}={value}",
    "<<<\nspring:\n  cloud:\n    azure:\n      {dotted}: {value}\n>>>",
    'config.Add("{Camel}", "{value}");',
)
# Words of a kind's name left out of its context names: they say how the key is built, not what it is for.
FORMAT_WORDS = re.compile(r"-(identifiable|legacy|common|annotated|security)(?=-)")


def in_context(kind: str, value: str, index: int) -> str:
    """The `index`th context, naming the service (`azure-search-identifiable-query-key` -> AZURE_SEARCH_QUERY_KEY)."""
    placed = report5_in_context(FORMAT_WORDS.sub("", kind), value, index, CONTEXTS)
    return placed.replace(f"⟦{FORMAT_WORDS.sub('', kind)}:", f"⟦{kind}:")


def drawn_lookalikes(rng: random.Random) -> list[str]:
    """Look-alikes drawn with a fixed seed from templates written for report7."""
    draw = Draw(rng)
    hexs, uid, b64, pick = draw.hexs, draw.uid, draw.b64, draw.pick
    lower = "abcdefghijklmnopqrstuvwxyz"

    def service() -> str:
        return rng.choice(["search", "eventhub", "servicebus", "cosmos", "storage", "redis", "openai", "apim", "batch"])

    def name() -> str:
        return f"{rng.choice(['orders', 'billing', 'catalog', 'ingest'])}-{rng.choice(['dev', 'prod', 'test'])}"

    groups: dict[str, list] = {
        "Azure ids, references and settings without a key": [
            lambda: f"/subscriptions/{uid()}/resourceGroups/rg-{name()}/providers/Microsoft.Search/searchServices/srch-{name()}",
            lambda: f"AZURE_TENANT_ID={uid()}",
            lambda: f'"clientId": "{uid()}",',
            lambda: f"@Microsoft.KeyVault(SecretUri=https://kv-{name()}.vault.azure.net/secrets/{service()}-key/{hexs(32)})",
            lambda: f"[listKeys(resourceId('Microsoft.Storage/storageAccounts', parameters('{service()}Name')), '2023-01-01').keys[0].value]",
            lambda: f"az {rng.choice(['search admin-key show', 'storage account keys list', 'eventhubs namespace authorization-rule keys list'])} -g rg-{name()} -n {service()}{pick(lower, 6)}",
            lambda: f'    "{service().upper()}_KEY": "@Microsoft.KeyVault(VaultName=kv-{name()};SecretName={service()}-key)",',
            lambda: f"Endpoint=sb://{name()}.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=${{{service().upper()}_KEY}}",
            lambda: f"{service()}_key: $(az keyvault secret show --vault-name kv-{name()} --name {service()}-key --query value -o tsv)",
        ],
        "build, package and deploy output": [
            lambda: f'      "contentHash": "{b64(64)}",',
            lambda: f"  Restored /src/{name()}/{name()}.csproj (in {rng.randint(80, 900)} ms).",
            lambda: f"Deployment '{name()}-{hexs(8)}' succeeded. Correlation id: {uid()}",
            lambda: f"##[section]Starting: Publish artifact ({rng.randint(100, 9999)}) {hexs(40)}",
            lambda: f"npm notice shasum: {hexs(40)}",
            lambda: f"npm notice integrity: sha512-{b64(24)}[...]{b64(6)}==",
            lambda: f"Successfully pushed {name()}.{rng.randint(1, 9)}.{rng.randint(0, 20)}.0.nupkg ({hexs(12)})",
        ],
        "ids, hashes and media": [
            lambda: f"x-ms-request-id: {uid()}",
            lambda: f"ETag: \"0x8DC{hexs(12).upper()}\"",
            lambda: f"Thumbprint: {hexs(40).upper()}",
            lambda: f"Operation-Location: https://{name()}.cognitiveservices.azure.com/vision/v3.2/read/analyzeResults/{uid()}",
            lambda: f'<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA{b64(48)}">',
            lambda: f"blob md5: {b64(16)}",
            lambda: f"traceparent: 00-{hexs(32)}-{hexs(16)}-01",
        ],
        "code and prose that handle keys": [
            'var key = Environment.GetEnvironmentVariable("AZURE_SEARCH_API_KEY");',
            "var credential = new AzureKeyCredential(configuration[\"Search:QueryKey\"]);",
            "builder.Configuration.AddAzureKeyVault(new Uri(vaultUri), new DefaultAzureCredential());",
            "if (string.IsNullOrEmpty(options.ApiKey)) throw new InvalidOperationException(\"Search:ApiKey is not set\");",
            "Regenerate key 2 first, switch the app to it, then regenerate key 1.",
            "Azure keys of the new format carry a signature such as `AzSe` or `+ASt` near their end.",
            "The NuGet API key is scoped to push only and expires in 365 days.",
            "Use a managed identity instead of the storage account key wherever the SDK supports it.",
            "const token = await credential.getToken(\"https://cognitiveservices.azure.com/.default\");",
            "connectionString: process.env.SERVICEBUS_CONNECTION_STRING,",
            "services.AddAzureClients(b => b.AddSearchClient(config.GetSection(\"Search\")));",
            "The Databricks token in CI is a service principal's, not a personal one; it rotates weekly.",
            "key_vault_secret = client.get_secret(\"cosmos-primary-key\").value",
            "Set AZURE_OPENAI_API_KEY in your shell before running the notebook; it is not in the repo.",
        ],
        "URLs without credentials": [
            lambda: f"https://{name()}.search.windows.net/indexes/products/docs?api-version=2024-07-01&search={pick(lower, 6)}",
            lambda: f"https://st{pick(lower, 10)}.blob.core.windows.net/media/{hexs(8)}.png",
            lambda: f"https://dev.azure.com/acme/{name()}/_build/results?buildId={rng.randint(10**5, 10**6)}&view=logs",
            lambda: f"https://www.nuget.org/packages/Acme.{name().split('-')[0].capitalize()}/{rng.randint(1, 9)}.{rng.randint(0, 20)}.0",
            lambda: f"https://portal.azure.com/#@acme.onmicrosoft.com/resource/subscriptions/{uid()}/overview",
        ],
    }
    return draw_lines(rng, groups, per_template=7, least=40)


def main(security_utilities_dir: str) -> None:
    commit, examples = format_examples(security_utilities_dir, random.Random(7077))
    secrets, kinds = report4_secret_entries(
        examples,
        existing_values(OUT.parent, "report7"),
        place=in_context,
        chosen=lambda values: values[:EXAMPLES],
        note="formats drawn + contexts",
        sort_kinds=True,
    )
    write_half(OUT, {"microsoft/security-utilities": commit}, "MIT", secrets, kinds, [], lambda line: True, drawn_lookalikes(random.Random(7077)))


if __name__ == "__main__":
    main(sys.argv[1])
