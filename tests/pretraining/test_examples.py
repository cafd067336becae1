"""Pretraining batches: pair structure, NSP balance, packing, spans, resume and rank slicing."""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from collections import Counter

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from bertkit.pretraining.corpus import prepare
from bertkit.pretraining.shards import load_split
from bertkit.pretraining.examples import PretrainingBatches
from bertkit.pretraining.phases import ContextPhase, ContextSchedule
from bertkit.files import UserError
from bertkit.pretraining.masking import MaskingConfig
from bertkit.model.heads import IGNORE_INDEX
from synthetic_corpus import make_tokenizer, write_corpus

CLS, SEP, PAD = 2, 3, 0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("examples")
    tok = make_tokenizer(root / "tok")
    write_corpus(root / "c.txt", docs=80, seed=7, paragraphs=(1, 4), sentences=(2, 7))
    prepare([root / "c.txt"], tok, root / "data", workers=1, progress=False,
            heldout_fraction=0.05)
    return root / "data"


def take(batches, n):
    return list(itertools.islice(iter(batches), n))


def original(batch) -> torch.Tensor:
    """The unmasked ids: the labels put back at the selected positions."""
    ids = batch["input_ids"].clone().reshape(-1)
    real = batch["mlm_labels"] != IGNORE_INDEX
    ids[batch["mlm_positions"][real]] = batch["mlm_labels"][real]
    return ids.reshape(batch["input_ids"].shape)


def stream(data) -> np.ndarray:
    """The train split as RoBERTa packs it: each document followed by [SEP]."""
    s = load_split(data, "train")
    parts = []
    for d in range(s.num_documents):
        for i in range(s.doc_sentences[d], s.doc_sentences[d + 1]):
            a = s.sentence_start[i]
            parts.append(np.asarray(s.shards[s.sentence_shard[i]][a:a + s.sentence_length[i]]))
        parts.append(np.array([SEP]))
    return np.concatenate(parts).astype(np.int64)


def sentence_ends(data) -> np.ndarray:
    """Positions in `stream` just past the last token of each sentence of the train split."""
    s = load_split(data, "train")
    ends, at = [], 0
    for d in range(s.num_documents):
        for i in range(s.doc_sentences[d], s.doc_sentences[d + 1]):
            at += int(s.sentence_length[i])
            ends.append(at)
        at += 1  # the document's [SEP]
    return np.asarray(ends)


