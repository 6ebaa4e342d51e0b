"""Topic tags: 1 to 3 short kebab-case labels per chunk (`content-strategy`), and a session's top tags.

Two ways to get them. `llm_topics` asks a configured chat model (the caller caches answers by content hash
and `TOPICS_PROMPT_VERSION`, and falls back to keywords on `LLMError`). `keyword_topics` is the offline
default: deterministic, no model, built to give tags a person would pick, not the most frequent words:

- Candidates are content words and two-word phrases of adjacent content words ("posting frequency"),
  after removing stop words, conversational filler ("okay", "thanks", "really"), generic verbs ("think",
  "fix", "going"), code noise ("self", "def", "return", file extensions), tool narration ("edited",
  "lines"), speaker labels, URLs, numbers, code blocks and redaction placeholders.
- File paths count as the modules they name: "src/checkout/cart.py" contributes "checkout" (its first
  meaningful folder) and, less, "cart".
- Plurals are folded lightly ("posts" -> "post", "strategies" -> "strategy"), so repeats add up.
- Score = frequency x idf x phrase weight: a phrase beats its own words, and more so when it repeats.
  With `TopicStats` (document frequencies over a session's chunks), words every chunk shares (the
  project's name, "test") weigh less than what sets this chunk apart.
- A chosen phrase excludes its words ("posting-frequency" leaves no room for "posting").

Tags feed the contextual prefix of each chunk's embedding, which must not change as a session grows
(ARCHITECTURE.md), so `keyword_topics_for_chunks` gives each chunk document frequencies over the chunks
up to and including it only: appending messages never changes an earlier chunk's tags.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sessionmem_pipeline.core.llm_protocol import ChatModel, LLMError
from sessionmem_pipeline.core.tokens import truncate_to_tokens

MAX_TAG_LENGTH = 40
DEFAULT_MAX_TOPICS = 3
TOPICS_PROMPT_VERSION = "topics-v1"
"""Part of the cache key of LLM answers: change it whenever the prompt changes, so old answers are not reused."""
LLM_INPUT_TOKENS = 1500
"""Chunks are at most 500 tokens by default; a larger configured limit is cut here to bound the cost per call."""

# ---- normalization --------------------------------------------------------------------------------

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def normalize_tag(tag: str) -> str:
    """Lowercase ASCII kebab-case, at most 40 characters, cut at a dash when it must be cut ("" if nothing is left).

    Accents are folded ("Café" -> "cafe") and "+" / "#" spelled out ("c++" -> "cpp", "c#" -> "csharp") so
    tags of languages stay distinct.
    """
    spelled = tag.strip().lower().replace("c++", "cpp").replace("c#", "csharp").replace("f#", "fsharp")
    ascii_text = unicodedata.normalize("NFKD", spelled).encode("ascii", "ignore").decode("ascii")
    kebab = _NON_ALNUM.sub("-", ascii_text).strip("-")
    if len(kebab) <= MAX_TAG_LENGTH:
        return kebab
    cut = kebab[: MAX_TAG_LENGTH + 1]
    return (cut.rsplit("-", 1)[0] if "-" in cut else cut[:MAX_TAG_LENGTH]).strip("-")


# ---- vocabulary -----------------------------------------------------------------------------------

_STOP_WORDS = frozenset(
    """
    a about above after again against all almost along already also although always am among an and another any
    anybody anyone anything anyway anywhere are aren around as at away back be became because become becomes been
    before being below beside besides between beyond both but by can cannot could couldn did didn do does doesn
    doing don done down during each either else enough etc even ever every everybody everyone everything
    everywhere except few for from further had hadn has hasn have haven having he her here hers herself him
    himself his how however i if in instead into is isn it its itself just least less many may me might mine
    more most much must my myself neither never nevertheless next no nobody none noone nor not nothing now
    nowhere of off often on once one only onto or other others otherwise our ours ourselves out over own per
    perhaps please quite rather same several shall she should shouldn since so some somebody someone something
    sometime sometimes somewhere still such than that the their theirs them themselves then there therefore
    these they this those though through throughout thus to together too toward towards under unless until up
    upon us very via was wasn we were weren what whatever when whenever where whereas wherever whether which
    while who whoever whole whom whose why will with within without won would wouldn yet you your yours
    yourself yourselves ll ve re d s t m o y
    okay ok yeah yep yup yes nope hey hi hello thanks thank cheers sure great good nice cool awesome perfect
    fine alright right well oh ah hmm hm um uh lol wow please sorry glad happy helpful useful appreciate
    interesting important possible available specific certain various real main similar simple easy hard quick
    large huge tiny high low lower higher short long full wrong correct clear multiple whole else anything
    once twice again
    really actually basically literally probably maybe definitely certainly totally pretty kinda sorta
    simply clearly obviously honestly exactly quickly slightly mostly likely usually currently recently
    finally generally especially
    think thinking thought know knowing knew known want wanted wanting need needed needs needing like liked
    get gets getting got gotten go goes going gone went make makes making made let lets letting say says saying
    said see seeing seen saw look looks looking looked seem seems seemed try tries trying tried come comes
    coming came take takes taking took give gives giving gave tell tells telling told ask asks asking asked
    feel feels feeling felt mean means meaning meant keep keeps keeping kept put puts putting call calls
    calling called find finds finding found show shows showing showed shown help helps helping helped work works
    working worked start starts starting started happen happens happening happened guess wonder suppose
    use uses using used add adds adding added fix fixes fixing fixed update updates updating updated change
    changes changing changed check checks checking checked run runs running ran create creates creating
    created remove removes removing removed write writes writing wrote written read reads reading handle
    handles handling handled do does did done doing sound sounds agree agreed decide decided
    bye lemme gonna wanna gotta dunno idk btw thx pls plz haha hahaha hehe omg xd ty np ttyl ur gr8 ofc srsly
    sry lmao jk brb yea ya tho cuz coz asap xoxo
    able sure true false new old big small good bad best better worse worst little lot lots bit kind sort
    thing things stuff way ways part parts point case cases example examples idea ideas question questions
    answer answers issue issues problem problems time times today tomorrow yesterday week day days moment
    minute minutes hour hours second seconds year years first last next previous end side place number numbers
    reason reasons result results fact option options step steps detail details version note notes
    words word line lines file files folder directory directories match matches exit code output input
    value values item items list data info information stuff approach level type types set order
    user users assistant system tool tools human ai model message messages conversation chat session
    edited wrote ran searched listed replaced recalled retrieved asked response finished checked status
    self cls def return returns import imports from function functions method methods args kwargs
    none null nil undefined true false var let const async await print println console log str int float
    bool dict tuple string strings object objects lambda yield pass elif else try except raise finally
    py js ts tsx jsx md json yaml yml toml txt csv html htm xml cfg ini sh bash zsh lock rs go rb java kt
    http https www com org net io html
    redacted
    """.split()
)
_SHORT_TERMS = frozenset({"ui", "ux", "ci", "cd", "db", "qa", "ml", "os", "vm", "ip", "s3", "x", "c#", "f#"})
"""Terms shorter than three letters that still name a subject (kept only when they appear in a phrase or alone)."""

_PLURAL_EXCEPTIONS = frozenset(
    """
    status analysis basis process access class news series species always perhaps redis kubernetes postgres
    alias canvas atlas bus gas lens plus thus minus bonus focus virus campus corpus census chaos ios macos dns
    aws gcs https sass pandas numpy express axios jenkins analytics physics mathematics economics ethics
    politics metrics logistics graphics diagnostics statistics sales means ops devops mas chess glass cross
    boss loss mess less bias atlas thesis crisis diagnosis hypothesis synopsis emphasis axis
    """.split()
)
_IRREGULAR_SINGULARS = {
    "caches": "cache", "indices": "index", "criteria": "criterion", "people": "person", "children": "child"
}

_GENERIC_PATH_PARTS = frozenset(
    """
    src lib libs app apps test tests testing spec specs core pkg internal cmd utils util common shared main index
    init __init__ dist build node_modules vendor docs doc scripts script bin tmp temp home users user var etc opt
    usr local github workflows config configs setup conftest mod module modules package packages public static
    assets components component pages views api fixtures examples example data repo repos project projects
    workspace workspaces code dev work git mnt srv
    """.split()
)


_STOP_WORDS_BY_LENGTH: dict[int, list[str]] = {}
for _word in _STOP_WORDS:
    _STOP_WORDS_BY_LENGTH.setdefault(len(_word), []).append(_word)


def _slip_of(word: str, intended: str) -> bool:
    """`word` is `intended` typed with two neighbouring letters swapped ("beacuse") or one letter left out
    ("becuse"): the common slips. Substitutions and extra letters are not judged: they mostly make other words
    ("world" from "would", "mother" from "other")."""
    if len(word) == len(intended):
        diffs = [i for i in range(len(word)) if word[i] != intended[i]]
        first, second = diffs if len(diffs) == 2 else (0, 0)
        return second == first + 1 and word[first] == intended[second] and word[second] == intended[first]
    dropped = (intended[:i] + intended[i + 1 :] for i in range(len(intended)))
    return len(word) + 1 == len(intended) and word in dropped


_REAL_SLIPS = frozenset({"three", "trough"})  # words that are also a slip of a function word ("there", "through")


@lru_cache(maxsize=65536)
def _is_typo(word: str) -> bool:
    """A misspelt or stretched filler word, never a subject: a letter typed three times ("realllly") or a slip of
    a function word ("beacuse", "whcih"). Only words of five letters or more: short ones are too close to judge."""
    if re.search(r"([a-z])\1\1", word):
        return True
    if len(word) < 5 or word in _REAL_SLIPS:
        return False
    near = (*_STOP_WORDS_BY_LENGTH.get(len(word), ()), *_STOP_WORDS_BY_LENGTH.get(len(word) + 1, ()))
    return any(_slip_of(word, stop) for stop in near)


def _singular(word: str) -> str:
    """Light plural folding for English nouns; unsure cases stay as they are."""
    if word in _IRREGULAR_SINGULARS:
        return _IRREGULAR_SINGULARS[word]
    if word in _PLURAL_EXCEPTIONS or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is", "os", "as")):
        return word[:-1]
    return word


def spoken_form(tag: str, text: str) -> str:
    """A tag in the words `text` used for it: "purple-trouser" -> "purple trousers" when the text says
    "trousers" more often than "trouser". Tags are folded to one form so repeats add up; a sentence about the
    text reads better in its own words."""
    used = Counter(word.lower() for word in _WORD.findall(text))
    forms: dict[str, Counter[str]] = {}
    for word, count in used.items():
        forms.setdefault(_singular(word), Counter())[word] = count
    return " ".join(
        (forms[part].most_common(1)[0][0] if part in forms else part) for part in tag.split("-")
    )


def _is_content_word(word: str) -> bool:
    if word in _STOP_WORDS or word in _MARKER_WORDS or _is_typo(word):
        return False
    if len(word) < 3:
        return word in _SHORT_TERMS
    if word.endswith(("ally", "ously", "fully", "ively", "edly", "ently", "antly", "ingly", "ize", "ify")):
        return False  # adverbs ("basically", "recently") and verbs ("normalize", "simplify")
    # Digits only in names such as "python3", "k8s", "oauth2"; not in numbers, hashes or ids.
    return not re.search(r"\d", word) or re.fullmatch(r"[a-z]+\d{1,2}|[a-z]\d[a-z]+", word) is not None


# ---- text preparation -----------------------------------------------------------------------------

_FENCED_CODE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_URL = re.compile(r"\b(?:https?|ftp)://\S+|\bwww\.\S+")
# Our redaction placeholders ([REDACTED:aws-key]) and the markers other tools leave in published transcripts
# ("[redacted text len=120 sha256=ab12cd]", "<redacted>"); markup tags such as "<file_photo>" or "<command-name>".
_PLACEHOLDER = re.compile(r"\[redacted\b[^\]]*\]|<redacted\b[^>]*>|</?[a-z][\w-]*>", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"\b[\w.-]+=\S*")  # len=120, sha=ab12: parameters, not subjects
# "Jason Wu: " at a line start; not "Edited src/app.py: " (a tool line naming a path) nor a long lead-in.
_SPEAKER_LABEL = re.compile(r"^[^\s:/.`\"]+(?: [^\s:/.`\"]+){0,3}:[ \t]+", re.MULTILINE)
_PATH = re.compile(
    r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+"  # src/checkout/cart.py, ./scripts/x
    r"|(?<![\w/.-])[\w-]+\.(?:py|js|ts|tsx|jsx|rs|go|rb|java|kt|md|toml|yaml|yml|json|sql|sh|css|html)\b"  # cart.py
)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_QUOTED = re.compile(r"\"([^\"\n]*)\"")
# Quoted code, as in an edit line ('replaced "return subtotal - self.discount" with ...'): operators and brackets,
# attribute access, snake_case, or a leading keyword. Quoted words ('Searched for "discount"') stay.
_CODE_SIGNS = re.compile(r"[=(){};<>\[\]]|\w\.\w|\w_\w|^\s*(?:return|def|import|from|class|const|let|var|if|for)\b")
_CLAUSE = re.compile(r"[.!?;:,()\[\]{}\"\n]|\s[-\u2013\u2014]\s")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+#]*(?:['\u2019][A-Za-z]+)?")  # "c++", "python3", "don't"


def _is_modifier_only(word: str) -> bool:
    """Participles such as "applied" or "embedded": fine before a noun ("embedded database"), not as a tag alone."""
    return len(word) > 4 and word.endswith("ed") and not word.endswith("eed")


def _path_terms(path: str) -> list[tuple[str, float]]:
    """What a path says about the subject: its innermost meaningful folder, and more weakly its file's name.

    The innermost one, because absolute paths start with the machine's layout (/home/jason/projects/shop/...).
    """
    parts = [p for p in path.strip("./").lower().split("/") if p and not p.startswith(".")]
    if not parts:
        return []
    stem = re.sub(r"^test_|_test$|\.test$|\.spec$", "", parts[-1].rsplit(".", 1)[0] if "." in parts[-1] else parts[-1])
    folders = [
        _singular(p) for p in parts[:-1] if p not in _GENERIC_PATH_PARTS and re.fullmatch(r"[a-z][a-z0-9_-]*", p)
    ]
    terms: list[tuple[str, float]] = []
    if folders and _is_content_word(folders[-1]):
        terms.append((folders[-1].replace("_", " ").replace("-", " "), 1.0))
    stem_word = _singular(stem.replace("_", " ").replace("-", " ").strip())
    if stem_word and stem_word not in _GENERIC_PATH_PARTS and all(_is_content_word(w) for w in stem_word.split()):
        terms.append((stem_word, 0.5))
    return terms


def _prose_and_paths(text: str) -> tuple[str, list[tuple[str, float]]]:
    """Text with noise removed, and the weighted module terms of the paths it mentioned."""
    text = unicodedata.normalize("NFKD", _FENCED_CODE.sub(" ", text))
    text = "".join(char for char in text if not unicodedata.combining(char))  # "Café" -> "Cafe"
    text = _ASSIGNMENT.sub(" ", _PLACEHOLDER.sub(" ", _URL.sub(" ", text)))
    text = _SPEAKER_LABEL.sub("", text)
    path_terms: list[tuple[str, float]] = []

    def take_path(match: re.Match[str]) -> str:
        path_terms.extend(_path_terms(match.group(0)))
        return " . "

    text = _PATH.sub(take_path, text)
    text = _INLINE_CODE.sub(" . ", text)
    text = _QUOTED.sub(lambda m: " . " if _CODE_SIGNS.search(m.group(1)) else m.group(0), text)
    return text, path_terms


def _words_by_clause(prose: str) -> Iterator[list[str | None]]:
    """Per clause, its words in order: a content word singularized, None where a stop word breaks a phrase."""
    for clause in _CLAUSE.split(prose):
        words: list[str | None] = []
        for raw in _WORD.findall(clause):
            word = re.split("['\u2019]", raw.lower())[0]  # "don't" -> "don", "user's" -> "user"
            words.append(_singular(word) if _is_content_word(word) else None)
        yield words


def _term_counts(text: str, exclude: Collection[str]) -> tuple[dict[str, float], dict[str, int]]:
    """Weighted occurrences of candidate terms (words and two-word phrases), and where each first appeared."""
    prose, path_terms = _prose_and_paths(text)
    excluded = {_singular(w) for name in exclude for w in name.lower().split()}
    counts: dict[str, float] = {}
    modifiers: dict[str, float] = {}  # the last resort of a text with no other content word ("Deployed.")
    first_seen: dict[str, int] = {}

    def see(term: str, weight: float, into: dict[str, float] = counts) -> None:
        into[term] = into.get(term, 0.0) + weight
        first_seen.setdefault(term, len(first_seen))

    for words in _words_by_clause(prose):
        kept = [w if w is not None and w not in excluded else None for w in words]
        for index, word in enumerate(kept):
            if word is None:
                continue
            if _is_modifier_only(word):
                see(word, 1.0, into=modifiers)
            elif word not in _SHORT_TERMS or len(kept) == 1:
                see(word, 1.0)
            following = kept[index + 1] if index + 1 < len(kept) else None
            if following is not None and following != word and not _is_modifier_only(following):
                see(f"{word} {following}", 1.0)
    for term, weight in path_terms:
        if not excluded.intersection(term.split()):
            see(term, weight)
    return counts or modifiers, first_seen


# ---- corpus statistics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TopicStats:
    """How many of a session's chunks mention each candidate term: what is common here weighs less."""

    documents: int
    frequencies: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> TopicStats:
        frequencies: Counter[str] = Counter()
        documents = 0
        for text in texts:
            documents += 1
            frequencies.update(_term_counts(text, ())[0].keys())
        return cls(documents=documents, frequencies=frequencies)

    def idf(self, term: str) -> float:
        """Smoothed inverse document frequency: 1.0 for a term in every chunk, more for rarer ones."""
        return 1.0 + math.log((1 + self.documents) / (1 + self.frequencies.get(term, 0)))


