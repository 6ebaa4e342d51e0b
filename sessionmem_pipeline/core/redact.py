"""Secret redaction: find credentials in text and replace them with typed placeholders (`[REDACTED:aws-key]`).

Runs once, at ingest (core/sanitize.py), before anything is stored, so chunks, embeddings, topics, summaries and every
output are built from redacted text; collapsing and chunking do not redact again. Two kinds of evidence are used:

- shape: provider keys with a recognisable prefix (AKIA…, sk-…, sk-ant-…, ghp_…, glpat-…, npm_…, xoxb-…,
  sk_test_…, AIza…, SG.…, hvs.…, dop_v1_…, dckr_pat_…, v1.0-…, AKCp…, A3-…, ntn_… and some seventy more,
  formats as published by the gitleaks and detect-secrets scanners; New Relic, Pixie, Jina, crates.io, TrueNAS,
  Segment, Mandrill, Ubidots, Vertex AI express mode `AQ.Ab8R…`, Postman, Packagist), Telegram and Discord bot
  tokens, webhook URLs, Azure SAS signatures, presigned URL signatures (`X-Amz-Signature=`, `X-Goog-Signature=`,
  `Signature=`), private-key blocks in any carrier (PEM, OpenSSH, PGP; plain lines, `\n`-escaped in a string,
  dashes shortened, base64-encoded once more: `LS0tLS1CRUdJTi…`, on one line or wrapped), base64 of any text in which
  these rules find a secret (a Kubernetes Secret's `data:` value, an encoded .env; one line or a block wrapped at
  76 or 64 columns, judged whole; decoded at most twice, typed `encoded-secret`), OpenShift OAuth tokens (`sha256~…`), JWTs and any three-part token whose first two
  parts are base64 of JSON (`ey…`, padding too), a JWT base64-encoded once more (`ZXlK…`) and base64 of a JSON
  object holding a key (`eyJrIjoi…`) are redacted wherever they appear;
  so is a key of a vendor no rule knows, by its shape: a short lower-case prefix then a random body (`tvly-…`,
  `sk-or-v1-…`), or 24 to 100 random characters standing on their own (an argument, an operand, a list item, a
  line): letters of both cases and digits (base64, url-safe too), or one case with digits interleaved, 32 or more
  (base32 and base36 keys: Azure DevOps, NuGet); ids with a known prefix (`toolu_…`, `cus_…`), digests, UUIDs,
  names, paths, labelled hashes (`sha256:…`), base64 media, Fernet tokens, PEM and ssh key bodies and wrapped base64
  blocks stay; a value with a name is left to the name rules when the name has a credential word they accept or
  says id, digest, nonce, signature, certificate or public, and is redacted under any other name (a vendor's: `mistral: <key>`, `GROK_MGMT=xai-…`); a
  40-character secret right after its key id (`AKIA…:<secret>`, GCS HMAC `GOOG…` then the secret on the next
  line); a webhook URL's path after `/hook(s)/` or `/webhook(s)/` when it holds a key-like part, or on a host made
  for webhooks (`hooks.zapier.com/hooks/catch/<account>/<hook>/`) when it holds an id; a vendor's short prefix
  before a hex key (`bkua_<40 hex>`, `cr-<58 hex>`, `key_<28 hex>`), a `<vendor>_live_`/`_test_` key; a hex or
  UUID key right after a vendor's name (`assemblyai = <32 hex>`, `ai21: <uuid>`; 40 or 64 digits, a commit's or a
  SHA-256's length, only under a name saying api or auth); a key in an API URL's `/vN/` path (`…/v3/<32 hex>`);
- context: a value assigned to a secret-like name (`DB_PASSWORD=…`, `"api_key": "…"`, `--token …`,
  `<password>…</password>`, `db_password: str = "…"`, a YAML phrase `password: Harbor Lights 2019!`,
  `<add key="ClearTextPassword" value="…"/>`, `define('DB_PASSWORD', '…')`, make's `API_TOKEN ?= "…"`, Go's
  `var apiToken string = "…"`, a YAML block or XML element holding it on the next line, a Kubernetes or ECS
  `name:`/`value:` pair, a Terraform variable's default, a table row `| API_KEY | … |`, a config line
  `cloudant_password  …`, `gh secret set NAME --body …`, `echo … | gh secret set`; a .properties, INI or
  gradle.properties line `db.password=plumtree` at a line's start; a query or connection-string parameter
  `?user=root&password=…`; a setter or builder call `ds.setPassword("…")`, `.withApiKey("…")`; `new PDO($dsn, 'u',
  '…')`, `mysqli_connect`, `getConnection`; Dockerfile's `ENV NAME value`; a Gradle or Ruby DSL line `password '…'`;
  XML `<Setting Name="ApiKey" Value="…"/>`, `<entry key="password">…</entry>`, `<Password value="…"/>`; a command
  line's words: `--password juniper`, `psql "… password=heron"`, `-e ansible_become_pass=…`; Rust's
  `const API_KEY: &str = "…"`; `api key: …` and `<vendor> key: <hex>` with a space; `azure_key:<random>` without
  one; names ending in auth, `MAILJET_BASIC_AUTH: <random>`, `…_AUTHENTICATION=<hex key>`; a key after its name and
  blanks, `is` or `to` in any spelling, `set ACME_API_KEY <hex>`, `I've set relay_token to <uuid>`; a random base64
  key holding `/` under any key name), a password inside a URL (`scheme://user:PASS@host`, user and host kept; the password runs to the last `@`),
  Redis `AUTH [user] PASS` (a prompt, MONITOR output, a client's log), Travis CI's `secure: "<encrypted>"`,
  `aws ssm put-parameter --type SecureString --value …`, an `Authorization:` header, `curl -u user:PASS` (quoted too),
  `mysql -pPASS`, `sshpass -p PASS`, `docker login … -p PASS`, `ConvertTo-SecureString "PASS"`, `curl -u ":PASS"`,
  `pulumi config set --secret NAME VALUE`, `az keyvault secret set … --value VALUE`, `netlify env:set NAME VALUE`,
  a Vault AppRole `secret_id=<uuid>`, SonarQube's bare `-Dsonar.login=<40 hex>`, `Bearer: <key>`, a CloudFormation
  `NoEcho: true` parameter's `Default:`, a `.pgpass` line's password, an .npmrc `:_authToken=`, the literal a password
  call is given last (`user.ChangePassword(old, "…")`), anything up to a blank after an `Authorization:` scheme word
  (`Bearer b@d0@h3C70K3n`), the one-line output of `cat` on a secret file (`cat config/master.key`), a Postman
  value typed `"secret"`, a value piped or fed (`<<<`) to `wrangler secret put`, `--with-token`, `--password-stdin`,
  `aws configure set NAME VALUE` under a credential's name, `mc alias set ALIAS URL ACCESS SECRET`, a generated salt
  or key of any characters under a weak name (`define('AUTH_SALT', '<64 random characters>')`), JS's `process.env.API_TOKEN ??= "…"`,
  `auth=("user", "PASS")`, a login call's password (`smtp.login(user, "PASS")`, `ldap.simple_bind_s(dn, "PASS")`), a
  credential's fallback after its lookup (`os.environ.get("PASSWORD") or "PASS"`, `process.env.API_TOKEN || "…"`),
  browser automation filling a password field (`page.fill('#password', 'PASS')`, Selenium's `send_keys`, Cypress'
  `.type`), a JWK's private members (`"d"`, `"p"`, `"q"`, `"k"`, … near `"kty"`), a secret store's one-line answer
  below the command that read it (`aws secretsmanager get-secret-value … --output text`, `gcloud secrets versions
  access`, `op read`, `vault kv get -field=…`, `echo $API_TOKEN`), a tight `token:<12+ mixed characters>`, a
  service's name as its own password (`POSTGRES_PASSWORD=postgres`), a password spelling its name
  (`Password=MyPassword123!`), tools' password options (`zip -P`, `7z -p…`, `keytool -storepass`, `ldapsearch -w`,
  `smbclient -U user%…`, `openssl enc -k`, `xfreerdp /p:`, `cmdkey /pass:`, `net user NAME PASS /add`, `net use … PASS
  /user:`, `sqlplus user/PASS@db`), a password fed to `sudo -S`, `passwd --stdin` or `chpasswd`, an expect script's
  `send "PASS\r"` after a password prompt, ssh-keygen's `-N`/`-P`, `poetry config http-basic.NAME USER PASS`,
  `rclone obscure PASS`, a pair of fields (`u: bob p: PASS`, `user bob pass PASS`, `creds: bob / PASS`), "password"
  in other languages as a label (`Passwort:`, `mot de passe :`, `contraseña:`, `пароль:`, `密码：`), redis.conf's
  `requirepass`/`masterauth` and `rootpw` directives, SQL's `SET PASSWORD … = PASSWORD('PASS')`, a literal given to a
  password hasher (`bcrypt('PASS')`, `Hash::make('PASS')`), an XML element named by its `name` attribute (`<property
  name="…password">PASS</property>`), Rust's `String::from("PASS")` and `"PASS".to_string()`, `<tool> config set NAME
  VALUE` under a credential's name; shell words quoted with JSON-escaped quotes (`-p\"PASS\"` in a tool call's
  JSON); Fly.io's `FlyV1 …` tokens, Slack `xoxd-` cookies and host-less webhook paths (`T…/B…/…`), an unsigned JWT (a
  header and a payload, no signature), Sidekiq's `hex:hex` licence beside its name, a Docker config `"auth"` (base64 of user:password), a Twilio auth token after its
  account SID, `X-…-Token:` headers, `PsExec … -p PASS`, `slcli … -k KEY`, token-taking logins (`cargo login`,
  `wandb login`, `ngrok config add-authtoken`, `snyk auth`, `doctl auth init -t`, `netlify --auth`), .NET
  `NetworkCredential`/`DirectoryEntry` arguments, `.netrc`'s `login … password …`, `htpasswd -b`, `redis-cli -a`,
  `mongo -p`, `sqlcmd -P`, `rabbitmqctl add_user`, openssl's `pass:…`, .npmrc's `_auth` (base64 of user:password),
  Vault's `Unseal Key 1:` output, ThingsBoard device URLs, a
  hex or UUID value under a `<vendor>_key` name (`zenkit_key = <32 hex>`), and a password or token written in
  prose (`the password is Kestrel-4471`, `log in with ops / PASS`, `the creds are app:PASS`, judged by the value:
  letters with digits or symbols; `the API token is fCh95aMw…`, `datadog: api_key 6459…`: as random as a key).
  These are all typed `password`, except AWS
  secret access keys (`aws-key`): the placeholder says "a credential was here", the name beside it says which.

Context rules also look at the value, so code that only *handles* secrets stays untouched:
`token = request.headers.get("Authorization")`, `api_key=os.environ["OPENAI_API_KEY"]`,
`password_hash = bcrypt.hash(pw)`, `"${DB_PASSWORD}"` (a template closes its brackets; `m{{h}o)p$` is a
password), `<your-api-key>`, a stored hash (`{SSHA}…`, `pbkdf2_sha256$…`), a flag (`SavePassword=1`). Generic
names (`hub_key`) only count when the value looks random; names of data (`cache_key`, `sortKey`, `idempotencyKey`)
never do. Known blind spots, on purpose: a bare
lowercase word assigned in code (`    password = hunter`, indented, or a keyword argument) reads as a variable (at a
line's start, as in .properties and INI files, it is a literal); a quoted word under a key or token name that is
not a password name or `…secret` (`api_key="wildflower"`) reads as a label (under `secret`, `client_secret`
a quoted word of six or more characters is the secret); a literal word `password`, `test` or `foo` as an
assigned value reads as a placeholder, and so does a YAML tag (`password: !secret db_password`); in a URL's password
slot the words `password`, `secret`, `changeme` and the like read as the placeholders examples write (`postgres://
admin:password@db`), any other word is redacted unless it equals the user (`guest:guest`, a default); a hex value under a `*_key` name whose first word is short or says digest
or id (`cl_key => <64 hex>`, `cache_key`, `tenant_key`) reads as a digest; a vendor's name alone (`cloudflare: "<hex>"`) does not name a credential unless its value is as random
as a key (mixed case and digits).

Documented placeholders stay: AWS's own example keys (`AKIAIOSFODNN7EXAMPLE`), filler (`glpat-xxxx…`,
`npm_XXXX…`, `rdme_XXXX_XXXX`, `xoxb-0000…-aaaa…`, `glc_EXAMPLETESTTEST…`, a zero UUID, `aaaa…1111…bbbb…`),
typed-out alphabets (`AIzaSyabcdef…`, `aBcDeF…`, `ZyXwVu…`, `1a2b3c4d…`, `qwertyuiop…`, character-set constants),
`<your-token>`, `INSERT_TOKEN_HERE`, `@@DB_PASSWORD@@`, `@@FILE:/path@@`, a shortened key (`27BZdTpu...SpU4C2vQSY=`),
a value marked as a stand-in with nothing random beside it (`fakepass!`, `samplepwd`, `FIXME-later`, `value_to_replace`;
`AKIAFAKE7Q2M…` keeps a key's shape and is redacted), the documented URL pair `user:password` (`user:secret`), a short word or a short
typed-out value under a key or token name (`API_TOKEN=short`, `API_KEY=abcdef1234`; under a password or secret name
it may be the weak password itself: `DB_PASSWORD=test1234` is redacted),
a cache key (`cache key: v2-deps-<hex>`, `key: node-modules-<hex>`, `Linux-pnpm-store-<sha256>`: words, then a hex
digest), a resource's name under a secret's name (`imagePullSecret="relay-registry-credentials"`, `"secret":
"awx-postgres-configuration"`: three or more lower-case parts ending in key, secret, auth, config, id and the like),
code between two string literals (`secret='" + secret + "'`, `').append(mask(token)).append('`), a Go template with
other delimiters (`[[ .Db.Password ]]`), an escaped reference (`'\\$DB_PASSWORD'`), a choice (`'true|false'`), a file of a
common type (`icons/lock-secret.svg`), an annotation (`@javax.annotation.Generated`), Kotlin's `String?`, a date
(`password_last_used: 2026-10-18T21:42:00Z`), an ARM expression (`[parameters('dbPassword')]`), `changeme` under a
key or token name (under a password name it is the weak password), an idempotency token (`clientRequestToken`).
Every pattern has bounded repetition, so a huge line costs linear time; and a huge text costs a few fast scans:
provider tokens are searched one literal prefix at a time, and every context rule looks only at the lines holding
its trigger word (`pass`, `token`, `key`, `://`, `login`…), found with `str.find` where the trigger is plain words,
so a 30 MB message of prose and code lines redacts in about 10 s (`benchmarks/huge_message.py`).

Seen in real sessions and left alone: `date -u +%Y-%m-%dT%H:%M:%SZ` (a time format, not `-u user:PASS`), OpenAI
Responses item ids (`rs_…`, `fc_…`, `ctc_…`), addresses under names of data (`"owner": <base58>`, `redeemed_by`,
`USDC Mint: …`, `new PublicKey("…")`), `tokenProgram: TOKEN_2022_PROGRAM_ID`, an id with a word (`<uuid>-plan`),
filler after `sk-ant-`, a blank to fill (`replace-for-shared-deployments`), a Solana address (base58 of 32 bytes)
where the text speaks of Solana, a public JWK's `"x"`, `"y"`, `"n"`; a record's id under its entity's name
(`customer=<uuid>`, `order: <hex>`), an age recipient (`age1…`) and any bech32 string with a valid checksum (`bc1q…`,
`cosmos1…`; not nostr's `nsec1…`).

Text stored field by field keeps its context: a value under a name (a tool call's argument, a metadata field) is
judged as it stood in its JSON text, `"password": "…"` (`redact_named`), and a list of strings as the command line
it stands for, `["mysql", "-pPASS"]` (`redact_words`).

Redacting is idempotent: a placeholder is never matched again, and a text that changed is judged again until nothing
more is found, so redacting twice equals redacting once.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import contextvars
import functools
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

REDACTION_VERSION = "25"  # change whenever a rule changes: stored text is redacted again under the new rules

KIND_AWS = "aws-key"
KIND_OPENAI = "openai-key"
KIND_ANTHROPIC = "anthropic-key"
KIND_GITHUB = "github-token"
KIND_SLACK = "slack-token"
KIND_STRIPE = "stripe-key"
KIND_GOOGLE = "google-api-key"
KIND_PRIVATE_KEY = "private-key"
KIND_JWT = "jwt"
KIND_PASSWORD = "password"
KIND_WEBHOOK = "webhook-url"
KIND_AZURE = "azure-key"
KIND_TOKEN = "token"  # a credential known by its shape alone
KIND_ENCODED = "encoded-secret"  # base64 of text that holds a secret
# Provider tokens recognised by shape alone: (kind, pattern). Formats as published by the gitleaks rules
# (cmd/generate/config/rules) and the vendors' docs; every repetition is bounded.
_PROVIDER_TOKENS: tuple[tuple[str, str], ...] = (
    (KIND_AWS, r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    (KIND_GITHUB, r"\bgh[pousr]_[A-Za-z0-9]{36,255}\b|\bgithub_pat_[A-Za-z0-9_]{22,255}"),
    ("gitlab-token", r"\bgl(?:pat|dt|rt|ptt|ft|imt|agent|oas|soat|ffct)-[0-9A-Za-z_.-]{20,300}"
                     r"|\bglcbt-[0-9A-Za-z]{1,5}_[0-9A-Za-z_-]{20,300}|\bGR1348941[\w-]{20,300}"),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
    (KIND_SLACK, r"\bxox[abposre](?:\.xox[a-z])?-(?=[A-Za-z-]{0,300}[0-9])[0-9A-Za-z-]{10,300}|\bxapp-\d-[0-9A-Za-z-]{10,300}"
     r"|\bxoxd(?:-|%2[Dd])[A-Za-z0-9%+/=-]{20,1000}"),  # a `d` cookie: base64, URL-encoded or not
    (KIND_STRIPE, r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,255}|\bwhsec_[A-Za-z0-9+/=]{20,255}"),
    (KIND_GOOGLE, r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])|\bGOCSPX-[A-Za-z0-9_-]{20,255}|\bya29\.[0-9A-Za-z_-]{20,2048}"),
    ("sendgrid-key", r"\bSG\.[\w-]{16,32}\.[\w-]{16,64}"),
    ("mailgun-key", r"\bkey-[0-9A-Za-z]{32}\b|\bpubkey-[0-9A-Za-z]{32}\b|\b[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8}\b"),
    ("mailchimp-key", r"\b[0-9a-f]{32}-us\d{1,2}\b"),
    ("docker-token", r"\bdckr_(?:pat|oat)_[A-Za-z0-9_-]{20,100}"),
    ("vault-token", r"\bhv[sbr]\.[\w-]{24,400}|\bs\.[A-Za-z0-9]{24}\b"),
    ("digitalocean-token", r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
    ("telegram-token", r"(?<![0-9])[0-9]{5,16}:A[\w-]{34}(?![\w-])"),  # `bot<id>:`, `id<id>:` too
    ("discord-token", r"\b[MNO][A-Za-z0-9_-]{23,27}\.[\w-]{6,7}\.[\w-]{27,40}(?![\w-])"),
    (KIND_AZURE, r"(?<![\w~.-])[\w~.]{3}\dQ~[\w~.-]{31,34}(?![\w~.-])"),
    ("twilio-key", r"\bSK[0-9a-fA-F]{32}\b"),
    ("shopify-token", r"\bshp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}\b"),
    ("huggingface-token", r"\b(?:hf|api_org)_[A-Za-z]{34}\b"),
    ("pypi-token", r"\bpypi-AgEIcHlwaS5vcmc[\w-]{50,1000}"),
    ("heroku-key", r"\bHRKU-AA[\w-]{58}|\bHRKU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
    ("age-key", r"\bAGE-SECRET-KEY-1[0-9A-Z]{58}\b"),
    ("facebook-token", r"\bEAA[A-Z][A-Za-z0-9]{80,400}\b|\b\d{15,16}\|[\w-]{27,40}\b"),
    ("sentry-token", r"\bsntry[su]_[A-Za-z0-9+/=_]{40,400}"),
    ("square-token", r"\b(?:sq0atp|sq0csp)-[\w-]{22,60}|\bEAAA[\w-]{60}\b"),
    ("sonar-token", r"\bsq[upa]_[0-9a-f]{40}\b"),
    ("openshift-token", r"\bsha256~[A-Za-z0-9_-]{43}(?![\w-])"),  # an OpenShift OAuth access token
    ("databricks-token", r"\bdapi[0-9a-f]{32}(?:-\d)?\b"),
    ("doppler-token", r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}\b"),
    ("linear-key", r"\blin_(?:api|oauth)_[A-Za-z0-9]{40}\b"),
    ("postman-key", r"\bPMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}\b"),
    ("pulumi-token", r"\bpul-[a-f0-9]{40}\b"),
    ("planetscale-token", r"\bpscale_(?:tkn|pw|oauth)_[\w=.-]{32,64}"),
    ("grafana-token", r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|\bglc_[A-Za-z0-9+/]{32,400}={0,3}|\beyJrIjoi[A-Za-z0-9]{70,400}={0,3}"),
    ("newrelic-key", r"\bNR(?:AK|II|IQ|JS)-[A-Za-z0-9_-]{19,32}(?![\w-])|\bNRAA-[a-f0-9]{27}\b|\bNRRA-[a-f0-9]{42}\b"),
    ("newrelic-license-key", r"\b[a-f0-9]{36}NRAL\b"),
    ("pixie-key", r"\bpx-(?:api|dep)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
    ("atlassian-token", r"\bATATT3[\w=-]{150,300}"),
    ("dynatrace-token", r"\bdt0[a-z][0-9]{2}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}\b"),  # `dt0c01.` API, `dt0s01.` platform
    ("rubygems-key", r"\brubygems_[a-f0-9]{48}\b"),
    ("clojars-token", r"\bCLOJARS_[A-Za-z0-9]{60}\b"),
    ("intra42-secret", r"\bs-s4t2(?:ud|af)-[a-f0-9]{64}\b"),
    ("salesforce-token", r"\b00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{50,400}"),  # org id, `!`, session token
    ("scalingo-token", r"\btk-us-[\w-]{48}"),
    ("octopus-key", r"\bAPI-[A-Z0-9]{26}\b"),
    ("perplexity-key", r"\bpplx-[A-Za-z0-9]{48}\b"),
    ("easypost-key", r"\bEZ[AT]K[A-Za-z0-9]{54}\b"),
    ("sendinblue-key", r"\bxkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}\b"),
    ("prefect-key", r"\bpnu_[A-Za-z0-9]{36}\b"),
    ("alibaba-key", r"\bLTAI[A-Za-z0-9]{12,20}\b"),  # an AccessKey id, as AKIA…: 16 characters before 2019, 24 since
    ("shippo-token", r"\bshippo_(?:live|test)_[a-fA-F0-9]{40}\b"),
    ("duffel-token", r"\bduffel_(?:live|test)_[\w=-]{43}"),
    ("readme-key", r"\brdme_[a-z0-9]{70}\b"),
    ("flyio-token", r"\bfo1_[\w-]{43}|\bfm[12][ar]?_[A-Za-z0-9+/]{100,2000}={0,3}|\bFlyV1[ \t]+[A-Za-z0-9+/=,_-]{40,4000}"),
    ("onepassword-token", r"\bops_eyJ[A-Za-z0-9+/_-]{100,2000}={0,3}"),
    ("docker-swarm-token", r"\bSWMTKN-1-[a-z0-9]{50}-[a-z0-9]{25}\b|\bSWMKEY-1-[A-Za-z0-9+/]{43}"),  # join and unlock
    ("terraform-token", r"\b[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}(?![\w=-])"),  # Terraform Cloud / Enterprise
    ("bedrock-key", r"\bABSK[A-Za-z0-9+/]{100,300}={0,2}"),  # an Amazon Bedrock API key
    ("appsync-key", r"\bda2-[a-z0-9]{26}\b"),  # an AWS AppSync GraphQL API key
    ("instagram-token", r"\bIGQV[A-Za-z0-9_-]{100,400}"),
    ("google-refresh-token", r"(?<![\w/])1//0[A-Za-z0-9_-]{40,400}"),
    ("cloudflare-origin-ca-key", r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}\b"),
    ("airtable-pat", r"\bpat[A-Za-z0-9]{14}\.[a-f0-9]{64}\b"),
    ("harness-pat", r"\b(?:pat|sat)\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}\b"),
    ("maxmind-key", r"(?<![A-Za-z0-9])[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk\b"),
    ("onepassword-secret-key", r"\bA3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}\b"),
    ("yandex-key", r"\bAQVN[A-Za-z0-9_-]{35,38}(?![\w-])|\bt1\.[A-Za-z0-9_-]{1,200}={0,2}\.[A-Za-z0-9_-]{86}={0,2}"),
    ("twitter-bearer", r"\bA{22}[A-Za-z0-9%]{80,100}(?![A-Za-z0-9%+/=])"),
    ("typeform-token", r"\btfp_[a-z0-9_.=-]{59}"),
    ("frameio-token", r"\bfio-u-[a-z0-9_=-]{64}"),
    ("sourcegraph-token", r"\bsgp_(?:[a-fA-F0-9]{16}|local)_[a-fA-F0-9]{40}\b|\bsgp_[a-fA-F0-9]{40}\b"),
    ("notion-token", r"\bntn_[0-9]{11}[A-Za-z0-9]{35}\b|\bsecret_[A-Za-z0-9]{43}\b"),
    ("definednetworking-key", r"\bdnkey-[a-z0-9=_-]{26}-[a-z0-9=_-]{52}"),
    ("clickhouse-key", r"\b4b1d[A-Za-z0-9]{38}\b"),
    ("flutterwave-key", r"\bFLW(?:PUBK|SECK)_TEST-[a-hA-H0-9]{32}-X\b|\bFLWSECK_TEST-[a-h0-9]{12}\b"),
    ("artifactory-key", r"\bAKCp[A-Za-z0-9]{69}\b|\bcmVmd[A-Za-z0-9]{59}\b"),
    ("mapbox-token", r"\b[ps]k\.eyJ[A-Za-z0-9_-]{10,300}\.[A-Za-z0-9_-]{20,100}|\b[ps]k\.[a-z0-9]{60}\.[a-z0-9]{22}\b"),
    ("plaid-token", r"\b(?:access|public)-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
    ("adobe-client-secret", r"\bp8e-[A-Za-z0-9]{32}\b"),
    ("dropbox-token", r"\bsl\.[A-Za-z0-9_=-]{135,1400}"),
    ("lob-key", r"\b(?:live|test)_(?:pub_)?[a-f0-9]{35}\b"),
    ("jina-key", r"\bjina_[A-Za-z0-9]{60}\b"),
    ("cratesio-token", r"\bcio[A-Za-z0-9]{32}\b"),
    ("truenas-key", r"\b\d{1,5}-[A-Za-z0-9]{64}\b"),
    ("segment-token", r"\bsgp_[A-Za-z0-9]{64}\b"),
    ("mandrill-key", r"\bmd-[A-Za-z0-9_-]{22}(?![\w-])"),
    ("ubidots-token", r"\bBBFF-[A-Za-z0-9]{30}\b"),
    ("gcp-express-key", r"\bAQ\.Ab8R[A-Za-z0-9_-]{20,200}"),  # Vertex AI express mode (osv-scalibr's Veles format)
    ("postman-token", r"\bPMAK-[0-9a-f]{24}-[0-9a-f]{34}\b|\bPMAT-[0-9A-Z]{26}"),  # API keys, collection tokens
    ("packagist-token", r"\bpackagist_[a-z]{3}_[0-9a-f]{28,128}"),  # `ack_` API keys, `acs_` secrets, user tokens
    ("live-key", r"\b[a-z]{2,8}_(?:live|test)_[A-Za-z0-9]{14,64}\b"),  # a vendor's live or test key: `rzp_live_…`
)

SECRET_KINDS = tuple(
    dict.fromkeys(
        (
            KIND_AWS,
            KIND_OPENAI,
            KIND_ANTHROPIC,
            KIND_GITHUB,
            KIND_SLACK,
            KIND_STRIPE,
            KIND_GOOGLE,
            KIND_PRIVATE_KEY,
            KIND_JWT,
            KIND_PASSWORD,
            KIND_WEBHOOK,
            KIND_AZURE,
            KIND_ENCODED,
            *(kind for kind, _ in _PROVIDER_TOKENS),
        )
    )
)

PLACEHOLDER_RE = re.compile(r"\[REDACTED:[a-z-]+\]")


def placeholder(kind: str) -> str:
    """The text that replaces a secret of this kind."""
    return f"[REDACTED:{kind}]"


@dataclass(frozen=True)
class SecretMatch:
    """Where a secret sits in a text, and what kind it is."""

    kind: str
    start: int
    end: int


# ---- value judgements shared by the context rules --------------------------------------------------------------

_VALUE_REFERENCE = re.compile(  # ${VAR}, $VAR, \$VAR, $(cmd), %(x)s, %s, {{ var }}, [[ .Var ]], {% %}, <%= %>, %VAR%, Ruby's #{var},
    # an ARM template expression `[parameters('dbPassword')]`
    r"""^\$|^\\\$[A-Z_][A-Z0-9_]{2,}$|^\[(?:parameters|variables)\('[\w.-]{1,100}'\)\]$|\$\{|\$\(|%\(\w+\)|%[sdr]\b|\{\{|\[\[[ \t]*\.?[A-Za-z_]|\{%|<%|^%\w+%$|#\{"""
)
_FORMAT_FIELD = re.compile(r"""\{[A-Za-z_][\w.\[\]'"]*\}""")  # `{name}` in a format string
_BRACKET_PAIRS = {")": "(", "]": "[", "}": "{"}
_VALUE_CODE = re.compile(  # a lookup, code between two string literals (`').append(x).append('`), an annotation
    r"^[ \t]*[),].{0,200}?[A-Za-z_]\w*\(|\)\.\w+\(|^@[a-z]\w*(?:\.[a-z]\w*)+\.[A-Z][A-Za-z]*$|os\.environ|(?<![A-Za-z])(?i:getenv)(?![A-Za-z])|process\.env|ENV\[|System\.getenv|Deno\.env|import\.meta\.env|secrets\.|settings\.|config\["
)
_VALUE_PLACEHOLDER = re.compile(
    r"""^[^A-Za-z0-9]*\*{3,}[^A-Za-z0-9]*$|^(?:<[^<>]*>|x{3,}|X{3,}|\.{3,}|…|-+|_+|\?+|#+)$"""  # masks, blanks
    r"""|(?:\.\.\.|…)$|^[\w+/=-]{6,}(?:\.\.\.|…)[\w+/=-]{6,}$"""  # shortened: `sk_test_...`, `27BZdTpu...SpU4C2vQSY=`
    r"""|^(?:insert|enter|put|paste|add|type)[-_ ]\S{0,40}[-_ ]here$|^(?-i:[A-Z][A-Z0-9_]*_HERE)$"""  # `INSERT_TOKEN_HERE`
    r"""|your[-_ ]?(?:[a-z]{1,20}[-_ ]){0,3}(?:key|token|secret|password|pass|pat)"""
    r"""|^replace[-_ ]?(?:me|this|with|for|before|in)(?![a-z])"""  # REPLACE_ME, `replace-for-prod`: blanks to fill; `changeme` is a (weak) password
    r"""|^\[[A-Za-z][A-Za-z _-]{0,40}\]$"""  # `[PASSWORD]`: a bracketed blank, as in docs
    r"""|placeholder|redacted"""
    r"""|^(?:@@|__|%%)[A-Za-z0-9_.:/-]{1,60}(?:@@|__|%%)$"""  # `@@DB_PASSWORD@@`, `@@FILE:/path@@`: filled in at deploy
    r"""|(?<![A-Za-z0-9])(?:x{3,400}|X{3,400})(?![A-Za-z0-9])""",  # `rdme_XXXX_XXXX`, `xxxx.atlasv1.xxxx`
    re.IGNORECASE,
)
_VALUE_WORD = re.compile(  # a word standing in for a value in an assignment; in a URL it may well be the password
    r"""^(?:example|value|dummy|none|null|nil|undefined|true|false|yes|no|on|off"""
    r"""|password|passwd|pass|pwd|secret|token|key|api[-_]?key|string|str|optional|required|bool"""
    r"""|test|testing|sample|foo|bar|baz|foobar)$""",
    re.IGNORECASE,
)
_VALUE_HASH = re.compile(  # a stored password hash: LDAP `{SSHA}…`, Django `pbkdf2_sha256$…`, Werkzeug `scrypt:…$`,
    # MySQL's `*<40 hex>`
    r"^\{[A-Z0-9-]{2,20}\}[A-Za-z0-9+/=.]|^(?:pbkdf2|scrypt|argon2|bcrypt|sha\d{1,3}|md5)[\w:-]{0,30}\$|^\*[0-9A-Fa-f]{40}$",
    re.IGNORECASE,
)
_VALUE_PATH = re.compile(  # where a credential is kept, not the credential; a file of a common type
    r"^(?:~|\.{1,2})?/\S*$|^[A-Za-z]:\\|\.(?:json|pem|key|p12|pfx|crt|cer|txt|ya?ml|env|toml|ini)$"
    r"|^[\w.-]+(?:/[\w.-]+)+\.(?:png|jpe?g|gif|svg|ico|webp|pdf|html?|css|js|ts|py|rb|go|java|sh|md|xml|conf|cfg)$"
)
_VALUE_URL = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CMDLET = re.compile(r"[A-Z][a-z]{1,20}-[A-Z][A-Za-z]{1,40}")  # PowerShell: `$Password = Read-Host …`
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_TYPE_WORDS = frozenset(
    "str string bytes int integer bool boolean any optional secretstr secretbytes none null object unknown "
    "text varchar char list dict mapping sequence uuid float double number decimal date datetime".split()
)
_NOT_CREDENTIAL_CHARS = re.compile(r"[\s\\|\"'`]")
_BRACKETS = re.compile(r"[\[\]{}()<>]")
_TOKEN_CHARS = re.compile(r"[A-Za-z0-9+/=_.~-]+")
_HEX_OR_UUID = re.compile(r"^(?:[0-9a-fA-F]{8,}|[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})$")


_DOCUMENTED_EXAMPLES = frozenset(  # published in vendors' docs, so not anyone's credential
    {
        "AKIAIOSFODNN7EXAMPLE",
        "AKIAI44QH8DHBEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
    }
)


def _is_filler(token: str) -> bool:
    """`glpat-xxxxxxxxxxxxxxxxxxxx`, `AKIAXXXXXXXXXXXXXXXX`: one character repeated over half the token; or only a
    few distinct characters."""
    characters = set(token)
    if len(token) >= _FEW_CHARACTERS_FROM and len(characters) <= _FEW_CHARACTERS:
        return True  # `aaaaaaaaaa1111111111bbbbbbbbbb…`: a few characters in long runs
    if len(characters) > len(token) // 2 + 1:
        return False  # a run over half the token leaves at most half of it for other characters
    return _longest_run(token) * 2 >= len(token)


def _is_chunk_filler(token: str) -> bool:
    """`glc_EXAMPLETESTTESTTEST…`: a short chunk repeated over half the token (judged for values and provider
    tokens, not for every random run: the search costs more than the rest of a token's judgement)."""
    if len(set(token)) > len(token) // 2 + _CHUNK_LONGEST:
        return False  # a chunk repeated over half the token leaves fewer distinct characters
    repeated = _REPEATED_CHUNK.search(token)
    return bool(repeated) and (repeated.end() - repeated.start()) * 2 >= len(token)


def _longest_run(token: str) -> int:
    longest = run = 0
    for index, char in enumerate(token):
        run = run + 1 if index and char == token[index - 1] else 1
        longest = max(longest, run)
    return longest


_FEW_CHARACTERS, _FEW_CHARACTERS_FROM = 4, 20  # 20 random hex digits have four or fewer distinct ones ~never


_CHUNK_LONGEST = 8
_REPEATED_CHUNK = re.compile(r"(.{2,%d}?)\1{3,}" % _CHUNK_LONGEST)
_FILLER_PARTS = re.compile(r"[a-z]+|[0-9]+")


def _is_typed_filler(value: str) -> bool:
    """`abcdef1234`, `abc123`, `test1234`, `abcd-1234`, `123456789`: a short value typed out in order (runs up the
    alphabet or the digits, one character repeated) and placeholder words; a random value of any length has no
    such parts (`_is_alphabet` judges long ones by their share of runs)."""
    if not _FILLER_VALUE.fullmatch(value):
        return False
    parts = _FILLER_PARTS.findall(value.lower())
    runs = [part for part in parts if _is_typed_run(part)]
    return bool(runs) and sum(map(len, parts)) >= 6 and all(part in runs or _VALUE_WORD.match(part) for part in parts)


_FILLER_VALUE = re.compile(r"[A-Za-z0-9]+(?:[-_.][A-Za-z0-9]+){0,3}")


def _is_typed_run(part: str) -> bool:
    """`abc`, `1234`, `0000`: three or more characters, each the one before it or the next one up."""
    return len(part) >= 3 and all(ord(b) - ord(a) in (0, 1) for a, b in zip(part, part[1:]))


def _is_alphabet(token: str) -> bool:
    """`abcdefghijklmnopqrstuvwxyz0123456789`, `AIzaSyabcdef…`, `aBcDeF…`, `ZyXwVu…`, `1a2b3c4d…`, `qwertyuiop…`:
    a character-set constant or a typed-out filler, half of it (or, interleaved, three quarters of its letters or
    digits) in runs typed in order (`abcd`, `dcba`, `0123`, `qwer`) that a random token almost never has."""
    if len(token) < 12:
        return False
    lowered = token.lower()
    if _typed_share(lowered, loose=True) * 2 >= len(lowered):
        return True
    switches = sum(1 for a, b in zip(lowered, lowered[1:]) if a.isdigit() != b.isdigit())
    if switches * 2 < len(lowered):
        return False
    letters = "".join(c for c in lowered if c.isalpha())
    digits = "".join(c for c in lowered if c.isdigit())
    return any(
        len(part) >= 8 and _typed_share(part, loose=False) * 4 >= len(part) * 3
        for part in (digits, letters if any(c > "f" for c in letters) else "")  # hex letters interleave by chance
    )


_KEYBOARD_NEXT = {a: b for row in ("qwertyuiop", "asdfghjkl", "zxcvbnm") for a, b in zip(row, row[1:])}


def _typed_share(text: str, loose: bool) -> int:
    """How many characters of `text` sit in runs of four or more typed in order: up the alphabet or the digits,
    and if `loose`, also down them or along a keyboard row."""
    steps = (1, -1) if loose else (1,)
    in_runs, run, step = 0, 1, None
    for previous, char in zip(text, text[1:]):
        this_step = ord(char) - ord(previous)
        if this_step not in steps:
            if not loose or _KEYBOARD_NEXT.get(previous) != char:
                run, step = 1, None
                continue
            this_step = 0  # along a keyboard row
        run, step = (run + 1 if this_step == step else 2), this_step
        in_runs += 4 if run == 4 else int(run > 4)
    return in_runs


def _has_balanced_brackets(value: str) -> bool:
    """Templates close what they open; `m{{h}o)p${e]` is a password made of symbols."""
    stack: list[str] = []
    for char in value:
        if char in "([{":
            stack.append(char)
        elif char in _BRACKET_PAIRS and (not stack or stack.pop() != _BRACKET_PAIRS[char]):
            return False
    return not stack


def _is_reference(value: str) -> bool:
    """`${DB_PASSWORD}`, `{{ token }}`, `Bearer {token}`: a value filled in later, not a literal."""
    if value.startswith("$"):
        return True  # `$TOKEN`, and `$(cmd …` cut short at a space
    if not _has_balanced_brackets(value):
        return False
    if _VALUE_REFERENCE.search(value):
        return True
    return bool(_FORMAT_FIELD.search(value)) and not any(c.isdigit() for c in _FORMAT_FIELD.sub("", value))


def _is_blank(value: str) -> bool:
    """True for values that are plainly not a secret: empty, too short, placeholders, references, code, paths,
    URLs, password hashes; a literal word like `password` still counts (see `_is_excluded_value`)."""
    value = value.strip()
    return (
        len(value) < 3  # `SavePassword=1`
        or value in _DOCUMENTED_EXAMPLES
        or (len(value) >= 8 and _is_filler(stripped := _SEPARATORS.sub("", value)))  # `00000000-0000-…`: a zero UUID
        or (16 <= len(value) <= 200 and " " not in value and _is_chunk_filler(stripped))
        or _is_alphabet(value)
        or value.startswith("[REDACTED")
        or _is_reference(value)
        or bool(_VALUE_CODE.search(value))
        or bool(_VALUE_PLACEHOLDER.search(value))
        or bool(_VALUE_HASH.search(value))
        or (bool(_VALUE_PATH.search(value)) and not _is_base64_key(value))  # `/L/4tJl…=`: a key, not a path
        or bool(_VALUE_URL.match(value))
        or _is_marked_stand_in(value)
    )


def _is_marked_stand_in(value: str) -> bool:
    """`fakepasswd#`, `samplepwd`, `FIXME!px1`, `passord_to_replace`: a word saying the value stands in, and nothing
    random beside it (`AKIAFAKE7Q2MZKD4RW6N`, `sk-FAKEkxbz5h…` are keys tagged for tests: their shape is a key's;
    `sample2024` may be a weak password: digits beside `fake`, `sample`, `dummy` or `notreal` keep it one)."""
    marker = _STAND_IN_WORD.search(value)
    if marker is None:
        return False
    rest = value[: marker.start()] + value[marker.end() :]
    digits = sum(c.isdigit() for c in rest)
    if digits > (0 if marker.group("weak") else 4):
        return False  # `sample2024`, `dummy2024`: a weak password may hold such a word (`FIXME!px1` may not)
    return not (any(c.isupper() for c in rest) and any(c.islower() for c in rest))


def _is_excluded_value(value: str) -> bool:
    """`_is_blank`, or words standing in for a value (`password = "password"`, `token: string`, `'true|false'`)."""
    return _is_blank(value) or all(_VALUE_WORD.match(word) for word in value.strip().split("|"))


_STAND_IN_WORD = re.compile(r"(?P<weak>(?-i:fake|sample|dummy)|not[-_]?(?:a[-_]?)?real)|fixme|to[-_]?replace", re.IGNORECASE)
_ADDRESS_VALUE = re.compile(r"(?:[A-Za-z]+[-_.])*(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?")  # `relay-ingest-10.0.12.7`


def _looks_random(value: str) -> bool:
    """A token-like value: long, no spaces, letters and digits, high character entropy; not a hex digest or UUID."""
    if len(value) < 16 or not _TOKEN_CHARS.fullmatch(value) or _HEX_OR_UUID.match(value):
        return False
    if _is_dotted_name(value):
        return False  # `jetbrains.mps.v8_elimination`: a dotted name; `WSsDXzCD.uOcxAp7k…`: a key id and its secret
    if _ADDRESS_VALUE.fullmatch(value):
        return False  # an address, or words naming it: not `KJoKf8rx5s10.1.2.3KI7hD5…`
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if not (has_digit and has_alpha):
        return False
    return _entropy(value) >= 3.3


def _entropy(value: str) -> float:
    """Shannon entropy of the value's characters, in bits per character."""
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _is_random_identifier(value: str) -> bool:
    """`zymlopifqy78f5m0nxynj3l_`: random, with letters and digits interleaved as no variable name has them."""
    switches = sum(1 for a, b in zip(value, value[1:]) if a.isdigit() != b.isdigit() and a.isalnum() and b.isalnum())
    return switches >= _RANDOM_SWITCHES and _looks_random(value)


_RANDOM_SWITCHES = 4  # letter-digit switches: `s3_client`, `refresh_token_v2`, `sha256_hex` have one or two


def _looks_like_credential(value: str) -> bool:
    """A value that could be a key or token (not a word, label, regex or template): for names like `token`,
    `secret`, `api_key`, where code is full of non-secret values (`end_token = '}'`, `token = r"[a-z]+"`)."""
    if _is_generated_secret(value):
        return True
    if len(value) < 8 or _NOT_CREDENTIAL_CHARS.search(value):
        return False
    if _BRACKETS.search(value) and _has_balanced_brackets(value):
        return False  # `r"[a-z]+"`, `<eos>`: a pattern or a tag; random symbols rarely close what they open
    has_digit = any(c.isdigit() for c in value)
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    if has_digit or (len(value) >= 16 and mixed_case):
        return True
    return len(value) >= 20 and value.isalpha() and _entropy(value) >= _RANDOM_LETTERS_ENTROPY  # Cloudant's 24 letters


def _is_generated_secret(value: str) -> bool:
    """A generated salt or key of any characters (WordPress `AUTH_SALT`: `j@cGIZJf…|ZnLZ…(=_0[LKbF7…`): long, one
    line, as varied as random characters."""
    return (
        len(value) >= _SALT_SHORTEST
        and value.isascii()
        and value.count(" ") <= _SALT_SPACES
        and not _TWO_WORDS.search(value)  # `SELECT k.id FROM api_keys …`, `Key fingerprint = …`: words, not a salt
        and "\n" not in value
        and _entropy(value) >= _SALT_ENTROPY
    )


_SALT_SHORTEST, _SALT_ENTROPY, _SALT_SPACES = 32, 4.6, 3  # 64 characters drawn from ~90: ~5.5 bits each
_TWO_WORDS = re.compile(r"[A-Za-z]{3,} [A-Za-z]{3,}")
_RANDOM_LETTERS_ENTROPY = 3.6  # 24 random lower-case letters: ~4.0 bits; repeated or plain words stay lower


def _is_dotted_name(value: str) -> bool:
    """`settings.api_token`, `jetbrains.mps.v8`: a dotted name; `<key id>.<secret>` has a random part."""
    return bool(_DOTTED.fullmatch(value)) and not any(_looks_random(part) for part in value.split("."))


def _looks_like_code(value: str, following: str) -> bool:
    """An unquoted value that reads as a variable, attribute, call or type rather than a literal."""
    if following[:1] in ("(", "[", ".") or _CMDLET.fullmatch(value):
        return True
    if _is_dotted_name(value):
        return True
    if value.rstrip("?!").lower() in _TYPE_WORDS:
        return True  # `str`, Kotlin's `String?`
    if not _IDENTIFIER.fullmatch(value):
        return False
    return not any(c.isdigit() for c in value) or ("_" in value and value.islower())  # `pw`, `s3_client`


_PROSE_WORDS = frozenset(  # the words of labels and messages; `value with quotes and spaces` may be a passphrase
    "the is are be must should can will your you not this that please enter invalid incorrect wrong required "
    "password token secret key".split()
)


_LABEL_ROOTS = (  # "password" or "code" in other languages: a translated label (`"Gjenta passord"`)
    r"passord|passwort|wachtwoord|contrase[ñn]a|senha|l[öo]senord|adgangskode|salasana|has[łl]o|heslo|jelsz[óo]"
    r"|parola|parool|mot de passe|пароль|密码|密碼|パスワード|비밀번호|passcode|kode|c[óo]digo|codice"
)
_LABEL_WORD = re.compile(rf"^(?:{_LABEL_ROOTS})|(?:{_LABEL_ROOTS})$", re.IGNORECASE)  # `Passordene`, `engangskode`


_LABEL_PUNCTUATION = "¿¡()\"'.,:;!?"


def _is_translated_label(words: Sequence[str]) -> bool:
    """`"Gjenta passord"`, `"Engangskode:"`: plain words of a language (letters only, at most the first upper-case,
    no digits or symbols inside), one of them starting or ending with "password" or "code" in another language. A
    password holding such a word is not plain words (`SommerPasswort!`, `Kode-Hemmelig`, `mitt passord er
    Sommer2024!`)."""
    cores = [word.strip(_LABEL_PUNCTUATION) for word in words]
    if not cores or not all(core.isalpha() and core[1:] == core[1:].lower() for core in cores):
        return False
    return any(_LABEL_WORD.search(core) for core in cores)


def _is_prose(value: str) -> bool:
    """Quoted prose (labels, help texts, messages) rather than a credential; a passphrase of a few plain words
    (`correct horse battery staple`) is not prose, a translated label is (`_is_translated_label`)."""
    words = value.split()
    if _is_translated_label(words):
        return True
    if len(words) < 2:
        return False
    return len(words) >= 7 or any(word.lower().strip(".,:;!?") in _PROSE_WORDS for word in words)


# ---- secret-like names ------------------------------------------------------------------------------------------

_PASSWORD_SUFFIXES = (  # and the ways people shorten or misspell it: `X3_PSWD`, `PSSWD:=…`
    "password", "passwd", "passphrase", "pswd", "psswd", "pswrd", "psswrd", "paswd", "paswrd", "pasword", "psword",
    "pssword",
)
_PASSWORD_LAST = frozenset({"pwd", "pass", "pw"})  # only as the name's last part: DB_PASS, MYSQL_PWD
_TOKEN_LAST = "pat"  # a personal access token, only as the name's last part: AZURE_DEVOPS_EXT_PAT (not `pat_count`)
_JOINED_PASSWORD_END = "pwd"  # also closing a joined last part: `cloudantpwd`, `ibmpwd` (not `pass`: `bypass`, `compass`)
_JOINED_KEY_LONGEST = 12  # `iamkey`, `slkey`: a short joined `…key` is a generic key name (not `primarykeycolumn`)
_STRONG_SUFFIXES = (*_PASSWORD_SUFFIXES, "secret", "token", "credential", "credentials", "apikey")
_KEY_QUALIFIERS = frozenset(
    "api secret access private auth encryption signing master license client app service account webhook "
    "subscription admin session hmac jwt crypt encrypt decrypt cipher aes deploy consumer".split()
)
_NOT_SECRET_AFTER = frozenset(
    "length len min max limit limits count counts ttl expiry expires expiration expire expired timeout url uri urls "
    "endpoint host file files path paths dir directory name names type types kind id ids arn prefix suffix header "
    "headers hash hashed digest policy policies regex regexp pattern field fields env var variable size format mode "
    "enabled required optional hint label prompt placeholder help text message msg error errors description desc "
    "title tooltip caption question location provider source version rotation usage budget counter index idx "
    "strategy validator validation input widget lifetime age manager class method stdin command cmd helper store "
    "schema model test check strength score reset encoding algorithm alg scheme style color re "
    "sha1 sha256 sha512 md5 bcrypt reuse prevention last program".split()
)
_NOT_SECRET_BEFORE = frozenset(
    "is has show hide use should can allow enable disable require needs validate verify check hash hashed max min "
    "num total page next prev continuation cursor sync public no skip ignore mask masked redact redacted forgot "
    "invalid wrong bad missing empty".split()
)
_NOT_SECRET_KEY_QUALIFIERS = frozenset(  # database and storage keys: `bucket_key`, `primaryKey`, `schemaKey`
    "bucket foreign primary public pub schema sequence partition natural".split()
)
_DATA_KEY_QUALIFIERS = frozenset(  # `cacheKey`, `sort_key`, `idempotencyKey`: a key naming data, whatever its value
    # (not `content`, `routing`, `group`, `message`, `object`, `file`: DRM, PagerDuty, Pushover and HMAC keys)
    "cache etag hash digest checksum dedup dedupe idempotency lookup sort cursor index shard lock commit build "
    "artifact layer chunk page".split()
)
_DIGEST_KEY_QUALIFIERS = _NOT_SECRET_KEY_QUALIFIERS | _DATA_KEY_QUALIFIERS | frozenset(  # also ids: hex under them
    "record object file blob content request message event item entry image "
    "storage project tenant user account org organization customer device instance resource node workspace team "
    "region zone".split()
)
_AUTH_PARTS = frozenset({"auth", "authentication", "authorization", "salt"})  # `MAILJET_BASIC_AUTH`: a weak name, as `*_key`
_VENDOR_NAME_SHORTEST = 4  # `zenkit_key`, `tomtomKey`; not `cl_key` (a two-letter prefix says too little)
_CAMEL_BOUNDARY = re.compile(r"([a-z0-9])([A-Z])|([A-Z]+)([A-Z][a-z])")

_NONE, _WEAK, _STRONG = 0, 1, 2


@functools.lru_cache(maxsize=4096)  # a name is judged by several rules, a line of assignments repeats names
def _name_parts(name: str) -> tuple[str, ...]:
    """`config.dbPassword` -> ("db", "password"): the words of a name's last dotted segment (`token.tag` is
    an attribute of a token, not a token), two segments when the last is a bare `key` (`api.key`)."""
    segments = name.rstrip(".").rsplit(".", 2)
    last_segment = segments[-1]
    if last_segment.lower() == "key" and len(segments) > 1:
        last_segment = f"{segments[-2]}_{last_segment}"  # `cloudflare.api.key`: the segment before says which key
    spaced = _CAMEL_BOUNDARY.sub(lambda m: f"{m[1] or m[3]}_{m[2] or m[4]}", last_segment)
    return tuple(_PLURAL_PASSWORD.sub("", part) for part in re.split(r"[_\-\s]+", spaced.lower()) if part)


_PLURAL_PASSWORD = re.compile(r"(?:(?<=password)|(?<=passwd))s$")  # `ENV_PASSWORDS`: a list of passwords (not `max_tokens`)


def _is_password_name(name: str) -> bool:
    parts = _name_parts(name)
    return any(p.endswith(_PASSWORD_SUFFIXES) for p in parts) or (
        bool(parts) and (parts[-1] in _PASSWORD_LAST or parts[-1].endswith(_JOINED_PASSWORD_END))
    )


def _name_strength(name: str) -> int:
    """How strongly a name says its value is a credential: 2 (password, token, api_key), 1 (a generic `*_key`), 0."""
    parts = _name_parts(name)
    best, last_index = _NONE, -1
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part.endswith(_STRONG_SUFFIXES) or (
            last and (part in _PASSWORD_LAST or part == _TOKEN_LAST or part.endswith(_JOINED_PASSWORD_END))
        ):
            strength = _STRONG
        elif part == "key":
            if index and parts[index - 1] in _NOT_SECRET_KEY_QUALIFIERS or _names_a_data_key(parts):
                continue
            strength = _STRONG if index and parts[index - 1] in _KEY_QUALIFIERS else _WEAK
        elif part.endswith("key") and part[:-3] in _KEY_QUALIFIERS:
            strength = _STRONG
        elif part.endswith("key") and len(part) <= _JOINED_KEY_LONGEST and part[:-3] not in _NOT_SECRET_KEY_QUALIFIERS and not _names_a_data_key(parts):
            strength = _WEAK
        elif part in _AUTH_PARTS:
            strength = _WEAK
        else:
            continue
        best, last_index = max(best, strength), index
    if best == _NONE:
        return best
    if any(part in _NOT_SECRET_AFTER for part in parts[last_index + 1 :]):
        return _NONE
    if any(part in _NOT_SECRET_BEFORE for part in parts[:last_index]):
        return _NONE
    if {"image", "pull"} <= set(parts[:last_index]) or {"client", "request"} <= set(parts[:last_index]):
        return _NONE  # `imagePullSecrets` names a registry secret (`PULL_SECRET` holds one); `clientRequestToken` is an
        # idempotency id (`request_token` is OAuth's)
    return best


def _names_a_data_key(parts: tuple[str, ...]) -> bool:
    """`cache_key`, `sortKey`, `cachekey`: a data qualifier and `key`, nothing else (`ENCRYPTION_CACHE_KEY` and
    `STRIPE_IDEMPOTENCY_KEY` say more: their other word may mark a credential)."""
    if len(parts) == 1:
        return parts[0].endswith("key") and parts[0][:-3] in _DATA_KEY_QUALIFIERS
    return len(parts) == 2 and parts[1] == "key" and parts[0] in _DATA_KEY_QUALIFIERS


_ALNUM_ONLY = re.compile(r"[^a-z0-9]")
_TYPE_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")
_RESOURCE_NAME = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+){2,}")  # three or more lower-case parts
_NAMING_LAST = frozenset(
    "key keys secret secrets token tokens auth authentication credential credentials creds password config "
    "configuration id".split()
)
_IDENTIFIER_LIKE = re.compile(r"[A-Za-z0-9_.-]+")


def _names_a_secret(value: str, name: str) -> bool:
    """A value that names a secret instead of being one: `"DELETE_SECRET"`, `"api_token"`, `"challengePassword"`."""
    lowered = value.lower()
    if lowered == name.lower():
        return True
    if lowered in _name_parts(name):  # `POSTGRES_PASSWORD=postgres`: under a password's name, a service's or a
        # default account's name is its (default) password; any other word of the name (`NEW_PASSWORD=new`) names it
        return not (_is_password_name(name) and lowered in _DEFAULT_ACCOUNTS)
    spelled_value, spelled_name = _ALNUM_ONLY.sub("", lowered), _ALNUM_ONLY.sub("", name.lower())
    if spelled_value.startswith(spelled_name) and spelled_value[len(spelled_name) :].isdigit():
        return False  # `password = "Password123"`: the name's word with digits is the weak password itself
    if len(spelled_value) >= 6 and (spelled_value in spelled_name or spelled_name in spelled_value):
        # `KeyMeshing = "id-Gost28147-89-None-KeyMeshing"`: the value spells the name; under a password's name a
        # value marked as a password is the weak password (`Password=MyPassword123!`)
        return not (_is_password_name(name) and _is_weak_password_spelling(value))
    if not _IDENTIFIER_LIKE.fullmatch(value):
        return False
    if _RESOURCE_NAME.fullmatch(value) and re.split(r"[-_]", value)[-1] in _NAMING_LAST and not _is_password_name(name):
        return True  # `awx-postgres-configuration`, `k8s-infra-key`, `foo_client_id`: a resource's name (under a
        # password's name, `river-stone-auth` may be a passphrase)
    parts = _name_parts(value.replace(".", "_"))
    names_one = any(p.endswith(_STRONG_SUFFIXES) or p in ("key", "keys", "pass", "pwd") for p in parts)
    type_like = bool(_TYPE_NAME.fullmatch(value)) and sum(c.isupper() for c in value) >= 2  # `Ed25519PrivateKey`;
    # not `Password123` (one pattern, not `(?:[A-Z][A-Za-z0-9]*){2,}`: that splits a long upper-case run every way)
    return names_one and (type_like or not any(c.isdigit() for c in value))


_DEFAULT_ACCOUNTS = frozenset(  # services and accounts shipped with their own name as password
    "postgres postgresql mysql mariadb redis rabbitmq mongo mongodb admin root guest elastic kibana grafana minio sa "
    "oracle neo4j couchdb keycloak jenkins sonar sonarqube gitea airflow superset vault consul nexus".split()
)


def _is_weak_password_spelling(value: str) -> bool:
    """`MyPassword123!`, `Password2024`: one word of letters of both cases and digits, with a symbol or three digits,
    holding the word password; not an identifier (`confirmPassword2`, `password_v2`), a selector (`#add-password`), a tag
    (`!Ref …`), a blank (`ADMIN_PASSWORD_HERE!`) or code."""
    return (
        bool(_WEAK_SPELLING.fullmatch(value))
        and any(c.isdigit() for c in value)
        and (any(c in _PROSE_SYMBOLS for c in value) or sum(c.isdigit() for c in value) >= 3)
        and any(c.islower() for c in value)
        and any(c.isupper() for c in value)
    )


_WEAK_SPELLING = re.compile(r"[A-Za-z0-9][A-Za-z0-9!@$%^&*+=~?]{5,63}")


# ---- rules --------------------------------------------------------------------------------------------------------

Accept = Callable[[re.Match[str]], bool]


def _always(_: re.Match[str]) -> bool:
    return True


@dataclass(frozen=True)
class _Rule:
    """One way to recognise a secret. `groups`: the match groups that may hold the secret (first that matched)."""

    kind: str
    pattern: re.Pattern[str]
    groups: tuple[int | str, ...] = (0,)
    accept: Accept = _always
    trigger: re.Pattern[str] | None = None  # found (lower-cased) on the line of every match; None: look everywhere
    lines: int = 1  # how many lines from the trigger's a match may span
    retry_inside: bool = True  # whether a rejected match's text is searched again (a block judged whole: not)


def _has_letter_and_digit(m: re.Match[str]) -> bool:
    token = m.group(0)
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token.split("-", 1)[-1])


def _accept_literal(m: re.Match[str], group: str = "value") -> bool:
    return not _is_excluded_value(m.group(group))


def _accept_authorization(m: re.Match[str]) -> bool:
    value, scheme = m.group("any") or m.group("value"), (m.group("scheme") or "").strip().lower()
    if scheme and (not _has_balanced_brackets(value) or value.startswith(("@", "…", "..."))):
        return False  # `Bearer {token}`-like text cut at a blank, curl's `@file`, a shortened `…abcd1234`
    if _is_excluded_value(value) or (scheme == "basic" and _is_blank_basic(value)):
        return False
    return bool(scheme) or any(_looks_random(part) for part in value.split(":"))  # `<id>:<secret>`: the pair at once


def _is_blank_basic(value: str) -> bool:
    """`Basic bm9uZQ==` is base64 of `none`: Basic credentials whose decoded `user:password` is a placeholder."""
    try:
        decoded = base64.b64decode(value, validate=True).decode("ascii")
    except (ValueError, UnicodeDecodeError):  # binascii.Error, and non-ASCII text after `Basic `
        return False
    user, _, password = decoded.rpartition(":")
    return _is_excluded_value(password) or (bool(user) and not _is_password_slot(user, password))


def _line_start(text: str, position: int) -> int:
    """Where the line holding `position` starts."""
    return text.rfind("\n", 0, position) + 1


def _accept_flag(m: re.Match[str]) -> bool:
    """`--token <key>`; under a password name any literal word (`--password juniper`: a shell word is a string),
    but not the words of a sentence about the flag (`the --password flag`)."""
    name, value = m.group("name"), m.group("value")
    if _name_strength(name) != _STRONG or _is_excluded_value(value):
        return False
    if _is_password_name(name) and value.lower() not in _WORDS_ABOUT_FLAGS:
        return not _OPTIONAL_PASSWORD_COMMAND.search(m.string, _line_start(m.string, m.start()), m.start())
    return not _looks_like_code(value, "") or _looks_random(value)


_OPTIONAL_PASSWORD_COMMAND = re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)\b")  # `--password` alone prompts
_WORDS_ABOUT_FLAGS = frozenset(
    "flag flags option options argument arguments parameter parameters switch field prompt or and to is with when "
    "if for instead only first here again then too".split()
)


def _accept_xml(m: re.Match[str]) -> bool:
    return _name_strength(m.group("name")) == _STRONG and not _is_excluded_value(m.group("value"))


_SEPARATORS = re.compile(r"[-_.]")
_WORD_CHAR = re.compile(r"\w")


def _accepts_token(kind: str, word_start: bool) -> Accept:
    """The judgement of a provider token of `kind`; `word_start`: the token must not follow a word character
    (its pattern's leading `\\b`, checked here so the pattern keeps a literal prefix that the regex engine scans
    for fast)."""

    def accept(m: re.Match[str]) -> bool:
        if word_start and m.start() and _WORD_CHAR.match(m.string, m.start() - 1):
            return False
        return _is_provider_token(kind, m)

    return accept


def _is_provider_token(kind: str, m: re.Match[str]) -> bool:
    token = m.group(0)
    if token in _DOCUMENTED_EXAMPLES or _is_filler(stripped := _SEPARATORS.sub("", token)) or _is_chunk_filler(stripped):
        return False  # `xoxp-XXXXXXXXXX-XXXXXXXXXX-…`, `glc_EXAMPLETEST…`: filler between separators
    if _is_alphabet(token) or _is_alphabet(_SEPARATORS.split(token, maxsplit=1)[-1]):
        return False  # `sk-abcdef…`: a typed-out alphabet after the prefix
    long_parts = [part for part in _SEPARATORS.split(token)[1:] if len(part) >= 4]
    if long_parts and all(len(set(part)) == 1 for part in long_parts):
        return False  # `xoxb-0000000000-0000000000000-aaaaaaaaaaaa`: each part one character repeated
    if _VALUE_PLACEHOLDER.search(token):
        return False  # `xoxb-your-bot-token`
    if kind == "vault-token" and token.startswith("s."):  # legacy `s.` tokens: not `s.AcceptanceTimeoutSeconds`
        return _has_letter_and_digit(m) and not token[2:].isupper() and not token[2:].islower()
    if kind == "huggingface-token":  # random mixed case, not `hf_requiredCharacteristicTypesFor…`
        body = token.split("_", 1)[1]
        return sum(c.isupper() for c in body) >= 8 and sum(c.islower() for c in body) >= 8
    if kind == "clickhouse-key":  # not 42 hex digits of a digest
        return any(c.isupper() for c in token)
    if kind in ("truenas-key", "mandrill-key", "cratesio-token"):  # random mixed case, not a hex digest or a word
        return _has_letter_and_digit(m) and any(c.isupper() for c in token[3:]) and any(c.islower() for c in token[3:])
    if kind == "live-key":  # `rzp_live_…`, not a test function `run_test_oauth2Authentication`
        return _has_letter_and_digit(m) and not _CAMEL_CASE_WORDS.fullmatch(token.split("_", 2)[2])
    if kind in (KIND_OPENAI, "octopus-key", "discord-token", "onepassword-secret-key", "maxmind-key"):
        return _has_letter_and_digit(m)
    if kind == "telegram-token":  # not `clm99224:AgencyIdentificationCodeContentType`: a secret of words
        return not _CAPITALIZED_WORDS.fullmatch(token.split(":", 1)[1])
    if kind == KIND_SLACK:  # not `xoxp-1234567890` nor a prefix whose secret part is `####`
        return not token.endswith("-") and any(c.isalpha() for c in token[5:])
    return True


_CAPITALIZED_WORDS = re.compile(r"(?:[A-Z][a-z]{2,})+")
_CAMEL_CASE_WORDS = re.compile(r"[a-z]+\d*(?:[A-Z][a-z]{2,}\d*)+")  # `oauth2Authentication`, `parseUtf8Headers`


def _alternatives(pattern: str) -> list[str]:
    """A pattern's top-level `|` alternatives."""
    parts, depth, start, index, in_class = [], 0, 0, 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(pattern[start:index])
            start = index + 1
        index += 1
    return [*parts, pattern[start:]]


_TOKEN_TRIGGERS = {  # a literal part of every token of the kind, for patterns without a literal prefix to scan for
    "telegram-token": ":a",
    "azure-key": "q~",
    "facebook-token": r"eaa|\|",
    "mailchimp-key": "-us",
    "maxmind-key": "_mmk",
    "stripe-key": "_live_|_test_|whsec_",
    "huggingface-token": "hf_|api_org_",
    "twitter-bearer": "a" * 22,
    "lob-key": "live_|test_",
    "live-key": "live_|test_",  # lob-key's: one scan for both
    "plaid-token": "-sandbox-|-development-|-production-",
    "harness-pat": r"at\.",
    "mapbox-token": r"k\.",
    "newrelic-license-key": "nral",
    "truenas-key": r"-[a-z0-9]{64}",
}


def _provider_rules() -> tuple[_Rule, ...]:
    """One rule per alternative of each provider token pattern. Python's regex engine scans fast for a literal
    prefix (`AKIA`, `ghp_`) but tries every branch at every position of one big alternation, so each alternative
    is its own pattern and a leading `\\b` moves into the judgement; a kind without a literal prefix looks only at
    lines holding its literal part."""
    rules = []
    for kind, pattern in _PROVIDER_TOKENS:
        for alternative in _alternatives(pattern):
            word_start = alternative.startswith(r"\b")
            body = alternative[2:] if word_start else alternative
            trigger = _TOKEN_TRIGGERS.get(kind)
            rules.append(
                _Rule(
                    kind,
                    re.compile(body),
                    accept=_accepts_token(kind, word_start),
                    trigger=_trigger(trigger) if trigger else None,
                )
            )
    return tuple(rules)


def _accept_value_below_name(m: re.Match[str]) -> bool:
    """A key or token alone on the line below a credential name (not a URL, a path or a sentence)."""
    name, value = m.group("name") or m.group("tag"), m.group("value")
    if _name_strength(name) != _STRONG or _is_excluded_value(value) or _is_stand_in(name, value):
        return False
    if _names_a_secret(value, name):
        return False
    return _looks_like_credential(value) and not _looks_like_code(value, "")


def _accept_spaced_value(m: re.Match[str]) -> bool:
    """`softlayer-api-key <value>`: only under a strong name and for a value as random as a key or a long hex;
    under a password name (`ldap_bind_pw Ld4pB1nd`), letters with digits or symbols."""
    name, value = m.group("name"), m.group("value")
    if _name_strength(name) != _STRONG or _is_excluded_value(value) or _is_stand_in(name, value):
        return False
    if _names_a_secret(value, name):
        return False
    if _is_password_name(name):
        return _accept_prose_password_value(value)
    return bool(_TOKEN_CHARS.fullmatch(value)) and _looks_like_key(value)


def _accept_named_key(m: re.Match[str]) -> bool:
    """A key after a credential's name and blanks (or `is`), whatever the name's spelling: hex of 32 or more, a UUID,
    or letters and digits as random as a key (not a digest or id the word before names: `cache key <hex>`)."""
    name, value = m.group("name"), m.group("value")
    if _name_strength(name) == _NONE or _word_before(m.string, m.start()) in _NOT_KEY_QUALIFIERS:
        return False
    if _is_excluded_value(value) or _names_a_secret(value, name) or _is_labelled_hex(value) or _is_dotted_name(value):
        return False
    if value.startswith((*_SSH_PUBLIC_KEY_BODIES, *_DATA_BASE64)) or _HEX_NUMBER.fullmatch(value):
        return False  # an ssh public key, base64 media or JSON (a JWT has its own rule), a number
    return _is_key_value(value)


def _is_key_value(value: str) -> bool:
    """Hex of 32 or more, a UUID, a key's shape, or letters and digits as random as a key's."""
    return _looks_like_key(value) or _has_token_shape(value) or _is_random_key(value)


_RANDOM_KEY_SHORTEST = 16


def _is_random_key(value: str) -> bool:
    """`W7GMO5U71I2TN9DMTWCD`: 16 or more letters and digits, interleaved as no word or number is."""
    return (
        len(value) >= _RANDOM_KEY_SHORTEST
        and value.isalnum()
        and _is_random_identifier(value)
        and not _is_filler(value)
        and not _typed_share(value.lower(), loose=False)
    )


def _accept_name_value_pair(m: re.Match[str]) -> bool:
    """A `name:`/`value:` pair: judged as the value of that name."""
    name, value = m.group("name") or m.group("json_name"), m.group("value") or m.group("json_value")
    strength = _name_strength(name)
    if strength == _NONE or _is_excluded_value(value) or _is_stand_in(name, value) or _names_a_secret(value, name):
        return False
    return _is_named_credential(name, value) if strength == _STRONG else _looks_random(value)


_SECURE_STRING_TYPE = re.compile(r"(?i:--type)[ \t]+SecureString\b")
_COMMAND_REACH = 200  # how far from `--value` its command's `--type SecureString` may be


def _accept_set_command(m: re.Match[str]) -> bool:
    """`pulumi config set --secret NAME VALUE`, `mc alias set ALIAS URL ACCESS SECRET`: any literal value; `netlify
    env:set NAME VALUE`, `aws configure set NAME VALUE`: under a credential's name."""
    value = _first_group(m, "dq", "sq", "bare", "env_dq", "env_sq", "env_bare", "mc_dq", "mc_sq", "mc_bare")
    if value.startswith("-") or _is_excluded_value(value):
        return False
    return m.group("name") is None or _name_strength(m.group("name")) == _STRONG


def _accept_secure_string_value(m: re.Match[str]) -> bool:
    """`--value …` of a command (up to `|`, `;`, `&` or the line's end) that also says `--type SecureString`: found
    with a few string searches per `--value`, so a line of thousands of them stays linear."""
    text = m.string
    start = max(text.rfind(mark, max(0, m.start() - _COMMAND_REACH), m.start()) for mark in "\n|;&") + 1
    start = max(start, m.start() - _COMMAND_REACH)
    ends = [text.find(mark, m.end(), m.end() + _COMMAND_REACH) for mark in "\n|;&"]
    end = min([e for e in ends if e != -1] or [min(len(text), m.end() + _COMMAND_REACH)])
    value = _first_group(m, "dq", "sq", "bare")
    return not _is_excluded_value(value) and _SECURE_STRING_TYPE.search(text, start, end) is not None


def _accept_docker_auth(m: re.Match[str]) -> bool:
    """A Docker config `"auth"` is base64 of `user:password`; other `auth` fields are left alone."""
    try:
        decoded = base64.b64decode(m.group("value") or m.group("npm"), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    user, _, password = decoded.partition(":")
    return bool(user) and bool(password) and decoded.isprintable()


_PROSE_SYMBOLS = frozenset("!@#$%^&*+=~?")
_YAML_TAG = re.compile(r"![A-Za-z]+")  # `password: !secret db_password`


def _accept_prose_password(m: re.Match[str]) -> bool:
    return _accept_prose_password_value(m.group("value"))


def _accept_prose_password_value(value: str) -> bool:
    """`the password is Kestrel-4471`: a value with letters and digits (or symbols), not a word like `required`."""
    if _is_excluded_value(value) or "://" in value or _YAML_TAG.fullmatch(value):
        return False
    has_letter = any(c.isalpha() for c in value)
    return has_letter and (any(c.isdigit() for c in value) or any(c in _PROSE_SYMBOLS for c in value[:-1]))


def _accept_prose_token(m: re.Match[str]) -> bool:
    """`the Zendesk API token is fCh95aMw…`: a value as random as a key (`the token is expired` is a sentence;
    `the cache key … is v3-<hex>` names a digest)."""
    value = m.group("value")
    if _is_excluded_value(value) or _word_before(m.string, m.start()) in _NOT_KEY_QUALIFIERS or _is_labelled_hex(value):
        return False
    return _looks_like_key(value)


def _accept_spaced_prose_key(m: re.Match[str]) -> bool:
    """A key-like value right after `token`/`api key`, unless the word before says digest or id (`cache key <hex>`)."""
    before = _WORD_BEFORE.search(m.string, max(0, m.start() - 40), m.start())
    qualifier = before.group(1).lower() if before else ""
    value = m.group("value")
    if qualifier in _NOT_KEY_QUALIFIERS or qualifier in _NOT_SECRET_BEFORE or _is_excluded_value(value):
        return False
    return _looks_like_key(value) and not value.startswith(_SSH_PUBLIC_KEY_BODIES)


_WORD_BEFORE = re.compile(r"([A-Za-z]+)[ \t_-]*$")
_NOT_KEY_QUALIFIERS = _DIGEST_KEY_QUALIFIERS | {"host", "ssh", "gpg", "pgp", "kms", "known"}  # keys that are not secrets
_SSH_PUBLIC_KEY_BODIES = ("AAAAB3NzaC1", "AAAAC3NzaC1", "AAAAE2VjZHNh")


def _looks_like_key(value: str) -> bool:
    """As random as a key, or a long hex key (shorter hex reads as an id or a short hash)."""
    return _looks_random(value) or (len(value) >= _HEX_KEY_SHORTEST and bool(_HEX_OR_UUID.match(value)))


_HEX_KEY_SHORTEST = 32


def _is_hex_key(value: str) -> bool:
    """32 to 64 hex digits, letters and digits both, not filler (a UUID, with its dashes, is an id)."""
    return "-" not in value and _is_mixed_hex(value, _HEX_KEY_SHORTEST) and not _is_filler(value)


def _is_mixed_hex(value: str, shortest: int) -> bool:
    """`shortest` to 64 hex digits, or a UUID, holding letters and digits both: the shape of a vendor's hex key
    (all digits is a number, all letters a word)."""
    return (
        shortest <= len(value) <= 64
        and bool(_HEX_OR_UUID.match(value))
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
    )


_ANNOTATED = re.compile(r"[A-Za-z_][\w.\[\]|, ]{0,80}?[ \t]=")  # `password: str = Field(...)`: Python, not YAML


def _accept_yaml_phrase(m: re.Match[str]) -> bool:
    """A YAML password of several words with a digit or symbol; `new_password: New password` is a label."""
    value = m.group("value")
    if " " not in value or not _is_password_name(m.group("name")) or _name_strength(m.group("name")) != _STRONG:
        return False
    if _is_excluded_value(value) or _is_prose(value) or _ANNOTATED.match(value):
        return False
    if value.split()[0].rstrip("?!").lower() in _TYPE_WORDS:
        return False  # Kotlin's `val signingPassword: String? by project`: a type
    return any(c.isdigit() or c in _PROSE_SYMBOLS for c in value)


_KV_VALUE_GROUPS = ("v_esc", "v_dq", "v_sq", "v_bt", "v_bare")
_YAML_INDENT = re.compile(r"[ \t]*(?:-[ \t]+)?")


def _is_env_style(m: re.Match[str]) -> bool:
    """`DB_PASSWORD=hunter2`, `Password=…;`: a tight `=` after an upper-case name, as in .env files, shells,
    connection strings; unlike a keyword argument (`password=pw`), its bare value is a literal."""
    name = m.group("name")
    tight = m.group("sep") == "=" and not m.group("sp1") and not m.group("sp2")
    return tight and (not any(c.islower() for c in name) or name[:1].isupper())


def _is_yaml_literal(m: re.Match[str]) -> bool:
    """`password: changeme` alone on its line: YAML, where a bare word is a string, not a variable."""
    if m.group("sep") != ":" or m.group("kq"):
        return False
    text, window = m.string, 120  # look no further than a YAML line's indent and trailing comment
    newline_before = text.rfind("\n", max(0, m.start() - window), m.start())
    if newline_before == -1 and m.start() > window:
        return False
    newline_after = text.find("\n", m.end(), m.end() + window)
    if newline_after == -1 and len(text) > m.end() + window:
        return False
    rest = text[m.end() : newline_after if newline_after != -1 else len(text)].strip()
    return (not rest or rest.startswith("#")) and bool(_YAML_INDENT.fullmatch(text, newline_before + 1, m.start()))


def _is_config_line(m: re.Match[str]) -> bool:
    """`db.password=plumtree`, `password = lighthouse` at the start of a line, the value running to its end:
    .properties, INI and gradle.properties, where a bare value is a literal (code assigns inside a block, indented,
    or ends its statement with `;`)."""
    if m.group("sep") not in ("=", ":") or m.group("kq"):
        return False
    text = m.string
    if _line_start(text, m.start()) != m.start() or text.startswith(("self.", "this.", "cls."), m.start()):
        return False
    line_end = text.find("\n", m.end())
    rest = text[m.end() : len(text) if line_end == -1 else line_end].strip()
    if rest and not rest.startswith("#"):
        return False
    value = m.group("v_bare") or ""
    return not ("_" in value and _IDENTIFIER.fullmatch(value))  # `auth_token = refresh_token_v2`: a variable


def _is_url_parameter(m: re.Match[str]) -> bool:
    """`?user=root&password=tamarind`, `;password=…;`: a query or connection-string parameter is a literal."""
    return m.group("sep") == "=" and m.start() > 0 and m.string[m.start() - 1] in "?&;"


def _is_shell_word(m: re.Match[str]) -> bool:
    """`--password=tamarind`, `psql "… password=heron …"`, `-e ansible_become_pass=heather`: a tight `name=value`
    word of a command line, whose bare value is a string; a keyword argument (after `(` or `,`, or followed by
    `,` `)` `(` `.`) is code."""
    if m.group("sep") != "=" or m.group("sp1") or m.group("sp2") or m.group("kq") or not m.start():
        return False
    text = m.string
    if text[m.start() - 1] not in " \t=-":
        return False
    before = text[max(0, m.start() - 200) : m.start()].rstrip(" \t=-\n")
    return not before.endswith((",", "(")) and text[m.end() : m.end() + 1] not in (",", ")", "(", ".", "[")


def _is_yaml_tag(m: re.Match[str]) -> bool:
    """`!secret db_password`, `!Ref DBPasswordParam`, `!vault |`: a YAML tag and what it applies to."""
    return bool(_YAML_TAG.fullmatch(m.group("v_bare"))) and m.string[m.end() : m.end() + 2].strip(" \t")[:1] not in ("", "\n")


def _inside_placeholder(text: str, position: int) -> bool:
    """`[REDACTED:openai-key]=…`: a placeholder's kind names no credential (else redacting twice differs)."""
    opened = text.rfind("[REDACTED:", max(0, position - 40), position)
    return opened >= 0 and "]" not in text[opened:position]


def _runs_into_placeholder(text: str, end: int) -> bool:
    """`…EXAMPLEpassword=[REDACTED:password]`: the value goes on in a placeholder, so it is the rest of a value another
    rule redacted, judged with it (redacting the text again would otherwise take more)."""
    return text.startswith("[REDACTED:", end)


def _is_tight_password_pair(m: re.Match[str], name: str, value: str) -> bool:
    """`ID:master PW:dipPr10Gg!`, `password:!Dd5G4s9`: credentials written down as a pair with no blank after the
    colon (docs, tickets, notes): under a password's name, a value of six or more characters with letters and digits
    or symbols; not a type (`password:string`), a member (`pw:this.pw`), a call or a shell expansion
    (`${DB_PASSWORD:?missing}`)."""
    return (
        _is_password_name(name)
        and _is_written_tight(m)
        and len(value) >= _TIGHT_PASSWORD_SHORTEST
        and _accept_prose_password_value(value)
        and not _CODE_IN_VALUE.search(value)
    )


def _is_written_tight(m: re.Match[str]) -> bool:
    """`name:value` with no blank around the colon, and not a shell expansion's `${NAME:-…}` or `${NAME:?…}`."""
    return not m.group("sp1") and not m.group("sp2") and m.string[max(m.start() - 1, 0) : m.start()] != "{"


_TIGHT_PASSWORD_SHORTEST = 6
_CODE_IN_VALUE = re.compile(r"[A-Za-z_]\w*[.(\[]|[(){};]")


def _is_tight_key_pair(m: re.Match[str], name: str, value: str) -> bool:
    """`token:AIhq5Xyb1Gga9Q2`, `SECRET KEY:…`: a key written down right after its name and a colon, shorter than
    `_looks_random` asks (12 characters or more) but as mixed as a key: upper and lower case and digits, one token;
    under a strong name (token, secret, api key), not a type (`token:TokenKind`) or a dotted name."""
    strong = _name_strength(name) == _STRONG or _word_before(m.string, m.start()) in _KEY_QUALIFIERS
    return (
        strong
        and _is_written_tight(m)
        and len(value) >= _TIGHT_KEY_SHORTEST
        and bool(_TOKEN_CHARS.fullmatch(value))
        and any(c.isdigit() for c in value)
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and not _is_dotted_name(value)
        and _mean_segment(value) <= _RANDOM_SEGMENT_LONGEST  # not a type: `V1SecretList`, `OAuth2AccessToken`
    )


def _mean_segment(value: str) -> float:
    """The mean length of a value's case and digit runs: a random key's are short (`AIhq5Xyb1Gga9Q2`: 1.7), a
    type's or a name's long (`Int32Literal`: 4)."""
    segments = _SEGMENT.findall(value)
    return sum(map(len, segments)) / len(segments) if segments else 0.0


_TIGHT_KEY_SHORTEST = 12


def _accept_assignment(m: re.Match[str]) -> bool:
    """A value assigned to a secret-like name, judged by the form of the assignment and the value's look."""
    name = m.group("name")
    strength = _name_strength(name)
    if strength == _NONE or _inside_placeholder(m.string, m.start()):
        return False
    group = next(g for g in _KV_VALUE_GROUPS if m.group(g) is not None)
    value = m.group(group)
    if _is_excluded_value(value) or _is_stand_in(name, value) or _names_a_secret(value, name):
        return False
    if m.string[m.end() : m.end() + 1] in ("<", "{", "$"):
        return False  # `dop_v1_<your-token>`: the start of a template, not a value
    if _runs_into_placeholder(m.string, m.end()):
        return False
    sep = m.group("sep")
    if group == "v_bare" and sep in (":", "::") and (not m.group("sp2") or (sep == ":" and m.group("sp1") and not m.group("kq"))):
        dotted = "." in name or m.string[m.start() - 1 : m.start()] == "."
        tight_dotted = dotted and not m.group("sp1") and not m.group("sp2")  # `io.jsonwebtoken:jjwt-api…`
        tight_pair = _is_tight_password_pair(m, name, value) or _is_tight_key_pair(m, name, value)
        if sep == "::" or tight_dotted or not (_looks_random(value) or tight_pair):
            return False  # `Pass :meth:`, `input:TokenStream`, `token::Kind`: not a key-value pair (`key:<random>` is)
    if sep == "," and (group != "v_bare" or m.group("sp1") or m.group("sp2") or not _looks_random(value)):
        return False  # a CSV row `fooToken,<random>,` and nothing else: `f(token, other)`
    if group == "v_bare" and _is_yaml_tag(m):
        return False  # `password: !secret db_password`, `!Ref DBPassword`: a YAML tag naming where the value is
    env_style = _is_env_style(m) or _is_config_line(m) or _is_url_parameter(m) or _is_shell_word(m)
    if group == "v_bare" and not env_style:
        if value.isdigit() and len(value) < 6:
            return False  # ports, counts, lifetimes
        following = m.string[m.end() : m.end() + 1]
        if _looks_like_code(value, following) and not _is_yaml_literal(m) and not _is_random_identifier(value):
            return False  # a variable (`refresh_token_v2`), unless it is as random as a key: `kucoinToken = x7k2_p9q…`
    if strength == _WEAK:  # not `key = "datasets/2019/part-0.parquet"`
        qualifier = _word_before(m.string, m.start())
        if qualifier in _NOT_KEY_QUALIFIERS:
            return False  # `cache key: v2-deps-<hex>`
        if qualifier not in _KEY_QUALIFIERS:  # `api key: <hex>` is as strong as `api_key`
            vendor_name = f"{qualifier}_{name}" if qualifier else name  # `clay key: <20 hex>`
            if ("/" in value and not _is_base64_key(value)) or _is_labelled_hex(value):
                return False  # `key: deps-<hex>`: a cache key; `key: datasets/2019/part-0.parquet`: a path
            return (
                _looks_random(value)
                or (bool(_TOKEN_CHARS.fullmatch(value)) and _has_token_shape(value))
                or _is_vendor_hex_key(vendor_name, value)
                or _is_auth_hex_key(name, value)
            )
    if _is_password_name(name) and (group == "v_bare" or env_style):
        return True  # a .env or shell password may be a phrase: `KEYSTORE_PASSWORD='my secret pass 9'`
    if group == "v_bare" and env_style:
        return True
    return _is_named_credential(name, value)




def _is_labelled_hex(value: str) -> bool:
    """`node-modules-<hex>`, `v3-<hex>`: words or a version, then a hex digest; a cache key, not a credential."""
    *labels, digest = re.split(r"[-_.:]", value)
    return (
        bool(labels)
        and len(digest) >= 7
        and all(c in string.hexdigits for c in digest)
        and all(_LABEL.fullmatch(label) and label not in _CREDENTIAL_PREFIX_PARTS for label in labels)
    )  # `key_<hex>`, `sk-<hex>`: a credential's prefix, not a label


_LABEL = re.compile(r"[A-Za-z][a-z]+|v\d{1,3}")  # `Linux-pnpm-store-<sha256>` too


def _word_before(text: str, start: int) -> str:
    """The word before a name on its line (`cache` of `cache key: …`), lower-cased; empty if none."""
    line_start = text.rfind("\n", max(0, start - 40), start) + 1
    before = _WORD_BEFORE.search(text, max(line_start, start - 40), start)
    return before.group(1).lower() if before else ""


def _is_stand_in(name: str, value: str) -> bool:
    """`API_TOKEN=short`, `API_KEY=abcdef1234`: a word of a few letters or a value typed out in order under a key or
    token name is a stand-in (keys and tokens are longer and random); under a password or secret name it may be the
    (weak) password itself (`DB_PASSWORD=test1234`, `SECRET_KEY=password123`), so it is redacted there."""
    if _is_password_name(name) or _is_secret_name(name) or "secret" in _name_parts(name):
        return False
    return (
        (len(value) < _KEY_SHORTEST and value.isalpha())
        or _is_typed_filler(value.strip())
        or _CHANGE_ME.fullmatch(value.strip()) is not None  # `API_TOKEN=changeme` (`DB_PASSWORD=changeme` is one)
    )


_CHANGE_ME = re.compile(r"change[-_]?me", re.IGNORECASE)


_KEY_SHORTEST = 8
_VENDOR_HEX_SHORTEST = 20  # `clay_key = <20 hex>`: vendors' hex keys run from 20 digits (a short git SHA has 7 to 12)


def _is_vendor_hex_key(name: str, value: str) -> bool:
    """`zenkit_key = <20 to 64 hex>`, `postageapp_key: <uuid>`: many vendors issue hex or UUID API keys; such a value
    under `<vendor>_key` is one, unless the word before `key` says digest or id (`cache_key`, `tenant_key`)."""
    if not _is_mixed_hex(value, _VENDOR_HEX_SHORTEST):
        return False
    parts = _name_parts(name)
    if not parts or not parts[-1].endswith("key"):
        return False
    qualifier = parts[-1][:-3] or (parts[-2] if len(parts) > 1 else "")
    return _is_vendor_word(qualifier) and qualifier not in _DIGEST_KEY_QUALIFIERS


def _is_auth_hex_key(name: str, value: str) -> bool:
    """`CURL_HEADER_AUTHENTICATION=<40 hex>`: under a name ending in auth a hex key is the credential, not a digest."""
    parts = _name_parts(name)
    return bool(parts) and parts[-1] in _AUTH_PARTS and _is_hex_key(value)


def _is_named_credential(name: str, value: str) -> bool:
    """A quoted value under a strong name: passwords may be phrases (not prose), a secret may be a word
    (`secret="wildflower"`), other secrets look like keys (`" 7awgM4… "`: the spaces inside the quotes are not)."""
    if _is_password_name(name):
        return not _is_prose(value)
    value = value.strip()
    return _looks_like_credential(value) or (_is_secret_name(name) and bool(_SECRET_WORD.fullmatch(value)))


_SECRET_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{5,63}")  # one word of six or more: a label has spaces or a dot


def _is_secret_name(name: str) -> bool:
    """`secret`, `client_secret`, `webhookSecret`: a name whose last part says secret, so its value is one."""
    parts = _name_parts(name)
    return bool(parts) and parts[-1].endswith("secret")


def _accept_named_fallback(name: str, value: str) -> bool:
    """A literal standing in when a credential's lookup finds nothing: judged as if assigned to that name, a password
    with letters and digits or symbols (`|| "not-set"` is a sentinel)."""
    return (
        _name_strength(name) == _STRONG
        and not _is_excluded_value(value)
        and not _names_a_secret(value, name)
        and _is_named_credential(name, value)
        and (not _is_password_name(name) or _accept_prose_password_value(value))
    )


_JWK_TYPE = re.compile(r"(?:\\?\"|')kty(?:\\?\"|')")  # `"kty"`, escaped in a JSON string, or a Python dict's `'kty'`
_JWK_REACH = 1500  # how far from a member its object's `"kty"` may be: a 4096-bit RSA JWK is about 3 KB
_WORDS_JOINED = re.compile(r"[A-Za-z]{3,}_[A-Za-z]{3,}")  # `user_profile_settings`: words, not base64url


def _in_jwk(text: str, start: int, end: int) -> bool:
    """Whether the member at `start:end` sits in the object that says `"kty"`: no brace between them."""
    before = text[max(0, start - _JWK_REACH) : start]
    last = None
    for last in _JWK_TYPE.finditer(before):
        pass
    if last is not None and "}" not in before[last.end() :]:
        return True
    after = text[end : end + _JWK_REACH]
    first = _JWK_TYPE.search(after)
    return first is not None and "{" not in after[: first.start()] and "}" not in after[: first.start()]


def _accept_jwk_member(m: re.Match[str]) -> bool:
    """A JWK's private member is base64url of key bytes: not words joined by underscores, a hex digest or a UUID."""
    value = m.group("value")
    return (
        _in_jwk(m.string, m.start(), m.end())
        and not _WORDS_JOINED.search(value)
        and not _HEX_OR_UUID.match(value)
        and not _is_excluded_value(value)
    )


_LOGIN_USER_WORD = re.compile(r"(?i)user|email|mail|login|name|dn|who|account|addr|sender|from|principal|id")
_LOGIN_NOT_USERS = frozenset(  # a strategy or a mechanism named before its option, not a user
    "google github gitlab facebook twitter apple microsoft azure local jwt basic bearer digest oauth oauth2 saml ldap "
    "oidc openid kerberos ntlm plain sha1 sha256 sha512 md5 scram".split()
)
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")
_LDAP_DN = re.compile(r"(?i)(?:cn|uid|ou|dc|o)=")
_MECHANISM = re.compile(r"(?i)scram-sha-\d+|sha-?\d+|md5|plain|oauth2?|v\d+(?:\.\d+)*")
_CALL_ARGUMENT = re.compile(r"\"[^\"]*\"|'[^']*'|`[^`]*`|[^,]+")


def _accept_login_password(m: re.Match[str]) -> bool:
    """The last argument of a login call is its password when the one before it is a user: a quoted name or a
    variable saying user, email, login or dn (`login(page, "user@example.com")`, `authenticate(conn, "SCRAM-SHA-256")`
    and `passport.authenticate("google", "oauth2")` name no password)."""
    value = m.group("value")
    if not _accept_prose_password_value(value) or _is_prose(value):
        return False
    if _EMAIL.fullmatch(value) or _LDAP_DN.match(value) or _MECHANISM.fullmatch(value):
        return False
    arguments = _CALL_ARGUMENT.findall(m.group("before"))
    user = arguments[-1].strip() if arguments else ""
    if user[:1] in ("\"", "'", "`"):
        return user[1:-1].strip().lower() not in _LOGIN_NOT_USERS
    return bool(_IDENTIFIER.fullmatch(user.split(".")[-1])) and (
        bool(_LOGIN_USER_WORD.search(user)) or (user.isupper() and len(user) > 1)
    )


_PROMPT_END = ("#", "$", ">", "%", ":")  # the next shell prompt, not an answer
_HOST_PORT = re.compile(r"[\w.-]+:\d{1,5}/?")
_ISO_DATE = re.compile(r"\d{4}-\d\d-\d\d")
_STORE_QUERY = re.compile(r"--query[= \t]+[\"']?([^\s\"']+)")
_SECRET_QUERY = re.compile(r"(?i)secretstring|(?:^|[.\]])value\b")  # `SecretString`, `Parameter.Value`, `value`
_INHERENT_STORE = re.compile(  # commands whose one-line answer is a secret whatever it is named
    r"secretsmanager|gcloud|security|keyvault|pass[ \t]+show|bw[ \t]")
_STORE_FIELD = re.compile(  # the field or parameter a store command reads, for the rest
    r"-field[= \t]+[\"']?([\w.-]+)|--fields?[= \t]+[\"']?(?:label=)?([\w.-]+)|op://[^\s\"']*/([\w.-]+)"
    r"|config:get[ \t]+([A-Za-z_]\w*)|secrets[ \t]+get[ \t]+([A-Za-z_]\w*)|--names?[= \t]+[\"']?(?:[^\s\"']*/)?([\w.-]+)"
    r"|\.data\.([\w.-]+)|\.data\[[\"']?([\w.-]+)"
)


def _accept_store_answer(m: re.Match[str]) -> bool:
    """The line below a secret store's read is the secret: whatever it is named from a store of secrets (Secrets
    Manager's `SecretString`, a keychain's `-w`, `pass show`), under a credential's name from the others (`vault kv
    get -field=password`, `op read op://…/token`, `heroku config:get API_KEY`; not `NODE_ENV`), and after `echo
    $NAME` under a credential's name; never an error, the next prompt, an ARN, a date, `host:port` or a reference."""
    value = m.group("value")
    if _is_excluded_value(value) or value.startswith(("$", "-", "(", "{", "[", "<", "\"", "arn:")) or value.endswith(_PROMPT_END):
        return False
    if _HOST_PORT.fullmatch(value) or _ISO_DATE.match(value):
        return False
    if not (_accept_prose_password_value(value) or _looks_random(value)):
        return False  # `continue`, `production`: the next line of a script, or a setting
    name = m.group("env") or m.group("echo") or m.group("cmd") or m.group("ps")
    if name is not None:
        return _name_strength(name) == _STRONG and _is_named_credential(name, value)
    store, arguments = m.group("store"), m.group("args")
    if (query := _STORE_QUERY.search(arguments)) and not _SECRET_QUERY.search(query.group(1)):
        return False  # `--query ARN`, `--query VersionId`: not the secret
    if store.startswith("kubectl") and "base64" not in arguments:
        return False  # still encoded (the base64 rule judges it) or a table
    if store.startswith("security") and not _KEYCHAIN_PRINTS_PASSWORD.search(arguments):
        return False  # without `-w` the keychain prints the item's attributes
    field = _STORE_FIELD.search(arguments)
    if field is not None and _name_strength(next(group for group in field.groups() if group)) == _STRONG:
        return True
    return bool(_INHERENT_STORE.search(store)) or ("ssm" in store and "--with-decryption" in arguments)


_KEYCHAIN_PRINTS_PASSWORD = re.compile(r"(?:^|[ \t])-[A-Za-z]*w\b")


def _accept_tool_password(m: re.Match[str]) -> bool:
    """A tool's password option holds a literal (not an option, a variable or `%…%`); ssh-keygen's `-N`/`-P` and
    atuin's `-p`/`-k` only on a line running that command (`-N ''` sets no passphrase)."""
    value = _first_group(m, "dq", "sq", "bare")
    if value.startswith(("-", "$", "%")) or _is_excluded_value(value):
        return False
    for group, command in (("keygen", "ssh-keygen"), ("atuin", "atuin")):
        if m.group(group):
            before = m.string[max(_line_start(m.string, m.start()), m.start() - 300) : m.start()]
            at = before.rfind(command)
            return at != -1 and not _COMMAND_SEPARATOR.search(before, at)  # not `ssh-keygen -lf k; grep -P …`
    return True


_COMMAND_SEPARATOR = re.compile(r"[|;&]")
_EXPANSION = re.compile(r"\$\(|\$\{|%\(|\{\{")  # `tmp-$(date +%s)`: filled in when the command runs


_NOT_A_PASSWORD_FIELD = re.compile(r"(?i)hint|reset|strength|forgot|policy|rule|meter|length|expir")


def _accept_typed_password(m: re.Match[str]) -> bool:
    """What automation types into a password field is the password, unless the field is about one (a hint, a reset,
    a strength meter) or the text is a sentence."""
    value = _first_group(m, "value", "filled")
    field = m.group("field") or m.group("selector") or m.group("receiver") or ""
    return _accept_prose_password_value(value) and not _is_prose(value) and not _NOT_A_PASSWORD_FIELD.search(field)


def _accept_config_set(m: re.Match[str]) -> bool:
    """`config set NAME VALUE` under a credential's name (redis' `requirepass` too); a signing key's id or
    fingerprint (`user.signingkey 3AA5C34371567BD2`) is public."""
    name, value = m.group("name"), _first_group(m, "dq", "sq", "bare")
    if value.startswith("-") or (name.lower().endswith("signingkey") and _is_hex_digits(value)):
        return False
    if name.lower() in ("requirepass", "masterauth"):
        return not _is_excluded_value(value)
    return _accept_named_fallback(name, value)


def _is_hex_digits(value: str) -> bool:
    return all(c in string.hexdigits for c in value)


def _accept_named_element(m: re.Match[str]) -> bool:
    """An element named for a credential holds it when the name ends in the credential's word (not
    `passwordEncoder`, `secretKeyRef`, `passwordToggleDrawable`); not an Android string (a message), a resource
    reference (`@drawable/…`) or a bean's name."""
    parts = _name_parts(m.group("name"))
    if m.group("tag") == "string" or not parts or _name_strength(parts[-1]) == _NONE:
        return False
    if _RESOURCE_REFERENCE.match(m.group("value")):
        return False
    return _accept_named_value(m)


_RESOURCE_REFERENCE = re.compile(r"[@?][\w:.]*/")


def _accept_named_value(m: re.Match[str]) -> bool:
    """`<add key="ClearTextPassword" value="…"/>`, `define('DB_PASSWORD', '…')`: a name and its quoted value."""
    groups = m.groupdict()
    name = groups.get("name") or groups.get("entry_name") or groups.get("element")
    value = groups.get("value") or groups.get("entry") or groups.get("element_value")
    strength = _name_strength(name)
    if strength == _NONE or _is_excluded_value(value) or _is_stand_in(name, value) or _names_a_secret(value, name):
        return False
    return _is_named_credential(name, value) if strength == _STRONG else _looks_random(value) or _is_generated_secret(value)


_QUOTED_VALUE = (
    r"""(?:[rbuRBU@]?\\"(?P<v_esc>[^"\\\n]{1,400})\\\""""
    r"""|[rbuRBU@]?"(?P<v_dq>(?:[^"\\\n]|\\.){1,400})\""""
    r"""|[rbuRBU]?'(?P<v_sq>[^'\n]{1,400})'"""
    r"""|`(?P<v_bt>[^`\n]{1,400})`"""
    r"""|(?P<v_bare>[^\s"'`,;&|()<>{}\[\]\\=][^\s"'`,;&|()<>{}\[\]\\]{0,400}))"""
)

_STDIN_PASSWORD = r"\bsudo[ \t]+(?:-[A-Za-z]{1,4}[ \t]+){0,4}-S\b|\bpasswd[ \t]+--stdin\b|\bchpasswd\b"  # read a password from stdin
_SHELL_WORD = r"""(?:\\?"(?P<dq>[^"\n]{1,1024}?)\\?"|'(?P<sq>[^'\n]{1,1024})'|(?P<bare>[^\s"']{1,1024}))"""  # `\"…\"` too: a
# command line inside a JSON string


def _first_group(m: re.Match[str], *groups: str) -> str:
    return next(m.group(g) for g in groups if m.group(g) is not None)


def _is_password_slot(user: str, value: str) -> bool:
    """The password of `user:PASS` in a URL or `curl -u`: any literal counts, even the word `password`; blanks
    (`<user:password>`, `$USER:$TOKEN`, `****`), a default equal to the user (`guest:guest`) and the documented
    pair of two placeholder words (`user:password`, `user:secret`) do not."""
    if user.lower() in _PLACEHOLDER_USERS and _VALUE_WORD.match(value):
        return False
    if value.lower() in _URL_PLACEHOLDER_PASSWORDS:
        return False  # `postgres://admin:password@db…`, `mongodb://user:changeme@localhost`: how examples write it
    return not _is_blank(value) and not _is_blank(f"{user}:{value}") and value != user


_PLACEHOLDER_USERS = frozenset({"user", "usr"})
_URL_PLACEHOLDER_PASSWORDS = frozenset(
    "password passwd pass pwd secret changeme mypassword yourpassword your_password your-password".split()
)


def _is_command_password(user: str, value: str) -> bool:
    """`curl -u user:PASS`: as in a URL, except that a word (`username:password`, `user:token`) is how docs write it;
    not `date -u +%Y-%m-%dT%H:%M:%SZ`, a time format."""
    return _is_password_slot(user, value) and not _VALUE_WORD.match(value) and not _TIME_FORMAT.search(user)


_TIME_FORMAT = re.compile(r"^\+|%[A-Za-z]")  # `date`'s `+FORMAT` and its `%H` directives


def _is_encoded_private_key(m: re.Match[str]) -> bool:
    return b"PRIVATE KEY" in _decoded_quads("".join(m.group(0)[:100].split())[:80])  # wrapped lines joined


def _is_token_like(m: re.Match[str]) -> bool:
    """Not words joined by dots (`eyebrows.eyelids.`): a token's first part has a digit or a capital letter."""
    head = m.group(0).split(".", 1)[0]
    return any(c.isdigit() or c.isupper() for c in head)


def _decoded_base64(text: str) -> bytes:
    """`text` as base64 (standard or url-safe), padding restored; b"" when it is not base64."""
    body = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        return b""


def _decoded_quads(text: str) -> bytes:
    """The whole 4-character groups of `text` as base64 (a match may end inside one)."""
    return _decoded_base64(text[: len(text) // 4 * 4])


def _is_sidekiq_credential(m: re.Match[str]) -> bool:
    if _SIDEKIQ_HOST.match(m.string, m.end()):
        return True
    line_end = m.string.find("\n", m.end())
    line = m.string[_line_start(m.string, m.start()) : len(m.string) if line_end == -1 else line_end]
    return "sidekiq" in line.lower() and bool(_SIDEKIQ_CONTEXT.search(line))


_SIDEKIQ_HOST = re.compile(r"@(?:gems|enterprise)\.contribsys\.com", re.IGNORECASE)
_SIDEKIQ_CONTEXT = re.compile(r"(?i)licen[cs]e|credential|\bpro\b|enterprise|bundle|sensitive")


def _is_unsigned_jwt(m: re.Match[str]) -> bool:
    """Two base64url parts whose first is a JWT's header: JSON naming `alg` or `typ`."""
    header = m.group(0).split(".", 1)[0]
    try:
        decoded = base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)).decode("utf-8", "replace")
    except (ValueError, binascii.Error):
        return False
    return decoded.startswith("{") and ('"alg"' in decoded or '"typ"' in decoded)


def _is_encoded_jwt(m: re.Match[str]) -> bool:
    """`ZXlK…` decodes to `eyJ…`: a JWT, or its header, when the decoded text is base64url with a dot or is long."""
    return bool(_ENCODED_JWT.match(_decoded_quads(m.group(0))))


def _holds_encoded_secret(m: re.Match[str]) -> bool:
    """Base64 that decodes to text (UTF-8, printable) in which the rules find a secret. Random tokens and digests
    decode to binary and are dropped after a few bytes; decoded text is decoded again at most once more (a manifest
    encoded whole, its values encoded too), so the work stays within twice the text's."""
    depth = _decoding_depth.get()
    if depth >= _ENCODED_DEPTH:
        return False
    lines = m.group(0).split()
    decoded = _decoded_text("".join(lines))
    if decoded is None and len(lines) > 1:
        decoded = _decoded_text("".join(lines[:-1]))  # a word after the block (`Done`) read as its last line
    if decoded is None:
        return False
    token = _decoding_depth.set(depth + 1)
    try:
        return bool(find_secrets(decoded))
    finally:
        _decoding_depth.reset(token)


def _decoded_text(run: str) -> str | None:
    """`run` decoded from base64 when that gives printable UTF-8 text (judged on a few bytes first: random bytes
    fail there)."""
    if not _is_printable_probe(_decoded_quads(run[:_ENCODED_PROBE])):
        return None
    try:
        decoded = _decoded_quads(run).decode("utf-8")
    except UnicodeDecodeError:
        return None
    return decoded if _is_printable(decoded) else None


def _is_printable_probe(data: bytes) -> bool:
    """The first bytes of a decoding read as text (a multi-byte character cut at their end still counts)."""
    if not data:
        return False
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(data) - 3:
            return False
        text = data[: error.start].decode("utf-8")
    return _is_printable(text)


def _is_printable(text: str) -> bool:
    """Letters, digits, punctuation and whitespace: no control characters."""
    return bool(text) and all(c.isprintable() or c in "\n\r\t" for c in text)


_ENCODED_SHORTEST = 24  # base64 of `postgres://u:pw@db/app`, 18 bytes, is 24 characters
_ENCODED_LONGEST = 16000
_ENCODED_LINES = 2000  # a wrapped block judged whole: 2,000 lines of 76 columns, 150 KB
_WRAP_WIDTHS = (76, 64)
_ENCODED_PROBE = 16  # 12 bytes: enough to tell text from random bytes, all printable ~1 time in 10^5
_ENCODED_DEPTH = 2
_decoding_depth: contextvars.ContextVar[int] = contextvars.ContextVar("decoding_depth", default=0)


_ENCODED_JWT = re.compile(rb"eyJ[A-Za-z0-9_-]{8,}(?:\.|[A-Za-z0-9_-]{24})")
_KEY_FIELD = re.compile(rb'"(?:k|key|api_?key|secret|client_secret|token|access_token|password|private_key)"\s*:\s*"[^"]{8}')


def _is_encoded_key_object(m: re.Match[str]) -> bool:
    """`eyJrIjoi…` decodes to `{"k":"<8 or more characters>…`: an object holding a key, not data."""
    return bool(_KEY_FIELD.search(_decoded_quads(m.group(0))))


def _has_key_body(m: re.Match[str]) -> bool:
    """A PEM block with a base64 body, however short when the block is whole (a test key's `AAAA`);
    `-----BEGIN … PRIVATE KEY----------END …` is an empty template, `…PRIVATE KEY-----\nMIIE...\n-----END` a
    shortened one."""
    block = m.group(0)
    if "END" not in block[-40:]:
        return bool(_KEY_BODY.search(block))
    if _KEY_BODY.search(block):
        return True
    body = _WHOLE_BLOCK_BODY.search(block)  # a short body: data (`AAAA`), not words (`key goes here`) or `MIIE...`
    return bool(body) and not re.search(r"\w[ \t]+\w|\.\.\.|…", _ESCAPED_BREAK.sub("\n", block[body.start(1) : block.rfind("END")]))


_KEY_BODY = re.compile(r"[A-Za-z0-9+/]{20}")
_ESCAPED_BREAK = re.compile(r"\\[rn]")
_WHOLE_BLOCK_BODY = re.compile(r"PRIVATE KEY(?: BLOCK)?-{2,5}(?:\s|\\[rn])*([A-Za-z0-9+/]{4})")
_PGPASS_LINES = 50  # how far below `~/.pgpass` (a `cat`, a comment) its lines are read
_PEM_LINES = 400  # a key block's lines: a 4096-bit RSA key has about 50, a PGP block a few hundred


def _accept_symbol_password(m: re.Match[str]) -> bool:
    """`db_pass: m{{h}o)p${e]nob(ody…`: a password of symbols whose brackets do not close, as templates' do."""
    value = m.group("value")
    return (
        _is_password_name(m.group("name"))
        and _name_strength(m.group("name")) == _STRONG
        and any(c in "([{" for c in value)  # opens a bracket, unlike `(password: string) =>` or `${PW:?missing}`
        and not _has_balanced_brackets(value)
        and not _is_excluded_value(value)
    )


def _trigger(pattern: str) -> re.Pattern[str]:
    """A rule's trigger: lower-case text that every line holding a match holds (see `_Rule.trigger`)."""
    return re.compile(pattern)


_RARE_COMMANDS = _trigger(  # one scan for the rules of rare commands and forms, each then judged on these lines only
    "psexec|paexec|slcli|cargo|wandb|ngrok|snyk|doctl|netlify|networkcredential|directoryentry|unseal|/api/v1/|pulumi|keyvault|configure|alias"
)
_CALL_FORMS = _trigger(  # one scan for the login and browser automation calls
    r"(?:log_?in|log_?on|sign_?in|authenticate|bind_s|simple_bind|signinwithemailandpassword|fill|type|send_?keys"
    r"|press_?sequentially|set_?value)\("
)
_TOOL_FORMS = _trigger(r"zip|7z|storepass|keypass|ldap|smbclient|openssl|freerdp|cmdkey|net[ \t]+use|poetry|rclone|ssh-keygen|atuin")
_ANSWER_FORMS = _trigger(  # one scan for the rules that read the line below a command or a prompt
    r"secretsmanager|ssm|gcloud|vault|op |keyvault|find-generic|find-internet|doppler|infisical|config:get|pass show"
    r"|bw get|kubectl|printenv|echo[ \t]+\"?[$%]|\$env:|sqlplus|password|passphrase"
)
_NAME_WORD = _trigger(r"pass|pw|ps{1,2}w|pasw|secret|token|credential|key|auth|salt|_pat\b|-pat\b")  # in every name `_name_strength` accepts


# ---- credential-shaped tokens: no known prefix, no name ---------------------------------------------------------
# A key of a vendor no rule knows still has a key's shape: a short lower-case prefix and a random body
# (`tvly-…`, `pcsk_…`, `sk-or-v1-…`), or a random run of 24 to 100 letters of both cases and digits standing on its
# own (a call's argument, a command's operand, a list item, a line of its own). Known safe shapes stay: ids with a
# known prefix (`toolu_…`, `msg_…`, `cus_…`, `i-…`), hex digests and UUIDs, names and paths (long
# word-like parts), hashes after their label (`sha256:`, `h1:`, `sha512-…`), base64 media and PEM or ssh key
# bodies, lines of a wrapped base64 block; and a value with a name (`rookTable = …`, `"nonce": "…"`) is left to
# the name rules, which judge the name.

_TOKEN_RUN = re.compile(  # a run may start with base64's `+`, not with `/` (a path)
    r"(?:(?<=[A-Za-z0-9_]=)|(?<![A-Za-z0-9+/=_~.\\%-]))(?P<value>[A-Za-z0-9+][A-Za-z0-9+/_~.\\%-]{18,4000}[A-Za-z0-9]={0,2})(?![A-Za-z0-9+/=_~\\%-])"
)
_PREFIXED_TOKEN = re.compile(r"(?P<prefix>[a-z][a-z0-9]{1,11}(?:[_-][a-z0-9]{1,11}){0,2}[_-])(?P<body>[A-Za-z0-9][\w-]{18,250})")
_ID_PREFIXES = frozenset(  # objects' ids, not credentials: Anthropic, OpenAI, Stripe, AWS, Clerk, and generic ones
    "toolu srvtoolu msg msgbatch req request call run thread asst file batch org proj chatcmpl cmpl resp item ft "
    "ftjob modr vs step cus pi ch evt acct prod price sub in ii txn src pm seti cs po tr re py ba card tok ic "
    "i vol snap ami sg subnet vpc eni igw rtb nat acl eipalloc lt r sess session user usr id uid ref job build "
    "commit sha md5 cache node pod deploy img image layer ws spec ulid "
    "rs fc ctc fs ci ig lsh mcp mcpl mcpr conv".split()  # OpenAI Responses items: reasoning, function call, …
)
_CREDENTIAL_PREFIX_PARTS = frozenset("sk rk key api apikey pat token tok secret pt pk pass pwd auth".split())
_SEGMENT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")
_RANDOM_SEGMENT_LONGEST = 3.0  # mean length of a token's case and digit runs: random ~1.5–2.5, names 4 and more
_RANDOM_TOKEN_ENTROPY = 3.6  # bits per character: 24 random letters and digits have ~4.3
_BARE_TOKEN_LENGTHS = (24, 100)
_HASH_LABEL = re.compile(
    r"(?i)(?:sha-?\d{0,3}|md5|h1|blake2[bs]?|xxh\d*|crc32|fingerprint|hash|digest|checksum|etag|integrity|nonce|salt)"
    r"[\"']?[ \t]*[:=]?[ \t]*[\"']?$"
)
_NAMED_VALUE_BEFORE = re.compile(r"[\w\]\"'`.-][\"'`\]]?[ \t]*(?::{1,2}|=>?|:=|->)[ \t]*[\"'`]?[ \t]*$")
_DATA_BASE64 = (  # base64 of images, fonts, PDFs, XML and JSON (`eyJ` is `{"`; a JWT has its own rule)
    "iVBORw0KGgo", "R0lGOD", "PHN2Zy", "PD94bWwg", "d09GMg", "d09GRg", "UklGR", "AAAA", "Qk0", "SUkq", "JVBERi0", "eyJ",
    "gAAAAA",  # a Fernet token: encrypted data (version byte 0x80, then a timestamp), not a key
)
_PLACEHOLDER_PREFIXES = frozenset("foo bar baz qux test dummy fake example sample my your demo".split())
_PLACEHOLDER_AT_END = re.compile(r"\[REDACTED:[a-z0-9-]+\]$|\[REDACTED:password\][ \t]+$")
"""The end of a placeholder right before a value: the rest of a value another rule redacted, or the word after a
password that took a name (`password=token: <key>`: only a password's placeholder, so a key after another
placeholder, which sessionmem's own output may put in a transcript, is still judged)."""
_PEM_BLOCK_LONGEST = 16_000  # a certificate or key block: the private key rule reads 12,000 characters
_NOT_PEM_BODY = re.compile(r"[^A-Za-z0-9+/=\s\\:,-]")  # ends the body of a block cut short, as the private key rule reads it
_DATA_BEFORE = ("base64,", "ssh-rsa ", "ssh-ed25519 ", "$", "}", "@")  # media, ssh keys, `$6$salt$HASH`, `{SSHA}…`, `pkg@…`
_PATH_WORD = re.compile(r"[a-z]{3,}|[A-Z][a-z]{2,}|\.{1,2}|~")
_FILE_NAME = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")


def _is_random_body(body: str) -> bool:
    """Letters and digits as random as a key's: short case and digit runs, no typed-out alphabet or filler."""
    alnum = body.replace("_", "").replace("-", "")
    if len(alnum) < 20 or _VALUE_PLACEHOLDER.search(body) or _HEX_OR_UUID.match(alnum):
        return False
    has_upper, has_lower = any(c.isupper() for c in alnum), any(c.islower() for c in alnum)
    digits = sum(c.isdigit() for c in alnum)
    if not digits or _entropy(alnum) < _RANDOM_TOKEN_ENTROPY:
        return False
    if _is_filler(alnum) or _typed_share(alnum.lower(), loose=False):
        return False  # a random key almost never has four letters or digits in a row (`…abcd123`)
    if has_upper and has_lower:
        segments = _SEGMENT.findall(alnum)
        return sum(map(len, segments)) / len(segments) <= _RANDOM_SEGMENT_LONGEST
    switches = sum(1 for a, b in zip(alnum, alnum[1:]) if a.isdigit() != b.isdigit())
    return len(alnum) >= 32 and switches >= 8  # base32 and base36 keys (one case: long letter runs), not ULIDs


def _is_prefixed_credential(m: re.Match[str]) -> bool:
    """`tvly-dev-…`, `pcsk_…`, `sk-or-v1-<hex>`: a short lower-case prefix that is not an id's or a placeholder's,
    then a random body (a hex body only after a credential-like prefix part: `sk`, `key`, `pat`…)."""
    parts = re.split(r"[_-]", m.group("prefix").rstrip("_-"))
    if parts[0] in _ID_PREFIXES or parts[0] in _PLACEHOLDER_PREFIXES:
        return False
    body = m.group("body")
    if _HEX_OR_UUID.match(re.sub(r"[_-]", "", body)) or _HEX_OR_UUID.match(body):
        if any(part in _CREDENTIAL_PREFIX_PARTS for part in parts):
            return len(body) >= _PREFIXED_HEX_SHORTEST
        hex_digits = re.sub(r"[_-]", "", body)
        return (  # `bkua_<40 hex>`, `cr-<58 hex>`; not `glpaa-aaaa…` nor `xoxb-0000…`
            len(body) >= _HEX_KEY_SHORTEST
            and _is_vendor_prefix(parts[0])
            and not _is_filler(hex_digits)
            and any(c.isdigit() for c in hex_digits)
            and any(c.isalpha() for c in hex_digits)
        )
    return _is_random_body(body)


_PREFIXED_HEX_SHORTEST = 24  # `key_<28 hex>`: after a credential word a shorter hex body is still a key


def _is_vendor_prefix(word: str) -> bool:
    """`bkua`, `zpka`, `cr`, `live`: a vendor's short key prefix, not a word naming data (`deps`, `git`, `sha`)."""
    return (
        word.isalpha()
        and 2 <= len(word) <= 5
        and word not in _DATA_NAME_PARTS
        and word not in _HEX_DATA_WORDS
    )


_HEX_DATA_WORDS = frozenset(  # words before a hex run that is a digest or an id, beside `_DATA_NAME_PARTS`
    "git hg svn pr ci rc br mr deps dep pkg npm tmp temp tree head base parent obj blob lock snap sum crc hex key "
    "shasum md5sum sha1sum sha256sum sha512sum release build run job task node event trace span asset chunk part".split()
)


_NAME_BEFORE = re.compile(r"([A-Za-z_][\w.-]{0,60})[\"'`]?[ \t]*(?::{1,2}|=>?|:=|->)[ \t]*[\"'`]?[ \t]*$")
_DATA_NAME_PARTS = frozenset(  # names of random values that are data: ids, digests, nonces, states, signatures
    "id ids uid uuid guid oid hash digest checksum sum nonce salt etag sha sha1 sha256 md5 integrity cursor state ref "
    "commit version rev revision signature sig fingerprint challenge verifier iv seed trace span request correlation "
    "name title label tag image path url uri file data blob content body payload hint value values example "
    "cert certs certificate certificates crt pem der x5c x5t ca chain pub pubkey modulus exponent thumbprint "
    "address addr owner signer mint wallet payer recipient sender by".split()  # `"owner": <base58 account>`, `redeemed_by`
)


def _names_data(before: str, value: str) -> bool:
    """The name before a random value says what it is: a vendor's name (`mistral: <key>`) leaves it a credential;
    an id, a digest, a nonce or a signature (`"etag": …`, `request_id = …`), or no readable name, data; a name with
    a credential word (`public_key`, `api_token`) is judged by the name rules."""
    named = _NAME_BEFORE.search(before)
    if not named:
        return True
    parts = _name_parts(named.group(1))
    if not parts or any(part in _DATA_NAME_PARTS for part in parts):
        return True
    if parts == ("project",):
        return bool(_HEX_OR_UUID.match(value))  # `project: <32 hex>` is an id (`MIXPANEL_PROJECT: <hex>` a token)
    if _NAME_WORD.search(named.group(1).lower()):  # judged by the name rules, unless they see no credential in it
        return _name_strength(named.group(1)) != _NONE or any(p in _PUBLIC_PARTS for p in parts) or _names_a_data_key(parts)
    return False


_JWK_PUBLIC_MEMBER = re.compile(r"(?:\\?\"|')(?:x|y|n|e|kid)(?:\\?\"|')[ \t]*:[ \t]*(?:\\?\"|')$")
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_BASE58_RUN = re.compile(f"[{_BASE58}]{{32,44}}")
_SOLANA_CONTEXT = re.compile(r"(?i)solana|lamports?\b|pubkey|program[ _-]?id|\bspl\b")
_SOLANA_REACH = 2000  # how far from an address the words saying Solana may be


def _is_solana_address(text: str, start: int, value: str) -> bool:
    """A base58 run that decodes to 32 bytes, standing alone where the text speaks of Solana (lamports, a pubkey, a
    program id, SPL): an ed25519 public key, not a credential (under a `*_key` name it may be a 32-byte seed). A
    secret key is 64 bytes (87 or 88 characters), and a base58-looking key elsewhere is still judged as a key (a
    43-character random key avoids 0, O, I and l about one time in twenty)."""
    if not _BASE58_RUN.fullmatch(value):
        return False
    number = 0
    for char in value:
        number = number * 58 + _BASE58.index(char)
    leading_zero_bytes = len(value) - len(value.lstrip("1"))
    if leading_zero_bytes + (number.bit_length() + 7) // 8 != 32:
        return False
    return _SOLANA_CONTEXT.search(text, max(0, start - _SOLANA_REACH), start + len(value) + _SOLANA_REACH) is not None


_PUBLIC_PARTS = frozenset({"public", "pub"})  # `public_key = <base64>`: published, not a credential
_PUBLIC_CALL_PARTS = _PUBLIC_PARTS | {"pubkey", "address"}
_CALL_BEFORE = re.compile(r"([A-Za-z_][\w.]{0,60})\([ \t]*[\"'`]?$")


def _stands_alone(text: str, start: int, end: int) -> bool:
    """Not a named value, not a hash after its label, not base64 media, not inside a PEM block or a wrapped base64
    block: the places where a random token is data rather than a credential."""
    newline_before = text.rfind("\n", max(0, start - _LINE_REACH), start)
    line_start = newline_before + 1 if newline_before != -1 or start <= _LINE_REACH else None  # None: far back
    before = text[max(line_start or 0, start - 80) : start]
    if _HASH_LABEL.search(before) or before.endswith(_DATA_BEFORE):
        return False
    if (call := _CALL_BEFORE.search(before)) and _PUBLIC_CALL_PARTS.intersection(_name_parts(call.group(1))):
        return False  # `new PublicKey("<base58>")`: a public key or an address, built from its text
    if _JWK_PUBLIC_MEMBER.search(before) and _in_jwk(text, start, end):
        return False  # a public JWK's coordinates and modulus (`"x"`, `"y"`, `"n"`, `"e"`): published, not a key
    if _is_solana_address(text, start, text[start:end]):
        return False  # a Solana account, program or mint address in a table or a list
    if _NAMED_VALUE_BEFORE.search(before) and (_names_data(before, text[start:end]) or _HEX_NUMBER.fullmatch(text, start, end)):
        return False  # `group_order = 0x8CB91E82…`: a named number written in hex
    if _PLACEHOLDER_AT_END.search(before) or _runs_into_placeholder(text, end):
        return False  # the rest of a value another rule redacted: judged with it (keeps redaction idempotent)
    begin = text.rfind("-----BEGIN", max(0, start - _PEM_BLOCK_LONGEST), start)
    if begin != -1 and text.find("-----END", begin, start) == -1:
        header_end = text.find("-----", begin + 10, start)
        if header_end == -1 or not _NOT_PEM_BODY.search(text, header_end + 5, start):
            return False  # inside a PEM block (a block cut short ends where its base64 body does)
    line_end = text.find("\n", end, end + _LINE_REACH)
    if line_end == -1 and end + _LINE_REACH < len(text) or line_start is None:
        return True  # on a line running far past the token (searched no further: one huge line of tokens stays linear)
    line_end = len(text) if line_end == -1 else line_end
    alone_on_line = _NOT_BLANK.search(text, line_start, start) is None and _NOT_BLANK.search(text, end, line_end) is None
    return not (alone_on_line and _is_wrapped_base64_line(text, line_start, line_end))


_LINE_REACH = 4096  # how far `_stands_alone` looks for the ends of a token's line
_NOT_BLANK = re.compile(r"\S")


def _is_wrapped_base64_line(text: str, line_start: int, line_end: int) -> bool:
    """The line between the offsets has a neighbour line of 40 or more token characters: a base64 block. For a line
    of 40 or more itself, a neighbour that is a placeholder counts too: it was such a line before it was redacted
    (keeps redaction idempotent); a shorter token beside a placeholder is judged as any other."""
    previous = text[text.rfind("\n", 0, max(line_start - 1, 0)) + 1 : max(line_start - 1, 0)] if line_start else ""
    next_end = text.find("\n", line_end + 1)
    following = text[line_end + 1 : len(text) if next_end == -1 else next_end] if line_end < len(text) else ""
    long_line = len(text[line_start:line_end].strip()) >= 40
    return any(
        (len(line.strip()) >= 40 and _TOKEN_CHARS.fullmatch(line.strip()))
        or (long_line and PLACEHOLDER_RE.fullmatch(line.strip()))
        for line in (previous, following)
    )


_WEBHOOK_SECRET_SHORTEST = 16
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}")


def _is_webhook_secret(part: str) -> bool:
    """A part of a webhook's path that is its secret: 16 or more letters and digits, both (not `deliveries`, not a
    ULID: `/webhook/deliveries/01ARZ3NDEK…` names a delivery)."""
    return (
        len(part) >= _WEBHOOK_SECRET_SHORTEST
        and not _ULID.fullmatch(part)
        and any(c.isdigit() for c in part)
        and any(c.isalpha() for c in part)
        and not _is_excluded_value(part)
    )


def _accept_webhook_path(m: re.Match[str]) -> bool:
    parts = m.group("path").split("/")
    if any(_is_webhook_secret(part) for part in parts):
        return True
    host = m.group("host").lower()
    return host.startswith(("hooks.", "webhooks.")) and "example" not in host and any(_is_hook_id(part) for part in parts)


def _is_hook_id(part: str) -> bool:
    """`3ouwv7m`: a short hook id (letters and digits) on a webhook host is the URL's secret."""
    return len(part) >= 5 and part.isalnum() and any(c.isdigit() for c in part) and any(c.isalpha() for c in part)


_HEX_NUMBER = re.compile(r"0[xX][0-9A-Fa-f]+")


def _has_token_shape(value: str) -> bool:
    """A prefixed key (`_is_prefixed_credential`), or 24 to 100 random letters of both cases and digits that are
    not base64 media, a file name, a dotted name, a path or a version."""
    if "\\" in value or "%" in value or value in _DOCUMENTED_EXAMPLES:
        return False
    if prefixed := _PREFIXED_TOKEN.fullmatch(value.rstrip("=")):  # `essu_…AAAANx5Zs4=`: base64 padding
        return _is_prefixed_credential(prefixed)
    low, high = _BARE_TOKEN_LENGTHS
    if not low <= len(value) <= high or value.startswith(_DATA_BASE64) or _FILE_NAME.search(value) or _DOTTED.fullmatch(value):
        return False
    if "/" in value and any(_PATH_WORD.fullmatch(part) for part in value.split("/")):
        return False  # a path
    if re.search(r"[._~+/-]", value.rstrip("=")) and not re.fullmatch(r"[A-Za-z0-9+/]+=*|[A-Za-z0-9_-]+=*", value):
        return False  # dotted or mixed separators: a version, a host, a file name
    if _UUID_AND_WORDS.fullmatch(value):
        return False  # `<uuid>-plan`: an id with a word (`0x<64 hex>` stays a key's shape: a wallet's private key)
    if _is_public_bech32(value):
        return False  # an age recipient (`age1…`), a Bitcoin or Cosmos address: published, checksummed
    return _is_random_body(value.rstrip("="))  # one case: base32 and base36 keys (`_is_random_body` asks more)


_BECH32 = re.compile(r"(?P<hrp>[a-z]{1,10})1(?P<data>[qpzry9x8gf2tvdw0s3jn54khce6mua7l]{38,90})")
_BECH32_CHARSET = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_AGE_RECIPIENT_DATA = 58
_BECH32_SECRET_PARTS = frozenset({"nsec", "secret", "key"})  # nostr's `nsec1…` is a private key


def _is_public_bech32(value: str) -> bool:
    """A bech32 or bech32m string with a valid checksum (`age1…`, `bc1q…`, `cosmos1…`) under a human-readable part
    that names no secret: a public key or an address. age's own secret keys are upper case (`AGE-SECRET-KEY-1…`)."""
    m = _BECH32.fullmatch(value)
    if m is None or m.group("hrp") in _BECH32_SECRET_PARTS:
        return False
    if m.group("hrp") == "age" and len(m.group("data")) == _AGE_RECIPIENT_DATA:
        return True  # an X25519 recipient by its fixed shape
    hrp, data = m.group("hrp"), [_BECH32_CHARSET.index(c) for c in m.group("data")]
    checksum = 1
    for digit in [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp] + data:
        top = checksum >> 25
        checksum = (checksum & 0x1FFFFFF) << 5 ^ digit
        for bit, generator in enumerate((0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)):
            checksum ^= generator if top >> bit & 1 else 0
    return checksum in (1, 0x2BC830A3)  # bech32, bech32m


_UUID_AND_WORDS = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}(?:[-_][A-Za-z]+)+")


_BASE64_KEY = re.compile(r"[A-Za-z0-9+/]{32,}={0,2}")


def _is_base64_key(value: str) -> bool:
    """`a/9WysJY…+ABa…==`: 32 or more random base64 characters of both cases and digits (Azure's and many vendors'
    keys); a path has readable words between its slashes."""
    body = value.rstrip("=")
    return (
        bool(_BASE64_KEY.fullmatch(value))
        and any(c.isupper() for c in body)
        and any(c.islower() for c in body)
        and _is_random_body(body)
    )


def _accept_shaped_token(m: re.Match[str]) -> bool:
    start, end = m.span("value")
    shaped = _has_token_shape(m.group("value")) or _is_vendor_named_hex(m.string, start, end)
    return shaped and _stands_alone(m.string, start, end)


def _is_vendor_named_hex(text: str, start: int, end: int) -> bool:
    """`assemblyai = <32 hex>`, `ai21: <uuid>`, `deepgram-api: <40 hex>`: a hex or UUID key right after a vendor's
    name (a word that names no data: not `commit`, `sha256`, `etag`, `release`); hex alone is a digest or an id."""
    value = text[start:end]
    if not _is_mixed_hex(value, _HEX_KEY_SHORTEST):
        return False
    named = _NAME_BEFORE.search(text, max(0, start - 80), start)
    if not named or "\n" in named.group(0):
        return False
    parts = _name_parts(named.group(1))
    if len(value) in _DIGEST_LENGTHS and not _KEY_PARTS & set(parts):
        return False  # `SRCREV_moby = <40 hex>`: a commit; `deepgram-api: <40 hex>` names a key
    return (
        bool(parts)
        and _is_vendor_word(parts[0])
        and not _is_filler(value)
        and not any(part in _DATA_NAME_PARTS or part in _HEX_DATA_WORDS or part in _ENTITY_NAMES for part in parts)
    )


_ENTITY_NAMES = frozenset(  # `customer=<uuid>`, `order: <32 hex>`: a record's id in a log line, not a vendor's key
    "customer user account order invoice tenant org organization workspace team session device job task "
    "build event item product resource instance node cluster subscription payment transaction charge message thread "
    "channel document record entity object parent child group member client deployment environment region zone "
    "installation application app store shop cart booking ticket issue incident alert".split()
)
_DIGEST_LENGTHS = (40, 64)  # SHA-1 (git commits) and SHA-256 in hex
_KEY_PARTS = frozenset({"api", "auth", "apikey"})


def _is_vendor_word(word: str) -> bool:
    """`deepgram`, `ai21`, `assemblyai`: four or more letters and digits, at least half of them letters."""
    return len(word) >= _VENDOR_NAME_SHORTEST and word.isalnum() and sum(c.isalpha() for c in word) * 2 >= len(word)


_RULES: tuple[_Rule, ...] = (
    _Rule(  # a PEM, OpenSSH or PGP private key block in any carrier: plain lines, `\n`-escaped in JSON or a
        # string, its dashes shortened (`--BEGIN PRIVATE KEY--`)
        KIND_PRIVATE_KEY,
        re.compile(
            # dashes possessive and a block starting at its first dash, its body stopping at another BEGIN: a
            # line of headers (`grep` output, `--BEGIN PRIVATE KEY--` repeated) costs no backtracking
            r"(?<!-)-{2,5}+BEGIN[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-{2,5}+"
            r"(?:(?:(?!-BEGIN)[\s\S]){0,12000}?-{2,5}+END[ A-Z0-9]{0,20}PRIVATE KEY(?: BLOCK)?-{2,5}+"
            r"|(?:\s|\\[rn])++(?:(?!-BEGIN)[A-Za-z0-9+/=\s\\:,-]){40,12000})"  # a block cut short (trimmed output): its base64 body
        ),
        accept=_has_key_body,
        trigger=_trigger("private key"),
        lines=_PEM_LINES,
    ),
    _Rule(  # a PuTTY key file's private part: the base64 lines after `Private-Lines: N`
        KIND_PRIVATE_KEY,
        re.compile(r"(?m)Private-Lines:[ \t]*\d{1,3}[ \t]*\r?\n(?P<value>[A-Za-z0-9+/=]{4,200}\r?$(?:\n[A-Za-z0-9+/=]{4,200}\r?$){0,99})"),
        ("value",),
        trigger=_trigger("private-lines"),
        lines=101,
    ),
    _Rule(  # a PEM private key encoded once more in base64 (Kubernetes `tls.key:`, CI variables): `LS0tLS1CRUdJTi…`,
        # one line or wrapped (`base64` wraps at 76 columns: each wrapped line whole, a short last one padded)
        KIND_PRIVATE_KEY,
        re.compile(
            r"\bLS0tLS1CRUdJTi[A-Za-z0-9+/]{40,16000}={0,2}"
            r"(?:\r?\n(?:[A-Za-z0-9+/]{20,200}={0,2}|[A-Za-z0-9+/]{1,19}={1,2})(?=\r?\n|$)){0,%d}" % _PEM_LINES
        ),
        accept=_is_encoded_private_key,
        trigger=_trigger("ls0tls1crudjti"),
        lines=_PEM_LINES,
    ),
    *_provider_rules(),
    _Rule(
        KIND_AWS,
        re.compile(
            r"(?i)(?:aws[_.-]?secret[_.-]?(?:access[_.-]?)?key|secret[_.-]?access[_.-]?key)"
            r"\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
            r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"
        ),
        ("value",),
        _accept_literal,
        _NAME_WORD,
    ),
    _Rule(  # a secret right after its key id (AWS `AKIA…:<40>`, GCS HMAC `GOOG…` then the secret on the next line)
        KIND_AWS,
        re.compile(
            r"\b(?:AKIA|ASIA|ABIA|ACCA|GOOG)[A-Z0-9]{16,57}[\"']?[ \t]*(?:[:,;=|/][ \t]*|\r?\n[ \t]*|[ \t]+)[\"']?"
            r"(?P<value>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("value",),
        lambda m: not _is_blank(m.group("value")) and _looks_like_credential(m.group("value")),
        _trigger("akia|asia|abia|acca|goog"),
        lines=2,
    ),
    _Rule(
        KIND_ANTHROPIC,
        re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,400}"),
        accept=_accepts_token(KIND_ANTHROPIC, word_start=False),  # not `sk-ant-xxxx…`: filler
        trigger=_trigger("sk-ant-"),
    ),
    _Rule(
        KIND_OPENAI,
        re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,400}"),
        accept=_accepts_token(KIND_OPENAI, word_start=False),
        trigger=_trigger("sk-"),
    ),
    _Rule(
        KIND_WEBHOOK,
        re.compile(
            r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<slack>[A-Za-z0-9/_-]{16,300})"
            r"|discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/(?P<discord>[\w-]{60,100})"
            r"|\.webhook\.office\.com/webhookb2/(?P<teams>[^\s\"'<>]{40,400})"
            r"|\boutlook\.office(?:365)?\.com/webhook/(?P<teams_old>[^\s\"'<>]{40,400})"
        ),
        ("slack", "discord", "teams", "teams_old"),
        trigger=_trigger(r"hooks\.slack|discord|webhook\.office|outlook\.office"),
    ),
    _Rule(  # any other webhook URL: the path after `/hook(s)/` or `/webhook(s)/` when a part of it is as random as a key,
        # or on a host made for webhooks (`hooks.zapier.com/hooks/catch/<account>/<hook>/`) when a part is an id
        KIND_WEBHOOK,
        re.compile(r"://(?P<host>[^\s/\"'<>]{1,100})/(?:[^\s/\"'<>?#]{1,100}/){0,4}(?:web)?hooks?/(?P<path>[^\s\"'<>?#]{16,400})"),
        ("path",),
        _accept_webhook_path,
        _trigger(r"hooks?/"),
    ),
    _Rule(  # a Vault AppRole `secret_id` (Vault's own spelling, or under a name saying vault or approle) is a UUID and the
        # role's password (elsewhere a `*_id` names a secret: `secretId`, `AZURE_CLIENT_SECRET_ID`)
        KIND_PASSWORD,
        re.compile(
            r"(?:(?<![\w-])secret_id|(?i:vault|approle)\w{0,40}?(?i:secret_?id))[\"'`]?[ \t]*[:=][ \t]*[\"'`]?"
            r"(?P<value>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b"
        ),
        ("value",),
        lambda m: not _is_blank(m.group("value")) and not all(len(set(group)) == 1 for group in m.group("value").split("-")),
        _trigger(r"secret_?id"),
    ),
    _Rule(  # a CloudFormation parameter marked `NoEcho: true` is a secret: its `Default:` literal is one (YAML or JSON,
        # within the parameter's next few lines at the same indent; not a tag such as `!Ref`)
        KIND_PASSWORD,
        re.compile(
            r"(?im)^(?P<indent>[ \t]{0,40})[\"']?noecho[\"']?[ \t]*:[ \t]*[\"']?true[\"']?,?[ \t]*\r?\n"
            r"(?:(?P=indent)[^\n]{0,200}\n){0,3}?(?P=indent)[\"']?default[\"']?[ \t]*:[ \t]*(?:\"(?P<dq>[^\"\n]{1,1024})\"|'(?P<sq>[^'\n]{1,1024})'|(?P<bare>[^\s\"'#][^\n]{0,1023}?))[ \t]*,?(?:[ \t]+#[^\n]*)?[ \t]*$"
        ),
        ("dq", "sq", "bare"),
        lambda m: _accept_prose_password_value(value := _first_group(m, "dq", "sq", "bare")) and not _YAML_TAG.match(value),
        _trigger("noecho"),
        lines=5,
    ),
    _Rule(  # a `.pgpass` line below a mention of the file: `host:port:database:user:password` (port 4-5 digits or `*`)
        KIND_PASSWORD,
        re.compile(r"(?m)^[ \t]*[\w.*-]{1,253}:(?:\d{4,5}|\*):[\w.*-]{1,100}:(?P<user>[^\s:]{1,100}):(?P<value>[^\s]{1,256})$"),
        ("value",),
        lambda m: _is_password_slot(m.group("user"), m.group("value")) and not m.group("value").isdigit(),
        _trigger("pgpass"),
        lines=_PGPASS_LINES,
    ),
    _Rule(  # an .npmrc auth token: whatever the registry, `_authToken=` holds the token
        KIND_PASSWORD,
        re.compile(r":_authToken=(?P<value>[^\s\"'$]{8,1024})"),
        ("value",),
        _accept_literal,
        _trigger("_authtoken"),
    ),
    _Rule(  # user.ChangePassword(old, "PASS"), ResetPassword(user, "PASS"): a password-like literal given after another
        # argument (`ResetPassword("user@example.com")` names the account)
        KIND_PASSWORD,
        re.compile(
            r"\b(?:[Cc]hange|[Rr]eset|[Ss]et|[Uu]pdate)_?[Pp]assword[ \t]*\([^()\"'\n]{1,100},[ \t]*"
            r"(?P<q>[\"'])(?P<value>[^\"'\n]{3,256})(?P=q)[ \t]*\)"  # the last argument (`keyring.set_password("svc", …)`: not)
        ),
        ("value",),
        lambda m: _accept_prose_password_value(m.group("value")),
        _trigger("password"),
    ),
    _Rule(  # `cat config/master.key`, `cat ~/.secrets/token`: the one-word line a file named for a secret prints (not
        # `cat deploy.key.pub`, `cat rotate_token.sh`, `cat /etc/passwd`)
        KIND_PASSWORD,
        re.compile(
            r"(?m)^[ \t]*(?:\$[ \t]*)?cat[ \t]+(?:[^\s|;&<>]{0,200}/)?(?:[\w.-]{0,60}[._-])?"
            r"(?:[\w-]{1,60}\.key|token|secret|password|api[_-]?key|credentials?)(?:\.txt)?[ \t]*\r?\n"
            r"[ \t]*(?P<value>[^\s]{6,512})[ \t]*\r?$"
        ),
        ("value",),
        lambda m: not _is_excluded_value(m.group("value")) and not m.group("value").startswith(("$", "cat:", "-----")),
        _trigger("cat"),
        lines=2,
    ),
    _Rule(  # a Postman environment's value whose `"type"` is `"secret"`
        KIND_PASSWORD,
        re.compile(r"\"value\"[ \t]*:[ \t]*\"(?P<value>[^\"\n]{1,1024})\"(?=[^{}\n]{0,200}\"type\"[ \t]*:[ \t]*\"secret\")"),
        ("value",),
        _accept_literal,
        _trigger(r"\"secret\""),
    ),
    _Rule(  # SonarQube's older tokens are 40 bare hex digits, known by their setting: `-Dsonar.login=…`, `$sonarLogin = "…"`
        "sonar-token",
        re.compile(r"(?i)sonar[._]?(?:login|token)[\"'\s,:=]{1,6}(?P<value>[0-9a-f]{40})\b"),
        ("value",),
        trigger=_trigger("sonar"),
    ),
    _Rule(  # a presigned URL's signature (S3 `X-Amz-Signature=`, GCS `X-Goog-Signature=`, CloudFront `Signature=`)
        KIND_TOKEN,
        re.compile(r"[?&;](?:X-Amz-Signature|X-Goog-Signature|Signature)=(?P<value>[A-Za-z0-9%+/=_~-]{16,2048})"),
        ("value",),
        lambda m: not _is_blank(m.group("value")),
        _trigger("signature="),
    ),
    _Rule(  # a key in an API URL's path: `https://eth-mainnet.alchemyapi.io/v2/<key>`, `…infura.io/v3/<32 hex>`
        KIND_PASSWORD,
        re.compile(r"://[\w.-]{1,100}(?::\d{1,5})?/v\d{1,2}/(?P<value>[A-Za-z0-9_-]{32,64})(?![\w-])(?!/)"),
        ("value",),
        lambda m: _looks_random(m.group("value")) or _is_hex_key(m.group("value")),
        _trigger("/v"),
    ),
    _Rule(  # a JWT, or any three-part token whose first two parts are base64 of JSON (`ey…` is `{…`), padding too;
        # a header is base64url (`/ey/ey/ey…`, `+ey+ey…` start no long scan) and a signature stops before a `/word` path
        KIND_JWT,
        re.compile(
            r"\bey[A-Za-z0-9_-]{8,8192}+\.ey[A-Za-z0-9_/+-]{8,8192}+\."
            r"(?:[A-Za-z0-9_+-]|/(?=[A-Za-z0-9_+-])(?![a-z][a-z-]{2,64}+(?:[/?#&\s\"'<>]|$))){0,8192}+(?:={1,2}(?![\w=]))?"
        ),
        accept=_is_token_like,
        trigger=_trigger(r"\.ey"),
    ),
    _Rule(  # an unsigned JWT (`"alg": "none"`): a header and a payload, base64url of JSON, and no signature part
        KIND_JWT,
        re.compile(r"\beyJ[A-Za-z0-9_-]{8,8192}+\.eyJ[A-Za-z0-9_-]{8,8192}+(?![A-Za-z0-9_.+/=-])"),
        accept=_is_unsigned_jwt,
        trigger=_trigger(r"\.ey"),
    ),
    _Rule(  # a Sidekiq Enterprise or Pro licence, `user:password` of hex, whole: in its gem server's URL
        # (`https://<user>:<pass>@enterprise.contribsys.com/`), or on a line naming Sidekiq and its licence, Pro,
        # Enterprise, Bundler or a credential (the Bundler setting has its own rule below)
        "sidekiq-credentials",
        re.compile(r"(?<![0-9a-fA-F])[0-9a-f]{8}:[0-9a-f]{8}(?![0-9a-fA-F:])"),
        accept=_is_sidekiq_credential,
        trigger=_trigger("contribsys|sidekiq"),
    ),
    _Rule(  # a Slack webhook's path without its host, `T<team>/B<bot>/<secret>` (workflows: `T…/A…/<id>/<secret>`)
        KIND_WEBHOOK,
        re.compile(r"(?<![\w])T[A-Z0-9]{8,12}/[AB][A-Z0-9]{8,12}/(?:\d{6,30}/)?[A-Za-z0-9]{20,40}(?![\w/])"),
        accept=lambda m: not _is_blank(m.group(0).rsplit("/", 1)[-1]),  # not `…/abcdefghijklmnopqrstuvwx`
        trigger=_trigger("slack|hook"),
    ),
    _Rule(  # a JWT encoded once more in base64 (`ZXlK` is `eyJ`), in a config value or a header
        KIND_JWT,
        re.compile(r"\bZXlK[A-Za-z0-9+/]{40,16000}={0,2}"),
        accept=_is_encoded_jwt,
        trigger=_trigger("zxlk"),
    ),
    _Rule(  # base64 of a JSON object that holds a key (Grafana's `eyJrIjoi…`: `{"k":"…`), standing on its own
        KIND_TOKEN,
        re.compile(r"(?<![\w+/.-])eyJ[A-Za-z0-9+/_-]{24,4096}={0,2}(?![\w+/.=-])"),
        accept=_is_encoded_key_object,
        trigger=_trigger("eyj"),
    ),
    _Rule(  # scheme://user:PASS@host keeps user and host; the password runs to the last `@` (`m42p!o@2wd@host`)
        KIND_PASSWORD,
        re.compile(
            r"\b[A-Za-z][A-Za-z0-9+.-]{1,30}://(?P<user>[^\s:/@'\"<>]{0,256}(?:@[\w.-]{1,253}\.[A-Za-z]{2,63})?)"
            r":(?P<value>[^\s/'\"<>]{1,256})@(?=[\w.\[-])"  # a user may be an email address (`smtp://me@x.com:PASS@host`)
        ),
        ("value",),
        lambda m: _is_password_slot(m.group("user"), m.group("value"))
        and not ("@" in m.group("user") and m.group("value").isdigit()),  # `http://admin@router.local:8080@…`: a port
        _trigger("://"),
    ),
    _Rule(
        KIND_PASSWORD,
        re.compile(
            r"(?i)\b(?:proxy-)?authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
            r"(?:(?P<scheme>(?:bearer|basic|token|bot|digest|api-?key|sso-key|ssws)[ \t]+)"
            r"(?P<any>[^\s\"'<>`\\|]{8,4096}?)(?=[,;)]?(?:[\s\"'<>`\\|]|$))|"
            r"(?P<value>[A-Za-z0-9._~+/=-]{8,4096}(?::[A-Za-z0-9._~+/=-]{8,4096})?))"  # `<id>:<secret>` whole; after a
            # scheme word, anything up to a blank or a quote (`Bearer b@d0@h3C70K3n`, `Bearer Atzr|1234`)
        ),
        ("any", "value"),
        _accept_authorization,
        _trigger("authorization"),
    ),
    _Rule(  # `"X-Auth": "Bearer <hex>"`, `token: Bearer <key>`: the scheme word says a credential follows, any header
        KIND_PASSWORD,
        re.compile(r"\b[Bb]earer:?[ \t]+(?P<value>[A-Za-z0-9._~+/-]{15,4096}[A-Za-z0-9_~+/-]={0,2})(?![A-Za-z0-9_~+/=-]|\.\w)"),
        ("value",),
        lambda m: not _is_excluded_value(m.group("value")) and _is_key_value(m.group("value"))
        and not _runs_into_placeholder(m.string, m.end()),
        _trigger("bearer"),
    ),
    _Rule(  # `curl -u sk_<key>:`: an API key as the user name, with no password (Stripe, Mailgun and others)
        KIND_PASSWORD,
        re.compile(r"(?:^|\s)(?:-u|--user)[ \t]+[\"']?(?P<value>[A-Za-z0-9_.~+/-]{16,256}):(?=[\"']?(?:\s|$))"),
        ("value",),
        lambda m: _is_key_value(m.group("value")),
        _trigger("-u"),
    ),
    _Rule(  # `https://<token>@github.com/…`: a key as a URL's user name, with no password
        KIND_PASSWORD,
        re.compile(r"://(?P<value>[A-Za-z0-9_.~-]{20,300})@[A-Za-z0-9-]+\.[A-Za-z0-9.-]"),
        ("value",),
        lambda m: _is_key_value(m.group("value")),
        _trigger("://"),
    ),
    _Rule(  # curl -u user:PASS, --user user:'PASS', -u "user:PASS PHRASE", -u ":PASS" (a password with no user)
        KIND_PASSWORD,
        re.compile(
            r"(?:^|\s)(?:-u|--user)[ \t]+(?:\"(?P<dq_user>[^\s:\"]{0,256}):(?P<dq_all>[^\"\n]{1,256})\""
            r"|'(?P<sq_user>[^\s:']{0,256}):(?P<sq_all>[^'\n]{1,256})'"
            r"|(?P<user>[^\s:\"']{0,256}):" + _SHELL_WORD + ")"
        ),
        ("dq_all", "sq_all", "dq", "sq", "bare"),
        lambda m: _is_command_password(
            _first_group(m, "dq_user", "sq_user", "user"), _first_group(m, "dq_all", "sq_all", "dq", "sq", "bare")
        ),
        _trigger("-u"),
    ),
    _Rule(  # docker login -u ci -p 'PASS', az login -u me -p PASS
        KIND_PASSWORD,
        re.compile(r"\blogin\b[^\n|;&]{0,200}?[ \t]-p[ \t]+" + _SHELL_WORD),
        ("dq", "sq", "bare"),
        lambda m: not _is_excluded_value(_first_group(m, "dq", "sq", "bare")),
        _trigger("login"),
    ),
    _Rule(  # PowerShell: ConvertTo-SecureString "PASS" -AsPlainText
        KIND_PASSWORD,
        re.compile(r"(?i)\bConvertTo-SecureString[ \t]+(?:-String[ \t]+)?(?:\\?\"(?P<dq>[^\"\n]{1,256}?)\\?\"|'(?P<sq>[^'\n]{1,256})')"),
        ("dq", "sq"),
        lambda m: not _is_excluded_value(_first_group(m, "dq", "sq")),
        _trigger("convertto-securestring"),
    ),
    _Rule(  # <add key="ClearTextPassword" value="PASS" />, define('DB_PASSWORD', 'PASS'), setdefault("API_TOKEN", "…"),
        # <Setting Name="ApiKey" Value="KEY"/>, <entry key="password">PASS</entry>, <Password value="PASS"/>
        KIND_PASSWORD,
        re.compile(
            r"(?:\b(?:[Kk]ey|[Nn]ame)=|\([ \t]*)[\"'](?P<name>[A-Za-z_][\w.-]{0,80})[\"']"
            r"(?:[ \t]+[Vv]alue=|[ \t]*,[ \t]*)[\"'](?P<value>[^\"'\n]{1,400})[\"']"
            r"|\b[Kk]ey=[\"'](?P<entry_name>[A-Za-z_][\w.-]{0,80})[\"'][ \t]*>(?P<entry>[^<>\n]{1,400})</"
            r"|<(?P<element>[A-Za-z_][\w.-]{0,80})[ \t]+[Vv]alue=[\"'](?P<element_value>[^\"'\n]{1,400})[\"']"
        ),
        ("value", "entry", "element_value"),
        _accept_named_value,
        _NAME_WORD,
    ),
    _Rule(  # if (db_pass !== "PASS"): a literal compared with a secret-named variable is that secret
        KIND_PASSWORD,
        re.compile(
            r"(?<![\w.])(?P<name>[A-Za-z_][\w.]{0,80})[ \t]*(?:===?|!==?)[ \t]*[\"'](?P<value>[^\"'\n]{1,400})[\"']"
        ),
        ("value",),
        _accept_named_value,
        _NAME_WORD,
    ),
    _Rule(  # db_pass: m{{h}o)p${e]nob(ody[finds>-_$#thisone}}, (unquoted, so the value runs to a space)
        KIND_PASSWORD,
        re.compile(r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]{0,80})[ \t]*[:=][ \t]*(?P<value>[^\s\"'`]{5,200}[^\s\"'`,;])(?=[,;]?(?:\s|$))"),
        ("value",),
        _accept_symbol_password,
        _NAME_WORD,
    ),
    _Rule(  # mysql -pPASS, quoted too (`-p'P@ss!'`, `-p\"…\"` in a JSON string); MariaDB's clients the same
        KIND_PASSWORD,
        re.compile(
            r"\b(?:mysql|mariadb)(?:dump|admin|sh|-dump|-admin)?\b[^\n|;&]{0,200}?[ \t]-p"
            r"(?:\\?\"(?P<dq>[^\"\s,\])][^\"\n]{0,255}?)\\?\"|'(?P<sq>[^'\s,\])][^'\n]{0,255})'|(?P<value>[^\s\"'-][^\s\"']{0,256}))"
            r"(?=[\s;|&)\\]|$)"  # a quote closing the word, not the one opening the next string (`-p"], cwd="…"`)
        ),
        ("value", "dq", "sq"),
        lambda m: not _is_excluded_value(_first_group(m, "value", "dq", "sq")),
        _trigger("mysql|mariadb"),
    ),
    _Rule(  # ds.setPassword("PASS"), builder.password("PASS"), ->withApiKey('KEY'), conf.set_password('PASS')
        KIND_PASSWORD,
        re.compile(
            r"(?:\.|->)(?:set|with)?_?(?P<name>[A-Za-z][A-Za-z0-9_]{0,60})[ \t]*\([ \t]*(?P<q>[\"'])(?P<value>[^\"'\n]{1,400})(?P=q)[ \t]*\)"
        ),
        ("value",),
        _accept_named_value,
        _NAME_WORD,
    ),
    _Rule(  # new PDO($dsn, 'user', 'PASS'), mysqli_connect("host", "user", "PASS"), DriverManager.getConnection(url, "user", "PASS")
        KIND_PASSWORD,
        re.compile(
            r"\b(?:new[ \t]+(?:PDO|mysqli)|mysqli?_connect|getConnection)[ \t]*\([ \t]*[^,()\n]{1,200},[ \t]*"
            r"[\"'][^\"'\n]{0,100}[\"'][ \t]*,[ \t]*[\"'](?P<value>[^\"'\n]{1,256})[\"']"
        ),
        ("value",),
        _accept_literal,
        _trigger("pdo|mysql|connection"),
    ),
    _Rule(  # Dockerfile's older form: ENV DB_PASSWORD PASS (the `ENV NAME=PASS` form is an assignment)
        KIND_PASSWORD,
        re.compile(r"(?m)^[ \t]*ENV[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]{0,80})[ \t]+(?P<value>[^\s=\"'][^\n]{0,400}?)[ \t]*$"),
        ("value",),
        lambda m: _name_strength(m.group("name")) == _STRONG and not _is_excluded_value(m.group("value")),
        _NAME_WORD,
    ),
    _Rule(  # Gradle and Ruby DSLs: `password 'PASS'`, `token "KEY"` (a call without parentheses), alone on its line
        KIND_PASSWORD,
        re.compile(r"(?m)^[ \t]*(?P<name>[A-Za-z_][A-Za-z0-9_]{0,60})[ \t]+(?P<q>[\"'])(?P<value>[^\"'\n]{1,400})(?P=q)[ \t]*$"),
        ("value",),
        lambda m: _name_strength(m.group("name")) == _STRONG and _accept_named_value(m),
        _NAME_WORD,
    ),
    _Rule(  # redis-cli -a PASS, mongo -p PASS, sqlcmd -P PASS, rabbitmqctl add_user USER PASS, openssl -passout pass:PASS
        KIND_PASSWORD,
        re.compile(
            r"(?:\bredis-cli\b[^\n|;&]{0,200}?[ \t]-a|\bmongo(?:sh|dump|restore|import|export)?\b[^\n|;&]{0,200}?[ \t]-p"
            r"|\bsqlcmd\b[^\n|;&]{0,200}?[ \t]-P|\brabbitmqctl[ \t]+(?:add_user|change_password)[ \t]+[^\s\"']{1,100})[ \t]+"
            + _SHELL_WORD + r"|[ \t]-pass(?:in|out)[ \t]+[\"']?pass:(?P<openssl>[^\s\"']{1,256})"
        ),
        ("dq", "sq", "bare", "openssl"),
        lambda m: not _is_excluded_value(_first_group(m, "dq", "sq", "bare", "openssl")),
        _trigger("redis-cli|mongo|sqlcmd|rabbitmqctl|pass:"),
    ),
    _Rule(  # SQL: CREATE or ALTER USER … IDENTIFIED [WITH plugin] BY 'PASS' (MySQL, MariaDB, Oracle, Snowflake); not
        # MySQL's `BY PASSWORD '*<hash>'`, a bind variable (`:pw`) or a substitution (`&pw`)
        KIND_PASSWORD,
        re.compile(
            r"(?i)(?:\b(?:create|alter)[ \t]+(?:user|role|login)\b|\bgrant\b)[^\n;]{0,300}?"
            r"\bidentified(?:[ \t]+with[ \t]+[\"'`]?\w{1,64}[\"'`]?)?[ \t]+by[ \t]+(?!password\b)"
            r"""(?:"(?P<dq>[^"\n]{1,256})"|'(?P<sq>[^'\n]{1,256})'|(?P<bare>[^\s"';\\]{1,256}))"""
        ),
        ("dq", "sq", "bare"),
        lambda m: not (value := _first_group(m, "dq", "sq", "bare")).startswith((":", "&", "?", "@"))
        and not _is_excluded_value(value),
        _trigger("identified"),
    ),
    _Rule(  # libcurl's password options: curl_easy_setopt(h, CURLOPT_PASSWORD, "PASS"), `CURLOPT_USERPWD, "user:PASS"`,
        # PHP's curl_setopt, pycurl's `c.setopt(pycurl.PROXYPASSWORD, 'PASS')` (a user before the colon is kept)
        KIND_PASSWORD,
        re.compile(
            r"setopt\w{0,20}\((?:[^,()\n]{0,80},)?[ \t]*(?:CURLOPT_|\w{1,20}\.)?(?P<option>(?:PROXY)?(?:USERPWD|PASSWORD|KEYPASSWD)"
            r"|TLSAUTH_PASSWORD)[ \t]*,[ \t]*(?:\"(?:(?P<dq_user>[^\"\n:]{0,256}):)?(?P<dq>[^\"\n]{1,256})\""
            r"|'(?:(?P<sq_user>[^'\n:]{0,256}):)?(?P<sq>[^'\n]{1,256})')"
        ),
        ("dq", "sq"),
        lambda m: ("USERPWD" not in m.group("option") or _first_group(m, "dq_user", "sq_user") is not None)
        and not _is_excluded_value(_first_group(m, "dq", "sq")),
        _trigger("setopt"),
    ),
    _Rule(  # .netrc: machine HOST login USER password PASS (one line or several)
        KIND_PASSWORD,
        re.compile(r"\blogin[ \t]+[^\s]{1,100}\s+password[ \t]+(?P<value>[^\s]{1,256})"),
        ("value",),
        _accept_literal,
        _trigger("login"),
        lines=2,
    ),
    _Rule(  # htpasswd -b[c] FILE USER PASS, htpasswd -nb USER PASS
        KIND_PASSWORD,
        re.compile(
            r"\bhtpasswd(?:[ \t]+-[a-zA-Z]{1,8})*?[ \t]+-(?P<flags>[a-zA-Z]{0,8}b[a-zA-Z]{0,8})(?:[ \t]+-[a-zA-Z]{1,8})*"
            r"(?P<args>(?:[ \t]+[^\s\"'-][^\s\"']{0,256}){1,2})[ \t]+" + _SHELL_WORD
        ),
        ("dq", "sq", "bare"),
        lambda m: len(m.group("args").split()) == (1 if "n" in m.group("flags") else 2)
        and not _is_excluded_value(_first_group(m, "dq", "sq", "bare")),
        _trigger("htpasswd"),
    ),
    _Rule(
        KIND_PASSWORD,
        re.compile(r"<(?P<name>[A-Za-z_][\w.-]{0,60})>(?P<value>[^<>\s]{1,400})</(?P=name)>"),
        ("value",),
        _accept_xml,
        _NAME_WORD,
    ),
    _Rule(  # Redis `AUTH [user] PASS`: at a redis-cli prompt, in MONITOR output (`"AUTH" "PASS"`), a client's debug log
        KIND_PASSWORD,
        re.compile(
            r"AUTH(?<![^\s>\]\[\"]AUTH)\"?[ \t]+(?:\"?(?P<user>[\w.@-]{1,64})\"?[ \t]+)?\"?"  # after a blank, `>`, `]`, `"`
            r"(?P<value>[^\s\"']{6,256}?)\"?(?=\s|$)"
        ),
        ("value",),
        lambda m: "=" not in m.group("value")  # `AUTH mechanism=SCRAM-SHA-256`: a setting, not a password
        and (_accept_prose_password_value(m.group("value")) or _looks_random(m.group("value"))),
        _trigger("auth"),
    ),
    _Rule(  # sshpass -p PASS
        KIND_PASSWORD,
        re.compile(r"\bsshpass[ \t]+-p[ \t]*" + _SHELL_WORD),
        ("dq", "sq", "bare"),
        lambda m: not _is_excluded_value(_first_group(m, "dq", "sq", "bare")),
        _trigger("sshpass"),
    ),
    _Rule(  # PsExec \\host -u user -p PASS; slcli config setup -u user -k KEY; cargo login TOKEN; ngrok add-authtoken TOKEN
        KIND_PASSWORD,
        re.compile(
            r"(?i)(?:\b(?:psexec(?:64)?|paexec)(?:\.exe)?\b[^\n|;&]{0,200}?[ \t]-p|\bslcli\b[^\n|;&]{0,200}?[ \t](?:-k|--api-key)"
            r"|\b(?:cargo|wandb)[ \t]+login|\bngrok[ \t]+(?:config[ \t]+)?add-authtoken|\bsnyk[ \t]+auth"
            r"|\bdoctl[ \t]+auth[ \t]+init[ \t]+(?:-t|--access-token)|\bnetlify\b[^\n|;&]{0,100}?[ \t]--auth)[ \t]+" + _SHELL_WORD
        ),
        ("dq", "sq", "bare"),
        lambda m: not _first_group(m, "dq", "sq", "bare").startswith("-") and not _is_excluded_value(_first_group(m, "dq", "sq", "bare")),
        _RARE_COMMANDS,
    ),
    _Rule(  # pulumi config set --secret NAME VALUE and az keyvault secret set … --value VALUE (the command says the
        # value is a secret, whatever the name); netlify env:set NAME VALUE under a credential's name
        KIND_PASSWORD,
        re.compile(
            r"(?:\bpulumi[ \t]+config[ \t]+set[ \t]+--secret[ \t]+[\w.:-]{1,100}"
            r"|\baz[ \t]+keyvault[ \t]+secret[ \t]+set\b[^\n|;&]{0,200}?[ \t]--value)[ \t]+" + _SHELL_WORD
            + r"|\b(?:netlify[ \t]+env:set|aws[ \t]+configure[ \t]+set)[ \t]+(?P<name>[A-Za-z_][\w.]{0,100})[ \t]+"
            + _SHELL_WORD.replace("?P<", "?P<env_")
            + r"|(?:^|(?<=[\n;&|$])|(?<=[\n;&|$][ \t]))[ \t]*mc[ \t]+alias[ \t]+set[ \t]+[\w.-]{1,100}[ \t]+https?://\S{1,300}[ \t]+"
            r"[^\s\"'-]\S{0,199}[ \t]+" + _SHELL_WORD.replace("?P<", "?P<mc_")
        ),
        ("dq", "sq", "bare", "env_dq", "env_sq", "env_bare", "mc_dq", "mc_sq", "mc_bare"),
        _accept_set_command,
        _RARE_COMMANDS,
    ),
    _Rule(  # .NET: new NetworkCredential("user", "PASS"), new DirectoryEntry("LDAP://…", "user", "PASS")
        KIND_PASSWORD,
        re.compile(
            r"\b(?:NetworkCredential\([ \t]*|DirectoryEntry\([ \t]*\"[^\"\n]{0,200}\"[ \t]*,[ \t]*)"
            r"\"[^\"\n]{0,100}\"[ \t]*,[ \t]*@?\"(?P<value>[^\"\n]{1,256})\""
        ),
        ("value",),
        _accept_literal,
        _RARE_COMMANDS,
    ),
    _Rule(  # log in with ops / PASS; the DB creds are app_rw:PASS
        KIND_PASSWORD,
        re.compile(
            r"(?i)\b(?:log[ \t-]?in|sign[ \t-]?in)[ \t]+(?:with|as|using)[ \t]+[\w.@-]{1,64}[ \t]*/[ \t]*(?P<slash>[^\s\"'`]{5,63}[^\s\"'`.,;:)!?])"
            r"|\b(?:creds|credentials|login)\b[^\n:=]{0,30}?[ \t](?P<user>[\w.@-]{1,64}):(?P<colon>[^\s:@/\"'`]{5,63}[^\s:@/\"'`.,;)!?])"
            r"|\bcreds?:?[ \t]+[\w.@-]{1,64}[ \t]*/[ \t]*(?P<creds>[^\s\"'`]{5,63}[^\s\"'`.,;:)])"  # `creds: bob / PASS`
        ),
        ("slash", "colon", "creds"),
        lambda m: _accept_prose_password_value(_first_group(m, "slash", "colon", "creds")),
        _trigger("log|sign|cred"),
    ),
    _Rule(  # a user and a password written as a pair of fields: `u: bob p: PASS`, `user bob pass PASS`, `login=bob,
        # pw=PASS`
        KIND_PASSWORD,
        re.compile(
            r"(?i)\b(?:u|usr|user|username|login)(?:[ \t]*+[:=][ \t]*+|[ \t]++)[\w.@-]{1,64}+(?:[ \t]*+[,;/|][ \t]*+|[ \t]++)"
            r"(?:p|pw|pwd|pass|passwd|password)(?:[ \t]*+[:=][ \t]*+|[ \t]++)(?P<value>[^\s\"'`]{5,63}[^\s\"'`.,;:)])"
        ),
        ("value",),
        lambda m: _accept_prose_password_value(value := m.group("value")) and not _is_prose(value) and not _EXPANSION.search(value),
        _trigger(  # the pair itself, lower-cased (`u` and `p` alone would select nearly every line), without the word
            # boundary, which would cost a scan twice as long
            r"(?:u(?:sr|ser(?:name)?)?|login)(?:[ \t]*+[:=][ \t]*+|[ \t]++)[\w.@-]{1,64}+(?:[ \t]*+[,;/|][ \t]*+|[ \t]++)"
            r"(?:p|pw|pwd|pass|passwd|password)(?:[ \t]*+[:=]|[ \t])"
        ),
    ),
    _Rule(  # "password" in other languages as a label: `Passwort: PASS`, `mot de passe : PASS`, `contraseña: PASS`,
        # `пароль: PASS`, `密码：PASS`
        KIND_PASSWORD,
        re.compile(
            r"(?i)(?<![\w])(?:passwort|kennwort|passord|adgangskode|lösenord|wachtwoord|mot de passe|contrase[ñn]a|senha"
            r"|palavra-passe|hasło|haslo|heslo|jelszó|salasana|şifre|sifre|mật khẩu|пароль|密码|密碼|パスワード|비밀번호"
            r"|كلمة المرور|סיסמה|รหัสผ่าน)[ \t]*[:：=][ \t]*(?P<value>[^\s\"'<>`]{4,127}[^\s\"'<>`.,;:)。，])"  # a password may end in `!`
        ),
        ("value",),
        lambda m: _accept_prose_password_value(m.group("value")),
        _trigger("passwort|kennwort|passord|adgangskode|lösenord|wachtwoord|mot de passe|contrase|senha|palavra-passe"
                 "|hasło|haslo|heslo|jelszó|salasana|şifre|sifre|mật khẩu|пароль|密码|密碼|パスワード|비밀번호|كلمة المرور|סיסמה|รหัสผ่าน"),
    ),
    _Rule(  # server configuration directives that hold a password: redis.conf's `requirepass` and `masterauth` (and
        # `CONFIG SET requirepass …` at run time), slapd's and kickstart's `rootpw` (not `--iscrypted` hashes)
        KIND_PASSWORD,
        re.compile(r"(?im)^[ \t]*(?:requirepass|masterauth|rootpw(?:[ \t]+--plaintext)?)[ \t]+(?P<value>[^\s#]{1,256})[ \t]*$"
                   r"|\bconfig[ \t]+set[ \t]+(?:requirepass|masterauth)[ \t]+[\"']?(?P<runtime>[^\s\"']{1,256})"),
        ("value", "runtime"),
        lambda m: not (value := _first_group(m, "value", "runtime")).startswith(("--", "{")) and not _is_excluded_value(value),
        _trigger("requirepass|masterauth|rootpw"),
    ),
    _Rule(  # SQL's `SET PASSWORD FOR u = PASSWORD('PASS')` or `= 'PASS'`; a literal given to a password hasher is the
        # password (`bcrypt('PASS')`, `Hash::make('PASS')`, `make_password('PASS')`, `bcrypt.hashpw(b"PASS", …)`)
        KIND_PASSWORD,
        re.compile(
            r"(?i)\bset[ \t]+password\b[^\n;=]{0,200}=[ \t]*(?:password[ \t]*\([ \t]*)?'(?P<sql>[^'\n]{1,256})'"
            r"|(?:\b(?:bcrypt|Hash::make|make_password|generate_password_hash|password_hash|hashpw|hash_password|hashPassword)"
            r"|\b(?:argon2|pbkdf2_sha256|sha512_crypt|sha256_crypt|bcrypt_sha256)\.hash|PasswordHasher\(\)\.hash)"
            r"\([ \t]*b?(?P<q>[\"'])(?P<hashed>[^\"'\n]{1,256})(?P=q)"  # not `check_password("wrong-guess1")` in a test
        ),
        ("sql", "hashed"),
        lambda m: _accept_prose_password_value(value := _first_group(m, "sql", "hashed")) and not _MECHANISM.fullmatch(value),
        _trigger("password|bcrypt|hash::make|hashpw|argon2|pbkdf2|_crypt|hasher"),
    ),
    _Rule(  # an XML element named by its `name` attribute: `<property name="hibernate.connection.password">PASS</property>`
        KIND_PASSWORD,
        re.compile(
            r"<(?P<tag>[A-Za-z][\w:.-]{0,40})\b[^>\n]{0,200}?\bname=[\"'](?P<name>[^\"'\n]{1,100})[\"'][^>\n]{0,100}>"
            r"(?:[ \t]*<value>)?(?P<value>[^<\n]{1,256})(?:</value>[ \t]*)?</(?P=tag)>"  # .NET settings: `<value>…</value>` inside
        ),
        ("value",),
        _accept_named_element,
        _NAME_WORD,
    ),
    _Rule(  # a credential built from a literal: Rust's `String::from("…")`, `"…".to_string()`, `SecretStr("…")`,
        # `Secret::new("…")`, `new String("…")` under a credential's name
        KIND_PASSWORD,
        re.compile(
            r"(?<![\w.])(?P<name>[A-Za-z_][\w.]{0,80})[ \t]*(?::[ \t]*[\w:<>&]{1,40}[ \t]*)?=[ \t]*"
            r"(?:(?:String::from|SecretString::(?:new|from)|Secret::new|SecretStr|SecretBox::new|new[ \t]+String|String)\([ \t]*"
            r"\"(?P<value>[^\"\n]{1,256})\"|\"(?P<owned>[^\"\n]{1,256})\"\.(?:to_string|to_owned|into)\(\))"
        ),
        ("value", "owned"),
        lambda m: _accept_named_fallback(m.group("name"), _first_group(m, "value", "owned")),
        _NAME_WORD,
    ),
    _Rule(  # `wp config set DB_PASSWORD PASS`, `dokku config:set`'s siblings: a tool's `config set NAME VALUE` (or
        # `env add`, `secrets set`, `variables set`) under a credential's name
        KIND_PASSWORD,
        re.compile(
            r"\b(?:(?:config|secrets?|env|vars?|variables?|variable|settings?)(?::|[ \t]+)(?:set|add|put|create)|set-env[ \t]+[\w.-]{1,100})"
            r"[ \t]+(?:--?[\w-]{1,30}[ \t]+){0,3}[\"']?(?P<name>[A-Za-z_][\w.-]{0,80})[\"']?[ \t]+(?:--body[ \t]+|-b[ \t]+)?" + _SHELL_WORD
        ),
        ("dq", "sq", "bare"),
        _accept_config_set,
        _NAME_WORD,
    ),
    _Rule(  # Vault's `operator init` output: Unseal Key 1: <base64>
        "vault-token",
        re.compile(r"(?i)\bunseal[ \t]+key(?:[ \t]+\d{1,2})?:[ \t]+(?P<value>[A-Za-z0-9+/]{40,90}={0,2})"),
        ("value",),
        trigger=_RARE_COMMANDS,
    ),
    _Rule(  # ThingsBoard device API: /api/v1/<access token>/telemetry
        KIND_PASSWORD,
        re.compile(r"/api/v1/(?P<value>[A-Za-z0-9]{20})/(?:telemetry|attributes|rpc|claim)\b"),
        ("value",),
        lambda m: _looks_random(m.group("value")),
        _RARE_COMMANDS,
    ),
    _Rule(  # a login call's password, its last argument after a user: `smtp.login("me@example.com", "…")`,
        # `ftp.login(user, "…")`, Go's `client.Login(ctx, "me", "…")`, Firebase's `signInWithEmailAndPassword(auth,
        # email, "…")`, `ldap.simple_bind_s(dn, "…")`
        KIND_PASSWORD,
        re.compile(
            r"(?i:\b(?:log_?in|log_?on|sign_?in|authenticate|simple_bind_s|simple_bind|bind_s)|signInWithEmailAndPassword)"
            r"\((?P<before>[^()\n]{1,300}?),[ \t]*(?P<q>[\"'`])(?P<value>[^\"'`\n]{1,256})(?P=q)[ \t]*\)"
        ),
        ("value",),
        _accept_login_password,
        _CALL_FORMS,
    ),
    _Rule(  # a credential's fallback after its lookup: `os.environ.get("PASSWORD") or "…"`, `process.env.API_TOKEN ||
        # "…"`, `ENV["DB_PASSWORD"] ?? "…"`, Ruby's `ENV.fetch("API_KEY") { "…" }`, the shell's `${DB_PASSWORD:-…}`:
        # the literal is the credential
        KIND_PASSWORD,
        re.compile(
            r"(?:\([ \t]*[\"'](?P<call>[A-Za-z_]\w{0,80})[\"'][ \t]*\)|process\.env\.(?P<js>[A-Za-z_]\w{0,80})"
            r"|\[[ \t]*[\"'](?P<index>[A-Za-z_]\w{0,80})[\"'][ \t]*\])"
            r"[ \t]*(?:\bor\b|\|\||\?\?|\?:|\{)[ \t]*(?P<q>[\"'`])(?P<value>[^\"'`\n]{1,256})(?P=q)"
            r"|\$\{(?P<shell>[A-Za-z_]\w{0,80}):?[-=](?P<default>[^}\s\"'$]{1,256})\}"
        ),
        ("value", "default"),
        lambda m: _accept_named_fallback(_first_group(m, "call", "js", "index", "shell"), _first_group(m, "value", "default")),
        _NAME_WORD,
    ),
    _Rule(  # a JSON Web Key's private members (`"d"`, RSA's `"p"`, `"q"`, `"dp"`, `"dq"`, `"qi"`, a symmetric `"k"`)
        # in the object that says `"kty"` (a public JWK has none of them); JSON escaped in a string or a Python dict too
        KIND_PRIVATE_KEY,
        re.compile(
            r"(?:\\?\"|')(?:d|p|q|dp|dq|qi|k)(?:\\?\"|')[ \t]*:[ \t]*(?:\\?\"|')(?P<value>[A-Za-z0-9_-]{16,4096}={0,2})(?:\\?\"|')"
        ),
        ("value",),
        _accept_jwk_member,
        _trigger(r"[\"'](?:d|p|q|dp|dq|qi|k)\\?[\"']"),
    ),
    _Rule(  # a secret store's one-line answer below the command that read it: `aws secretsmanager get-secret-value …
        # --output text`, `gcloud secrets versions access`, `security find-generic-password -w`, `pass show`, and, under
        # a credential's name, `vault kv get -field=NAME`, `op read op://…/NAME`, `heroku config:get NAME`, `doppler
        # secrets get NAME --plain`, `kubectl get secret … {.data.NAME} | base64 -d`, `printenv NAME`, `echo $NAME`
        # (`%NAME%`, PowerShell's `$env:NAME`)
        KIND_PASSWORD,
        re.compile(
            r"(?m)^[ \t]*(?:[$>][ \t]*|PS[^\n>]{0,80}>[ \t]*)?(?:(?P<store>aws[ \t]+secretsmanager[ \t]+get-secret-value|aws[ \t]+ssm[ \t]+get-parameters?"
            r"|gcloud[ \t]+secrets[ \t]+versions[ \t]+access|vault[ \t]+(?:kv[ \t]+get|read)|op[ \t]+read|op[ \t]+item[ \t]+get"
            r"|az[ \t]+keyvault[ \t]+secret[ \t]+show|security[ \t]+find-(?:generic|internet)-password|doppler[ \t]+secrets[ \t]+get"
            r"|infisical[ \t]+secrets[ \t]+get|heroku[ \t]+config:get|(?:go)?pass[ \t]+show|bw[ \t]+get[ \t]+password"
            r"|kubectl[ \t]+get[ \t]+secrets?)\b(?P<args>[^\n]{0,400})"
            r"|printenv[ \t]+(?P<env>[A-Za-z_]\w{0,80})[ \t]*|echo[ \t]+\"?(?:\$\{?(?P<echo>[A-Za-z_]\w{0,80})\}?|%(?P<cmd>[A-Za-z_]\w{0,80})%)\"?[ \t]*"
            r"|\$env:(?P<ps>[A-Za-z_]\w{0,80})[ \t]*)\r?\n"
            r"[ \t]*(?P<value>[^\s]{6,512})[ \t]*\r?$"
        ),
        ("value",),
        _accept_store_answer,
        _ANSWER_FORMS,
        lines=2,
    ),
    _Rule(  # browser automation typing a password into its field: Playwright's `page.fill('#password', '…')`,
        # `getByLabel('Password').fill('…')`, `passwordInput.fill('…')`, Selenium's `find_element(By.ID,
        # "password").send_keys("…")`, `sendKeys`, WebdriverIO's `setValue`, Cypress' `cy.get('#pwd').type('…', {…})`
        # (a trailing key sequence such as `{enter}` is kept)
        KIND_PASSWORD,
        re.compile(
            r"(?:(?P<field>(?<![A-Za-z])(?:[Pp]ass(?:word|wd|phrase)?|PASS(?:WORD|WD)?|[Pp]wd|PWD)(?![a-z])[^;\n]{0,100}?)[\"'`][ \t]*\}?[ \t]*\)+"
            r"(?:\.clear\(\))?\.|(?<![A-Za-z])(?P<receiver>(?:password|passwd|pwd)\w{0,30})(?:\.clear\(\))?\.)"
            r"(?i:fill|type|send_?keys|press_?sequentially|set_?value)\([ \t]*(?P<q>[\"'`])(?P<value>[^\"'`\n]{1,256}?)(?:\{[A-Za-z]{2,20}\})*(?P=q)"
            r"[ \t]*(?:,[ \t]*\{[^)\n]{0,80})?\)"  # Cypress' and Playwright's options: `{ log: false }`, `{ delay: 100 }`
            r"|\.(?:fill|type)\([ \t]*[\"'`](?P<selector>[^\"'`\n]{0,100}?(?<![A-Za-z])(?:[Pp]ass(?:word|wd|phrase)?|[Pp]wd)(?![a-z])[^\"'`\n]{0,100})[\"'`]"
            r"[ \t]*,[ \t]*(?P<q2>[\"'`])(?P<filled>[^\"'`\n]{1,256}?)(?:\{[A-Za-z]{2,20}\})*(?P=q2)"
        ),
        ("value", "filled"),
        _accept_typed_password,
        _CALL_FORMS,
    ),
    _Rule(  # requests' auth=("user", "PASS"), HTTPBasicAuth("user", "PASS")
        KIND_PASSWORD,
        re.compile(
            r"(?:\bauth[ \t]*=[ \t]*\(|\bHTTP(?:Basic|Digest)Auth\()[ \t]*[\"'][^\"'\n]{1,100}[\"'][ \t]*,[ \t]*"
            r"[\"'](?P<value>[^\"'\n]{1,256})[\"']"
        ),
        ("value",),
        _accept_literal,
        _trigger("auth"),
    ),
    _Rule(  # a Docker config.json `"auth": "<base64 of user:password>"`; .npmrc's `_auth=<the same>`
        KIND_PASSWORD,
        re.compile(r"\"auth\"[ \t]*:[ \t]*\"(?P<value>[A-Za-z0-9+/]{8,1024}={0,2})\"|(?<![\w-])_auth[ \t]*=[ \t]*(?P<npm>[A-Za-z0-9+/]{8,1024}={0,2})"),
        ("value", "npm"),
        _accept_docker_auth,
        _trigger('"auth"|_auth'),
    ),
    _Rule(  # a Twilio auth token after its account SID: Client("AC…", "TOKEN"), -u AC…:TOKEN, `twilio login AC… TOKEN`
        "twilio-key",
        re.compile(r"\bAC[0-9a-f]{32}[\"']?(?:[ \t]*,[ \t]*|:|[ \t]+)[\"']?(?P<value>[0-9a-f]{32})\b"),
        ("value",),
        trigger=_trigger("ac[0-9a-f]{32}"),
    ),
    _Rule(  # an Azure SAS signature, and a storage account key in a connection string
        KIND_AZURE,
        re.compile(r"[?&;]sig=(?P<sig>[A-Za-z0-9%+/=]{20,256})|\bAccountKey=(?P<account>[A-Za-z0-9+/]{40,256}={0,2})"),
        ("sig", "account"),
        lambda m: not _is_blank(m.group(m.lastgroup)),  # not `sig=ABCDEFGHIJ…`, a typed-out alphabet
        trigger=_trigger("sig=|accountkey="),
    ),
    _Rule(  # X-Shopify-Access-Token: …, X-API-Key: … (anywhere on a line)
        KIND_PASSWORD,
        re.compile(
            r"(?i)\bx-(?:[a-z0-9]{1,30}-){0,4}(?:token|key|secret|auth|api)\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?"
            r"(?P<value>[A-Za-z0-9._~+/=-]{8,1024})"
        ),
        ("value",),
        lambda m: not _is_excluded_value(m.group("value")) and _looks_like_credential(m.group("value")),
        _trigger("x-"),
    ),
    _Rule(  # the password is Kestrel-4471; Password for the admin is tr0ub4dor&3; login as root, password ch4ngeMe
        KIND_PASSWORD,
        re.compile(
            r"(?i)\b(?:password|passwd|passphrase|pwd|pw)\b"
            r"(?:[ \t]+(?:for|of|to|on)[ \t]+[^\n:=]{1,40}?[ \t]+(?:is|was)|[ \t]+(?:is|was)(?:[ \t]+now)?|[ \t]*[:=]|)"
            r"[ \t]+[\"'`]?"
            r"(?P<value>[^\s\"'`]{5,63}[^\s\"'`.,;:)!?])"
        ),
        ("value",),
        _accept_prose_password,
        _NAME_WORD,
    ),
    _Rule(  # the Zendesk API token is fCh95aMw… (`key: …` and `key = …` are assignments, judged above)
        KIND_PASSWORD,
        re.compile(
            r"(?i)\b(?:token|secret|credentials?|api[ _-]?key|access[ _-]?key|secret[ _-]?key|key)\b"
            r"(?:[ \t]+(?:for|of|to|on|in|at|from)[ \t]+[^\n:=]{1,40}?[ \t]+(?:is|was)|[ \t]+(?:is|was)(?:[ \t]+now)?)"
            r"[ \t]+[\"'`]?"
            r"(?P<value>[A-Za-z0-9+/=_.~-]{15,400}[A-Za-z0-9=_~-])"
        ),
        ("value",),
        _accept_prose_token,
        _NAME_WORD,
    ),
    _Rule(  # `datadog: api_key 6459…`, `the gitter token 298e…`, `trello key b36e… token 629a…`: a name, blanks, a key
        KIND_PASSWORD,
        re.compile(
            r"(?i)\b(?P<name>api[ _-]?(?:key|secret)|secret|token|key)[ \t]+"
            r"(?P<value>[A-Za-z0-9+/=_.~-]{20,400}[A-Za-z0-9=_~-])(?=$|[\s,;)])"
        ),
        ("value",),
        _accept_spaced_prose_key,
        _NAME_WORD,
    ),
    _Rule(  # `set ACME_API_KEY <key>`, `the acme_token is <key>`, `set acme_pat to <key>`: a name, blanks, a key
        KIND_PASSWORD,
        re.compile(
            r"(?<![\w.-])(?P<name>[A-Za-z_][\w.-]{1,80})[\"'`]?[ \t]+(?:(?:is|was|to)[ \t]+)?[\"'`]?"
            r"(?P<value>[A-Za-z0-9+/_~-][A-Za-z0-9+/_.~-]{13,400}[A-Za-z0-9+/_~-]={0,2})(?=$|[\s,;)\"'`]|\.(?!\w))"
        ),
        ("value",),
        _accept_named_key,
        _NAME_WORD,
    ),
    _Rule(  # a config line `cloudant_password   <value>`: a joined name, blanks, a key-like value, nothing after
        KIND_PASSWORD,
        re.compile(
            r"(?m)^[ \t]*(?P<name>[A-Za-z][A-Za-z0-9]{0,40}(?:[_-][A-Za-z0-9]{1,40}){1,6})[ \t]+"
            r"[\"']?(?P<value>[^\s\"']{6,400})[\"']?[ \t]*$"
        ),
        ("value",),
        _accept_spaced_value,
        _NAME_WORD,
    ),
    _Rule(  # a table row: `| ALGOLIA_API_KEY | <value> |`, `| beamer | api key | <value> |`, and drawn with box
        # characters as CLIs print them (`│ URL_CREDENTIALS │ <value> │`: doppler, infisical)
        KIND_PASSWORD,
        re.compile(r"[|│┃][ \t]*(?P<name>[A-Za-z_][\w .-]{0,60}?)[ \t]*[|│┃][ \t]*`?(?P<value>[^\s|│┃`]{8,400})`?[ \t]*[|│┃]"),
        ("value",),
        _accept_named_value,
        _NAME_WORD,
    ),
    _Rule(  # Kubernetes env `- name: API_TOKEN` / `value: …` on the next line; ECS `{"name": "API_TOKEN", "value": "…"}`
        KIND_PASSWORD,
        re.compile(
            r"(?m)^[ \t]*(?:-[ \t]+)?name:[ \t]*[\"']?(?P<name>[A-Za-z_][\w.-]{0,80})[\"']?[ \t]*\n"
            r"[ \t]*value:[ \t]*(?P<q>[\"']?)(?P<value>[^\s\"'#]{1,400})(?P=q)[ \t]*$"
            r"|[\"']name[\"'][ \t]*:[ \t]*[\"'](?P<json_name>[A-Za-z_][\w.-]{0,80})[\"'][ \t]*,[ \t]*"
            r"[\"']value[\"'][ \t]*:[ \t]*[\"'](?P<json_value>[^\"'\n]{1,400})[\"']"
        ),
        ("value", "json_value"),
        _accept_name_value_pair,
        _NAME_WORD,
        lines=2,
    ),
    _Rule(  # Terraform: variable "finicity_client_secret" { … default = "…" }
        KIND_PASSWORD,
        re.compile(r"\bvariable[ \t]+\"(?P<name>[\w-]{1,80})\"[ \t]*\{[^}]{0,300}?\bdefault[ \t]*=[ \t]*\"(?P<value>[^\"\n]{1,400})\""),
        ("value",),
        _accept_named_value,
        _NAME_WORD,
        lines=8,
    ),
    _Rule(  # gh secret set NAME --body VALUE; echo -n VALUE | gh secret set NAME (or wrangler secret put, docker login
        # --password-stdin, gh auth login --with-token); the same commands fed a here-string (`--with-token <<< 'VALUE'`)
        KIND_PASSWORD,
        re.compile(
            r"\b(?:gh|glab)[ \t]+secret[ \t]+set\b[^\n|;&<]{0,200}?[ \t](?:--body|-b)(?:[ \t]+|=)" + _SHELL_WORD
            + r"|\b(?:echo|printf)(?:[ \t]+-[neE]{1,3})?[ \t]+"
            + _SHELL_WORD.replace("?P<", "?P<p")
            + r"[ \t]*\|[ \t]*[^\n|;&]{0,80}?(?:secret[ \t]+(?:set|create|put)\b|--password-stdin|--with-token|" + _STDIN_PASSWORD + ")"
            + r"|(?:--password-stdin|--with-token|\bsecret[ \t]+(?:set|create|put)\b[^\n|;&<]{0,100}?|" + _STDIN_PASSWORD
            + r")[ \t]*<<<[ \t]*" + _SHELL_WORD.replace("?P<", "?P<h")
        ),
        ("dq", "sq", "bare", "pdq", "psq", "pbare", "hdq", "hsq", "hbare"),
        lambda m: not _is_excluded_value(_first_group(m, "dq", "sq", "bare", "pdq", "psq", "pbare", "hdq", "hsq", "hbare")),
        _trigger("secret|password-stdin|with-token|sudo|passwd"),
    ),
    _Rule(  # archive, key store, directory and Windows tools' password options: `zip -P PASS`, `7z a -pPASS`,
        # `keytool -storepass PASS`, `ldapsearch -w PASS`, `smbclient -U user%PASS`, `openssl enc -k PASS`, `xfreerdp
        # /p:PASS`, `cmdkey /pass:PASS`, `net user NAME PASS /add`, `net use Z: \\host\share PASS /user:NAME`
        KIND_PASSWORD,
        re.compile(
            r"(?:\b(?:zip|unzip)\b[^\n|;&]{0,200}?[ \t]-P[ \t]+|\b7z[az]?\b[^\n|;&]{0,200}?[ \t]-p(?=[^\s-])"
            r"|(?<=[ \t])-(?:src|dest|new)?(?:storepass|keypass)[ \t]+"  # keytool's and jarsigner's, each of them
            r"|\bldap(?:search|add|modify|delete|passwd|whoami|compare|modrdn)\b[^\n|;&]{0,200}?[ \t]-w[ \t]+"
            r"|\bsmbclient\b[^\n|;&]{0,200}?[ \t](?:-U|--user)(?:[ \t]+|=)[\"']?[^\s%\"']{1,100}%"
            r"|\bopenssl[ \t]+enc\b[^\n|;&]{0,200}?[ \t]-k[ \t]+|\bx?freerdp\b[^\n|;&]{0,200}?[ \t]/p:"
            r"|\bcmdkey\b[^\n|;&]{0,200}?[ \t]/pass:|\bnet[ \t]+user[ \t]+[^\s/]{1,100}[ \t]+(?=[^\s/*][^\n]{0,200}?/add\b)"
            r"|\bnet[ \t]+use[ \t]+(?:[A-Za-z]:[ \t]+)?\\\\[^\s]{1,300}[ \t]+(?=[^\s/*][^\n]{0,200}?/user:)"
            r"|\bpoetry[ \t]+config[ \t]+http-basic\.[\w.-]{1,100}[ \t]+[^\s]{1,100}[ \t]+|\brclone[ \t]+obscure[ \t]+"
            r"|(?<=[ \t])(?P<atuin>-k|--key|-p|--password)(?:[ \t]+|=)"  # atuin's login and register: its password, its sync key
            r"|(?<=[ \t])(?P<keygen>-[NP])[ \t]+)"  # ssh-keygen's new (`-N`) and old (`-P`) passphrases, each of them
            + _SHELL_WORD
        ),
        ("dq", "sq", "bare"),
        _accept_tool_password,
        _TOOL_FORMS,
    ),
    _Rule(  # Oracle's `sqlplus user/PASS@db`; an expect script's answer to a password prompt (`send "PASS\r"`)
        KIND_PASSWORD,
        re.compile(
            r"\bsqlplus[ \t]+(?:-[sSlL][ \t]+)*[\"']?[A-Za-z_][\w$#]{0,60}/(?P<sqlplus>[^\s@/\"']{1,128})"
            r"|(?i:pass(?:word|phrase))[^\n]{0,100}?(?:\n[^\n]{0,100}?)?\bsend[ \t]+(?:--[ \t]+)?\"(?P<expect>[^\"\n\\]{1,256})\\r\""
        ),
        ("sqlplus", "expect"),
        lambda m: not (value := _first_group(m, "sqlplus", "expect")).startswith(("$", "[")) and not _is_excluded_value(value),
        _ANSWER_FORMS,
        lines=2,
    ),
    _Rule(  # YAML: `password: Harbor Lights 2019!`, a phrase up to the end of its line
        KIND_PASSWORD,
        re.compile(
            r"(?m)^[ \t]*(?:-[ \t]+)?(?P<name>[A-Za-z_][\w.-]{0,80}):[ \t]+"
            r"(?P<value>[^\s\"'#|>&*!{\[%@`][^\n#]{0,200}?[^\s#])[ \t]*(?:[ \t]#[^\n]{0,400})?$"
        ),
        ("value",),
        _accept_yaml_phrase,
        _NAME_WORD,
    ),
    _Rule(  # a value on the line after its name: YAML `api_token: |` or `>`, XML `<apiToken>` alone on its line
        KIND_PASSWORD,
        re.compile(
            r"(?m)^[ \t]*(?:(?P<name>[A-Za-z_][\w.-]{0,80}):[ \t]+[|>][-+]?|<(?P<tag>[A-Za-z_][\w.-]{0,80})>)[ \t]*\n"
            r"[ \t]+(?P<value>[^\s<>]{8,400})[ \t]*(?:$|\n[ \t]*</(?P=tag)>)"
        ),
        ("value",),
        _accept_value_below_name,
        _NAME_WORD,
        lines=3,
    ),
    _Rule(  # Sidekiq Enterprise/Pro gem credentials: BUNDLE_GEMS__CONTRIBSYS__COM=user:pass, bundle config … contribsys.com
        "sidekiq-credentials",
        re.compile(r"(?i)contribsys(?:\.|__)com[\"']?(?:[ \t]*[:=][ \t]*|[ \t]+)[\"']?(?P<value>[a-f0-9]{8}:[a-f0-9]{8})\b"),
        ("value",),
        trigger=_trigger("contribsys"),
    ),
    _Rule(  # SoftLayer's SOAP endpoint carries the API key in its path
        KIND_PASSWORD,
        re.compile(r"(?i)\bapi\.softlayer\.com/soap/v3(?:\.1)?/(?P<value>[a-z0-9]{64})\b"),
        ("value",),
        trigger=_trigger("softlayer"),
    ),
    _Rule(  # Travis CI's encrypted variable `secure: "<base64>"`
        KIND_PASSWORD,
        re.compile(r"(?<![\w-])secure[\"']?[ \t]*:[ \t]*[\"']?(?P<travis>[A-Za-z0-9+/=\\]{40,4000})"),
        ("travis",),
        lambda m: not _is_excluded_value(m.group("travis")),
        _trigger("secure"),
    ),
    _Rule(  # `aws ssm put-parameter --type SecureString --value …`, the options in either order
        KIND_PASSWORD,
        re.compile(r"(?i:--value)[ \t=]+" + _SHELL_WORD),
        ("dq", "sq", "bare"),
        _accept_secure_string_value,
        _trigger("securestring"),
    ),
    _Rule(  # fish: set -x API_TOKEN value
        KIND_PASSWORD,
        re.compile(r"\bset[ \t]+-[gxuU]{1,3}[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]{0,80})[ \t]+[\"']?(?P<value>[^\s\"']{1,400})"),
        ("value",),
        lambda m: _name_strength(m.group("name")) == _STRONG and not _is_excluded_value(m.group("value")),
        _NAME_WORD,
    ),
    _Rule(  # --password hunter2 (the `--name=value` form is an assignment)
        KIND_PASSWORD,
        re.compile(
            r"(?:^|\s)--?(?P<name>[A-Za-z][A-Za-z0-9_-]{1,60})[ \t]+[\"']?"
            r"(?P<value>[^\s\"'<>|&;$\\-][^\s\"'\\]{0,400})"
        ),
        ("value",),
        _accept_flag,
        _NAME_WORD,
    ),
    _Rule(
        KIND_PASSWORD,
        re.compile(
            r"(?<![A-Za-z0-9_])"
            r"(?=[A-Za-z0-9_.-]{0,80}?(?i:pass|pwd|pw|ps{1,2}w|pasw|secret|token|credential|key|auth|pat(?![A-Za-z0-9])))"  # cheap pre-filter on the name
            r"(?P<name>[A-Za-z_][A-Za-z0-9_.-]{0,80})(?P<kq>\\?[\"']\]?|\])?"  # `"key": `, `["KEY"] = `, `[key]:`
            r"(?:[ \t]*:[ \t]*&?(?:'static[ \t]+)?[A-Za-z_][\w.]{0,40}\??(?=[ \t]*=[^=])"  # a type: `password: str = `, Rust's `&str`
            r"|[ \t]+(?:string|String|str|\[\]byte)(?=[ \t]*=[^=]))?"  # Go: `var apiToken string = `
            r"(?P<sp1>[ \t]*)(?P<sep>:{1,3}=|\?\?=|\|\|=|[?+.]=|=>|=(?![=~])|::(?![:=])|:(?![:/=])|,)(?P<sp2>[ \t]*)"  # make's `::=`, `?=`, JS's `??=`
            + _QUOTED_VALUE
        ),
        _KV_VALUE_GROUPS,
        _accept_assignment,
        _NAME_WORD,
    ),
    _Rule(KIND_TOKEN, _TOKEN_RUN, ("value",), _accept_shaped_token),  # a key of a vendor no rule knows, by its shape
    _Rule(  # base64 of text that holds a secret: a Kubernetes Secret's `data:` value (`cG9zdGdyZXM6Ly91…`), an encoded
        # manifest or .env, on one line or wrapped (`base64` wraps at 76 columns: the block is judged whole, so a
        # secret across two lines is found and a block costs one judgement, not one a line); last, so a more
        # specific kind wins where finds overlap (`Authorization: Basic <base64>` stays a password)
        KIND_ENCODED,
        re.compile(
            r"(?<![\w+/.-])(?:"
            + "|".join(  # a block wrapped at 76 (base64, MIME) or 64 (PEM, openssl) columns, then its last line
                r"(?:[A-Za-z0-9+/]{%d}\r?\n[ \t]*){1,%d}[A-Za-z0-9+/]{0,%d}={0,2}" % (width, _ENCODED_LINES, width)
                for width in _WRAP_WIDTHS
            )
            + r"|[A-Za-z0-9+/]{%d,%d}={0,2})(?![\w+/=.-])" % (_ENCODED_SHORTEST, _ENCODED_LONGEST)  # or one run
        ),
        accept=_holds_encoded_secret,
        retry_inside=False,
    ),
)


