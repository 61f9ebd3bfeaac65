#!/usr/bin/python3
"""Deterministic inputs of the language-model benchmark.

    make_inputs.py ids OUT --records 8 --length 256 --vocab 50257 [--seed 1]
        space-separated token ids, one record per line (masque --input-format ids)
    make_inputs.py stories OUT --records 4000 [--seed 2]
        TinyStories-like sentences, one per line (plain text for the stories260k pipeline)

Same arguments, same bytes.
"""
import argparse
import random

NAMES = ["Lily", "Tom", "Ben", "Mia", "Sam", "Anna", "Max", "Sue", "Tim", "Lucy", "Jack", "Emma"]
ANIMALS = ["cat", "dog", "bird", "bunny", "frog", "duck", "fish", "bear", "puppy", "kitten"]
THINGS = ["ball", "box", "tree", "car", "boat", "cake", "hat", "kite", "toy", "flower", "book",
          "rock", "cup", "shoe", "apple", "star"]
PLACES = ["park", "garden", "house", "forest", "beach", "school", "pond", "town", "yard", "sky"]
ADJECTIVES = ["big", "small", "red", "happy", "sad", "shiny", "little", "soft", "kind", "funny",
              "blue", "old", "brave", "pretty"]
VERBS = ["played with", "found", "saw", "liked", "wanted", "shared", "lost", "made", "helped"]
FEELINGS = ["happy", "sad", "scared", "excited", "tired", "proud", "surprised", "angry"]
TEMPLATES = [
    "Once upon a time, there was a {adj} {animal} named {name}.",
    "{name} went to the {place} with a {adj} {thing}.",
    "One day, {name} {verb} a {adj} {thing} in the {place}.",
    "{name} was very {feeling} because the {thing} was {adj}.",
    "The {animal} {verb} the {thing} and said, \"Thank you, {name}!\"",
    "{name} and the {animal} were best friends, and they played in the {place} every day.",
    "\"Look at the {adj} {thing}!\" said {name} to the {animal}.",
    "After that, {name} felt {feeling} and went home to sleep.",
    "The {adj} {animal} did not want to share the {thing}, so {name} was {feeling}.",
    "{name} learned that it is good to be {adj} and to help friends.",
]


def sentence(rng):
    return rng.choice(TEMPLATES).format(
        name=rng.choice(NAMES), animal=rng.choice(ANIMALS), thing=rng.choice(THINGS),
        place=rng.choice(PLACES), adj=rng.choice(ADJECTIVES), verb=rng.choice(VERBS),
        feeling=rng.choice(FEELINGS))


def stories(out, records, seed):
    rng = random.Random(seed)
    with open(out, "w") as f:
        for _ in range(records):
            # One to three sentences: records of varied length, as a real corpus has.
            f.write(" ".join(sentence(rng) for _ in range(rng.randint(1, 3))) + "\n")


def ids(out, records, length, vocab, seed):
    rng = random.Random(seed)
    with open(out, "w") as f:
        for _ in range(records):
            f.write(" ".join(str(rng.randrange(vocab)) for _ in range(length)) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["ids", "stories"])
    ap.add_argument("out")
    ap.add_argument("--records", type=int, required=True)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.kind == "ids":
        ids(args.out, args.records, args.length, args.vocab, args.seed)
    else:
        stories(args.out, args.records, args.seed)


if __name__ == "__main__":
    main()
