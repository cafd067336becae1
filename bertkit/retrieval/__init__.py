"""Retrieval: the top passages of a corpus for each query, by a sentence model's cosines
(`search`) or by BM25 (`bm25`); BEIR directories read (`beir`) and evaluated (`evaluation`);
hard negatives mined for training pairs (`mining`)."""