def _span(rule: _Rule, m: re.Match[str]) -> tuple[int, int] | None:
    for group in rule.groups:
        if m.group(group) is not None:
            return m.span(group)
    return None


def _candidates(rule: _Rule, text: str, start: int, end: int) -> Iterator[re.Match[str]]:
    """The rule's accepted matches in `text[start:end]`. A rejected match gives its text back, so
    `-var="db_password=…"` is still seen after `var="…"` was judged not a secret (unless the rule judges blocks
    whole: a wrapped base64 block rejected is not searched again from each of its lines, which costs the square)."""
    position = start
    while (m := rule.pattern.search(text, position, end)) is not None:
        span = _span(rule, m)
        if span is not None and span[0] < span[1] and rule.accept(m):
            yield m
            position = max(m.end(), m.start() + 1)
        else:
            position = m.start() + 1 if rule.retry_inside else max(m.end(), m.start() + 1)


def _trigger_hits(trigger: re.Pattern[str], text: str, lowered: str) -> list[tuple[int, int]]:
    """Per line holding a match of `trigger`, the newline before it and a match's end: one scan of the text, shared
    by every rule with this trigger whatever its `lines`. A trigger of plain words is found word by word with
    `str.find`, several times faster than a regular expression's alternation; the lines are the same."""
    words = _trigger_words(trigger.pattern)
    if words is None:
        return _lines_hit(lambda position: hit.span() if (hit := trigger.search(lowered, position)) else None, text)
    hits: dict[int, int] = {}
    for word in words:
        found = lambda position, word=word: (at, at + len(word)) if (at := lowered.find(word, position)) != -1 else None  # noqa: E731
        for start, end in _lines_hit(found, text):
            hits.setdefault(start, end)
    return sorted(hits.items())


