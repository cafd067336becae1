"""The Task protocol: one tuple lists the tasks, settings are frozen values saved to and read
from bertkit_task.json (the files written before tasks were classes included), and the head is
initialised from a generator without touching the global one."""
from __future__ import annotations

import argparse
import dataclasses

import pytest
import torch

from bertkit.cli.main import build_parser, main
from bertkit.files import UserError
from bertkit.finetuning import heads
from bertkit.finetuning.predict import TaskModel
from bertkit.finetuning.tasks import (QA, TASK_NAMES, TASKS, Classify, Pair, Regress, Spans,
                                      Tag, load_task, task_type)
from bertkit.model import hub
from bertkit.text.tokenizer import Tokenizer

# bertkit_task.json as the dict-based code wrote it (every key it wrote, "head" included).
OLD_FILES = {
    "classify": {"task": "classify", "max_length": 64, "text_column": "sentence",
                 "pair_column": None, "label_column": "label", "label_kind": "multi",
                 "labels": ["a", "b"], "head": {"kind": "sequence", "num_labels": 2,
                                                "problem_type": "multi_label_classification"}},
    "regress": {"task": "regress", "max_length": 64, "text_column": "premise",
                "pair_column": "hypothesis", "label_column": "score", "label_kind": "float",
                "head": {"kind": "sequence", "num_labels": 1, "problem_type": "regression"}},
    "tag": {"task": "tag", "max_length": 64, "conllu_column": "xpos", "alignment": "first",
            "scheme": "BIO", "decode": "first", "labels": ["O", "B-PER", "I-PER"],
            "head": {"kind": "token", "num_labels": 3, "crf": True}},
    "spans": {"task": "spans", "max_length": 64, "conllu_column": "upos", "alignment": "copy",
              "decode": "first", "labels": ["LOC", "PER"], "nested": True, "span_margin": -0.5,
              "head": {"kind": "spans", "num_labels": 2, "max_width": 3, "ffn_size": 12}},
    "qa": {"task": "qa", "max_length": 32, "stride": 8, "max_answer_tokens": 20,
           "max_question": 64, "null_threshold": -1.5, "head": {"kind": "qa"}},
}
EXPECTED = {
    "classify": Classify(max_length=64, text_column="sentence", label_column="label",
                         labels=("a", "b"), multi_label=True),
    "regress": Regress(max_length=64, text_column="premise", pair_column="hypothesis",
                       label_column="score"),
    "tag": Tag(max_length=64, conllu_column="xpos", alignment="first", scheme="BIO",
               labels=("O", "B-PER", "I-PER"), crf=True),
    "spans": Spans(max_length=64, labels=("LOC", "PER"), nested=True, span_margin=-0.5,
                   max_width=3, ffn_size=12),
    "qa": QA(max_length=32, stride=8, max_answer_tokens=20, max_question=64,
             null_threshold=-1.5),
}


def test_one_tuple_names_the_tasks_and_the_command_line_offers_them():
    assert TASK_NAMES == tuple(t.name for t in TASKS)
    assert len(set(TASK_NAMES)) == len(TASKS)
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = top.choices["finetune"]
    parser.format_usage()  # a command's flags are added on first use
    tasks = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert tuple(tasks.choices) == TASK_NAMES
    assert task_type("spans") is Spans
    with pytest.raises(UserError, match="unknown task 'nope'; choose one of classify, pair"):
        task_type("nope")


def test_texts_in_a_file_without_the_txt_suffix_are_told_to_take_it(tmp_path):
    texts = tmp_path / "reviews"  # "a gem of a film" reads as a CoNLL token and its tags
    texts.write_text("a gem of a film\nan utter mess\n")
    with pytest.raises(UserError, match=r"reviews: a classify model reads .txt, JSONL, CSV or "
                                        r"TSV here, not conll \(one text a line: name the "
                                        r"file .txt\)"):
        Classify().read_inputs(texts)
    assert [ex.text for ex in Classify().read_inputs(texts.rename(tmp_path / "r.txt"))] == \
        ["a gem of a film", "an utter mess"]


