"""Two retrieval development sets in BEIR's layout, and the training triplets held out from
them, built from the development data, for `bertkit evaluate --input DIR` (docs/retrieval.md's
figures) and the side-by-side training benches (bench/rerank_quality.py,
bench/sparse_quality.py):

  sick/   SICK dev's premises as queries; the hypotheses each entails (in the dev file) are its
          relevant passages, among every sentence of SICK's train and dev files (a premise is
          a passage too, under the same id as its query, so it is never retrieved for itself).
  squad/  the answerable questions of every other paragraph of each article of the SQuAD 2.0
          subset (the 1st, 3rd, ...: a fixed half, the subset has only three articles) as
          queries, each one's paragraph relevant, among all the subset's paragraphs (titled by
          their article) and 3,000 paragraphs of 40 words or more drawn (seed 0) from
          english_books.txt as distractors.
  train-triplets.jsonl
          anchor / positive / negative rows, as `finetune rerank`, `finetune sparse` and
          `finetune embed` read them: SICK train's premises, each with a hypothesis it
          entails and one it contradicts (`bertkit.finetuning.sentence_pairs.read_nli`; a
          premise that is a sick/ query left out), and the answerable questions of the other
          paragraphs of SQuAD, each with its paragraph as positive and as negative the
          passage of squad/'s corpus that BM25 ranks highest, the paragraph itself left out
          (`bertkit.retrieval.mining`). Shuffled (seed 0), so that the first N rows mix both.
  train-pairs.jsonl, train-passages.jsonl
          what `bertkit mine` reads to give a training set of hard negatives: every SICK
          train premise (none a sick/ query) with each hypothesis it entails, and the same
          SQuAD questions with their paragraph, as anchor / positive pairs; and where to look
          for the negatives, SICK train's sentences, the other paragraphs of SQuAD and the
          book distractors (never a paragraph of squad/'s questions).

No query of a development set is the anchor of a training row, and no SQuAD paragraph has
questions on both sides. Deterministic: the same data gives the same files, byte for byte.

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

from bertkit.files import atomic_file, read_jsonl, read_lines  # noqa: E402  (the repository first)
from bertkit.finetuning.sentence_pairs import Pair, read_nli  # noqa: E402
from bertkit.retrieval.beir import write_beir  # noqa: E402
from bertkit.retrieval.mining import MiningSettings, mine  # noqa: E402

DISTRACTORS = 3000
MIN_WORDS = 40
TRIPLETS_FILE = "train-triplets.jsonl"
PAIRS_FILE = "train-pairs.jsonl"
PASSAGES_FILE = "train-passages.jsonl"


def sick(data: Path, out: Path) -> tuple[Path, list[dict], list[Pair], list[str]]:
    """The sick/ set (dev premises against every SICK sentence); the training triplets of
    SICK train whose premise is none of its queries; the pairs of those premises and each
    hypothesis they entail, and SICK train's sentences, for mining."""
    ids: dict[str, str] = {}  # sentence -> id, in the order first seen
    entails: dict[str, dict[str, None]] = {}
    train: list[Pair] = []
    for name in ("sick.train.jsonl", "sick.dev.jsonl"):
        for _, row in read_jsonl(data / "nli" / name):
            premise, hypothesis = row["premise"].strip(), row["hypothesis"].strip()
            for text in (premise, hypothesis):
                ids.setdefault(text, f"s{len(ids)}")
            if row["label"] == "entailment" and hypothesis != premise:
                if name == "sick.dev.jsonl":
                    entails.setdefault(premise, {})[hypothesis] = None
                else:
                    train.append(Pair(premise, hypothesis))
        if name == "sick.train.jsonl":
            sentences = list(ids)
    corpus = [{"_id": pid, "title": "", "text": text} for text, pid in ids.items()]
    queries = [{"_id": ids[p], "text": p} for p in entails]
    qrels = [(ids[p], ids[h], 1) for p, hs in entails.items() for h in hs]
    triplets = [{"anchor": t.anchor, "positive": t.positive, "negative": t.negative}
                for t in read_nli(data / "nli" / "sick.train.jsonl").triplets
                if t.anchor.strip() not in entails]
    pairs = [p for p in train if p.anchor not in entails]
    return write_beir(out / "sick", corpus, queries, qrels), triplets, pairs, sentences


