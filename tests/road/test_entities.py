"""Entity embeddings of categorical data: reading ratings, the three models' math, baselines,
files; a planted low-rank rating table; a short run on MovieLens (skipped without ../shared)."""
from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

import bertkit.road.entities as entities
from bertkit.files import UserError
from bertkit.road.entities import (Categories, EntitiesOptions, Rating, Recommender,
                                   RecommenderConfig, baselines, load_recommender, neighbours,
                                   neighbours_of, plot_items, predict, read_ratings,
                                   run_entities, save_recommender)

HEADER = ["userId", "movieId", "title", "year", "genres", "rating", "timestamp"]


def write_csv(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(HEADER)
        for user, movie, rating in rows:
            genres = "Comedy|Drama" if movie % 2 else "Action"
            writer.writerow([user, movie, f"Movie {movie}, The", 1990 + movie % 20, genres,
                             f"{rating:.4f}", 0])
    return path


def small_rows() -> list[Rating]:
    return [Rating(1, 10, "A", 1995, ("Comedy",), 4.0), Rating(1, 20, "B", None, (), 2.0),
            Rating(2, 10, "A", 1995, ("Comedy",), 5.0), Rating(3, 30, "C", 2003,
                                                              ("Action", "Comedy"), 1.0)]


def test_reading_ratings_with_quoted_titles_empty_years_and_genre_bags(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("userId,movieId,title,year,genres,rating,timestamp\n"
                    '1,2455,"Fly, The",1986,Drama|Horror,2.5,1260759113\n'
                    "2,7,Untitled,,(no genres listed),4,0\n", encoding="utf-8")
    rows = read_ratings(path)
    assert rows[0] == Rating(1, 2455, "Fly, The", 1986, ("Drama", "Horror"), 2.5)
    assert rows[1].year is None and rows[1].genres == ("(no genres listed)",)



def test_ratings_in_semicolons_gzipped_read_as_the_same_rows(tmp_path):
    """The one CSV reader: Excel's semicolons (a comma in a title kept) and compression."""
    import gzip
    lines = ["userId;movieId;title;year;genres;rating", '1;2455;"Fly, The";1986;Drama|Horror;2.5']
    path = tmp_path / "r.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert read_ratings(path) == [Rating(1, 2455, "Fly, The", 1986, ("Drama", "Horror"), 2.5)]

@pytest.mark.parametrize("line, message", [
    ("1,2,T,1990,Drama,six,0", r":3: rating 'six' is not a number from 0.5 to 5.0$"),
    ("1,2,T,1990,Drama,7.5,0", r":3: rating '7.5' is not a number"),
    ("x,2,T,1990,Drama,3,0", r":3: userId, movieId and year must be integers$"),
    ("1,2,T,1990,3,0", r":3: 6 fields but the header \(line 1\) has 7$"),
])
def test_a_bad_row_is_a_one_line_error_naming_file_and_line(tmp_path, line, message):
    path = tmp_path / "r.csv"
    path.write_text(",".join(HEADER) + "\n1,2,T,1990,Drama,3,0\n" + line + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="^" + str(path) + message) as info:
        read_ratings(path)
    assert "\n" not in str(info.value)


def test_a_header_without_the_columns_is_an_error(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("user,movie,rating\n1,2,3\n", encoding="utf-8")
    with pytest.raises(UserError, match=rf"^{path}:1: the header lacks userId, movieId, year, genres"):
        read_ratings(path)


def test_categories_encode_unseen_as_zero_and_bag_the_genres():
    cats = Categories.from_ratings(small_rows())
    assert cats.users == [1, 2, 3] and cats.movies == [10, 20, 30]
    assert cats.titles == ["A (1995)", "B", "C (2003)"] and cats.counts == [2, 1, 1]
    data = cats.encode(small_rows() + [Rating(9, 99, "Z", 1850, ("Western",), 3.0)])
    assert data["user"].tolist() == [1, 1, 2, 3, 0] and data["movie"].tolist() == [1, 2, 1, 3, 0]
    assert data["genres"].tolist() == [[2, 0], [0, 0], [2, 0], [1, 2], [0, 0]]
    assert data["year"].tolist() == [1, 0, 1, 2, 0]  # 1995-1999 = 1, unknown, 2000-2004 = 2


def test_baselines_by_hand():
    cats = Categories.from_ratings(small_rows())
    train = cats.encode(small_rows())
    dev = cats.encode([Rating(3, 10, "A", 1995, (), 3.0), Rating(2, 40, "new", None, (), 3.0)])
    # global mean 3.0; movie 10's mean 4.5, movie 40 unseen -> 3.0
    assert baselines(train, dev) == pytest.approx({"global_mean": 0.0,
                                                   "movie_mean": (1.5 ** 2 / 2) ** 0.5})


def config(kind: str) -> RecommenderConfig:
    return RecommenderConfig(users=6, movies=7, genres=4, years=3, kind=kind, dim=5, hidden=8)


def test_the_one_hot_model_is_additive_and_the_embedding_models_are_not():
    """One weight per category cannot say who likes what: r(u1, m1) + r(u2, m2) = r(u1, m2) +
    r(u2, m1). A product of learned vectors can."""
    g = torch.Generator().manual_seed(0)
    genres, year = torch.tensor([[1, 2], [3, 0]]), torch.tensor([1, 2])
    for kind in ("onehot", "dot", "mlp"):
        model = Recommender(config(kind), torch.Generator().manual_seed(1))
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(generator=g)
            r = lambda u, m: model(torch.tensor([u, u]), torch.tensor([m, m]), genres, year)
            gap = (r(1, 2) + r(3, 4) - r(1, 4) - r(3, 2)).abs().max()
        assert (float(gap) < 1e-5) is (kind == "onehot")


def test_the_one_hot_model_equals_one_hot_columns_times_a_weight_vector():
    model = Recommender(config("onehot"))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(generator=torch.Generator().manual_seed(2))
    user, movie = torch.tensor([1, 5]), torch.tensor([6, 0])
    genres, year = torch.tensor([[1, 3], [2, 0]]), torch.tensor([0, 2])
    onehot = lambda idx, n: torch.nn.functional.one_hot(idx, n).float()
    genre_columns = (onehot(genres, 4) * (genres != 0)[..., None]).sum(1) \
        / (genres != 0).sum(1, keepdim=True)
    expected = (3.5 + onehot(user, 6) @ model.user.weight + onehot(movie, 7) @ model.movie.weight
                + genre_columns @ model.genre.weight + onehot(year, 3) @ model.year.weight)
    with torch.no_grad():
        assert torch.allclose(model(user, movie, genres, year), expected.squeeze(-1), atol=1e-6)


def test_save_load_round_trip_neighbours_and_picture(tmp_path):
    cats = Categories.from_ratings([Rating(u, m, f"Movie {m}", 2000, ("Drama",), 3.0)
                                    for u in range(1, 5) for m in range(1, 7)])
    model = Recommender(RecommenderConfig(users=5, movies=7, genres=2, years=cats.year_buckets,
                                          kind="dot", dim=4), torch.Generator().manual_seed(0))
    data = cats.encode([Rating(2, 3, "", 2000, ("Drama",), 3.0), Rating(9, 1, "", None, (), 1.0)])
    save_recommender(model, cats, tmp_path / "m")
    loaded, loaded_cats = load_recommender(tmp_path / "m")
    assert loaded_cats == cats
    assert torch.equal(predict(model, data), predict(loaded, data))
    found = neighbours(tmp_path / "m", "Movie 2", k=3, min_ratings=1)
    assert found == neighbours_of(model, cats, 2, k=3, min_ratings=1)
    vectors = model.movie_vectors()[1:]
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    best = max((i for i in range(6) if i != 1), key=lambda i: unit[i] @ unit[1])
    assert found[0][0] == cats.movies[best] and found[0][2] == pytest.approx(unit[best] @ unit[1])
    with pytest.raises(UserError, match="no movie title contains 'Nothing'"):
        neighbours(tmp_path / "m", "Nothing")
    points = plot_items(model, cats, tmp_path / "movies.png", n=5, labels=2)
    assert points.xy.shape == (5, 2) and points.labelled == [0, 1]
    assert (tmp_path / "movies.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_save_that_fails_leaves_the_previous_model_whole(tmp_path, monkeypatch):
    """One folder swap: the weights and the config appear together or not at all."""
    cats = Categories.from_ratings([Rating(u, m, f"Movie {m}", 2000, ("Drama",), 3.0)
                                    for u in range(1, 4) for m in range(1, 4)])
    config = RecommenderConfig(users=4, movies=4, genres=2, years=cats.year_buckets, kind="dot",
                               dim=4)
    save_recommender(Recommender(config, torch.Generator().manual_seed(0)), cats, tmp_path / "m")
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}

    def full_disk(*args, **kwargs):  # the weights are written, the config fails
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(entities.json, "dump", full_disk)
    with pytest.raises(UserError, match=f"^{tmp_path / 'm'}: no space left"):
        save_recommender(Recommender(config, torch.Generator().manual_seed(1)), cats,
                         tmp_path / "m")
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


def test_a_planted_low_rank_table_is_learned_better_than_the_baselines(tmp_path):
    """ratings = 3 + 0.8 * u . v (rank 2) + noise: the dot model must find the interaction
    that the baselines and the additive one-hot model cannot."""
    g = np.random.default_rng(0)
    users, movies = g.normal(size=(120, 2)), g.normal(size=(60, 2))
    table = np.clip(3.0 + 0.8 * users @ movies.T + g.normal(0, 0.1, (120, 60)), 0.5, 5.0)
    cells = [(u + 1, m + 1, table[u, m]) for u in range(120) for m in range(60)]
    order = g.permutation(len(cells))
    write_csv(tmp_path / "train.csv", [cells[i] for i in order[:5000]])
    write_csv(tmp_path / "dev.csv", [cells[i] for i in order[5000:6000]])
    result = run_entities(EntitiesOptions(
        train=str(tmp_path / "train.csv"), dev=str(tmp_path / "dev.csv"), out=str(tmp_path / "o"),
        kinds=("onehot", "dot"), dim=8, epochs=30, batch_size=128, lr=1e-2, weight_decay=0.01,
        movies=("Movie 1,",), min_ratings=1))
    r = result.metrics["dev_rmse"]
    assert r["dot"] < 0.5 * r["movie_mean"] and r["dot"] < 0.5 * r["onehot"]
    assert r["dot"] < 0.5 * r["global_mean"]
    assert len(result.neighbours["dot"]["Movie 1,"]) == 8
    assert (tmp_path / "o" / "movies.png").is_file() and (tmp_path / "o" / "metrics.json").is_file()


def test_the_real_movielens_files_read_whole(shared_data):
    rows = read_ratings(shared_data / "tabular" / "movielens.dev.csv")
    assert len(rows) == 9972 and all(0.5 <= r.rating <= 5 for r in rows)


@pytest.mark.slow
def test_one_epoch_on_movielens_beats_the_global_mean(tmp_path, shared_data):
    result = run_entities(EntitiesOptions(
        train=str(shared_data / "tabular" / "movielens.train.csv"),
        dev=str(shared_data / "tabular" / "movielens.dev.csv"), out=str(tmp_path / "o"),
        kinds=("mlp",), epochs=1, movies=("Toy Story",), top_k=3))
    r = result.metrics["dev_rmse"]
    assert r["mlp"] < r["movie_mean"] < r["global_mean"]
    assert [t for _, t, _ in result.neighbours["mlp"]["Toy Story"]][0] != "Toy Story (1995)"