def _lines_hit(find: Callable[[int], tuple[int, int] | None], text: str) -> list[tuple[int, int]]:
    """(the newline before, the end) of the first hit `find(position)` gives on each line, a line at a time."""
    hits: list[tuple[int, int]] = []
    position = 0
    while (found := find(position)) is not None:
        hit_start, hit_end = found
        hits.append((max(text.rfind("\n", 0, hit_start), 0), hit_end))
        line_end = text.find("\n", hit_end)
        position = len(text) if line_end == -1 else line_end + 1
    return hits


@functools.cache
def _trigger_words(pattern: str) -> tuple[str, ...] | None:
    """The words of a trigger that is only words between `|` (a backslash may escape punctuation); None for any
    other pattern."""
    if not _PLAIN_WORDS.fullmatch(pattern):
        return None
    return tuple(_ESCAPE.sub(r"\1", word) for word in _PLAIN_WORD.findall(pattern))


_PLAIN_WORD = re.compile(r"(?:[^\\.^$*+?{}\[\]()|]|\\[^A-Za-z0-9])+")
_PLAIN_WORDS = re.compile(rf"{_PLAIN_WORD.pattern}(?:\|{_PLAIN_WORD.pattern})*")
_ESCAPE = re.compile(r"\\(.)")


def _stretches(hits: list[tuple[int, int]], text: str, count: int) -> list[tuple[int, int]]:
    """The stretches of `count` lines whose first holds a trigger's hit, as (start, end) of `text`, merged where they
    overlap. A stretch starts at the newline before it, so a rule's `(?:^|\\s)` still sees it; it ends before the
    newline after its last line, which only rules spanning more lines cross (`_Rule.lines`)."""
    stretches: list[tuple[int, int]] = []
    for start, end in hits:
        for _ in range(count):
            newline = text.find("\n", end)
            if newline == -1:
                end = len(text)
                break
            end = newline + 1
        else:
            end -= 1
        if stretches and start <= stretches[-1][1]:
            start = stretches.pop()[0]
        stretches.append((start, end))
    return stretches


