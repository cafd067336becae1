"""The road to BERT: the earlier systems the textbooks teach, runnable and measured.

- `bertkit.road.entities`: entity embeddings of categorical data (a MovieLens recommender).
- `bertkit.road.seq2seq`: a GRU encoder-decoder: plain, with additive attention, and with
  attention and a pointer-generator copy mechanism.
- `bertkit.road.bleu`: corpus BLEU and chrF, equal to sacrebleu's.
- `bertkit.road.elmo`: ELMo, forward and backward LSTM language models whose layers are
  contextual vectors (the Embedder takes an ELMo directory).
- `bertkit.road.elmo_tagger`: ELMo's use for a task: frozen layers, a learned scalar mix
  (bertkit.model.scalar_mix), a linear tagger.
"""
