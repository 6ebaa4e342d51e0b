"""Speed of the offline embedder (all-MiniLM-L6-v2 int8 ONNX) on this machine: one command, one table.

    python benchmarks/embedder_speed.py [--texts 32] [--batch-sizes 1,4,8,16,32,64] [--rounds 3] [--json]

Reports the model load time (sha256 check + onnxruntime session) and texts per second for
- texts of 300 word pieces (the model reads 256 of them; chunks of a session mostly look like this),
- texts of mixed length (20 to 400 word pieces), batched after sorting by length (what `embed` does)
  and, as the baseline, in input order,
- short texts (8 to 40 word pieces: queries, one-line memories), six times as many,
for fixed batch sizes and for the default: batches limited to 512 padded tokens.
Speed depends on the number of word pieces, not on what they say, so the texts are random vocabulary
words from a fixed seed. Configurations are measured in interleaved rounds and each cell keeps its
best round, so a burst of load from other processes does not decide the comparison.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable, Sequence

from sessionmem_pipeline.providers.embedders import LocalMiniLMEmbedder, _counting_tokenizer

DEFAULT_BATCHING = "default"


def texts_of_lengths(lengths: Sequence[int], seed: int = 7) -> list[str]:
    """Texts of about the given numbers of word pieces, [CLS] and [SEP] included."""
    tokenizer = _counting_tokenizer()
    rng = random.Random(seed)
    words = sorted(word for word in tokenizer.get_vocab() if word.isalpha() and len(word) > 2)
    pieces = {word: len(tokenizer.encode(word, add_special_tokens=False).ids) for word in words}
    texts = []
    for length in lengths:
        chosen, count = [], 2
        while count < length:
            chosen.append(rng.choice(words))
            count += pieces[chosen[-1]]
        texts.append(" ".join(chosen))
    return texts


def seconds(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def in_input_order(embedder: LocalMiniLMEmbedder, texts: list[str]) -> Callable[[], object]:
    """The baseline: consecutive batches of the input, each padded to its own longest text."""
    size = embedder.batch_size
    return lambda: [embedder.embed(texts[start : start + size]) for start in range(0, len(texts), size)]


def cells(batching: str, sets: dict[str, list[str]]) -> dict[str, tuple[Callable[[], object], int]]:
    """What to time for one batching configuration: name -> (run, number of texts)."""
    long_texts, mixed_texts, short_texts = sets["long"], sets["mixed"], sets["short"]
    embedder = LocalMiniLMEmbedder() if batching == DEFAULT_BATCHING else LocalMiniLMEmbedder(int(batching), None)
    runs = {
        "texts_300_tokens_per_s": (lambda: embedder.embed(long_texts), len(long_texts)),
        "mixed_sorted_per_s": (lambda: embedder.embed(mixed_texts), len(mixed_texts)),
        "short_per_s": (lambda: embedder.embed(short_texts), len(short_texts)),
    }
    if batching != DEFAULT_BATCHING:
        runs["mixed_input_order_per_s"] = (in_input_order(embedder, mixed_texts), len(mixed_texts))
    return runs


def measure(batchings: list[str], sets: dict[str, list[str]], rounds: int) -> list[dict[str, object]]:
    """Texts per second per configuration and cell: the best of `rounds` interleaved rounds."""
    plans = {batching: cells(batching, sets) for batching in batchings}
    best: dict[tuple[str, str], float] = {}
    for _ in range(rounds):
        for batching, runs in plans.items():
            for name, (run, count) in runs.items():
                rate = count / seconds(run)
                best[batching, name] = max(rate, best.get((batching, name), 0.0))
    return [
        {"batching": batching, **{name: round(best[batching, name], 1) for name in runs}}
        for batching, runs in plans.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--texts", type=int, default=32, help="texts per measurement")
    parser.add_argument("--batch-sizes", default="1,4,8,16,32,64", help="fixed batch sizes to compare with the default")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; each cell keeps its best")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args()

    embedder = LocalMiniLMEmbedder()
    load_seconds = seconds(embedder.load)
    sets = {
        "long": texts_of_lengths([300] * args.texts),
        "mixed": texts_of_lengths([random.Random(index).randint(20, 400) for index in range(args.texts)]),
        "short": texts_of_lengths([random.Random(index).randint(8, 40) for index in range(6 * args.texts)]),
    }
    embedder.embed(sets["long"][:8])  # warm-up: first runs allocate onnxruntime's arenas
    rows = measure([*args.batch_sizes.split(","), DEFAULT_BATCHING], sets, args.rounds)
    result = {
        "model_id": embedder.model_id,
        "threads": embedder.threads,
        "load_seconds": round(load_seconds, 3),
        "texts_per_measurement": args.texts,
        "rounds": args.rounds,
        "rows": rows,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{embedder.model_id}: load {load_seconds:.2f} s, {embedder.threads} threads, "
        f"{args.texts} texts per cell, best of {args.rounds} rounds; texts per second:"
    )
    print()
    print("| batching | 300 tokens | mixed 20-400, length-sorted | mixed 20-400, input order | short 8-40 |")
    print("| --- | ---: | ---: | ---: | ---: |")
    default_label = f"default (<= {embedder.max_batch_tokens} padded tokens)"
    for row in rows:
        label = default_label if row["batching"] == DEFAULT_BATCHING else f"fixed {row['batching']}"
        input_order = row.get("mixed_input_order_per_s")
        print(
            f"| {label} | {row['texts_300_tokens_per_s']} | {row['mixed_sorted_per_s']} "
            f"| {'-' if input_order is None else input_order} | {row['short_per_s']} |"
        )


if __name__ == "__main__":
    main()
