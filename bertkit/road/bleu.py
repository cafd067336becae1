"""Corpus BLEU and chrF, computed as sacrebleu computes them (its defaults), one reference each.

BLEU (Papineni et al. 2002) with sacrebleu's defaults: the `13a` tokenizer of mteval-v13a.pl,
case kept, n-grams up to 4 with clipped counts summed over the corpus, the brevity penalty
exp(1 - r/c) when the output is shorter than the references, and the `exp` smoothing of an
n-gram order without any match (its precision becomes 100 / (2^k * total), k counting such
orders). chrF (Popovic 2015): character n-grams of orders 1..6 with whitespace removed,
precision and recall per order summed over the corpus, averaged over the orders that occur
on both sides, F with beta = 2 (recall weighted more). Both return 0..100.

tests/road/test_bleu.py checks both against sacrebleu's corpus_bleu and corpus_chrf.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from typing import Sequence

_13A_RULES = (
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),  # symbols and ASCII punctuation
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),  # period and comma, unless after a digit
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),  # ... unless before a digit
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),  # a dash after a digit
)


def tokenize_13a(line: str) -> list[str]:
    """mteval-v13a's tokenization: the words BLEU counts."""
    line = line.rstrip().replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = (line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                .replace("&gt;", ">"))
    line = f" {line} "
    for pattern, replacement in _13A_RULES:
        line = pattern.sub(replacement, line)
    return line.split()


def _ngrams(tokens: Sequence, n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str], max_order: int = 4) -> float:
    """Corpus BLEU of `hypotheses` against one reference each (0..100)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    correct, total = [0] * max_order, [0] * max_order
    sys_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        h, r = tokenize_13a(hyp), tokenize_13a(ref)
        sys_len, ref_len = sys_len + len(h), ref_len + len(r)
        for n in range(1, max_order + 1):
            hyp_counts, ref_counts = _ngrams(h, n), _ngrams(r, n)
            total[n - 1] += sum(hyp_counts.values())
            correct[n - 1] += sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())
    if not any(correct):
        return 0.0
    brevity = 1.0 if sys_len >= ref_len else (math.exp(1 - ref_len / sys_len) if sys_len else 0.0)
    log_precisions, halvings = [], 1.0
    for n in range(max_order):
        if total[n] == 0:  # no n-grams this long anywhere: sacrebleu leaves the precision 0
            log_precisions.append(-9999999999)
        elif correct[n] == 0:
            halvings *= 2
            log_precisions.append(math.log(100.0 / (halvings * total[n])))
        else:
            log_precisions.append(math.log(100.0 * correct[n] / total[n]))
    return brevity * math.exp(sum(log_precisions) / max_order)


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str], char_order: int = 6,
                beta: float = 2.0) -> float:
    """Corpus chrF of `hypotheses` against one reference each (0..100)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    hyp_total, ref_total, matches = [0] * char_order, [0] * char_order, [0] * char_order
    for hyp, ref in zip(hypotheses, references):
        h, r = "".join(hyp.split()), "".join(ref.split())
        for n in range(1, char_order + 1):
            hyp_counts, ref_counts = _ngrams(h, n), _ngrams(r, n)
            hyp_total[n - 1] += sum(hyp_counts.values())
            ref_total[n - 1] += sum(ref_counts.values())
            matches[n - 1] += sum(min(c, ref_counts[g]) for g, c in hyp_counts.items())
    precision = recall = 0.0
    orders = 0
    for n in range(char_order):
        if hyp_total[n] > 0 and ref_total[n] > 0:
            precision += matches[n] / hyp_total[n]
            recall += matches[n] / ref_total[n]
            orders += 1
    if orders == 0 or precision + recall == 0:
        return 0.0
    precision, recall = precision / orders, recall / orders
    factor = beta ** 2
    return 100 * (1 + factor) * precision * recall / (factor * precision + recall)
