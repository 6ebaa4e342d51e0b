"""The project's cl100k encoder (its vocabulary parsed by the project) is tiktoken's own."""

from __future__ import annotations

import tiktoken

from sessionmem_pipeline.core.tokens import ENCODING_NAME, _encoder, count_tokens


def test_encoder_equals_tiktokens_offline_cl100k() -> None:
    ours, theirs = _encoder(), tiktoken.get_encoding(ENCODING_NAME)
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours._mergeable_ranks == theirs._mergeable_ranks
    text = "Déjà vu: `pytest -x` failed 3 times <|endoftext|> 12345 \n\n  tabs\tand 日本語"
    assert ours.encode(text, disallowed_special=()) == theirs.encode(text, disallowed_special=())
    assert count_tokens(text) == len(theirs.encode(text, disallowed_special=()))