def _book_paragraphs(path: Path, count: int, seed: int = 0) -> list[str]:
    long = [line.strip() for _, line in read_lines(path) if len(line.split()) >= MIN_WORDS]
    return random.Random(seed).sample(long, count)


def squad(data: Path, out: Path) -> tuple[Path, list[dict], list[Pair], list[str]]:
    """The squad/ set (questions of every other paragraph against all paragraphs and book
    distractors); the training triplets of the other paragraphs' questions, each with a
    BM25-mined negative from the set's corpus; those questions' pairs, and the passages that
    are no set question's paragraph, for mining."""
    articles = json.loads((data / "qa" / "squad2_subset.dev.json").read_text(encoding="utf-8"))
    corpus, queries, qrels, pairs = [], [], [], []
    for a, article in enumerate(articles["data"]):
        title = article["title"].replace("_", " ")
        for k, paragraph in enumerate(article["paragraphs"]):
            pid, text = f"squad-{a}-{k}", paragraph["context"].strip()
            corpus.append({"_id": pid, "title": title, "text": text})
            for qa in paragraph["qas"]:
                if qa.get("is_impossible") or not qa["answers"]:
                    continue
                if k % 2 == 0:
                    queries.append({"_id": qa["id"], "text": qa["question"].strip()})
                    qrels.append((qa["id"], pid, 1))
                else:  # the passage as BEIR joins title and text, as the dev set shows it
                    pairs.append(Pair(qa["question"].strip(), f"{title} {text}"))
    for i, text in enumerate(_book_paragraphs(data / "corpus" / "english_books.txt",
                                              DISTRACTORS)):
        corpus.append({"_id": f"book-{i}", "title": "", "text": text})
    passages = [f"{c['title']} {c['text']}".strip() for c in corpus]
    negatives = mine(pairs, passages, MiningSettings(num_negatives=1, bm25=True),
                     progress=False)
    triplets = [{"anchor": p.anchor, "positive": p.positive, "negative": passages[n[0]]}
                for p, n in zip(pairs, negatives) if n]
    judged = {pid for _, pid, _ in qrels}
    pool = [text for c, text in zip(corpus, passages) if c["_id"] not in judged]
    return write_beir(out / "squad", corpus, queries, qrels), triplets, pairs, pool


def write_triplets(path: Path, rows: list[dict], seed: int = 0) -> Path:
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    return write_rows(path, rows)


def write_rows(path: Path, rows: list[dict]) -> Path:
    with atomic_file(path) as f:
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True,
                        help="the data folder (nli/, qa/, corpus/)")
    parser.add_argument("--out", type=Path, required=True,
                        help="where sick/, squad/ and the training files go")
    args = parser.parse_args(argv)
    triplets, pairs, pool = {}, [], {}
    for name, build in (("sick", sick), ("squad", squad)):
        path, triplets[name], more, passages = build(args.data, args.out)
        pairs += more
        pool.update(dict.fromkeys(passages))
        counts = [sum(1 for line in open(path / f, encoding="utf-8") if line.strip())
                  for f in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv")]
        print(f"{path}: {counts[0]} passages, {counts[1]} queries, {counts[2] - 1} judgements")
    path = write_triplets(args.out / TRIPLETS_FILE, triplets["sick"] + triplets["squad"])
    print(f"{path}: {len(triplets['sick'])} SICK and {len(triplets['squad'])} SQuAD triplets")
    write_rows(args.out / PAIRS_FILE, [{"anchor": p.anchor, "positive": p.positive}
                                       for p in pairs])
    write_rows(args.out / PASSAGES_FILE, [{"_id": f"t{i}", "text": text}
                                          for i, text in enumerate(pool)])
    print(f"{args.out / PAIRS_FILE}: {len(pairs)} pairs to mine negatives for among "
          f"{len(pool)} passages ({args.out / PASSAGES_FILE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