def test_a_text_file_for_a_model_of_pairs_holds_a_pair_a_line(tmp_path):
    # as `embed` reads it: a tab separates the pair (it was one text, and no "pair" came out)
    texts = tmp_path / "pairs.txt"
    texts.write_text("a man sings\tsomeone sings\n\nit rains\tthe sun\tshines\n")
    pair = Pair(text_column="premise", pair_column="hypothesis")
    assert [(ex.text, ex.pair, ex.source) for ex in pair.read_inputs(texts)] == [
        ("a man sings", "someone sings", f"{texts}:1"), ("it rains", "the sun\tshines", f"{texts}:3")]
    assert [ex.text for ex in Classify().read_inputs(texts)][0] == "a man sings\tsomeone sings"
    texts.write_text("a man sings\tsomeone sings\nno second text\n")
    with pytest.raises(UserError, match=r"pairs.txt:2: a pair model reads a pair a line, "
                                        r"TEXT<TAB>PAIR: this line has no tab"):
        pair.read_inputs(texts)


@pytest.mark.parametrize("command", ["predict", "evaluate"])
def test_a_batch_size_of_0_is_one_line(tiny_bert, tmp_path, capsys, command):
    model, task = tmp_path / "m", Classify(labels=("a", "b"))
    heads.save_task_model(task.make_model(hub.load_encoder(tiny_bert)), model,
                          task=task.to_json(), tokenizer=Tokenizer.load(tiny_bert),
                          labels=["a", "b"])
    (tmp_path / "in.jsonl").write_text('{"text": "x", "label": "a"}\n')
    assert main([command, "--model", str(model), "--input", str(tmp_path / "in.jsonl"),
                 "--batch-size", "0"]) == 2  # was: ValueError, range() arg 3 must not be zero
    assert capsys.readouterr().err == "error: --batch-size must be at least 1, got 0\n"


def test_a_model_not_fine_tuned_is_refused_with_what_to_do_instead(tiny_bert, minilm_dir):
    # `predict` / `evaluate` on a pretrained encoder, or on a sentence model (which `embed` reads)
    with pytest.raises(UserError, match=r"not a fine-tuned model \(no bertkit_task.json, "
                                        r"architecture BertModel\): fine-tune it first, "
                                        r"`bertkit finetune TASK --model "):
        load_task(tiny_bert)
    with pytest.raises(UserError, match=r"architecture BertModel\): a sentence model, whose "
                                        r"vectors `bertkit embed` gives"):
        load_task(minilm_dir)


@pytest.mark.parametrize("name", list(OLD_FILES))
def test_files_written_before_tasks_were_classes_still_load(name):
    task = task_type(name).from_json(OLD_FILES[name])
    assert task == EXPECTED[name]
    written = task.to_json()
    # the keys that still mean something are written as before
    kept = set(OLD_FILES[name]) - {"head"}
    if name == "spans":  # spans never used the tagging options it used to save
        kept -= {"alignment", "decode"}
    assert {k: written[k] for k in kept} == {k: OLD_FILES[name][k] for k in kept}
    assert type(task).from_json(written) == task


