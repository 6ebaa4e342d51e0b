"""Offline detection of decisions and action items in a chunk, behind the `has_decision` / `has_action` filters.

Both detectors read the text sentence by sentence with hand-written cues rather than a model: they must be
deterministic (a re-index gives the same flags), cost nothing, and be explainable when a user asks why a
chunk was flagged. Measured on tests/fixtures/flags/ with `python benchmarks/flags.py`.

- A *decision* is a settled choice or conclusion ("let's go with", "we decided", "I'll use", "X it is",
  "instead of X we'll Y", "agreed", "the plan is", a short "yes, option B" reply). The same cue inside a
  question ("should we go with X?"), a hypothetical ("if we decided to ...") or a negation ("we haven't
  decided") is not one.
- An *action* is an action item or a change made: a to-do ("TODO:", "next steps:", "remind me", "by Friday",
  "@sam please ..."), a commitment or request to do work ("I'll add ...", "we need to rotate ...",
  "can you fix ...?", "Update the README"), or a state-changing tool call (a consequential tool, or a shell
  command that is not read-only).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Sequence

from sessionmem_pipeline.core.models import CATEGORY_CONSEQUENTIAL, CATEGORY_SHELL, ToolRecord

# ---- text preparation ---------------------------------------------------------------------------

_FENCED_CODE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# A chunk line starts with its speaker ("User: ", "Jason Wu: "); cues anchored at a sentence start allow it.
_LABEL = r"(?:[A-Z][\w.'-]*(?:\s[A-Z][\w.'-]*){0,3}:\s+)?"


def _sentences(text: str) -> Iterator[str]:
    """Sentences of prose with code removed: identifiers such as `decided_at` or a quoted command are no cue."""
    prose = _INLINE_CODE.sub(" <code> ", _FENCED_CODE.sub(" ", text))
    for line in prose.splitlines():
        for sentence in _SENTENCE_END.split(line.strip()):
            sentence = sentence.strip()
            if sentence:
                yield sentence


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(" )\"'").endswith("?")


# Words that make a decision cue hypothetical, negated or still open when they come before it in its clause.
_UNSETTLED_BEFORE = re.compile(
    r"\b(if|whether|unless|suppose|supposing|would|could|might|maybe|perhaps|should|not|never|yet|"
    r"undecided|suggested|suggest|\w+n't|cannot|'d)\b",
    re.IGNORECASE,
)
_CLAUSE_BREAK = re.compile(r"[,;:()\u2014]|\b(?:and|but|so|then)\b", re.IGNORECASE)

# ---- decisions ----------------------------------------------------------------------------------

_DECISION_CUES = re.compile(
    r"""
    \blet'?s\s+(?:go|stick|run|roll)\s+with\b
  | \blet'?s\s+(?:use|pick|choose|keep|adopt|switch\s+to)\b
  | \b(?:we|i|the\s+team|they)(?:'re|\s+are|'m|\s+am)\s+(?:keeping|staying\s+with|switching\s+to|dropping|moving\s+to|
        deprecating|standardi[sz]ing\s+on)\b
  | \b(?:going|sticking)\s+with\b(?!\s+the\s+flow)
  | \b(?:went|go)\s+with\b(?!\s+the\s+flow)
  | \b(?:we|i)(?:'ll|\s+will)\s+(?:use|go\s+with|stick\s+with|keep(?!\s+(?:an\s+eye|in\s+mind|you|track|going|trying|
        looking|it\s+up))|switch\s+to|adopt|rely\s+on|pick|choose|drop)\b
  | \b(?:decided|agreed|settled|chose|chosen|picked|opted|concluded)\b
  | \bsettle[sd]?\s+(?:it|this|on)\b
  | \b(?:the|our|my)\s+plan\s+is\b | \bis\s+the\s+plan\b
  | \bfinal\s+(?:answer|call|decision|verdict)\b | \bverdict\b | \bconclusion\b
  | \bdecision\s*(?::|is\b|was\b|made\b|taken\b)
  | \bfrom\s+now\s+on\b | \bgoing\s+forward\b | \b(?:good|great|right|sensible)\s+(?:choice|call|decision)\b
  | \b(?:sounds\s+good|ship\s+it|go\s+ahead|lgtm|approved)\b
    """,
    re.IGNORECASE | re.VERBOSE,
)
# "SQLite it is." / "right, 404 it is" — a short sentence naming the option, then "it is".
_IT_IS_CHOICE = re.compile(_LABEL + r"(?:\w+,\s+)?((?:\S+\s+){1,3})it\s+is[.!]*$", re.IGNORECASE)
# "bottom tabs, good." — a short reply naming the option, then approving it.
_GOOD_CHOICE = re.compile(_LABEL + r"((?:\S+\s+){0,2}\S+),\s+(?:good|great|perfect|fine)[.!]*$", re.IGNORECASE)
# "Zod then." — a reply of one to three words naming an option, then "then".
_THEN_CHOICE = re.compile(_LABEL + r"(?:\w+,\s+)?(\S+(?:\s+\S+){0,3})\s+then[.!]*$", re.IGNORECASE)
# "so I implemented the per-thread cache instead." — what was done in place of the alternative.
_DID_INSTEAD = re.compile(r"\b(?:i|we)\s+(?:\w+ed|went|chose|took|kept|built|wrote|made)\b.*\binstead\b", re.IGNORECASE)
# "Instead of polling, we'll rely on events." / "Rather than X, let's Y."
_INSTEAD_OF_CHOICE = re.compile(
    _LABEL + r"(?:instead\s+of|rather\s+than)\b.*\b(?:we'll|we\s+will|i'll|i\s+will|let's|we\s+use|we're|i'm)\b",
    re.IGNORECASE,
)
# "yes, local by default" / "yep, two repos" / "Fine, sessionmem." — a short reply naming the accepted option.
_AFFIRMATION = re.compile(_LABEL + r"(?:yes|yep|yup|yeah|ok|okay|fine|agreed|deal)\b[\s,.!:;-]*(.*)$", re.IGNORECASE)
# Words that make a short reply a pleasantry or a remark ("ok then", "that's how it is"), not a named option.
_NOT_AN_OPTION = frozenset(
    "i you we it that this there here thanks thank cool great nice good perfect got noted sure understood "
    "right true exactly makes ok okay alright well bye later soon now what whatever how why where when as "
    "which so because is just then "
    # assent to go on ("ok continue", "yes please do it") approves the next step, it names no option
    "continue continuing proceed carry go on ahead please thx ty next more "
    # a form of address or a farewell ("Yes, sir!", "ok, see ya") answers a person, it names no option
    "sir mam ma'am madam uncle auntie aunt dear honey babe darling mate dude bro guys see ya cya".split()
)
_MAX_ECHO_WORDS = 4


def _settled(sentence: str, cue_start: int) -> bool:
    """No hypothetical, negation or open question precedes the cue within its clause."""
    before = sentence[:cue_start]
    clause = _CLAUSE_BREAK.split(before)[-1] if before else ""
    return _UNSETTLED_BEFORE.search(clause or "") is None


def _is_named_choice(sentence: str) -> bool:
    match = _IT_IS_CHOICE.match(sentence) or _THEN_CHOICE.match(sentence) or _GOOD_CHOICE.match(sentence)
    return match is not None and _names_an_option(match.group(1))


def _names_an_option(words: str) -> bool:
    found = re.findall(r"[\w+#-]+(?:\.[\w+#-]+)*", words.lower())  # keeps "node.js", drops a final "."
    return 0 < len(found) <= _MAX_ECHO_WORDS and not _NOT_AN_OPTION.intersection(found)


def _is_accepted_option(sentence: str) -> bool:
    match = _AFFIRMATION.match(sentence)
    return match is not None and _names_an_option(match.group(1))


def _sentence_has_decision(sentence: str) -> bool:
    if _is_question(sentence):
        return False
    for cue in _DECISION_CUES.finditer(sentence):
        if _settled(sentence, cue.start()):
            return True
    return (
        _is_named_choice(sentence)
        or bool(_INSTEAD_OF_CHOICE.match(sentence) or _DID_INSTEAD.search(sentence))
        or _is_accepted_option(sentence)
    )


def has_decision(text: str) -> bool:
    """Whether the text records a choice or conclusion that was reached (not one asked about or imagined)."""
    return any(_sentence_has_decision(sentence) for sentence in _sentences(text))


# ---- actions ------------------------------------------------------------------------------------

# Verbs of work that changes something: code, documents, schedules, other people's inboxes.
_WORK_VERBS = (
    r"add|fix|write|rewrite|update|create|remove|delete|drop|rename|refactor|implement|send|draft|deploy|publish|"
    r"push|commit|merge|migrate|rotate|run|set\s+up|setup|start|finish|change|move|bump|install|uninstall|upgrade|"
    r"downgrade|review|test|prepare|schedule|email|message|ping|call|remind|book|file|open|investigate|"
    r"look\s+into|clean\s+up|document|convert|build|configure|wire|revert|roll\s+back|backfill|export|import|"
    r"sketch|decide|replace|tag|release|ship|enable|disable|archive|block|cancel|pay|order|buy|submit|post|"
    r"reply|respond|contact|share|upload|benchmark|profile|debug|patch|port|split|extract|generate|make|take|plan|"
    r"handle|put|finalize|complete|organize|arrange|sign|print|translate|record|announce|invite|notify|"
    r"note|tell(?!\s+me\b)|ask(?!\s+me\b)"
)
_WORK = rf"(?:{_WORK_VERBS})\b"
# An assistant narrating work it is doing: "Renaming it across the codebase now." Not running/testing/building,
# which mostly verify rather than change.
_WORK_GERUNDS = (
    r"adding|fixing|writing|rewriting|updating|creating|removing|deleting|dropping|renaming|refactoring|"
    r"implementing|sending|drafting|deploying|publishing|pushing|committing|merging|migrating|rotating|"
    r"changing|moving|bumping|installing|uninstalling|upgrading|downgrading|reverting|rolling\s+back|"
    r"cleaning\s+up|converting|configuring|wiring|replacing|tagging|releasing|generating|backfilling|"
    r"scheduling|archiving|disabling|enabling|patching|porting|splitting|extracting"
)

_ACTION_CUES = re.compile(
    rf"""
    ^{_LABEL}(?:todo|fixme)\b | \btodo(?:\s+for\s+\w+)?\s*: | \baction\s+items?\b
  | \bnext\s+steps?\s*(?::|is\b|are\b|will\b) | \b(?:to-?dos|tasks|follow[\s-]?ups)(?:\s+\w+){0,2}\s*:
  | \bplan\s+for\s+(?:today|tonight|tomorrow|the\s+week|this\s+week|next\s+week|\w+day)\s*:
  | ^{_LABEL}(?:{_WORK_GERUNDS})\b
  | \bremind\s+(?:me|us|him|her|them)\b | \bfollow[\s-]up\s+(?:with|on)\b | \bdon'?t\s+forget\b | \bdo\s+not\s+forget\b
  | \bmake\s+sure\s+to\b | @\w+[,:]?\s+(?:please|pls|can\s+you|could\s+you)\b
  | \bby\s+(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|noon|eod|next\s+week)\b
  | ^{_LABEL}(?:will\s+do|on\s+it|i'm\s+on\s+it)\b
  | \b(?:i|we)(?:'ll|\s+will|(?:'m|\s+am|'re|\s+are)\s+going\s+to)\s+(?:\w+ly\s+)?(?:now\s+)?{_WORK}
  | \b(?:need|needs|have|has|got)\s+to\s+(?:\w+ly\s+)?{_WORK} | \bmust\s+(?:\w+ly\s+)?{_WORK}
  | \b(?:by|before)\s+(?:the\s+)?end\s+of\s+(?:the\s+)?(?:day|week|month|quarter|sprint)\b
  | \b\w+\s+owns\s+(?:it|this|that)\b | \bowner\s*: | \bgotta\s+{_WORK} | \bneeds\s+doing\b
  | \blet'?s\s+{_WORK} | \bplease\s+{_WORK}
    """,
    re.IGNORECASE | re.VERBOSE,
)
# Requests phrased as questions still assign work: "Can you fix it?", "could you add a test?"
_REQUEST = re.compile(rf"\b(?:can|could|would)\s+you\s+(?:please\s+)?{_WORK}", re.IGNORECASE)
# An imperative sentence starting with a work verb: "Add a test for ...", "update it".
_IMPERATIVE = re.compile(rf"^{_LABEL}(?:please\s+|pls\s+|and\s+)?{_WORK}(?!\s+sense)", re.IGNORECASE)


def _sentence_has_action(sentence: str) -> bool:
    if _REQUEST.search(sentence):
        return True
    if _is_question(sentence):
        return False
    if _IMPERATIVE.match(sentence):
        return True
    for cue in _ACTION_CUES.finditer(sentence):
        if _settled(sentence, cue.start()):
            return True
    return False


# First words of shell commands that only read: listing, viewing, searching, testing, linting in check mode.
_READ_ONLY_PROGRAMS = frozenset(
    "ls ll la cat head tail less more grep rg ag ack find fd tree pwd echo printf wc which whereis type file stat "
    "du df ps top htop env printenv whoami id uname date cd diff cmp sort uniq cut jq yq awk "
    "pytest tox nox mypy pyright flake8 pylint eslint tsc vitest jest shellcheck hadolint "
    "true false test [ history man help".split()
)
# Subcommands that only read, for tools whose other subcommands write (git, docker, kubectl, npm, pip, gh ...).
_READ_ONLY_SUBCOMMANDS = frozenset(
    "status log diff show blame describe get logs ls list ps images inspect top view search info version help "
    "check lint test outdated freeze audit why explain doctor plan validate vet build compile typecheck "
    "rev-parse shortlog reflog cat-file ls-files grep".split()
)
_SCRIPT_RUNNERS = frozenset({"npm", "pnpm", "yarn", "bun"})
# `git branch` lists, `git branch new-feature` creates, `git branch -D old` deletes.
_LISTING_WHEN_BARE = frozenset({"branch", "tag", "remote", "config"})
_RENAME_OR_DELETE_FLAGS = frozenset({"-d", "-D", "-m", "-M", "--delete", "--move", "--unset", "add", "drop", "pop"})
# Long flags that make a reading tool write ("ruff check --fix", "find . -delete"); short ones are ambiguous
# ("grep -i" ignores case, "sed -i" edits in place), so sed is judged on its own.
_STATE_CHANGING_FLAGS = re.compile(r"(^|\s)(--in-place|--fix|--write|-delete|-exec)(\s|=|$)")
_COMMAND_WRAPPERS = frozenset({"sudo", "time", "nice", "npx", "pnpx", "bunx", "exec"})
_ENVIRONMENT_RUNNERS = frozenset({"uv", "poetry", "pipenv", "hatch", "pdm"})  # "uv run pytest" -> pytest
_WRITE_REDIRECT = re.compile(r"(?<![0-9&])>{1,2}\s*(?!&|/dev/null)\S")
_COMMAND_SEPARATORS = re.compile(r"&&|\|\||;|\|")


def _segment_is_read_only(segment: str) -> bool:
    try:
        words = shlex.split(segment, posix=True)
    except ValueError:  # unbalanced quotes: judge by whitespace
        words = segment.split()
    while words:
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]) or words[0] in _COMMAND_WRAPPERS:  # FOO=1 sudo cmd
            words = words[1:]
        elif words[0] in _ENVIRONMENT_RUNNERS and words[1:2] == ["run"]:
            words = words[2:]
        else:
            break
    if not words:
        return True
    program = words[0].rsplit("/", 1)[-1]
    if program in ("python", "python3") and words[1:3] == ["-m", "pytest"]:
        return True
    if program == "sed":
        return not any(word.startswith("-i") or word == "--in-place" for word in words)
    if program in _READ_ONLY_PROGRAMS:
        return not _STATE_CHANGING_FLAGS.search(segment)
    positional = [word for word in words[1:] if not word.startswith("-")]
    if positional[:1] == ["run"] and program in _SCRIPT_RUNNERS:  # npm run build -> build
        positional = positional[1:]
    if not positional:
        return False
    if positional[0] in _LISTING_WHEN_BARE:
        return len(positional) == 1 and not any(word in _RENAME_OR_DELETE_FLAGS for word in words)
    return positional[0] in _READ_ONLY_SUBCOMMANDS and not _STATE_CHANGING_FLAGS.search(segment)


def shell_command_changes_state(command: str) -> bool:
    """Whether a shell command may change files or the world; read-only commands (git status, pytest) do not.

    Unknown programs count as state-changing: wrongly flagging an action is cheaper than hiding one.
    """
    if _WRITE_REDIRECT.search(command):
        return True
    segments = [segment.strip() for segment in _COMMAND_SEPARATORS.split(command) if segment.strip()]
    return not all(_segment_is_read_only(segment) for segment in segments)


def _tool_changes_state(tool: ToolRecord) -> bool:
    if tool.category == CATEGORY_CONSEQUENTIAL:
        return True
    return tool.category == CATEGORY_SHELL and shell_command_changes_state(tool.command or "")


def has_action(text: str, tools: Sequence[ToolRecord] = ()) -> bool:
    """Whether the text holds an action item or the tools changed state (an edit, a write, a mutating command)."""
    if any(_tool_changes_state(tool) for tool in tools):
        return True
    return any(_sentence_has_action(sentence) for sentence in _sentences(text))
