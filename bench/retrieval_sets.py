"""Two retrieval test sets in BEIR's layout, built from the development data, for
`bertkit evaluate --input DIR` (docs/retrieval.md's figures):

  sick/   SICK's premises as queries; the hypotheses each entails are its relevant passages,
          among every sentence of SICK's train and dev files (a premise is a passage too,
          under the same id as its query, so it is never retrieved for itself).
  squad/  the answerable questions of the SQuAD 2.0 subset as queries, each one's paragraph
          relevant, among the subset's paragraphs (titled by their article) and 3,000
          paragraphs of 40 words or more drawn (seed 0) from english_books.txt as distractors.

Deterministic: the same data gives the same directories, byte for byte.

    .venv/bin/python bench/retrieval_sets.py --data DATA_DIR --out OUT_DIR
    bertkit evaluate --model MODEL --input OUT_DIR/sick
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertkit.files import read_jsonl, read_lines  # noqa: E402  (the repository on the path first)
from bertkit.retrieval.beir import write_beir  # noqa: E402

DISTRACTORS = 3000
MIN_WORDS = 40


def sick(data: Path, out: Path) -> Path:
    ids: dict[str, str] = {}  # sentence -> id, in the order first seen
    entails: dict[str, dict[str, None]] = {}
    for name in ("sick.train.jsonl", "sick.dev.jsonl"):
        for _, row in read_jsonl(data / "nli" / name):
            premise, hypothesis = row["premise"].strip(), row["hypothesis"].strip()
            for text in (premise, hypothesis):
                ids.setdefault(text, f"s{len(ids)}")
            if row["label"] == "entailment" and hypothesis != premise:
                entails.setdefault(premise, {})[hypothesis] = None
    corpus = [{"_id": pid, "title": "", "text": text} for text, pid in ids.items()]
    queries = [{"_id": ids[p], "text": p} for p in entails]
    qrels = [(ids[p], ids[h], 1) for p, hs in entails.items() for h in hs]
    return write_beir(out / "sick", corpus, queries, qrels)


def _book_paragraphs(path: Path, count: int, seed: int = 0) -> list[str]:
    long = [line.strip() for _, line in read_lines(path) if len(line.split()) >= MIN_WORDS]
    return random.Random(seed).sample(long, count)


def squad(data: Path, out: Path) -> Path:
    articles = json.loads((data / "qa" / "squad2_subset.dev.json").read_text(encoding="utf-8"))
    corpus, queries, qrels = [], [], []
    for a, article in enumerate(articles["data"]):
        for k, paragraph in enumerate(article["paragraphs"]):
            pid = f"squad-{a}-{k}"
            corpus.append({"_id": pid, "title": article["title"].replace("_", " "),
                           "text": paragraph["context"].strip()})
            for qa in paragraph["qas"]:
                if not qa.get("is_impossible") and qa["answers"]:
                    queries.append({"_id": qa["id"], "text": qa["question"].strip()})
                    qrels.append((qa["id"], pid, 1))
    for i, text in enumerate(_book_paragraphs(data / "corpus" / "english_books.txt",
                                              DISTRACTORS)):
        corpus.append({"_id": f"book-{i}", "title": "", "text": text})
    return write_beir(out / "squad", corpus, queries, qrels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="the data folder (nli/, qa/, corpus/)")
    parser.add_argument("--out", type=Path, required=True, help="where sick/ and squad/ go")
    args = parser.parse_args(argv)
    for build in (sick, squad):
        path = build(args.data, args.out)
        counts = [sum(1 for line in open(path / name, encoding="utf-8") if line.strip())
                  for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")]
        print(f"{path}: {counts[0]} passages, {counts[1]} queries, {counts[2] - 1} judgements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
