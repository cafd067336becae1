"""The road to BERT: the earlier systems the source documents teach, runnable and measured.

- `bertkit.road.entities`: entity embeddings of categorical data (a MovieLens recommender).
- `bertkit.road.seq2seq`: a GRU encoder-decoder with and without additive attention.
- `bertkit.road.bleu`: corpus BLEU and chrF, equal to sacrebleu's.
"""