def test_mlm_packing_fills_rows_and_tiles_the_stream(data):
    T = 32
    pb = PretrainingBatches(data, objective="mlm", seq_len=T, batch_size=16, seed=1,
                            row_ends="anywhere")
    rows = torch.cat([original(b) for b in take(pb, len(pb))]).numpy()
    b = take(pb, 1)[0]
    assert "attention_mask" not in b and b["num_tokens"] == 16 * T  # full rows: no mask
    assert (rows[:, 0] == CLS).all() and (rows[:, -1] == SEP).all()
    assert (b["token_type_ids"] == 0).all()
    assert ((rows[:, 1:-1] == SEP).sum(1) > 0).any()  # rows cross document boundaries
    s = stream(data)
    L = T - 2
    bodies = {tuple(r) for r in rows[:, 1:-1]}
    shifts = [k for k in range(L) if tuple(s[k:k + L]) in bodies]
    assert len(shifts) >= 1
    k = shifts[0]
    windows = {tuple(s[k + i * L:k + (i + 1) * L]) for i in range((len(s) - k) // L)}
    assert bodies <= windows and len(rows) >= len(windows) - 16  # all but a last partial batch
    # N is fixed: round(B*T*0.15) rounded up to a multiple of 8; the rows' own counts fit
    assert b["mlm_positions"].shape == (8 * -(-round(16 * T * 0.15) // 8),)
    assert (b["mlm_labels"] != IGNORE_INDEX).sum() == 16 * round((T - 2) * 0.15)


def _row_ends_in_stream(rows: np.ndarray, s: np.ndarray) -> list[int]:
    """Where in the stream each row's body ends (bodies of these synthetic texts are unique)."""
    L = rows.shape[1] - 2
    at = {tuple(s[e - L:e]): e for e in range(L, len(s) + 1)}
    return sorted(at[tuple(r)] for r in rows[:, 1:-1])


@pytest.mark.parametrize("seed", [1, 2])
def test_mlm_rows_end_where_sentences_end_and_do_not_overlap(data, seed):
    T = 64
    pb = PretrainingBatches(data, objective="mlm", seq_len=T, batch_size=8, seed=seed)
    rows = torch.cat([original(b) for b in take(pb, len(pb))]).numpy()
    assert (rows[:, 0] == CLS).all() and (rows[:, -1] == SEP).all()  # full rows, no padding
    assert "attention_mask" not in take(pb, 1)[0]
    s, ends = stream(data), sentence_ends(data)
    assert (np.diff(ends) < T - 2).all()  # a sentence end in every window: no row cut anywhere
    got = _row_ends_in_stream(rows, s)
    assert set(got) <= set(ends.tolist())
    assert (np.diff(got) >= T - 2).all()  # disjoint rows
    # all but a last partial batch of the epoch's rows, and most of the text
    assert len(rows) >= len(pb._epoch_plan(0).a_start) - 8
    assert len(rows) * (T - 2) > 0.6 * len(s)
    other = PretrainingBatches(data, objective="mlm", seq_len=T, batch_size=8, seed=seed + 10)
    assert set(got) != set(_row_ends_in_stream(
        torch.cat([original(b) for b in take(other, len(other))]).numpy(), s))


def test_a_sentence_longer_than_a_row_is_cut_into_rows_not_skipped(data):
    T = 8  # rows of 6 tokens: many sentences are longer
    pb = PretrainingBatches(data, objective="mlm", seq_len=T, batch_size=16, seed=0)
    rows = torch.cat([original(b) for b in take(pb, len(pb))]).numpy()
    s, ends = stream(data), set(sentence_ends(data).tolist())
    at = {}
    for e in range(T - 2, len(s) + 1):
        at.setdefault(tuple(s[e - T + 2:e]), []).append(e)
    bodies = [at[tuple(r)] for r in rows[:, 1:-1]]
    # some rows end at a sentence end, some inside a long sentence, and most text is read
    assert any(set(b) & ends for b in bodies) and any(not set(b) & ends for b in bodies)
    assert len(rows) * (T - 2) > 0.6 * len(s)


def whole_sentence_rows_by_hand(data, L: int) -> list[tuple]:
    """RoBERTa's FULL-SENTENCES as a plain loop over the sentences: a row takes sentences while
    they fit in L tokens; a sentence longer than L is cut into rows of L, its rest opening
    the next row."""
    s, ends = stream(data), sentence_ends(data)
    split = load_split(data, "train")
    starts = ends - split.sentence_length
    rows, open_at, end = [], None, None
    for a, b in zip(starts.tolist(), ends.tolist()):
        if open_at is not None and b - open_at <= L:
            end = b
            continue
        if open_at is not None:
            rows.append((open_at, end))
        while b - a > L:
            rows.append((a, a + L))
            a += L
        open_at, end = a, b
    rows.append((open_at, end))
    return [tuple(s[a:b]) for a, b in rows]


@pytest.mark.parametrize("T", [64, 8])
def test_whole_sentence_rows_start_and_end_at_sentences_and_pad_the_rest(data, T):
    pb = PretrainingBatches(data, objective="mlm", seq_len=T, batch_size=8, seed=3,
                            row_ends="whole-sentences")
    batches = take(pb, len(pb))
    assert sum("attention_mask" in b for b in batches) > len(batches) // 2  # padded rows
    bodies = []
    for b in batches:
        ids = original(b)
        attention = b.get("attention_mask", torch.ones_like(ids))
        length = attention.sum(1)
        assert (ids[attention == 0] == PAD).all()
        assert (ids[:, 0] == CLS).all() and (ids[torch.arange(len(ids)), length - 1] == SEP).all()
        assert (b["mlm_labels"] != IGNORE_INDEX).sum() > 0
        picked = b["mlm_positions"][b["mlm_labels"] != IGNORE_INDEX]
        assert (attention.reshape(-1)[picked] == 1).all()  # no padding is ever masked
        bodies += [tuple(row[1:n - 1].tolist()) for row, n in zip(ids, length.tolist())]
    expected = whole_sentence_rows_by_hand(data, T - 2)
    assert len(bodies) >= len(expected) - 8
    assert not Counter(bodies) - Counter(expected)  # each row one of the loop's, once
    assert sum(map(len, expected)) == len(stream(data)) - load_split(data, "train").num_documents \
        + sum(t.count(SEP) for t in expected)  # every token of text in some row
    first, second = pb._plan(0), pb._plan(1)  # the same rows every epoch, in another order
    assert np.array_equal(first.a_start, second.a_start)
    assert not np.array_equal(first.order, second.order)
    again = take(PretrainingBatches(data, objective="mlm", seq_len=T, batch_size=8, seed=3,
                                    row_ends="whole-sentences"), 2)
    assert torch.equal(again[1]["input_ids"], batches[1]["input_ids"])


def test_nsp_pairs_structure_balance_and_random_documents(data):
    T = 48
    pb = PretrainingBatches(data, objective="mlm+nsp", seq_len=T, batch_size=16, seed=2)
    labels = []
    for b in take(pb, len(pb)):
        ids = original(b)
        for row in range(ids.shape[0]):
            att = b.get("attention_mask", torch.ones_like(ids))[row]
            r, types = ids[row], b["token_type_ids"][row]
            seps = torch.nonzero(r == SEP).squeeze(1).tolist()
            assert r[0] == CLS and len(seps) == 2
            first, second = seps
            assert first >= 2 and second >= first + 2  # A and B are not empty
            assert (types[:first + 1] == 0).all() and (types[first + 1:second + 1] == 1).all()
            assert (types[second + 1:] == 0).all() and (r[second + 1:] == PAD).all()
            assert (att[:second + 1] == 1).all() and (att[second + 1:] == 0).all()
        labels.append(b["nsp_labels"])
    labels = torch.cat(labels).float()
    assert 0.4 < labels.mean().item() < 0.65  # 50/50, plus one-sentence chunks (always random)
    plan = pb._epoch_plan(0)
    doc_a = np.searchsorted(pb.doc_stream, plan.a_start, side="right") - 1
    doc_b = np.searchsorted(pb.doc_stream, plan.b_start, side="right") - 1
    rand = plan.nsp_label == 1
    assert (doc_a[rand] != doc_b[rand]).all()  # random B comes from another document
    assert (doc_a[~rand] == doc_b[~rand]).all()  # actual next: same document, after A
    assert (plan.b_start[~rand] >= plan.a_start[~rand] + plan.a_len[~rand]).all()
    assert (plan.a_len + plan.b_len <= T - 3).all()


def test_short_seq_prob_makes_some_short_pairs(data):
    T = 64
    lengths = {}
    for p in (0.0, 0.5):
        pb = PretrainingBatches(data, objective="mlm+nsp", seq_len=T, batch_size=8, seed=0,
                                short_seq_prob=p)
        plan = pb._epoch_plan(0)
        lengths[p] = plan.a_len + plan.b_len
    # the target length is drawn per document (as BERT): half the documents aim short
    assert lengths[0.5].mean() < lengths[0.0].mean() - 5
    assert (lengths[0.0] == T - 3).mean() > 0.5  # otherwise pairs fill the row


def test_span_batches_single_segments_and_boundaries(data):
    T = 40
    pb = PretrainingBatches(data, objective="span", seq_len=T, batch_size=8, seed=3)
    for b in take(pb, 5):
        ids = original(b)
        assert ((ids == SEP).sum(1) == 1).all()  # one segment, inside one document
        real = b["mlm_labels"] != IGNORE_INDEX
        pos, left, right = (b[k][real] for k in ("mlm_positions", "span_left", "span_right"))
        assert ((left < pos) & (pos < right)).all()
        assert torch.equal(pos // T, left // T) and torch.equal(pos // T, right // T)
        assert torch.equal(b["span_offset"][real], pos - left - 1)
        assert real.sum() > 0.12 * b["num_tokens"]


def test_clm_labels_are_the_next_token(data):
    pb = PretrainingBatches(data, objective="clm", seq_len=32, batch_size=4)
    b = take(pb, 1)[0]
    assert "mlm_positions" not in b
    assert torch.equal(b["clm_labels"][:, :-1], b["input_ids"][:, 1:])
    assert (b["clm_labels"][:, -1] == IGNORE_INDEX).all()


@pytest.mark.parametrize("objective", ["mlm", "mlm+nsp", "span", "clm"])
def test_resume_from_state_gives_the_same_batches(data, objective, tmp_path):
    kwargs = dict(objective=objective, seq_len=64, batch_size=16, seed=5,
                  masking=MaskingConfig(whole_word=objective == "mlm"))
    pb = PretrainingBatches(data, **kwargs)
    per_epoch = len(pb)
    n = per_epoch + 3  # across an epoch boundary
    straight = take(pb, n)
    run = PretrainingBatches(data, **kwargs)
    it = iter(run)
    first = [next(it) for _ in range(per_epoch - 1)]
    state = run.state_dict()
    # the state is plain ints and a tensor: through safetensors + json, no pickle
    save_file({"generator": state["generator"]}, str(tmp_path / "g.safetensors"))
    saved = json.loads(json.dumps({k: v for k, v in state.items() if k != "generator"}))
    saved["generator"] = load_file(str(tmp_path / "g.safetensors"))["generator"]
    resumed = PretrainingBatches(data, **kwargs)
    resumed.load_state_dict(saved)
    rest = take(resumed, n - len(first))
    for a, b in zip(straight, first + rest):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key
    # a second pass (epoch 1) masks the same sequences afresh
    assert not torch.equal(straight[0]["input_ids"], straight[per_epoch]["input_ids"])


def test_resume_refuses_another_configuration(data):
    pb = PretrainingBatches(data, objective="mlm", seq_len=32, batch_size=4)
    other = PretrainingBatches(data, objective="mlm", seq_len=48, batch_size=4)
    with pytest.raises(UserError, match="seq_len"):
        other.load_state_dict(pb.state_dict())


@pytest.mark.parametrize("objective", ["mlm+nsp", "span", "clm"])
def test_two_ranks_share_exactly_the_single_process_batch(data, objective):
    B, T = 4, 48
    single = take(PretrainingBatches(data, objective=objective, seq_len=T, batch_size=2 * B,
                                     seed=9), 4)
    ranks = [take(PretrainingBatches(data, objective=objective, seq_len=T, batch_size=B,
                                     seed=9, rank=r, world_size=2), 4) for r in range(2)]
    for step, whole in enumerate(single):
        parts = [ranks[r][step] for r in range(2)]
        def mask(b):
            return b.get("attention_mask", torch.ones_like(b["input_ids"]))
        assert torch.equal(mask(whole), torch.cat([mask(p) for p in parts]))
        for key in ("input_ids", "token_type_ids", "nsp_labels", "clm_labels"):
            if key in whole:
                assert torch.equal(whole[key], torch.cat([p[key] for p in parts])), key
        assert whole["num_tokens"] == sum(p["num_tokens"] for p in parts)
        if "mlm_positions" not in whole:
            continue
        fields = ("mlm_positions", "mlm_labels") + (
            ("span_left", "span_right", "span_offset") if objective == "span" else ())

        def entries(batch, shift):
            real = batch["mlm_labels"] != IGNORE_INDEX
            cols = [batch[f][real] + (shift if f in ("mlm_positions", "span_left",
                                                     "span_right") else 0) for f in fields]
            return sorted(zip(*(c.tolist() for c in cols)))
        assert entries(whole, 0) == sorted(entries(parts[0], 0) + entries(parts[1], B * T))


def _schedule(data, prefetch=2, masking=None):
    def batches(seq_len, batch_size, seed):
        return PretrainingBatches(data, objective="mlm", seq_len=seq_len, batch_size=batch_size,
                                  seed=seed, prefetch=prefetch, masking=masking)
    return ContextSchedule([batches(16, 8, 3), batches(32, 4, 4)],
                           [ContextPhase(16, 0.5), ContextPhase(32, 0.5)])


def _run(schedule, progress):
    """One batch per entry of `progress`, each after telling the schedule how far it is."""
    out, it = [], None
    for fraction in progress:
        schedule.set_progress(fraction)
        it = it or iter(schedule)
        out.append(next(it))
    return out


def test_length_schedule_switches_to_long_sequences_at_its_fraction(data):
    steps = [i / 8 for i in range(8)]
    got = _run(_schedule(data), steps)
    assert [tuple(b["input_ids"].shape) for b in got] == [(8, 16)] * 4 + [(4, 32)] * 4
    # the long phase is the late batches' own order, not a replay of the short phase's text
    late = take(PretrainingBatches(data, objective="mlm", seq_len=32, batch_size=4, seed=4), 4)
    for a, b in zip(got[4:], late):
        assert torch.equal(a["input_ids"], b["input_ids"])
    # a run resumed after the switch starts with long sequences
    resumed = _schedule(data)
    resumed.set_progress(0.75)
    assert next(iter(resumed))["input_ids"].shape == (4, 32)


@pytest.mark.parametrize("cut", [2, 6])  # before and after the switch
def test_length_schedule_resumes_exactly(data, cut):
    steps = [i / 8 for i in range(8)]
    straight = _run(_schedule(data), steps)
    first = _schedule(data)
    head = _run(first, steps[:cut])
    resumed = _schedule(data)
    resumed.load_state_dict(first.state_dict())
    tail = _run(resumed, steps[cut:])
    for a, b in zip(straight, head + tail):
        assert torch.equal(a["input_ids"], b["input_ids"])
        assert torch.equal(a["mlm_positions"], b["mlm_positions"])


def test_length_schedule_needs_a_switch_inside_the_run(data):
    short = PretrainingBatches(data, objective="mlm", seq_len=16, batch_size=8)
    long = PretrainingBatches(data, objective="mlm", seq_len=32, batch_size=4)
    for at in (0.0, 1.0, 1.5):
        with pytest.raises(UserError, match="inside the run"):
            ContextSchedule([short, long], [ContextPhase(16, at), ContextPhase(32, 1 - at)])


def _targets(batch) -> torch.Tensor:
    return batch["mlm_positions"][batch["mlm_labels"] != IGNORE_INDEX]


@pytest.mark.parametrize("progress, rate", [(0.0, 0.4), (0.5, 0.25), (1.0, 0.1), (1.5, 0.1)])
def test_a_scheduled_masking_rate_follows_the_run(data, progress, rate):
    scheduled = PretrainingBatches(data, objective="mlm", seq_len=32, batch_size=4, seed=2,
                                   masking=MaskingConfig(mlm_prob=0.4, mlm_prob_final=0.1))
    constant = PretrainingBatches(data, objective="mlm", seq_len=32, batch_size=4, seed=2,
                                  masking=MaskingConfig(mlm_prob=rate))
    assert scheduled.num_predictions >= constant.num_predictions  # sized for the higher rate
    scheduled.set_progress(progress)
    # the batch a constant rate of `rate` gives, target for target
    assert torch.equal(_targets(next(iter(scheduled))), _targets(next(iter(constant))))


def test_a_scheduled_masking_rate_resumes_exactly_and_rises_too(data):
    def feed():
        return _schedule(data, masking=MaskingConfig(mlm_prob=0.4, mlm_prob_final=0.1))
    steps = [i / 8 for i in range(8)]
    straight = _run(feed(), steps)
    counts = [len(_targets(b)) for b in straight]
    assert counts[0] > counts[3] and counts[4] > counts[7] and counts[0] > 2 * counts[-1]
    first = feed()
    head = _run(first, steps[:5])  # after the switch to long sequences at 0.5
    resumed = feed()
    resumed.load_state_dict(first.state_dict())
    for a, b in zip(straight, head + _run(resumed, steps[5:])):
        assert torch.equal(a["mlm_positions"], b["mlm_positions"])
        assert torch.equal(a["input_ids"], b["input_ids"])
    rising = _run(_schedule(data, masking=MaskingConfig(mlm_prob=0.1, mlm_prob_final=0.4)),
                  [0.0, 0.99])
    assert len(_targets(rising[1])) > 2 * len(_targets(rising[0]))
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="mlm_prob_final"):
            MaskingConfig(mlm_prob_final=bad)


def test_bad_settings_are_refused(data):
    with pytest.raises(UserError, match="objective"):
        PretrainingBatches(data, objective="xlnet", seq_len=32, batch_size=4)
    with pytest.raises(UserError, match="too short"):
        PretrainingBatches(data, objective="mlm", seq_len=4, batch_size=4)
    held = PretrainingBatches(data, objective="mlm", seq_len=32, batch_size=64, split="heldout")
    assert len(held) >= 1  # a small split still yields full batches


# The prefetching thread -----------------------------------------------------------------------

def test_closing_the_batches_stops_their_prefetching_thread(data):
    it = iter(PretrainingBatches(data, objective="mlm", seq_len=16, batch_size=4, prefetch=2))
    next(it)
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "bertkit-batches"]


_EXIT_WHILE_PREFETCHING = """
import sys, time
import torch
from bertkit.pretraining import examples

real = examples.mask_tokens


def slow(*args, **kwargs):  # a batch built in many short native calls that release the GIL
    end, x = time.monotonic() + 1.0, torch.ones(64)
    while time.monotonic() < end:
        x < 0.5
    return real(*args, **kwargs)


examples.mask_tokens = slow
it = iter(examples.PretrainingBatches(sys.argv[1], objective="mlm", seq_len=16, batch_size=4,
                                      prefetch=2))
next(it)
it.close()  # what the training loop does when it fails, and then the process exits
"""


@pytest.mark.slow
def test_a_process_that_exits_while_the_next_batch_is_built_exits_cleanly(data):
    """A daemon thread inside a torch call when the interpreter finalizes is ended as it takes
    the GIL back, through a C++ frame that may not unwind: std::terminate, exit -6
    ("terminate called without an active exception"), what a rank whose peer died did."""
    done = subprocess.run([sys.executable, "-c", _EXIT_WHILE_PREFETCHING, str(data)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "terminate called" not in done.stderr, done.stderr[-2000:]
