"""What someone said, told in the third person (core/reported.py)."""

from __future__ import annotations

import pytest

from sessionmem_pipeline.core.reported import reported


@pytest.mark.parametrize(
    ("speaker", "sentence", "listeners", "told"),
    [
        # the speaker named for "I", the one listener for "you", fillers and emoticons left out
        ("Paul", "sure, i will send you the login and password on sunday :)", ["Luke"],
         "Paul will send Luke the login and password on sunday"),
        # the verb after the new subject agrees, past one adverb
        ("Bob", "I really like the first ones best", ["Lenny"], "Bob really likes the first ones best"),
        ("Adam", "I must admit I worry about her", ["Karen"], "Adam must admit Adam worries about her"),
        ("Bob", "I think you know her", ["Lenny"], "Bob thinks Lenny knows her"),
        # contractions and possessives
        ("Jane", "sorry Ollie, i'm very busy, i won't have time for lunch tomorrow", ["Ollie"],
         "Jane is very busy, Jane won't have time for lunch tomorrow"),
        ("Beth", "Auntie Deirdre, I've been meaning to message you", ["Deirdre"],
         "Beth has been meaning to message Deirdre"),
        ("Cathy", "I left my sunglasses at yours", ["Broke"], "Cathy left Cathy's sunglasses at Broke's"),
        # "you" stays when more than one person could be meant
        ("Anna", "I'd love to see you all", ["Mia", "Tom"], "Anna would love to see you all"),
        # not about the speaker: labelled; an answer keeps its assent, a negation is no filler
        ("Paul", "yes, 1 person", ["Luke"], "Paul: Yes, 1 person"),
        ("Leo", "No, thanks", ["Beatrice"], "Leo: No, thanks"),
        ("Amanda", "He called her last time", ["Hannah"], "Amanda: He called her last time"),
        # a question keeps its words
        ("Hannah", "Hey, do you have Betty's number?", ["Amanda"], "Hannah asked: Do you have Betty's number?"),
        # nothing but chat noise
        ("Rob", "lol :D", ["Eric"], ""),
        ("Joseph", "Wujek Janek has twin cows:D <file_photo>", ["Ella"], "Joseph: Wujek Janek has twin cows"),
    ],
)
def test_a_sentence_is_told_about_its_speaker(speaker: str, sentence: str, listeners: list[str], told: str) -> None:
    assert reported(speaker, sentence, listeners) == told


def test_an_assistant_reporting_work_is_told_as_what_it_did() -> None:
    told = reported("Assistant", "I fixed the rounding bug in `src/shop/cart.py` and the tests pass.", ["User"])

    assert told == "Assistant fixed the rounding bug in `src/shop/cart.py` and the tests pass."


def test_code_and_numbers_are_no_emoticons() -> None:
    told = reported("Assistant", "I changed it to Vec<u8> (see step 8) and kept a[:3] :)", ["User"])

    assert told == "Assistant changed it to Vec<u8> (see step 8) and kept a[:3]"
    assert reported("User", "self.usage = embedder.usage", ["Assistant"]) == "User: self.usage = embedder.usage"
