"""Model inputs: over-long texts are cut and counted once per command, and inputs that cannot
go through the model (a larger tokenizer, pairs into one segment type) are one-line errors
naming the model."""
from __future__ import annotations

import warnings

import pytest
import torch

from bertkit.cli.main import main
from bertkit.config import EncoderConfig
from bertkit.files import UserError
from bertkit.finetuning.predict import TaskModel, fits_encoder
from bertkit.finetuning.readers import TaggedSentence
from bertkit.finetuning.tasks import Classify, Pair, Tag
from bertkit.model import hub
from bertkit.model.encoder import Encoder, init_weights
from bertkit.text.tokenizer import Tokenizer

LONG = "the movie was good and the plot was great and so fine"  # 13 pieces + 2 specials


def _runner(model_dir, task, **config) -> TaskModel:
    """An untrained task model over the directory's tokenizer; `config` changes the encoder."""
    tokenizer = Tokenizer.load(model_dir)
    cfg = hub.load_config(model_dir).replace(**config)
    encoder = Encoder(cfg)
    init_weights(encoder, cfg, torch.Generator().manual_seed(0))
    return TaskModel(task.make_model(encoder), tokenizer, task, source="m-dir",
                     check_inputs=fits_encoder(tokenizer, cfg, "m-dir"))


def _cut_lines(caught) -> list[str]:
    return [str(w.message) for w in caught if "were cut" in str(w.message)]


def test_over_long_texts_are_cut_and_counted_once_per_call(tiny_bert):
    runner = _runner(tiny_bert, Classify(max_length=8, labels=("negative", "positive")))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = runner.classify([LONG, "so bad", LONG + " and good"])
    assert len(out) == 3
    assert _cut_lines(caught) == ["2 of 3 texts were longer than 8 tokens and were cut"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.classify(["so bad", "good"])
    assert _cut_lines(caught) == []


def test_word_split_sentences_are_counted_too(tiny_bert):
    task = Tag(max_length=6, labels=("O", "B-PER", "I-PER"))
    runner = _runner(tiny_bert, task)
    long = TaggedSentence("john went to new york and paris".split(), [], "")
    short = TaggedSentence(["mary"], [], "")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        runner.predict([long, short])
    assert _cut_lines(caught) == ["1 of 2 texts were longer than 6 tokens and were cut"]


def test_pairs_need_two_segment_types_unless_the_model_has_none(tiny_bert, tiny_modern):
    task = Pair(max_length=32, labels=("a", "b"))
    one = _runner(tiny_bert, task, type_vocab_size=1)
    assert len(one.classify(["the movie"])) == 1  # single texts are segment 0: fine
    with pytest.raises(UserError, match=r"^m-dir: the model has 1 segment type, so it takes no "
                                        r"sentence pairs"):
        one.classify(["the movie"], ["was good"])
    # "modern" has no segment table: a pair is [CLS] a [SEP] b [SEP], its types unused
    modern = _runner(tiny_modern, task)
    assert len(modern.classify(["the movie"], ["was good"])) == 1


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(tiny_bert):
    runner = _runner(tiny_bert, Classify(max_length=16, labels=("negative", "positive")),
                     vocab_size=8)
    with pytest.raises(UserError, match=r"^m-dir: the tokenizer's \d+ pieces do not fit the "
                                        r"model's vocabulary of 8"):
        runner.classify(["the movie"])


def _write(path, rows: list[str]):
    path.write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow
def test_finetune_and_predict_say_once_how_many_texts_were_cut(tiny_bert, tmp_path, capsys):
    rows = [f'{{"text": "{t}", "label": "{y}"}}' for t, y in
            [(LONG, "positive"), ("so bad", "negative"), ("good", "positive"),
             ("awful plot", "negative")] * 3]
    train = _write(tmp_path / "train.jsonl", rows)
    dev = _write(tmp_path / "dev.jsonl", rows[:4])
    assert main(["finetune", "classify", "--model", str(tiny_bert), "--train", str(train),
                 "--dev", str(dev), "--out", str(tmp_path / "m"), "--epochs", "1",
                 "--max-length", "8", "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    cut = [line for line in err if "were cut" in line]
    assert cut == [f"warning: {train}: 3 of 12 texts were longer than 8 tokens and were cut",
                   f"warning: {dev}: 1 of 4 texts were longer than 8 tokens and were cut"]
    texts = _write(tmp_path / "in.txt", [LONG, "so bad", LONG])
    assert main(["predict", "--model", str(tmp_path / "m"), "--input", str(texts),
                 "--out", str(tmp_path / "out.jsonl")]) == 0
    cut = [line for line in capsys.readouterr().err.splitlines() if "were cut" in line]
    assert cut == ["warning: 2 of 3 texts were longer than 8 tokens and were cut"]


@pytest.mark.slow
def test_finetune_pair_on_one_segment_type_names_the_model(tmp_path, tiny_bert, capsys):
    encoder = Encoder(hub.load_config(tiny_bert).replace(type_vocab_size=1))
    model = hub.save_model(encoder, tmp_path / "one", tokenizer=Tokenizer.load(tiny_bert))
    train = _write(tmp_path / "pairs.jsonl", [
        f'{{"premise": "the movie", "hypothesis": "{h}", "label": "{y}"}}'
        for h, y in [("was good", "yes"), ("was bad", "no")] * 4])
    assert main(["finetune", "pair", "--model", str(model), "--train", str(train),
                 "--out", str(tmp_path / "m"), "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {model}: the model has 1 segment type") and \
        err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "m").exists()


# Word case ----------------------------------------------------------------------------------------

def test_word_case_names_the_case_a_lowercasing_tokenizer_loses():
    from bertkit.finetuning.inputs import WORD_CASES, piece_cases, word_case

    cases = {w: WORD_CASES[word_case(w)] for w in
             ["paris", "Paris", "PARIS", "iPhone", "McDonald", "I", "a", "2016", "@user", "#Tag",
              "Zoë", "ÉCOLE", "--"]}
    assert cases == {"paris": "lower", "Paris": "Capitalised", "PARIS": "UPPER",
                     "iPhone": "mIxed", "McDonald": "mIxed", "I": "Capitalised", "a": "lower",
                     "2016": "no letters", "@user": "lower", "#Tag": "Capitalised",
                     "Zoë": "Capitalised", "ÉCOLE": "UPPER", "--": "no letters"}
    # every piece of a word carries the word's case; specials get 0
    assert piece_cases(["New", "york"], [-1, 0, 0, 1, -1]) == [0, 2, 2, 1, 0]


def test_tag_items_carry_case_ids_only_with_the_case_feature(tiny_bert):
    from bertkit.finetuning.inputs import pad_inputs

    tok = Tokenizer.load(tiny_bert)
    sentences = [TaggedSentence(["Mary", "went", "to", "PARIS"],
                                ["B-PER", "O", "O", "B-LOC"], "t:1"),
                 TaggedSentence(["john"], ["B-PER"], "t:3")]
    task = Tag(labels=("O", "B-LOC", "B-PER", "I-LOC", "I-PER"), scheme="BIO")
    assert all(it.case_ids is None for it in task.encode(tok, sentences))
    assert "case_ids" not in pad_inputs(task.encode(tok, sentences))
    items = Tag(labels=task.labels, scheme="BIO", case_feature=True).encode(tok, sentences)
    batch = pad_inputs(items)
    assert batch["case_ids"].tolist() == [[0, 2, 1, 1, 3, 0], [0, 1, 0, 0, 0, 0]]
