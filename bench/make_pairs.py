"""Our own English minimal pairs, from templates over common words: bench/data/minimal_pairs.jsonl.

Written for bertkit (not taken from BLiMP or any published set), to compare pretraining recipes
with `bertkit evaluate --model RUN --input bench/data/minimal_pairs.jsonl`. Each line is
{"sentence_good", "sentence_bad", "UID", "field", "pairID"} in BLiMP's format; "UID" names the
phenomenon:

  sv_agreement_simple          the dog runs .            / the dog run .
  sv_agreement_across_pp       the keys on the table are  / ... is
  sv_agreement_across_relative the boy that the girls like is / ... are
  determiner_noun_agreement    this book / these books    / these book / this books
  anaphor_agreement            Mary saw herself / the boys saw themselves / ... himself
  adjective_noun_order         the big dog is here        / the dog big is here
  auxiliary_placement          the children will eat      / the children eat will
  transitive_missing_object    the man wore a coat .      / the man wore .
  irregular_past_participle    has eaten                  / has ate
  npi_ever                     no student has ever        / the student has ever

Seeded and deterministic: the same seed gives the same file, byte for byte.

    .venv/bin/python bench/make_pairs.py [--per-uid 100] [--seed 0]
                                         [--out bench/data/minimal_pairs.jsonl]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bertkit.files import atomic_file  # noqa: E402  (the repository on the path first)

# (singular, plural) nouns: people, animals, things.
PEOPLE = [("boy", "boys"), ("girl", "girls"), ("man", "men"), ("woman", "women"),
          ("teacher", "teachers"), ("student", "students"), ("doctor", "doctors"),
          ("child", "children"), ("farmer", "farmers"), ("friend", "friends"),
          ("driver", "drivers"), ("worker", "workers")]
ANIMALS = [("dog", "dogs"), ("cat", "cats"), ("bird", "birds"), ("horse", "horses"),
           ("mouse", "mice"), ("fish", "fish"), ("cow", "cows"), ("duck", "ducks")]
THINGS = [("book", "books"), ("key", "keys"), ("box", "boxes"), ("car", "cars"),
          ("chair", "chairs"), ("cup", "cups"), ("letter", "letters"), ("picture", "pictures"),
          ("shoe", "shoes"), ("window", "windows")]
AGENTS = PEOPLE + [a for a in ANIMALS if a[0] != "fish"]  # "fish" is both numbers
# (third person singular, plural) of intransitive verbs.
INTRANSITIVE = [("runs", "run"), ("sleeps", "sleep"), ("sings", "sing"), ("walks", "walk"),
                ("laughs", "laugh"), ("waits", "wait"), ("smiles", "smile"), ("jumps", "jump"),
                ("swims", "swim"), ("works", "work")]
PLACES = ["on the table", "near the door", "in the kitchen", "under the bed", "by the window",
          "in the garden", "behind the house"]
ADJECTIVES = ["big", "small", "old", "new", "red", "happy", "young", "quiet", "tall", "long"]
# Verbs that need an object, with objects they take.
TRANSITIVE = [("wore", ["a coat", "a hat", "the red shoes", "a blue shirt"]),
              ("grabbed", ["the rope", "his bag", "the cup", "a pen"]),
              ("brought", ["the food", "a letter", "some water", "the keys"]),
              ("borrowed", ["a book", "the car", "some money", "a pencil"]),
              ("fixed", ["the chair", "the window", "an old clock", "the door"]),
              ("bought", ["a car", "new shoes", "some bread", "the house"]),
              ("hired", ["a driver", "two workers", "a new teacher", "the cook"])]
# (past participle, simple past) of irregular verbs, with objects.
PARTICIPLES = [("eaten", "ate", ["the cake", "an apple", "the bread"]),
               ("written", "wrote", ["a letter", "the report", "a song"]),
               ("broken", "broke", ["the window", "a cup", "the chair"]),
               ("taken", "took", ["the bus", "the money", "a picture"]),
               ("seen", "saw", ["the movie", "a ghost", "the sea"]),
               ("given", "gave", ["a gift", "the answer", "a speech"]),
               ("driven", "drove", ["the car", "a truck", "the bus"]),
               ("spoken", "spoke", ["the truth", "two languages", "a few words"]),
               ("chosen", "chose", ["a book", "the red one", "a name"]),
               ("stolen", "stole", ["the money", "a bike", "the keys"])]
WOMEN = ["Mary", "Anna", "Sarah", "Emma", "Lucy", "the woman", "the girl", "the queen",
         "my mother", "his sister"]
MEN = ["John", "Peter", "David", "Tom", "James", "the man", "the boy", "the king",
       "my father", "her brother"]
REFLEXIVE_VERBS = ["saw", "hurt", "praised", "blamed", "helped", "watched", "described"]
AUXILIARIES = ["will", "can", "should", "must", "might", "could"]
BASE_VERBS = [("eat", "the apples"), ("read", "the letter"), ("open", "the door"),
              ("clean", "the kitchen"), ("paint", "the fence"), ("find", "the keys"),
              ("carry", "the boxes"), ("visit", "the farm")]


def sv_simple(rng: random.Random) -> tuple[str, str]:
    (one, many), (verb_one, verb_many) = rng.choice(AGENTS), rng.choice(INTRANSITIVE)
    plural = rng.random() < 0.5
    noun, good, bad = (many, verb_many, verb_one) if plural else (one, verb_one, verb_many)
    det = rng.choice(["the", "these", "those", "some"] if plural else ["the", "this", "that", "a"])
    return f"{det} {noun} {good} .", f"{det} {noun} {bad} ."


def sv_across_pp(rng: random.Random) -> tuple[str, str]:
    (one, many), place = rng.choice(THINGS), rng.choice(PLACES)  # a singular attractor
    plural = rng.random() < 0.5
    good, bad = ("are", "is") if plural else ("is", "are")
    tail = rng.choice(["old", "broken", "new", "mine", "very small"])
    noun = many if plural else one
    return f"the {noun} {place} {good} {tail} .", f"the {noun} {place} {bad} {tail} ."


def sv_across_relative(rng: random.Random) -> tuple[str, str]:
    (one, many), (a_one, a_many) = rng.sample(PEOPLE, 2)
    plural = rng.random() < 0.5
    noun = many if plural else one
    attractor = a_one if plural else a_many  # the noun inside the clause has the other number
    verb = rng.choice(["like", "know", "met", "saw", "helped"]) if not plural else \
        rng.choice(["likes", "knows", "met", "saw", "helped"])
    good, bad = ("are", "is") if plural else ("is", "are")
    tail = rng.choice(["tall", "here", "very kind", "at home", "tired"])
    clause = f"that the {attractor} {verb}"
    return f"the {noun} {clause} {good} {tail} .", f"the {noun} {clause} {bad} {tail} ."


def determiner_noun(rng: random.Random) -> tuple[str, str]:
    one, many = rng.choice([t for t in THINGS + ANIMALS + PEOPLE if t[0] != t[1]])
    plural = rng.random() < 0.5
    near = rng.random() < 0.5
    det_one, det_many = ("this", "these") if near else ("that", "those")
    verb = rng.choice(["saw", "liked", "wanted", "found", "needed"])
    subject = rng.choice(["I", "we", "they", "she", "he"])
    if plural:
        return f"{subject} {verb} {det_many} {many} .", f"{subject} {verb} {det_one} {many} ."
    return f"{subject} {verb} {det_one} {one} .", f"{subject} {verb} {det_many} {one} ."


def anaphor(rng: random.Random) -> tuple[str, str]:
    verb = rng.choice(REFLEXIVE_VERBS)
    subject, own = rng.choice([(rng.choice(WOMEN), "herself"), (rng.choice(MEN), "himself"),
                               (f"the {rng.choice(PEOPLE)[1]}", "themselves")])
    other = rng.choice([w for w in ("herself", "himself", "themselves") if w != own])
    return f"{subject} {verb} {own} .", f"{subject} {verb} {other} ."


def adjective_order(rng: random.Random) -> tuple[str, str]:
    # In subject position, where "noun adjective" cannot be read as a small clause
    # ("we found the cow happy" is good English).
    adjective, (noun, _) = rng.choice(ADJECTIVES), rng.choice(ANIMALS + THINGS)
    rest = rng.choice(["is here", "was lost", "is in the garden", "was on the table",
                       "is mine", "was near the door"])
    return f"the {adjective} {noun} {rest} .", f"the {noun} {adjective} {rest} ."


def auxiliary(rng: random.Random) -> tuple[str, str]:
    aux, (verb, obj) = rng.choice(AUXILIARIES), rng.choice(BASE_VERBS)
    subject = rng.choice(["the children", "the teacher", "my friends", "she", "they", "we",
                          "the farmer", "he"])
    return f"{subject} {aux} {verb} {obj} .", f"{subject} {verb} {aux} {obj} ."


def transitive(rng: random.Random) -> tuple[str, str]:
    verb, objects = rng.choice(TRANSITIVE)
    subject = rng.choice(["the man", "the woman", "my brother", "the teacher", "she", "he",
                          "the doctor", "our neighbour"])
    when = rng.choice(["", " yesterday", " last week", " this morning"])
    return f"{subject} {verb} {rng.choice(objects)}{when} .", f"{subject} {verb}{when} ."


def participle(rng: random.Random) -> tuple[str, str]:
    done, past, objects = rng.choice(PARTICIPLES)
    subject, aux = rng.choice([("she", "has"), ("he", "has"), ("they", "have"), ("we", "have"),
                               ("the boy", "has"), ("my friends", "have"), ("the girl", "had"),
                               ("the workers", "had")])
    obj = rng.choice(objects)
    return f"{subject} {aux} {done} {obj} .", f"{subject} {aux} {past} {obj} ."


def npi(rng: random.Random) -> tuple[str, str]:
    one, _ = rng.choice(PEOPLE)
    done, _, objects = rng.choice(PARTICIPLES)
    obj = rng.choice(objects)
    bad_det = rng.choice(["the", "this", "every", "that"])
    return f"no {one} has ever {done} {obj} .", f"{bad_det} {one} has ever {done} {obj} ."


# UID -> (field, template)
TEMPLATES: dict[str, tuple[str, Callable[[random.Random], tuple[str, str]]]] = {
    "sv_agreement_simple": ("morphology", sv_simple),
    "sv_agreement_across_pp": ("syntax", sv_across_pp),
    "sv_agreement_across_relative": ("syntax", sv_across_relative),
    "determiner_noun_agreement": ("morphology", determiner_noun),
    "anaphor_agreement": ("morphology", anaphor),
    "adjective_noun_order": ("syntax", adjective_order),
    "auxiliary_placement": ("syntax", auxiliary),
    "transitive_missing_object": ("syntax", transitive),
    "irregular_past_participle": ("morphology", participle),
    "npi_ever": ("semantics", npi),
}


def written(sentence: str) -> str:
    """As printed: a capital first letter, the full stop against the last word."""
    sentence = sentence.replace(" .", ".")
    return sentence[0].upper() + sentence[1:]


def pairs(per_uid: int, seed: int) -> Iterator[dict]:
    """`per_uid` distinct pairs of every phenomenon (fewer if the templates give fewer)."""
    for uid, (field, template) in TEMPLATES.items():
        rng = random.Random(f"{seed}/{uid}")
        seen: set[tuple[str, str]] = set()
        for _ in range(per_uid * 50):
            if len(seen) == per_uid:
                break
            good, bad = template(rng)
            if (good, bad) in seen or good == bad:
                continue
            seen.add((good, bad))
            yield {"sentence_good": written(good), "sentence_bad": written(bad), "UID": uid,
                   "field": field, "pairID": f"{uid}_{len(seen)}"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-uid", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path,
                        default=REPO / "bench" / "data" / "minimal_pairs.jsonl")
    args = parser.parse_args(argv)
    rows = list(pairs(args.per_uid, args.seed))
    with atomic_file(args.out) as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    counts = {uid: sum(r["UID"] == uid for r in rows) for uid in TEMPLATES}
    print(f"{len(rows)} pairs written to {args.out}: {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