# ---- keyword extraction ---------------------------------------------------------------------------

_PHRASE_WEIGHT = 1.5
_REPEATED_PHRASE_WEIGHT = 2.5


def _phrase_score(term: str, counts: Mapping[str, float]) -> float:
    """A phrase's weight grows with how often it and its own words occur: central phrases beat stray pairs."""
    frequency = counts[term]
    words = term.split()
    centrality = sum(counts.get(word, 0.0) for word in words) / len(words)
    return frequency * (_REPEATED_PHRASE_WEIGHT if frequency >= 2 else _PHRASE_WEIGHT) * max(1.0, centrality)


def keyword_topics(
    text: str,
    *,
    max_topics: int = DEFAULT_MAX_TOPICS,
    corpus_stats: TopicStats | None = None,
    exclude: Collection[str] = (),
) -> list[str]:
    """Up to `max_topics` kebab-case tags for `text`, best first; [] only when it has no content word.

    `exclude` names words never to use, such as the speakers' names.
    """
    counts, first_seen = _term_counts(text, exclude)
    if not counts:
        return []

    def score(term: str) -> float:
        base = _phrase_score(term, counts) if " " in term else counts[term]
        return base * (corpus_stats.idf(term) if corpus_stats is not None else 1.0)

    ranked = sorted(counts, key=lambda term: (-score(term), first_seen[term], term))
    chosen: list[str] = []
    used_words: set[str] = set()
    for term in ranked:
        words = set(term.split())
        if words & used_words:
            continue
        tag = normalize_tag(term)
        if tag and tag not in chosen:
            chosen.append(tag)
            used_words |= words
        if len(chosen) == max_topics:
            break
    return chosen


