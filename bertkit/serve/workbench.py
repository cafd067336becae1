"""What `bertkit serve` shows, as plain Python: the models, corpus and runs named on the command
line, and one method per view that answers with JSON-ready dicts.

The web application (`bertkit.serve.app`) only routes requests here; scripts and notebooks can
call the same methods. Nothing a request carries can name a file: the models, the corpus, the
sense-labelled file and the run directories are fixed when the Workbench is built, and a
request picks among them by name. Every request is checked against `Limits`, and a bad one
raises `RequestError` (one sentence, a 4xx status).
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from bertkit.files import UserError, read_json
from bertkit.model.fetch import hub_name
from bertkit.serve.search import LineIndex, vectors_note
from bertkit.serve.served import ServedModel, load_served_model  # noqa: F401  (served here)
from bertkit.text.tokenizer import check_pairs
from bertkit.training.runlog import run_spec

ROUND = 4
"""Decimals kept in the numbers sent to the page (attention weights, points)."""


class RequestError(UserError):
    """A request the workbench refuses: one sentence, and the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """The most a single request may ask for (what keeps one request from holding the
    worker for long)."""

    text_chars: int = 2000
    """Characters of one text (a sentence, a pair's second text, a question or a context)."""
    top_k: int = 50
    """Guesses per [MASK]."""
    attention_tokens: int = 128
    """Tokens of a text drawn in the attention view (every layer and head: L x A x T x T)."""
    sense_points: int = 300
    """Occurrences of a word projected in the embeddings view."""
    masks: int = 20
    """[MASK]s in one fill-mask text."""
    search_k: int = 100
    """Nearest lines a search request may ask for, per model."""


@dataclass
class Workbench:
    """The models, texts and runs `bertkit serve` was started with, and the views over them."""

    models: dict[str, ServedModel]
    runs: dict[str, Path] = field(default_factory=dict)
    """Run directories by name: their metrics.jsonl is read as it grows."""
    corpus: list[str] = field(default_factory=list)
    """Lines sampled from the corpus (--input): where a word's occurrences are found, and what the
    standardizer and the anisotropy figures are fitted on."""
    corpus_name: str = ""
    sense_rows: list = field(default_factory=list)
    """bertkit.senses.data.SenseExample rows of --senses: sense-labelled occurrences."""
    senses_name: str = ""
    limits: Limits = field(default_factory=Limits)
    line_index: LineIndex | None = None
    """The lines of the corpus the search view ranks (the first --search-lines of them), and
    each model's vectors of them; None without a corpus."""
    progress: bool = False
    """Long work (encoding the lines to search) reports its progress on stderr."""
    searcher: Any = None
    """bertkit.retrieval.corpus_index.Searcher over the index of --index (its retrievers fused,
    the top reranked, as `bertkit search` does); None without one."""

    @classmethod
    def load(cls, models: Sequence[str | Path], runs: Sequence[str | Path] = (),
             corpus: str | Path | None = None, corpus_lines: int = 400,
             senses: str | Path | None = None, device: str | torch.device = "cpu",
             limits: Limits = Limits(), allow_untrained_head: bool = False,
             seed: int = 0, search_lines: int = 10_000,
             text_field: str = "text") -> "Workbench":
        """`models`: directories or Hugging Face Hub names (fetched into its cache), named by their
        last part; `runs`: run directories as DIR or NAME=DIR; `corpus`: a text file whose
        lines are sampled, and whose first `search_lines` lines are searched (0: no search),
        or a file of records whose `text_field` is the text (`numbered_texts`); `senses`: a
        sense-labelled JSON-lines file."""
        from bertkit.embeddings.anisotropy import sample_lines
        from bertkit.senses.data import read_examples

        loaded: dict[str, ServedModel] = {}
        for path, name in zip(models, unique_names(models)):
            loaded[name] = load_served_model(path, name, device, allow_untrained_head)
        run_dirs: dict[str, Path] = {}
        named = [run_spec(r) for r in runs]
        for (given, path), name in zip(named, unique_names([p for _, p in named])):
            name = given or name
            if not Path(path).is_dir():
                raise UserError(f"{path}: no such run directory")
            if name in run_dirs:
                raise UserError(f"two runs are named {name!r}: give them as NAME=DIR")
            run_dirs[name] = Path(path)
        lines = sample_lines(corpus, corpus_lines, seed=seed, text_field=text_field) \
            if corpus is not None else []
        sense_rows = read_examples(senses) if senses is not None else []
        index = LineIndex.read(corpus, search_lines, text_field) \
            if corpus is not None and search_lines > 0 else None
        return cls(loaded, run_dirs, lines, str(corpus or ""), sense_rows, str(senses or ""),
                   limits, index)

    # Helpers -----------------------------------------------------------------------------------
    def model(self, name: Any, need: str = "") -> ServedModel:
        if not isinstance(name, str) or name not in self.models:
            raise RequestError(f"no model named {name!r}; this server has "
                               f"{', '.join(self.models)}", 404)
        model = self.models[name]
        if need == "encoder" and model.embedder is None:
            raise RequestError(f"model {name!r} has no transformer encoder to look into")
        if need == "attention" and not model.has_attention:
            raise RequestError(f"model {name!r} has no attention layers to show")
        return model

    def text(self, value: Any, what: str = "text", allow_empty: bool = False) -> str:
        if not isinstance(value, str):
            raise RequestError(f"{what} must be a string")
        if not value.strip() and not allow_empty:
            raise RequestError(f"{what} is empty")
        if len(value) > self.limits.text_chars:
            raise RequestError(f"{what} has {len(value)} characters; this server takes at most "
                               f"{self.limits.text_chars}", 413)
        return value

    def describe(self) -> dict:
        lemmas = sorted({e.lemma for e in self.sense_rows})
        return {"models": [m.describe() for m in self.models.values()],
                "runs": list(self.runs), "corpus": Path(self.corpus_name).name
                if self.corpus_name else "", "corpus_lines": len(self.corpus),
                "senses": Path(self.senses_name).name if self.senses_name else "",
                "sense_words": lemmas, "limits": vars(self.limits),
                "search": self.line_index.describe() if self.line_index else None,
                "index": self._index_description()}

    # 1. Fill the mask --------------------------------------------------------------------------
    def fill_mask(self, text: Any, top_k: Any = 5, models: Any = None) -> dict:
        """Each model's top-k guesses for every [MASK] of `text`, side by side."""
        text = self.text(text)
        if isinstance(top_k, bool) or not isinstance(top_k, int) \
                or not 1 <= top_k <= self.limits.top_k:
            raise RequestError(f"top_k must be a whole number from 1 to {self.limits.top_k}")
        names = [n for n, m in self.models.items() if not m.no_fill_mask] \
            if models is None else models
        if not isinstance(names, list) or not names \
                or not all(isinstance(n, str) for n in names):
            raise RequestError("models must be a list of model names" if models is not None
                               else "none of this server's models has a masked-LM head")
        if "[MASK]" not in text:
            raise RequestError("the text has no [MASK]: write [MASK] where a word is to be "
                               "guessed, or click a word")
        if text.count("[MASK]") > self.limits.masks:
            raise RequestError(f"the text has {text.count('[MASK]')} [MASK]s; this server "
                               f"guesses at most {self.limits.masks} at once", 413)
        out = []
        for name in dict.fromkeys(names):  # a name given twice is answered once
            model = self.model(name)
            if model.no_fill_mask:
                out.append({"name": name, "error": f"{name}: {model.no_fill_mask}"})
                continue
            own = text.replace("[MASK]", model.mask_token)
            started = time.perf_counter()
            try:
                result = model.filler([own], top_k=top_k)[0]
            except UserError as e:
                raise RequestError(str(e)) from None
            out.append({"name": name, "masks": [[{
                "token": g["token_str"], "id": g["token"], "score": round(g["score"], 6),
                "sequence": g["sequence"]} for g in guesses] for guesses in result["masks"]],
                "ms": round(1000 * (time.perf_counter() - started), 1)})
        return {"text": text, "models": out}

    # 2. Attention ------------------------------------------------------------------------------
    def attention(self, model: Any, text: Any, pair: Any = None) -> dict:
        """Every layer's and head's attention weights for a text (or a pair), and what each
        head attends to (`bertkit.model.attention.head_summary`)."""
        from bertkit.model.attention import HEAD_TARGETS, attention_weights, head_summary

        served = self.model(model, "attention")
        text = self.text(text)
        pair = None if pair in (None, "") else self.text(pair, "pair")
        embedder = served.embedder
        if pair is not None:
            try:
                check_pairs(embedder.config, f"model {served.name!r}")
            except UserError as e:
                raise RequestError(str(e)) from None
        enc = embedder.tokenize([text if pair is None else (text, pair)])[0]
        limit = min(self.limits.attention_tokens, embedder.max_length)
        if enc.truncated or len(enc.ids) > limit:
            count = f"more than {len(enc.ids)}" if enc.truncated else str(len(enc.ids))
            raise RequestError(f"the text is {count} tokens; the attention "
                               f"view draws at most {limit} tokens", 413)
        ids = torch.from_numpy(enc.ids)[None].to(embedder.device)
        types = torch.from_numpy(enc.type_ids)[None].to(embedder.device)
        weights = attention_weights(embedder.encoder, ids, types)[:, 0]  # [L, A, T, T]
        tok = embedder.tokenizer
        summary = head_summary(weights, ids[0], tok.cls_id, tok.sep_id)
        return {"model": served.name, "tokens": [tok.id_to_token(int(i)) for i in enc.ids],
                "segments": enc.type_ids.tolist(),
                "weights": np.round(weights.cpu().numpy(), ROUND).tolist(),
                "summary": {t: np.round(summary[t].cpu().numpy(), ROUND).tolist()
                            for t in HEAD_TARGETS}}

    # 3. Contextual embeddings ------------------------------------------------------------------
    def _standardizer(self, served: ServedModel):
        """The embedder's standardizer: the directory's own, else one fitted on the corpus
        sample (with the anisotropy report of that sample), made once; None without either."""
        embedder = served.embedder
        if served.corpus_report is None and self.corpus:
            from bertkit.embeddings.anisotropy import anisotropy_report

            served.corpus_report, fitted = anisotropy_report(
                embedder, self.corpus, layers="all", standardizer=embedder.standardizer,
                corpus_name=self.corpus_name)
            embedder.standardizer = embedder.standardizer or fitted
        return embedder.standardizer

    def _span(self, item: Any, what: str) -> tuple[str, tuple[int, int]]:
        """A {"text", "word"[, "occurrence"]} or {"text", "start", "end"} target."""
        if not isinstance(item, dict):
            raise RequestError(f"{what} must be an object with text and word")
        text = self.text(item.get("text"), f"{what}.text")
        if "start" in item or "end" in item:
            start, end = item.get("start"), item.get("end")
            if not (isinstance(start, int) and isinstance(end, int)
                    and 0 <= start < end <= len(text)):
                raise RequestError(f"{what}: start and end must be character offsets in the "
                                   f"text, start < end")
            return text, (start, end)
        word = self.text(item.get("word"), f"{what}.word").strip()
        occurrence = item.get("occurrence", 1)
        if isinstance(occurrence, bool) or not isinstance(occurrence, int) or occurrence < 1:
            raise RequestError(f"{what}.occurrence must be a whole number from 1")
        found = list(word_matches(text, word))
        if len(found) < occurrence:
            raise RequestError(f"{what}: {word!r} occurs {len(found)} time(s) in the text")
        return text, found[occurrence - 1]

    def similarity(self, model: Any, a: Any, b: Any) -> dict:
        """The cosine similarity of one word in two contexts, at every layer (the textbooks'
        "bank" example); also after standardization when there is a standardizer."""
        served = self.model(model, "encoder")
        (text_a, span_a), (text_b, span_b) = self._span(a, "a"), self._span(b, "b")
        embedder = served.embedder
        L, H = embedder.config.num_layers, embedder.config.hidden_size
        standardizer = self._standardizer(served)
        runs = {"raw": False, **({"standardized": True} if standardizer is not None else {})}
        out: dict[str, Any] = {"model": served.name, "layers": list(range(L + 1)),
                               "words": [text_a[slice(*span_a)], text_b[slice(*span_b)]]}
        try:
            for key, standardize in runs.items():
                vectors = embedder.word_vectors([text_a, text_b], [span_a, span_b],
                                                layers="all", combine="concat",
                                                standardize=standardize)  # [2, (L+1) H]
                per_layer = vectors.reshape(2, L + 1, H).astype(np.float64)
                cos = [cosine(per_layer[0, k], per_layer[1, k]) for k in range(L + 1)]
                out[key] = [round(c, ROUND) for c in cos]
        except ValueError as e:
            raise RequestError(str(e)) from None
        out["standardized_with"] = _standardizer_source(standardizer, self.corpus_name)
        return out

    def senses(self, model: Any, word: Any, layer: Any = "last4") -> dict:
        """A word's occurrences (in the sense-labelled file, else in the corpus sample) as 2-D
        points, raw and standardized, coloured by sense; the occurrences' anisotropy (their
        expected cosine) both ways, and the corpus's per layer beside them."""
        from bertkit.embeddings.anisotropy import expected_cosine
        from bertkit.embeddings.embedder import resolve_layers
        from bertkit.embeddings.plots import project_2d

        served = self.model(model, "encoder")
        word = self.text(word, "word").strip()
        embedder = served.embedder
        if isinstance(layer, bool) or not isinstance(layer, (int, str)):
            raise RequestError("layer must be a layer number, 'last4' or 'all'")
        try:
            layers = resolve_layers(layer, embedder.config.num_layers)
        except ValueError as e:
            raise RequestError(str(e)) from None
        limit = self.limits.sense_points
        labelled = [e for e in self.sense_rows if e.lemma.lower() == word.lower()][:limit]
        if labelled:
            texts = [e.text for e in labelled]
            spans = [(e.start, e.end) for e in labelled]
            senses = [e.synset or "" for e in labelled]
            glosses = {e.synset: e.gloss or "" for e in labelled if e.synset}
            source = Path(self.senses_name).name
        else:
            texts, spans = [], []
            for line in self.corpus:
                for span in word_matches(line, word):
                    texts.append(line)
                    spans.append(span)
                    break
                if len(texts) >= limit:
                    break
            senses, glosses, source = [""] * len(texts), {}, Path(self.corpus_name).name
        if not self.corpus and not self.sense_rows:
            raise RequestError("this server has no texts to find a word in: start it with "
                               "--input FILE or --senses FILE")
        if len(texts) < 3:
            raise RequestError(f"{word!r} occurs {len(texts)} time(s) in {source or 'the texts'};"
                               f" the projection needs 3 or more")
        standardizer = self._standardizer(served)
        try:
            raw = embedder.word_vectors(texts, spans, layers=layers)
        except ValueError as e:
            raise RequestError(str(e)) from None
        if standardizer is not None:
            z = embedder.word_vectors(texts, spans, layers=layers, standardize=True)
        else:  # standardized over these occurrences themselves
            z = (raw - raw.mean(0)) / np.maximum(raw.std(0), 1e-12)
        points_raw, axes_raw = project_2d(raw)
        points_z, axes_z = project_2d(z)
        out: dict[str, Any] = {
            "model": served.name, "word": word, "source": source, "layers": layers,
            "senses": senses, "glosses": glosses,
            "contexts": [_snippet(t, s) for t, s in zip(texts, spans)],
            "raw": {"points": np.round(points_raw, ROUND).tolist(), "axes": list(axes_raw),
                    "anisotropy": round(expected_cosine(raw), ROUND)},
            "standardized": {"points": np.round(points_z, ROUND).tolist(),
                             "axes": list(axes_z),
                             "anisotropy": round(expected_cosine(z), ROUND)},
            "standardized_with": _standardizer_source(standardizer, self.corpus_name)
            or "these occurrences"}
        report = served.corpus_report
        if report is not None:
            out["corpus"] = {"name": Path(self.corpus_name).name, "words": report.words,
                             "layers": [{"layer": s.layer,
                                         "anisotropy": round(s.anisotropy, ROUND),
                                         "anisotropy_standardized": round(s.anisotropy_std,
                                                                          ROUND),
                                         "rogue": [{"dim": r.dim, "share": round(r.share,
                                                                                  ROUND)}
                                                   for r in s.rogue]}
                                        for s in report.layers]}
        return out

    # 4. Training runs --------------------------------------------------------------------------
    def run(self, name: Any, after: Any = 0) -> dict:
        """The records of a run's metrics.jsonl from number `after` on (poll with the
        returned `next` to follow a run as it trains), and its settings."""
        from bertkit.training.runlog import read_metrics

        if not isinstance(name, str) or name not in self.runs:
            raise RequestError(f"no run named {name!r}; this server has "
                               f"{', '.join(self.runs) or 'none'}", 404)
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise RequestError("after must be a whole number from 0")
        run = self.runs[name]
        try:
            records = read_metrics(run / "metrics.jsonl")
        except UserError as e:
            raise RequestError(str(e), 422) from None
        restarted = after > len(records)  # the log was cut back (a resumed run)
        start = 0 if restarted else after
        args = None
        if (run / "training_args.json").is_file():
            try:
                args = read_json(run / "training_args.json")
            except UserError:
                args = None
        return {"name": name, "records": [_finite(r) for r in records[start:]],
                "next": len(records), "restarted": restarted,
                "training_args": args}

    # 5. A fine-tuned model ---------------------------------------------------------------------
    def predict(self, model: Any, text: Any = None, pair: Any = None,
                question: Any = None, context: Any = None) -> dict:
        """A fine-tuned model's answer: every class's probability, the entity spans (or a tag
        per word), or the answer span of a question in a context."""
        served = self.model(model)
        runner = served.task_model
        if runner is None:
            raise RequestError(f"model {served.name!r} is not fine-tuned for a task")
        task = runner.task
        try:
            if task.verb == "answer":
                question, context = self.text(question, "question"), self.text(context,
                                                                                 "context")
                return {"model": served.name, "task": task.name,
                        **runner.answer(question, context)}
            text = self.text(text)
            if task.verb == "tag":
                found = runner.tag(text)
                key = "entities" if not found or "word" not in found[0] else "words"
                return {"model": served.name, "task": task.name, "text": text, key: found}
            pair = None if pair in (None, "") else self.text(pair, "pair")
            if task.verb == "rerank":  # the text is the query, the pair its passage
                if pair is None:
                    raise RequestError("a reranker scores a passage (pair) for a query (text)")
                return {"model": served.name, "task": task.name, "text": text, "pair": pair,
                        "score": runner((text, pair))["score"]}
            if task.name == "pair" and pair is None:
                raise RequestError("a sentence-pair model needs the second text (pair)")
            return {"model": served.name, "task": task.name, "text": text,
                    **self._classes(runner, text, pair)}
        except RequestError:
            raise
        except UserError as e:
            raise RequestError(str(e)) from None

    @staticmethod
    def _classes(runner, text: str, pair: str | None) -> dict:
        """Every label's probability (softmax; sigmoid for multi-label), or the number of a
        regression model."""
        from bertkit.finetuning.readers import TextExample

        problem = runner.task.problem_type  # a sentence task's (cnn.SentenceTask)
        if problem == "regression":
            return {"score": runner.classify(text, pair)["score"]}
        _, outputs = runner.outputs([TextExample(text, pair)])
        logits = outputs[0].float()
        multi = problem == "multi_label_classification"
        probs = (torch.sigmoid(logits) if multi else logits.softmax(-1)).tolist()
        ranked = sorted(zip(runner.labels, probs), key=lambda lp: -lp[1])
        return {"multi_label": multi,
                "classes": [{"label": label, "score": round(p, 6)} for label, p in ranked]}

    # 6. Search ---------------------------------------------------------------------------------
    def search_models(self) -> list[str]:
        """The models a search asks by default: the sentence models, else every encoder."""
        sentence = [n for n, m in self.models.items() if m.sentence]
        return sentence or [n for n, m in self.models.items() if m.embedder is not None]

    def prepare_search(self) -> None:
        """Encode the lines to search with every sentence model now (a server's start), so
        that their first search answers at once; other encoders encode on first use."""
        if self.line_index is None:
            return
        for name, served in self.models.items():
            if served.sentence:
                self.line_index.encode(name, served.embedder, self.progress)

    def search(self, query: Any, k: Any = 10, models: Any = None) -> dict:
        """The k lines of the corpus nearest to `query` by the cosine of sentence vectors,
        for each model side by side (`bertkit.serve.search.LineIndex`)."""
        index = self.line_index
        if index is None:
            raise RequestError("this server has no lines to search: start it with --input FILE")
        query = self.text(query, "query")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.limits.search_k:
            raise RequestError(f"k must be a whole number from 1 to {self.limits.search_k}")
        names = self.search_models() if models is None else models
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise RequestError("models must be a list of model names")
        if not names:
            raise RequestError("no model to search with: name one or more models"
                               if models is not None else
                               "none of this server's models has an encoder to search with")
        out = []
        for name in dict.fromkeys(names):
            served = self.model(name)
            if served.embedder is None:
                out.append({"name": name, "error": f"{name}: a convolutional classifier "
                                                   f"gives no sentence vectors"})
                continue
            started = time.perf_counter()
            fresh = name not in index.vectors
            try:
                index.encode(name, served.embedder, self.progress)
                encoded = time.perf_counter()
                hits = index.nearest(name, served.embedder, query, k, self.limits.text_chars)
            except UserError as e:
                raise RequestError(str(e)) from None
            answer = {"name": name, "sentence_model": served.sentence,
                      "vectors": vectors_note(served.embedder, served.sentence),
                      "results": hits, "ms": round(1000 * (time.perf_counter() - encoded), 1)}
            if fresh:  # this search encoded the lines first
                answer["encode_s"] = round(encoded - started, 2)
            out.append(answer)
        return {"query": query, "k": k, **index.describe(), "models": out}


    # 7. Search an index ------------------------------------------------------------------------
    def _index_description(self) -> dict | None:
        found = self.searcher
        if found is None:
            return None
        return {"passages": len(found.index.ids), "retrievers": found.index.describe(),
                "fusion": found.fusion.description if found.fusion is not None else None,
                "rerank_top": found.rerank_top if found.reranker is not None else 0}

    def index_search(self, query: Any, k: Any = 10) -> dict:
        """The k passages of the index (--index) best for `query`: its retrievers' rankings
        fused, the first reranked, as `bertkit search` gives them."""
        if self.searcher is None:
            raise RequestError("this server has no index to search: start it with --index DIR")
        query = self.text(query, "query")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.limits.search_k:
            raise RequestError(f"k must be a whole number from 1 to {self.limits.search_k}")
        started = time.perf_counter()
        hits = self.searcher.search([query], top_k=k)[0]
        return {"query": query, "k": k, **self._index_description(),
                "results": [{"rank": r, "id": h.id, "score": round(h.score, ROUND),
                             "text": h.text} for r, h in enumerate(hits, 1)],
                "ms": round(1000 * (time.perf_counter() - started), 1)}


