"""What `bertkit serve` is tested on: two tiny pretrained models (the 2018 BERT and the modern
encoder) over a vocabulary trained on synthetic text, three tiny fine-tuned models (a
classifier, a tagger, a question answerer), a corpus, a sense-labelled file and a run log."""
from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("fastapi")

from bertkit.finetuning import heads  # noqa: E402
from bertkit.finetuning.tasks import QA, Classify, Tag  # noqa: E402
from bertkit.model import hub  # noqa: E402
from bertkit.model.create import init_model  # noqa: E402
from bertkit.serve.workbench import Limits, Workbench  # noqa: E402
from bertkit.text.tokenizer import Tokenizer  # noqa: E402
from bertkit.text.vocab import train_tokenizer  # noqa: E402

WORDS = ("the a we sat on river bank money rates raised water cat dog mat tree pond sky "
         "john went to paris london and of in was blue green deposited picnic").split()
SENSES = {"money": ("bank.n.02", "a financial institution"),
          "river": ("bank.n.01", "sloping land beside a body of water")}


def _corpus(path: Path, lines: int = 300, seed: int = 0) -> Path:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        out.append(" ".join(words) + " .")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def _senses(path: Path, n: int = 24, seed: int = 1) -> Path:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        kind = "money" if i % 2 else "river"
        before = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
        text = f"{before} {kind} bank {rng.choice(WORDS)} ."
        start = text.index(" bank ") + 1
        synset, gloss = SENSES[kind]
        rows.append({"lemma": "bank", "pos": "noun", "synset": synset, "gloss": gloss,
                     "text": text, "start": start, "end": start + 4})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(path: Path, steps: int = 30) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    lines = []
    for step in range(10, steps + 1, 10):
        lines.append({"step": step, "split": "train", "loss": 9.0 - step / 10,
                      "mlm_accuracy": step / 100, "learning_rate": 1e-3})
    lines.append({"step": steps, "split": "eval", "eval_loss": 7.5, "eval_mlm_accuracy": 0.2})
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (path / "training_args.json").write_text(json.dumps({"command": "bertkit pretrain"}))
    return path


def _task_model(task, encoder_dir: Path, out: Path, seed: int) -> Path:
    model = task.make_model(hub.load_encoder(encoder_dir))
    heads.init_head(model, torch.Generator().manual_seed(seed))
    labels = list(task.labels) if hasattr(task, "labels") and task.labels else None
    return heads.save_task_model(model, out, task=task.to_json(),
                                 tokenizer=Tokenizer.load(encoder_dir), labels=labels)


@pytest.fixture(scope="session")
def served(tmp_path_factory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("serve")
    corpus = _corpus(root / "corpus.txt")
    tok = train_tokenizer([corpus], vocab_size=120, progress=False)
    with torch.random.fork_rng():
        init_model("tiny", tok, root / "bert2018", seed=1, architecture="bert",
                   max_positions=64, initializer_range=0.2)
        init_model("tiny", tok, root / "modern", seed=2, architecture="modern",
                   max_positions=64, initializer_range=0.2)
        cls = _task_model(Classify(labels=("negative", "positive"), max_length=64),
                          root / "bert2018", root / "classifier", 3)
        tagger = _task_model(Tag(labels=("O", "B-PER", "I-PER", "B-LOC", "I-LOC"),
                                 scheme="BIO", max_length=64),
                             root / "bert2018", root / "tagger", 4)
        qa = _task_model(QA(max_length=64, stride=16), root / "bert2018", root / "qa", 5)
    return SimpleNamespace(root=root, corpus=corpus, senses=_senses(root / "senses.jsonl"),
                           run=_run(root / "run"), bert=root / "bert2018",
                           modern=root / "modern", classifier=cls, tagger=tagger, qa=qa)


@pytest.fixture(scope="session")
def workbench(served) -> Workbench:
    return Workbench.load([served.bert, served.modern, served.classifier, served.tagger,
                           served.qa], [served.run], corpus=served.corpus,
                          senses=served.senses, limits=Limits(attention_tokens=48))