def keyword_topics_for_chunks(
    texts: Sequence[str], *, max_topics: int = DEFAULT_MAX_TOPICS, exclude: Collection[str] = ()
) -> list[list[str]]:
    """Tags for each of a session's chunks (in order), each weighed against the chunks up to it only.

    An earlier chunk's tags therefore never change when the session grows, and neither does its embedding.
    """
    frequencies: Counter[str] = Counter()
    tags = []
    for documents, text in enumerate(texts, start=1):
        frequencies.update(_term_counts(text, ())[0].keys())
        stats = TopicStats(documents=documents, frequencies=frequencies)
        tags.append(keyword_topics(text, max_topics=max_topics, corpus_stats=stats, exclude=exclude))
    return tags


# ---- LLM extraction -------------------------------------------------------------------------------

_LLM_SYSTEM_PROMPT = """\
You label excerpts of conversations between people and an AI assistant with topic tags, used to filter search results.
Give 1 to {max_topics} tags naming what the excerpt is about: short noun phrases in lowercase kebab-case, \
such as "content-strategy", "posting-frequency", "database-migration", "checkout-bug".
Never use people's names, and never generic words such as "conversation", "question", "help", "code", "discussion".
Reply with a JSON object only: {{"topics": ["tag", ...]}}"""

_GENERIC_TAGS = frozenset({"conversation", "discussion", "question", "chat", "general", "misc", "other", "topic"})


