"""Write the schema-order suite's shipped dataset: weekday arithmetic in several steps.

Each item says what day of the week something falls on and moves it later and earlier by a few
days, two to four times; the label is the weekday it ends on. Working through the steps (or the
net shift modulo 7) gets it right, a guess from the surface gets it right one time in seven, so
a schema that lets the model reason before it answers has something to gain. The ground truth is
computed, never annotated.

Deterministic: the same seed writes the same bytes (a test re-runs it against the committed file).

    python scripts/make_schema_order_dataset.py [--out prober/suites/data/schema_order.jsonl]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ITEMS = 400
SEED = 20261130
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "suites" / "data" / "schema_order.jsonl"

EVENTS = ("the team's review meeting", "Maria's dentist appointment", "the library book sale",
          "the quarterly budget call", "the school concert", "the server maintenance window",
          "Sam's job interview", "the community garden workday", "the product launch demo",
          "the chess club final", "the landlord's inspection", "the charity bake sale")
LATER = ("postponed by {n} days", "pushed back {n} days", "moved {n} days later", "delayed by {n} days")
EARLIER = ("brought forward by {n} days", "moved {n} days earlier", "pulled in by {n} days")


def make_item(index: int, rng: random.Random) -> dict:
    start = rng.randrange(7)
    event = rng.choice(EVENTS)
    shifts = []
    for _ in range(rng.randint(2, 4)):
        days = rng.randint(1, 30)
        shifts.append(days if rng.random() < 0.6 else -days)
    steps = [(rng.choice(LATER) if days > 0 else rng.choice(EARLIER)).format(n=abs(days)) for days in shifts]
    moves = ", then ".join(steps)
    text = (f"{event[0].upper()}{event[1:]} was planned for a {WEEKDAYS[start]}. It was {moves}. "
            f"On which day of the week does it fall now?")
    return {"id": f"weekday-{index:04d}", "input": text, "label": WEEKDAYS[(start + sum(shifts)) % 7],
            "choices": list(WEEKDAYS)}


def generate(items: int = ITEMS, seed: int = SEED) -> list[dict]:
    rng = random.Random(seed)
    return [make_item(index, rng) for index in range(1, items + 1)]


def write(path: Path, items: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    write(args.out, generate())
    print(f"wrote {ITEMS} items to {args.out}")


if __name__ == "__main__":
    main()
