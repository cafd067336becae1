"""The windows of a long input: where they start, which window each piece takes its result
from (the most central one, checked against BERT's SQuAD rule spelled out), and how a whole
input's results are assembled from its windows'."""
from __future__ import annotations

import numpy as np
import pytest

from bertkit.files import UserError
from bertkit.text.windows import central_window, split, window_starts, windowed_span


def _max_context(starts, room, piece):
    """run_squad.py's _check_is_max_context for windows of equal length: the window where
    min(pieces left, pieces right) is largest, the first on a tie."""
    best, best_score = None, None
    for w, s in enumerate(starts):
        if s <= piece < s + room:
            score = min(piece - s, s + room - 1 - piece)
            if best_score is None or score > best_score:
                best, best_score = w, score
    return best


@pytest.mark.parametrize("pieces, room", [(10, 10), (11, 10), (37, 8), (100, 7), (9, 2),
                                          (5, 1), (64, 14)])
def test_windows_cover_every_piece_and_each_piece_takes_the_most_central(pieces, room):
    starts = window_starts(pieces, room)
    size = min(room, pieces)
    assert starts[0] == 0 and starts[-1] + size == pieces  # the last ends at the end
    assert np.all(np.diff(starts) <= max(1, room // 2)) and np.all(np.diff(starts) > 0)
    owner = central_window(starts, size, pieces)
    assert owner.tolist() == [_max_context(starts, size, j) for j in range(pieces)]


def test_an_input_that_fits_is_one_window_itself():
    w = split(12, (1, 11), 12)
    assert len(w.positions) == 1 and w.positions[0].tolist() == list(range(12))
    assert w.owned(0).all()
    values = np.arange(24.0).reshape(12, 2)
    np.testing.assert_array_equal(w.assemble([values]), values)


def test_a_pair_keeps_its_first_text_in_every_window_and_windows_the_second():
    # [CLS] a a [SEP] b*20 [SEP]: segment 1 from position 4
    types = [0] * 4 + [1] * 21
    lo, hi = windowed_span(types)
    assert (lo, hi) == (4, 24)
    w = split(25, (lo, hi), 10)
    for held in w.positions:
        assert len(held) == 10 and held[:4].tolist() == [0, 1, 2, 3] and held[-1] == 24
    assert w.shared.tolist() == [True] * 4 + [False] * 20 + [True]
    # each windowed position is owned by exactly one window, shared ones by all
    owned = np.zeros(25, dtype=int)
    for k, held in enumerate(w.positions):
        owned[held[w.owned(k)]] += 1
    assert owned[4:24].tolist() == [1] * 20 and owned[0] == len(w.positions)


def test_assemble_takes_the_owner_s_value_and_the_mean_where_shared():
    w = split(9, (1, 8), 5)  # [CLS] + 7 pieces + [SEP], 3 pieces a window
    results = [held * 10.0 + k for k, held in enumerate(w.positions)]
    whole = w.assemble(results)
    for t in range(1, 8):
        assert whole[t] == t * 10 + w.owner[t]
    assert whole[0] == np.mean(range(len(w.positions)))  # [CLS]: 0 * 10 + k, averaged
    assert whole[8] == 80 + np.mean(range(len(w.positions)))


def test_a_first_text_that_leaves_no_room_is_refused_in_one_line():
    with pytest.raises(UserError, match=r"^f.txt:3: its first text \(10 tokens"):
        split(20, (9, 19), 9, "f.txt:3")