def llm_topics(text: str, llm: ChatModel, *, max_topics: int = DEFAULT_MAX_TOPICS) -> list[str]:
    """1 to `max_topics` tags from the chat model, normalized; LLMError when its reply is not usable.

    Extra tags beyond `max_topics` are dropped (their order is the model's preference); tags that
    normalize to nothing, duplicates and generic words are skipped. A reply left with no tag is an error
    so the caller falls back to `keyword_topics`.
    """
    system = _LLM_SYSTEM_PROMPT.format(max_topics=max_topics)
    reply = llm.complete_json(system, truncate_to_tokens(text, LLM_INPUT_TOKENS))
    return _validated_topics(reply, llm.model, max_topics)


_MARKER_WORDS = frozenset({"redacted", "placeholder", "len", "sha", "sha1", "sha256", "md5"})
"""Words of redaction markers ("[redacted text len=120 sha256=...]"): a tag with one of them names no subject."""


def usable_tags(tags: Iterable[str], max_topics: int = DEFAULT_MAX_TOPICS) -> list[str]:
    """A model's tags normalized, each once, without what is no subject: generic words ("discussion"), function
    words, ids and hashes, placeholders ("redacted"), typos; a tag is kept when one of its words says something."""
    kept: list[str] = []
    for tag in tags:
        normalized = normalize_tag(tag)
        words = normalized.split("-")
        if not normalized or normalized in kept or normalized in _GENERIC_TAGS or _MARKER_WORDS.intersection(words):
            continue
        if any(re.fullmatch(r"[0-9a-f]*\d[0-9a-f]*", word) and len(word) >= 6 for word in words):
            continue  # a hash or an id ("3f9a2c1d")
        if any(_is_content_word(word) and word not in _GENERIC_TAGS for word in words):
            kept.append(normalized)
    return kept[:max_topics]