def _lowered(text: str) -> str:
    """`text` in lower case, offset for offset (a few characters lower-case to two, then only ASCII is lowered)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def find_secrets(text: str) -> list[SecretMatch]:
    """Every secret in `text`, in order, non-overlapping; overlapping finds merge and keep the most specific kind.
    A rule with a trigger looks only at the lines holding it, so a huge text costs a few fast scans."""
    placeholders = [m.span() for m in PLACEHOLDER_RE.finditer(text)]
    lowered = _lowered(text)
    scopes: dict[tuple[re.Pattern[str] | None, int], list[tuple[int, int]]] = {}
    hits: dict[re.Pattern[str], list[tuple[int, int]]] = {}
    found: list[tuple[int, int, int, str]] = []  # start, end, priority, kind
    for priority, rule in enumerate(_RULES):
        key = (rule.trigger, rule.lines)
        if key not in scopes:
            if rule.trigger is None:
                scopes[key] = [(0, len(text))]
            else:
                if rule.trigger not in hits:
                    hits[rule.trigger] = _trigger_hits(rule.trigger, text, lowered)
                scopes[key] = _stretches(hits[rule.trigger], text, rule.lines)
        for start, end in scopes[key]:
            for m in _candidates(rule, text, start, end):
                span = _span(rule, m)
                if span is None or _overlaps_any(span, placeholders):
                    continue  # already redacted: keeps redaction idempotent
                found.append((span[0], span[1], priority, rule.kind))
    found.sort()
    merged: list[SecretMatch] = []
    best_priority = 0
    for start, end, priority, kind in found:
        if merged and start < merged[-1].end:
            last = merged[-1]
            if priority < best_priority:
                best_priority, kind_kept = priority, kind
            else:
                kind_kept = last.kind
            merged[-1] = SecretMatch(kind_kept, last.start, max(last.end, end))
        else:
            merged.append(SecretMatch(kind, start, end))
            best_priority = priority
    return merged


def _overlaps_any(span: tuple[int, int], sorted_spans: list[tuple[int, int]]) -> bool:
    """Whether `span` overlaps one of `sorted_spans` (sorted, disjoint)."""
    index = bisect.bisect_left(sorted_spans, (span[1],))
    return index > 0 and sorted_spans[index - 1][1] > span[0]


def redact(text: str) -> str:
    """`text` with every secret replaced by its typed placeholder; idempotent: after a change the lines around each
    new placeholder are judged again (cheap), and if anything more is found there the whole text is redacted again
    (a value judged beside a neighbour that turns out to be a secret, `token: <key> password=…`, is judged alone
    once the neighbour is a placeholder), so redacting twice equals redacting once."""
    for _ in range(_REDACT_ROUNDS):
        matches = find_secrets(text) if text else []
        if not matches:
            return text
        text, inserted = _replaced(text, matches)
        if not any(find_secrets(text[start:end]) for start, end in _lines_around(text, inserted)):
            return text
    return text


_REDACT_ROUNDS = 4  # each round adds placeholders or ends; on every corpus the first finds all


def redact_named(name: str, value: str) -> str:
    """A value stored under a name (a tool call's argument, a metadata field) redacted as it would be in the JSON
    text it came from: judged alone, then on one line after its name (`"password": "Kestrel-4471"`), so the name
    rules see the name and an id under `id` reads as data. A value of several lines, a long one or one under a name
    that is not a word is judged alone."""
    text = redact(value)
    if "\n" in text or len(text) > _NAMED_VALUE_LONGEST or not _FIELD_NAME.fullmatch(name):
        return text
    head = f'"{name}": "' if '"' not in text else f"{name}: "
    framed = f'{head}{text}{chr(34) if head.endswith(chr(34)) else ""}'
    value_end = len(head) + len(text)
    inside = [
        SecretMatch(m.kind, max(m.start, len(head)) - len(head), min(m.end, value_end) - len(head))
        for m in find_secrets(framed)
        if m.end > len(head) and m.start < value_end
    ]
    return redact(_replaced(text, inside)[0]) if inside else text


_NAMED_VALUE_LONGEST = 4096


def redact_words(words: Sequence[str]) -> list[str]:
    """A list of strings (a command's argv, a tool's list argument) redacted as the command line it stands for
    (`["curl", "-u", "admin:PASS", url]`, `["--password", "PASS"]`): each word judged alone, then in the line the
    words make joined by blanks."""
    words = [redact(word) for word in words]
    found = find_secrets(" ".join(words))
    if not found:
        return words
    redacted: list[str] = []
    start = 0
    for word in words:
        end = start + len(word)
        inside = [SecretMatch(m.kind, max(m.start, start) - start, min(m.end, end) - start) for m in found if m.end > start and m.start < end]
        redacted.append(redact(_replaced(word, inside)[0]) if inside else word)
        start = end + 1
    return redacted
_FIELD_NAME = re.compile(r"[A-Za-z_][\w.-]{0,80}")


def _replaced(text: str, matches: list[SecretMatch]) -> tuple[str, list[int]]:
    """`text` with `matches` replaced by placeholders, and where each placeholder starts in the result."""
    pieces: list[str] = []
    inserted: list[int] = []
    position = length = 0
    for match in matches:
        before = text[position : match.start]
        pieces.append(before)
        inserted.append(length + len(before))
        pieces.append(mark := placeholder(match.kind))
        length += len(before) + len(mark)
        position = match.end
    pieces.append(text[position:])
    return "".join(pieces), inserted


def _lines_around(text: str, positions: list[int]) -> list[tuple[int, int]]:
    """The line of each position with one line either side, merged where they meet; a position inside the last span
    is skipped and no search runs back past it (a huge line of placeholders stays linear)."""
    spans: list[tuple[int, int]] = []
    for position in positions:
        if spans and position < spans[-1][1]:
            continue
        floor = spans[-1][0] if spans else 0
        start = text.rfind("\n", floor, max(floor, text.rfind("\n", floor, position))) + 1 or floor
        end_of_line = text.find("\n", position)
        following = -1 if end_of_line == -1 else text.find("\n", end_of_line + 1)
        end = len(text) if following == -1 else following
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans
