"""Entity embeddings of categorical data: lecture 17's recommender on MovieLens ratings.

A categorical column (a user id, a movie id, a genre, a year bucket) can enter a model one-hot:
one weight per category, which is what a linear model on one-hot columns learns. An entity
embedding gives each category a learned vector instead (one-hot times a weight matrix is a row
lookup, so nn.Embedding is that product without the zeros), and categories that behave alike
end up with vectors that point alike. Three models, one class (`kind`):

- "onehot": rating = mean + w_user + w_movie + mean of w_genre + w_year: one-hot columns
  into a linear layer. Additive, so it can learn who rates high and what is rated high but not
  who likes what.
- "dot": rating = mean + b_user + b_movie + p_user . q_movie (matrix factorisation with biases).
- "mlp": rating = mean + MLP([p_user; q_movie; mean of the genre vectors; year-bucket vector]).

`run_entities` trains them with the shared loop, scores dev RMSE beside the global-mean and
per-movie-mean baselines, lists nearest movies by cosine of their learned vectors (CS109B lecture 17's
"who is more similar to Jay?") and draws the movie vectors in 2-D (PCA).
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from bertkit.config import TrainConfig
from bertkit.embeddings.plots import project_2d
from bertkit.figures import draw_or_skip, new_figure, save_png
from bertkit.files import (UserError, atomic_dir, atomic_file, check_not_input, compression_of,
                           format_suffix, read_json)
from bertkit.model.kind import RECOMMENDER_FILE, ModelKind, require_kind
from bertkit.text.sources import Source, csv_rows, find_delimiter
from bertkit.training.loop import train
from bertkit.training.settings import run_settings

CONFIG_FORMAT = "bertkit-recommender"
KINDS = ("onehot", "dot", "mlp")
COLUMNS = ("userId", "movieId", "year", "genres", "rating")
RATING_RANGE = (0.5, 5.0)
YEAR_BUCKET = 5
"""Years are grouped in buckets of this many (1990-1994, 1995-1999, ...)."""


# Reading ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rating:
    user: int
    movie: int
    title: str
    year: int | None
    """None where the file leaves it empty."""
    genres: tuple[str, ...]
    rating: float


def read_ratings(path: str | Path) -> list[Rating]:
    """Rows of a MovieLens-style CSV (or TSV, either compressed) with a header naming at least
    userId, movieId, year, genres (pipe-separated) and rating (title optional), read by the one
    CSV reader (`sources.csv_rows`: quoted titles, Excel's semicolons). A bad row is a
    UserError naming the file and line."""
    path = Path(path)
    fmt = "tsv" if format_suffix(path) == ".tsv" else "csv"
    source = find_delimiter(Source(path, fmt, compression_of(path)), COLUMNS)
    rows: list[Rating] = []
    at: dict[str, int] | None = None
    for number, fields, _ in csv_rows(source):
        if at is None:
            at = _rating_columns(path, number, [f.strip().lstrip("\ufeff") for f in fields])
        else:
            rows.append(_rating(path, number, fields, at))
    if not rows:
        raise UserError(f"{path}: no ratings")
    return rows


def _rating_columns(path: Path, number: int, header: list[str]) -> dict[str, int]:
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise UserError(f"{path}:{number}: the header lacks {', '.join(missing)} "
                        f"(it has {', '.join(header)})")
    return {name: header.index(name) for name in header}


def _rating(path: Path, number: int, fields: list[str], at: dict[str, int]) -> Rating:
    try:
        user, movie = int(fields[at["userId"]]), int(fields[at["movieId"]])
        year = int(fields[at["year"]]) if fields[at["year"]].strip() else None
    except ValueError:
        raise UserError(f"{path}:{number}: userId, movieId and year must be integers") from None
    try:
        rating = float(fields[at["rating"]])
    except ValueError:
        rating = math.nan
    if not RATING_RANGE[0] <= rating <= RATING_RANGE[1]:
        raise UserError(f"{path}:{number}: rating {fields[at['rating']]!r} is not a number "
                        f"from {RATING_RANGE[0]} to {RATING_RANGE[1]}")
    title = fields[at["title"]] if "title" in at else ""
    genres = tuple(g for g in fields[at["genres"]].split("|") if g)
    return Rating(user, movie, title, year, genres, rating)


@dataclass
class Categories:
    """The categories seen in training, each with its index (0 = not seen in training)."""
    users: list[int]
    """User ids; user users[i] has index i + 1."""
    movies: list[int]
    """Movie ids; movie movies[i] has index i + 1."""
    titles: list[str]
    """'Title (year)' of each movie, same order."""
    counts: list[int]
    """Training ratings of each movie, same order."""
    genres: list[str]
    """Genre names; genres[i] has index i + 1 (0 pads a movie's bag of genres)."""
    first_year: int
    """First year of bucket 1 (bucket 0: year unknown or before it)."""
    year_buckets: int
    """Number of year buckets, the unknown one included."""

    @classmethod
    def from_ratings(cls, rows: Sequence[Rating]) -> "Categories":
        movies: dict[int, list] = {}
        for r in rows:
            entry = movies.setdefault(r.movie, [r.title, r.year, 0])
            entry[2] += 1
        ids = sorted(movies)
        years = [r.year for r in rows if r.year is not None]
        first = min(years, default=2000) // YEAR_BUCKET * YEAR_BUCKET
        return cls(users=sorted({r.user for r in rows}), movies=ids,
                   titles=[f"{movies[m][0]} ({movies[m][1]})" if movies[m][1] else movies[m][0]
                           for m in ids],
                   counts=[movies[m][2] for m in ids],
                   genres=sorted({g for r in rows for g in r.genres}),
                   first_year=first,
                   year_buckets=2 + (max(years, default=first) - first) // YEAR_BUCKET)

    def year_bucket(self, year: int | None) -> int:
        if year is None or year < self.first_year:
            return 0
        return min(1 + (year - self.first_year) // YEAR_BUCKET, self.year_buckets - 1)

    def encode(self, rows: Sequence[Rating]) -> dict[str, torch.Tensor]:
        """user [N], movie [N], genres [N, G] (0-padded), year [N] indices and rating [N]."""
        user_index = {u: i + 1 for i, u in enumerate(self.users)}
        movie_index = {m: i + 1 for i, m in enumerate(self.movies)}
        genre_index = {g: i + 1 for i, g in enumerate(self.genres)}
        bags = [[genre_index[g] for g in r.genres if g in genre_index] for r in rows]
        G = max(1, max(map(len, bags), default=1))
        return {"user": torch.tensor([user_index.get(r.user, 0) for r in rows]),
                "movie": torch.tensor([movie_index.get(r.movie, 0) for r in rows]),
                "genres": torch.tensor([b + [0] * (G - len(b)) for b in bags]),
                "year": torch.tensor([self.year_bucket(r.year) for r in rows]),
                "rating": torch.tensor([r.rating for r in rows], dtype=torch.float32)}


# The models ------------------------------------------------------------------------------------

@dataclass
class RecommenderConfig:
    """The shape of a Recommender (saved in recommender.json)."""
    users: int
    """Number of user indices (0 = unseen included)."""
    movies: int
    """Number of movie indices (0 = unseen included)."""
    genres: int
    """Number of genre indices (0 = padding included)."""
    years: int
    """Number of year buckets."""
    kind: str = "dot"
    """"onehot" (linear in one-hot columns), "dot" (dot product plus biases) or "mlp"."""
    dim: int = 32
    """Entity embedding width (dot, mlp)."""
    hidden: int = 64
    """Hidden width of the MLP."""
    mean: float = 3.5
    """Global mean rating, the models' starting point."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"kind must be one of {', '.join(KINDS)}, got {self.kind!r}")


class Recommender(nn.Module):
    def __init__(self, cfg: RecommenderConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        # A one-hot column times a weight vector is one weight per category: width-1 tables.
        width = 1 if cfg.kind == "onehot" else cfg.dim
        self.user = nn.Embedding(cfg.users, width)
        self.movie = nn.Embedding(cfg.movies, width)
        if cfg.kind != "dot":
            self.genre = nn.Embedding(cfg.genres, width, padding_idx=0)
            self.year = nn.Embedding(cfg.years, width)
        if cfg.kind == "dot":
            self.user_bias = nn.Embedding(cfg.users, 1)
            self.movie_bias = nn.Embedding(cfg.movies, 1)
        if cfg.kind == "mlp":
            self.mlp = nn.Sequential(nn.Linear(4 * cfg.dim, cfg.hidden), nn.ReLU(),
                                     nn.Linear(cfg.hidden, 1))
        if generator is not None:
            self.init_weights(generator)

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator) -> None:
        """Normal(0, 0.1) embeddings and weights (zero for the one-hot model and the biases)."""
        for name, p in self.named_parameters():
            if self.cfg.kind == "onehot" or "bias" in name:
                p.zero_()
            else:
                p.normal_(0.0, 0.1, generator=generator)
        if self.cfg.kind != "dot":
            self.genre.weight[0].zero_()

    def _genre_mean(self, genres: torch.Tensor) -> torch.Tensor:
        """genres [B, G] (0 = none) -> the mean of each row's genre vectors [B, width]."""
        real = (genres != 0)[..., None]  # [B, G, 1]
        return (self.genre(genres) * real).sum(1) / real.sum(1).clamp(min=1)

    def forward(self, user: torch.Tensor, movie: torch.Tensor, genres: torch.Tensor,
                year: torch.Tensor) -> torch.Tensor:
        """Index tensors [B] (genres [B, G]) -> predicted ratings [B] (unclipped)."""
        if self.cfg.kind == "onehot":
            parts = self.user(user) + self.movie(movie) + self._genre_mean(genres) + self.year(year)
            return self.cfg.mean + parts.squeeze(-1)
        p, q = self.user(user), self.movie(movie)  # [B, D]
        if self.cfg.kind == "dot":
            return (self.cfg.mean + self.user_bias(user).squeeze(-1)
                    + self.movie_bias(movie).squeeze(-1) + (p * q).sum(-1))
        x = torch.cat([p, q, self._genre_mean(genres), self.year(year)], -1)  # [B, 4D]
        return self.cfg.mean + self.mlp(x).squeeze(-1)

    def movie_vectors(self) -> np.ndarray:
        """The learned movie embeddings [movies, dim] (row 0: unseen)."""
        if self.cfg.kind == "onehot":
            raise UserError("a one-hot model has no movie vectors, only one weight per movie: "
                            "use a dot or mlp model")
        return self.movie.weight.detach().cpu().float().numpy()


def rating_loss(model: Recommender, batch: dict) -> tuple[torch.Tensor, dict]:
    """Mean squared error of the predicted ratings."""
    pred = model(batch["user"], batch["movie"], batch["genres"], batch["year"])
    return F.mse_loss(pred, batch["rating"]), {}


@torch.no_grad()
def predict(model: Recommender, data: dict[str, torch.Tensor], batch_size: int = 8192
            ) -> torch.Tensor:
    """Ratings for encoded rows, clipped to the rating scale."""
    model.eval()
    device = next(model.parameters()).device
    out = [model(*(data[k][i:i + batch_size].to(device) for k in ("user", "movie", "genres",
                                                                  "year"))).cpu()
           for i in range(0, len(data["rating"]), batch_size)]
    return torch.cat(out).clamp(*RATING_RANGE)


def rmse(pred: torch.Tensor, target: torch.Tensor) -> float:
    return float(((pred.double() - target.double()) ** 2).mean().sqrt())


def baselines(train_data: dict[str, torch.Tensor], dev_data: dict[str, torch.Tensor]
              ) -> dict[str, float]:
    """Dev RMSE of the global mean and of each movie's mean (the global mean for a movie
    unseen in training)."""
    mean = float(train_data["rating"].mean())
    n = int(max(train_data["movie"].max(), dev_data["movie"].max())) + 1
    sums = torch.zeros(n, dtype=torch.float64).index_add_(0, train_data["movie"],
                                                          train_data["rating"].double())
    counts = torch.zeros(n, dtype=torch.float64).index_add_(
        0, train_data["movie"], torch.ones(len(train_data["movie"]), dtype=torch.float64))
    item_mean = torch.where(counts > 0, sums / counts.clamp(min=1), torch.tensor(mean,
                                                                                  dtype=torch.float64))
    item_mean[0] = mean
    target = dev_data["rating"]
    return {"global_mean": rmse(torch.full_like(target, mean), target),
            "movie_mean": rmse(item_mean[dev_data["movie"]], target)}


class RowBatches:
    """Shuffled batches of encoded rows, a new order on each pass (generator seeded with
    seed + pass number)."""

    def __init__(self, data: dict[str, torch.Tensor], batch_size: int, seed: int = 0):
        self.data, self.batch_size, self.seed, self.passes = data, batch_size, seed, 0

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.passes)
        self.passes += 1
        order = torch.randperm(len(self.data["rating"]), generator=g)
        for i in range(0, len(order), self.batch_size):
            rows = order[i:i + self.batch_size]
            batch = {k: v[rows] for k, v in self.data.items()}
            batch["input_ids"] = batch["movie"][:, None]
            batch["num_tokens"] = torch.tensor(len(rows))  # examples: the loop's tokens/s
            yield batch

    def __len__(self) -> int:
        return math.ceil(len(self.data["rating"]) / self.batch_size)


# Saving, loading, neighbours, pictures ---------------------------------------------------------

def save_recommender(model: Recommender, categories: Categories, out: str | Path) -> Path:
    """model.safetensors and recommender.json (config and categories), published together in
    one folder swap: `out` holds the old model or the new one, never half of each."""
    out = Path(out)
    with atomic_dir(out) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()},
                  str(tmp / "model.safetensors"))
        with open(tmp / RECOMMENDER_FILE, "w", encoding="utf-8") as f:
            json.dump({"format": CONFIG_FORMAT, "config": asdict(model.cfg),
                       "categories": asdict(categories)}, f, ensure_ascii=False)
    return out


def load_recommender(model_dir: str | Path) -> tuple[Recommender, Categories]:
    """The model (in eval mode) and categories of a directory saved by save_recommender."""
    model_dir = require_kind(model_dir, ModelKind.RECOMMENDER)
    saved = read_json(Path(model_dir) / RECOMMENDER_FILE, "recommender config", CONFIG_FORMAT)
    model = Recommender(RecommenderConfig(**saved["config"]))
    model.load_state_dict(load_file(str(Path(model_dir) / "model.safetensors")))
    return model.eval(), Categories(**saved["categories"])


def find_movie(categories: Categories, movie: int | str) -> int:
    """Index of a movie given by id, or by (part of) its title: the most-rated match."""
    if isinstance(movie, int) or str(movie).isdigit():
        if int(movie) not in categories.movies:
            raise UserError(f"movie id {movie} is not in the training ratings")
        return categories.movies.index(int(movie)) + 1
    query = str(movie).lower()
    matches = [i for i, t in enumerate(categories.titles) if query in t.lower()]
    if not matches:
        raise UserError(f"no movie title contains {movie!r}")
    return max(matches, key=lambda i: categories.counts[i]) + 1


def neighbours_of(model: Recommender, categories: Categories, movie: int | str, k: int = 10,
                  min_ratings: int = 20) -> list[tuple[int, str, float]]:
    """The k movies (rated at least min_ratings times) whose learned vectors have the highest
    cosine with `movie`'s: (movie id, title, cosine), best first."""
    index = find_movie(categories, movie)
    vectors = model.movie_vectors()[1:]
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cosines = unit @ unit[index - 1]
    candidates = [i for i in np.argsort(-cosines)
                  if i != index - 1 and categories.counts[i] >= min_ratings]
    return [(categories.movies[i], categories.titles[i], float(cosines[i]))
            for i in candidates[:k]]


def neighbours(model_dir: str | Path, movie: int | str, k: int = 10,
               min_ratings: int = 20) -> list[tuple[int, str, float]]:
    """Load a saved dot or mlp model and list `movie`'s nearest movies by cosine."""
    model, categories = load_recommender(model_dir)
    return neighbours_of(model, categories, movie, k, min_ratings)


@dataclass
class ItemPoints:
    """The movies drawn in the 2-D picture."""
    movies: list[int]
    """Movie ids."""
    titles: list[str]
    xy: np.ndarray
    """[N, 2] PCA coordinates of their learned vectors."""
    labelled: list[int]
    """Positions (into movies) of the points with a title written beside them."""


def plot_items(model: Recommender, categories: Categories, out: str | Path, n: int = 400,
               labels: int = 30, title: str = "") -> ItemPoints:
    """The n most-rated movies' learned vectors projected on their first two principal
    components, the `labels` most-rated with their titles; written atomically to `out`."""
    vectors = model.movie_vectors()[1:]
    top = sorted(range(len(categories.movies)), key=lambda i: -categories.counts[i])[:n]
    xy, axes = project_2d(vectors[top])
    points = ItemPoints([categories.movies[i] for i in top], [categories.titles[i] for i in top],
                        xy, list(range(min(labels, len(top)))))

    def draw() -> None:
        fig = new_figure(out, figsize=(10, 8))
        ax = fig.add_subplot()
        ax.scatter(xy[:, 0], xy[:, 1], s=8, c="tab:blue", alpha=0.5)
        for i in points.labelled:
            ax.annotate(points.titles[i][:32], xy[i], fontsize=7, xytext=(3, 2),
                        textcoords="offset points")
        ax.set_xlabel(axes[0])
        ax.set_ylabel(axes[1])
        ax.set_title(title or f"learned movie embeddings, the {len(top)} most-rated movies "
                     "(PCA)", fontsize=10)
        save_png(fig, out)

    draw_or_skip(draw, out)  # the points are the result; the picture is a side product
    return points


# The whole run ---------------------------------------------------------------------------------

@dataclass
class EntitiesOptions:
    """Learn entity embeddings from movie ratings; dev RMSE against baselines, neighbours, a map."""
    train: Path
    """Training ratings: CSV with userId, movieId, year, genres, rating (and title)."""
    dev: Path
    """Development ratings, same columns."""
    out: Path = field(metadata={"output": "directory"})
    """Output directory: a model directory per kind, metrics.json, movies.png."""
    kinds: tuple[str, ...] = KINDS
    """Models to train: "onehot", "dot" and/or "mlp"."""
    dim: int = 32
    """Entity embedding width."""
    hidden: int = 64
    """MLP hidden width."""
    epochs: int = 6
    """Passes over the training ratings."""
    batch_size: int = 256
    """Ratings per batch."""
    lr: float = 3e-3
    """Peak learning rate (AdamW, linear decay)."""
    weight_decay: float = 0.3
    """AdamW weight decay on the embeddings and weights."""
    movies: tuple[str, ...] = ("Toy Story", "Godfather, The", "Star Wars: Episode IV")
    """Movies (title parts or ids) whose nearest neighbours to list."""
    top_k: int = 8
    """Neighbours per movie."""
    min_ratings: int = 20
    """Neighbours and pictures only among movies rated at least this often in training."""
    plot_movies: int = 400
    """Most-rated movies drawn in movies.png."""
    seed: int = 0
    """Seed of initialisation, batch order and the training loop."""
    resume: bool = False
    """Continue each model from its latest checkpoint under OUT (after Ctrl-C or SIGTERM)."""
    device: str = "auto"
    """Torch device; auto: CUDA when there is one, else the CPU."""


@dataclass
class EntitiesResult:
    out: Path
    """The output directory."""
    metrics: dict
    """As in metrics.json: baselines' and models' dev RMSE, examples/s, neighbours."""
    points: ItemPoints | None = None
    """The movies drawn in movies.png (None without a dot or mlp model)."""
    neighbours: dict[str, dict[str, list]] = field(default_factory=dict)
    """kind -> movie query -> [(movie id, title, cosine)]."""


def run_entities(options: EntitiesOptions, command_line: str | None = None) -> EntitiesResult:
    """Train each kind, score dev RMSE beside the baselines, list neighbours, draw movies.png."""
    for kind in options.kinds:
        if kind not in KINDS:
            raise UserError(f"kinds must be among {', '.join(KINDS)}, got {kind!r}")
    out = Path(options.out)
    check_not_input(out, [options.train, options.dev], names=["training file", "dev file"])
    train_rows, dev_rows = read_ratings(options.train), read_ratings(options.dev)
    categories = Categories.from_ratings(train_rows)
    train_data, dev_data = categories.encode(train_rows), categories.encode(dev_rows)
    metrics: dict = {"data": {"train_ratings": len(train_rows), "dev_ratings": len(dev_rows),
                              "users": len(categories.users), "movies": len(categories.movies),
                              "genres": len(categories.genres)},
                     "dev_rmse": baselines(train_data, dev_data)}
    print(f"entities: {len(train_rows)} ratings, {len(categories.users)} users, "
          f"{len(categories.movies)} movies; dev RMSE global mean "
          f"{metrics['dev_rmse']['global_mean']:.4f}, movie mean "
          f"{metrics['dev_rmse']['movie_mean']:.4f}", file=sys.stderr)
    found: dict[str, dict[str, list]] = {}
    points = None
    for kind in options.kinds:
        cfg = RecommenderConfig(users=len(categories.users) + 1, movies=len(categories.movies) + 1,
                                genres=len(categories.genres) + 1,
                                years=categories.year_buckets, kind=kind, dim=options.dim,
                                hidden=options.hidden, mean=float(train_data["rating"].mean()))
        model = Recommender(cfg, torch.Generator().manual_seed(options.seed))
        batches = RowBatches(train_data, options.batch_size, options.seed)
        per_epoch = len(batches)
        train_cfg = TrainConfig(lr=options.lr, max_steps=max(1, round(options.epochs * per_epoch)),
                                warmup_fraction=0.02, weight_decay=options.weight_decay,
                                clip_norm=0.0, seed=options.seed, resume=options.resume,
                                log_every=per_epoch // 4 or 1,
                                eval_every=per_epoch, best_metric="dev_rmse", best_mode="min")

        def evaluate(m: Recommender) -> dict[str, float]:
            return {"dev_rmse": rmse(predict(m, dev_data), dev_data["rating"])}

        result = train(model, rating_loss, batches, train_cfg, out / kind, evaluate=evaluate,
                       save=lambda m, path: save_recommender(m, categories, path),
                       device=options.device, fingerprint={"task": "ratings", "kind": kind},
                       settings=run_settings({"options": options}, device=options.device,
                                             precision=train_cfg.precision,
                                             command=command_line))
        if result.stopped_by == "interrupted":
            raise KeyboardInterrupt(f"stopped: continue {out / kind} with resume")
        model.cpu()
        metrics["dev_rmse"][kind] = evaluate(model)["dev_rmse"]
        metrics[kind] = {"steps": result.step, "train_seconds": result.train_seconds,
                         "examples_per_s": result.tokens / max(result.train_seconds, 1e-9),
                         "best_step": result.best_step}
        print(f"entities {kind}: dev RMSE {metrics['dev_rmse'][kind]:.4f}, "
              f"{metrics[kind]['examples_per_s']:.0f} examples/s", file=sys.stderr)
        if kind == "onehot":
            continue
        found[kind] = {m: neighbours_of(model, categories, m, options.top_k, options.min_ratings)
                       for m in options.movies}
        if points is None or kind == "dot":
            points = plot_items(model, categories, out / "movies.png", options.plot_movies,
                                title=f"{kind} model: movie embeddings of the "
                                      f"{options.plot_movies} most-rated movies, PCA")
    metrics["neighbours"] = found
    with atomic_file(out / "metrics.json") as f:
        json.dump(metrics, f, indent=2, ensure_ascii=False)
    return EntitiesResult(out, metrics, points, found)


@dataclass
class NeighboursOptions:
    """List the movies nearest to one by cosine of a saved recommender's learned vectors."""
    model: Path
    """Model directory: OUT/dot or OUT/mlp of an entities run."""
    movie: str
    """Movie id, or part of its title (the most-rated match)."""
    top_k: int = 10
    """Neighbours to list."""
    min_ratings: int = 20
    """Only movies rated at least this often in training."""