def _validated_topics(reply: Any, model: str, max_topics: int) -> list[str]:
    if not isinstance(reply, dict) or not isinstance(reply.get("topics"), list):
        raise LLMError(f'{model} replied {str(reply)[:200]!r}; expected a JSON object {{"topics": [...]}}')
    raw = reply["topics"]
    if not all(isinstance(tag, str) for tag in raw):
        raise LLMError(f"{model} replied topics {str(raw)[:200]!r}; expected a list of strings")
    tags = usable_tags(raw, max_topics)
    if not tags:
        raise LLMError(f"{model} replied no usable topic tag in {str(raw)[:200]!r}")
    return tags


# ---- session level --------------------------------------------------------------------------------


def session_topics(chunk_topics: Sequence[Sequence[str]], *, max_topics: int = 5) -> list[str]:
    """A session's main tags: those on most of its chunks, earliest first on ties.

    A single-word tag already named inside a chosen phrase ("cache" under "cache-invalidation") is
    skipped as redundant.
    """
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for tags in chunk_topics:
        for tag in dict.fromkeys(normalize_tag(t) for t in tags):
            if tag:
                counts[tag] += 1
                first_seen.setdefault(tag, len(first_seen))
    chosen: list[str] = []
    for tag in sorted(counts, key=lambda t: (-counts[t], first_seen[t])):
        if any(tag in other.split("-") and "-" not in tag for other in chosen):
            continue
        chosen.append(tag)
        if len(chosen) == max_topics:
            break
    return chosen