def test_settings_are_frozen_and_overrides_make_a_new_value():
    task = EXPECTED["classify"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.labels = ("c",)
    other = task.with_overrides(text_column="review", pair_column=None, conllu_column="upos")
    assert other.text_column == "review" and task.text_column == "sentence"
    assert other.pair_column is None and not hasattr(other, "conllu_column")
    assert EXPECTED["tag"].with_overrides(conllu_column="upos").conllu_column == "upos"


def test_a_model_saved_before_tasks_were_classes_loads_and_tags(tiny_bert, tmp_path):
    # what `bertkit finetune tag --crf` wrote: the task dict with its head
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    old = {"task": "tag", "max_length": 64, "conllu_column": "upos", "alignment": "copy",
           "decode": "first", "labels": labels, "scheme": "BIO"}
    model = Tag(labels=tuple(labels), scheme="BIO", crf=True).make_model(
        hub.load_encoder(tiny_bert))
    heads.init_head(model, torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.crf.transitions.normal_(generator=torch.Generator().manual_seed(1))
    heads.save_task_model(model, tmp_path / "m", task=old, tokenizer=Tokenizer.load(tiny_bert),
                          labels=labels)
    runner = TaskModel.load(tmp_path / "m")
    assert runner.task == Tag(max_length=64, labels=tuple(labels), scheme="BIO", crf=True)
    torch.testing.assert_close(runner.model.crf.transitions, model.crf.transitions)
    batch = runner.tokenizer(["john went to paris ."])
    with torch.no_grad():
        torch.testing.assert_close(runner.model(*batch), model.eval()(*batch))
    text = "john went to paris ."
    assert all(text[e["start"]:e["end"]] == e["text"] for e in runner.tag(text))


def test_the_head_is_initialised_from_a_generator_alone(tiny_bert):
    task = Classify(labels=("a", "b", "c"))

    def head(seed: int) -> torch.Tensor:
        model = task.make_model(hub.load_encoder(tiny_bert))
        before = torch.random.get_rng_state()
        heads.init_head(model, torch.Generator().manual_seed(seed))
        assert torch.equal(before, torch.random.get_rng_state())  # the global one is untouched
        return model.classifier.weight.detach().clone()

    torch.testing.assert_close(head(3), head(3), atol=0, rtol=0)
    assert not torch.equal(head(3), head(4))
    assert head(3).std() == pytest.approx(0.02, rel=0.3)  # BERT's initializer_range


def test_tagging_takes_a_crf_unless_asked_not_to_or_decoding_by_the_mean(tmp_path):
    def crf(**settings):
        return Tag(**settings).configure(tmp_path / "train.conll").crf

    assert crf() is True
    assert crf(crf=False) is False
    assert crf(decode="mean") is False
    assert crf(decode="first", crf=True) is True
    with pytest.raises(UserError, match="drop --crf"):
        crf(decode="mean", crf=True)


@pytest.mark.parametrize("name,has,lacks", [
    ("tag", ["--crf", "--scheme", "--case-feature", "--conllu-column", "--epochs"],
     ["--pooling", "--stride", "--multi-label", "--vectors", "--text-column", "--span-ffn"]),
    ("classify", ["--pooling", "--multi-label", "--text-column", "--vectors", "--lr"],
     ["--crf", "--stride", "--case-feature", "--max-span-width"]),
    ("spans", ["--max-span-width", "--span-ffn", "--span-null-weight", "--case-feature"],
     ["--crf", "--scheme", "--pooling", "--vectors"]),
    ("qa", ["--stride", "--max-answer-tokens", "--max-length"],
     ["--crf", "--pooling", "--text-column", "--vectors", "--conllu-column"]),
])
def test_a_tasks_help_lists_only_what_applies_to_it(name, has, lacks, capsys):
    from bertkit.cli.main import main

    with pytest.raises(SystemExit):
        main(["finetune", name, "--help"])
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()
              if line.startswith("  --")]  # the options, not flags named in their help
    flags = {flag.rstrip(",") for flag in listed}
    assert set(has) <= flags and not set(lacks) & flags, (name, flags)


def test_classify_on_a_file_of_pairs_says_it_leaves_the_second_text_out(tmp_path, capsys):
    """`finetune classify` on SICK trained on the premises alone without a word: it keeps
    doing so (a text and its label is what classify reads), and says how to read the pairs."""
    train = tmp_path / "nli.jsonl"
    train.write_text('{"premise": "A man sleeps.", "hypothesis": "A man rests.", '
                     '"label": "entailment"}\n')
    task = Classify().configure(train)
    assert (task.text_column, task.pair_column) == ("premise", None)
    assert capsys.readouterr().err == (
        f"warning: {train} has a second text, column 'hypothesis', that classify leaves out: "
        f"`finetune pair` (or --pair-column hypothesis) reads the pairs\n")
    assert Classify(pair_column="hypothesis").configure(train).pair_column == "hypothesis"
    assert Pair().configure(train).pair_column == "hypothesis"
    assert capsys.readouterr().err == ""
