"""A sentence someone said, told in the third person: "Paul: sure, i will send you the login" becomes "Paul will
send Luke the login".

Summaries list what people said as statements about them, the way a person writing minutes does: the speaker
named instead of "I", the one other participant named instead of "you", and the chat noise around the content
(leading "well, sure", emoticons, "lol", attachment tags) left out. Words are replaced or dropped, never
reordered, so the statement says what the sentence said; anything the rules do not recognise stays as written.
Pure string rules, no model: deterministic and free.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Interjections, greetings and fillers that open a chat sentence without adding to it ("Oh well, ...").
_FILLERS = (
    r"hey|hi|hello|good\s+(?:morning|afternoon|evening)|morning|evening|oh+|well|so|lol|ha(?:\s*ha)+|hehe+|hmm+|"
    r"um+|uh+|ah+|aw+|wow|omg|ugh|urgh|ooh|btw|anyway|anyways|dear|honey|babe|guys|man|dude|mate|and|but|also|"
    r"actually|honestly|just|please|pls|great|cool|nice|thanks|thx|thank\s+you|sorry"
)
# Assent: an answer ("yes, option B") unless the speaker goes on about themselves
# ("sure, I'll send it" says the assent again).
_ASSENT = r"ok|okay|k|yeah|yes|yep|yup|yea|sure|alright|right"
_FILLER_OPENER = re.compile(rf"^(?:(?:{_FILLERS})\b[\s,.!:;-]*)+", re.IGNORECASE)
_OPENER = re.compile(rf"^(?:(?:{_FILLERS}|{_ASSENT})\b[\s,.!:;-]*)+", re.IGNORECASE)
# Emoticons, emoji, laughter and chat attachment tags ("<file_photo>") anywhere in the sentence.
_NOISE = re.compile(
    r"(?:(?:^|(?<=\s))(?:[:;=][-o']?[)(DPpOo3/\\|*\]\[]+|<3+|\^\^|xD+)|(?<=[A-Za-z])[:;]-?[)(DPp]+)"
    r"(?=\s|$|[.,!?])"
    r"|\b(?:lol+|lmao|rofl|ha(?:\s*ha)+\w*|hehe+|xoxo)\b"
    r"|<file_\w+>"
    r"|[\U0001F000-\U0001FAFF\u2600-\u27BF\uFE0F]",
    re.IGNORECASE,
)
# Irregular present forms after a third-person subject; other verbs take -s / -es / -ies.
_THIRD_PERSON = {
    "am": "is", "are": "is", "have": "has", "do": "does", "don't": "doesn't", "dont": "doesn't", "go": "goes",
    "were": "was", "aren't": "isn't", "haven't": "hasn't", "havent": "hasn't", "wanna": "wants to",
    "gotta": "has to",
}
# Adverbs between a subject and its verb ("I really like"), skipped when the verb is agreed.
_ADVERBS = frozenset(
    "really just also still already always never usually actually totally only even so kinda sorta probably "
    "definitely maybe mostly almost finally personally simply honestly literally seriously both all too".split()
)
# Words that follow a subject without being a present-tense verb to agree: modals, past forms, adverbs.
_NOT_PRESENT = _ADVERBS | frozenset(
    """
    can could will would shall should must might may cannot can't couldn't won't wouldn't shouldn't didn't
    wasn't was did had got went made said told saw thought bought brought came took gave found left lost met ran
    sent spent felt knew heard kept forgot ate drank wrote won paid slept woke fell sold began became understood
    chose caught taught built meant put read let set cut hit hurt quit
    """.split()
)
# Words after which "you" starts a clause (its subject) rather than being an object.
_CLAUSE_START = frozenset(
    "and but so if when because cause cuz coz that as then since until while think hope guess know mean bet".split()
)

_CONTRACTED = {"'m": "is", "'re": "is", "'ve": "has", "'ll": "will", "'d": "would"}
_FIRST = {"i": "", "me": "", "my": "'s", "mine": "'s", "myself": ""}
_SECOND = {"you": "", "u": "", "your": "'s", "ur": "'s", "yours": "'s", "yourself": ""}
_UNCONTRACTED = {"im": ("i", "'m"), "ive": ("i", "'ve"), "youre": ("you", "'re"), "youve": ("you", "'ve")}
_EDGE = re.compile(r"^([^\w']*)(.*?)([^\w']*)$")


def _third_person(verb: str) -> str:
    """The form a present-tense verb takes after "she" ("like" -> "likes"); other words stay as they are."""
    lowered = verb.lower()
    if lowered in _THIRD_PERSON:
        return _THIRD_PERSON[lowered]
    if not verb.isalpha() or not verb.islower() or lowered in _NOT_PRESENT or lowered.endswith(("ed", "ly")):
        return verb
    if lowered.endswith(("s", "sh", "ch", "x", "o", "z")):
        return verb + "es"
    if lowered.endswith("y") and lowered[-2:-1] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


def _person(word: str, speaker: str, listener: str) -> tuple[str, bool] | None:
    """The replacement of a first- or second-person word ("my" -> "Paul's") and whether it is a subject whose
    verb must agree; None when the word stays."""
    lowered = word.lower()
    lowered, contraction = _UNCONTRACTED.get(lowered, (lowered, ""))
    if "'" in lowered and lowered[: lowered.index("'")] in ("i", "you"):
        lowered, contraction = lowered[: lowered.index("'")], lowered[lowered.index("'") :]
    if lowered in _FIRST:
        person, ending = speaker, _FIRST[lowered]
    elif lowered in _SECOND and listener:
        person, ending = listener, _SECOND[lowered]
    else:
        return None
    if contraction in _CONTRACTED:
        return f"{person} {_CONTRACTED[contraction]}", False
    if contraction:  # "i'd've", "you'd" variants the table does not know
        return None
    return person + ending, lowered in ("i", "you", "u")


def _third_person_words(text: str, speaker: str, listener: str) -> str:
    """First person replaced by the speaker, second by the listener, verbs after a replaced subject agreed."""
    words = text.split()
    original = list(words)
    agree = False
    for index, token in enumerate(original):
        lead, word, trail = _EDGE.match(token).groups()
        previous = original[index - 1].lower().strip(",.;:!") if index else ""
        if agree and (word.lower() in _ADVERBS or word.lower().endswith("ly")):
            continue
        if agree:
            words[index] = lead + _third_person(word) + trail
            agree = False
            continue
        replaced = _person(word, speaker, listener)
        if replaced is None:
            continue
        replacement, subject = replaced
        words[index] = lead + replacement + trail
        is_subject = word.lower() in ("i",) or (
            subject and (index == 0 or previous in _CLAUSE_START or original[index - 1].endswith((",", ";", ".")))
        )
        agree = is_subject and not trail
    return " ".join(words)


def reported(speaker: str, sentence: str, listeners: Sequence[str] = ()) -> str:
    """`sentence` said by `speaker`, as a statement about them: "I"/"my" replaced by the speaker, "you"/"your"
    by the listener when exactly one other person takes part (`listeners`), and "{speaker} ..." when the speaker
    is the subject, else "{speaker}: ...". A question keeps its words: "{speaker} asked: ...". "" when nothing is
    left once the chat noise is gone."""
    text = " ".join(_NOISE.sub(" ", sentence.replace("\u2019", "'")).split())
    told = _told(speaker, _OPENER, text, listeners)
    if told.startswith((f"{speaker} ", f"{speaker}'s ")):
        return told
    return _told(speaker, _FILLER_OPENER, text, listeners)


def _told(speaker: str, opener: re.Pattern[str], text: str, listeners: Sequence[str]) -> str:
    text = opener.sub("", text)
    if listeners:  # "Ollie, ..." / "Auntie Deirdre, ...": who is addressed, not what is said
        names = "|".join(re.escape(name) for name in listeners)
        text = opener.sub("", re.sub(rf"^(?:\w+\s+)?(?:{names})\s*[,!]\s*", "", text, flags=re.IGNORECASE))
    text = text.strip(" ,;:-")
    if not re.search(r"[A-Za-z0-9]", text):
        return ""
    if re.match(r"[a-z]+(?:'[a-z]+)?(?:[\s,;:!]|\.(?:\s|$)|$)", text):  # a word, not code such as "self.usage"
        text = text[:1].upper() + text[1:]
    if "?" in text:
        return f"{speaker} asked: {text}"
    statement = _third_person_words(text, speaker, listeners[0] if len(listeners) == 1 else "")
    if statement.startswith((f"{speaker} ", f"{speaker}'s ")):
        return statement
    return f"{speaker}: {statement}"