def word_matches(text: str, word: str):
    """Character spans of `word` in `text` as a whole word, ignoring case."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE)
    for m in pattern.finditer(text):
        yield m.span()


def unique_names(paths: Sequence[str | Path]) -> list[str]:
    """A short name per path (its last part; a Hugging Face cache snapshot's, its Hub name's
    rather than the commit's), numbered where two would be equal."""
    names = []
    for p in paths:
        base = Path(hub_name(p) or str(p).rstrip("/")).name or str(p)
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        names.append(name)
    return names


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def _snippet(text: str, span: tuple[int, int], width: int = 60) -> dict:
    start, end = span
    left = max(0, start - width)
    return {"before": ("..." if left else "") + text[left:start],
            "word": text[start:end],
            "after": text[end:end + width] + ("..." if end + width < len(text) else "")}


def _standardizer_source(standardizer, corpus_name: str) -> str:
    if standardizer is None:
        return ""
    if standardizer.path:
        return Path(standardizer.path).name
    return f"{Path(corpus_name).name} ({standardizer.count} words)"


def _finite(record: dict) -> dict:
    """A log record as JSON allows it: NaN and infinities become null."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()}


__all__ = ["RequestError", "Limits", "ServedModel", "load_served_model", "Workbench",
           "word_matches", "unique_names"]
