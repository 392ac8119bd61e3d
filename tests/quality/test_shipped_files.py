"""Which files of a Hub dataset a shipped lm-eval task reads: the dataset card's `configs:` data_files, else the
Hub's own layout; one format; a split with no files refused naming where labctl looked."""

from __future__ import annotations

import pytest

from labctl.errors import BadInput
from labctl.quality.shipped import choose_files, front_matter

CARD = b"""---
configs:
- config_name: ARC-Easy
  data_files:
  - split: test
    path: ARC-Easy/test-*
  - split: train
    path: [ARC-Easy/train-0.parquet, ARC-Easy/train-1.parquet]
- config_name: other
  data_files: other/*.jsonl
---
# card
"""
PATHS = [
    "ARC-Easy/test-00000-of-00001.parquet",
    "ARC-Easy/train-0.parquet",
    "ARC-Easy/train-1.parquet",
    "ARC-Easy/nested/test-9.parquet",
    "other/a.jsonl",
    "README.md",
]


def test_the_cards_configs_choose_each_splits_files() -> None:
    card = front_matter(CARD)
    fmt, files = choose_files("allenai/ai2_arc", PATHS, card, "ARC-Easy", ["test", "train"])
    assert fmt == "parquet"
    assert files == {
        "test": ["ARC-Easy/test-00000-of-00001.parquet"],  # `*` stays within its folder
        "train": ["ARC-Easy/train-0.parquet", "ARC-Easy/train-1.parquet"],
    }


def test_a_config_of_bare_files_is_its_train_split() -> None:
    fmt, files = choose_files("o/d", PATHS, front_matter(CARD), "other", ["train"])
    assert (fmt, files) == ("json", {"train": ["other/a.jsonl"]})


@pytest.mark.parametrize(
    ("paths", "config", "expected"),
    [
        (
            ["main/test-00000-of-00001.parquet", "main/train-00000-of-00001.parquet"],
            "main",
            "main/test-00000-of-00001.parquet",
        ),
        (["data/test-00000-of-00002.parquet", "x.txt"], None, "data/test-00000-of-00002.parquet"),
        (["test.jsonl", "train.jsonl"], None, "test.jsonl"),
    ],
)
def test_without_a_card_the_hubs_layout(paths: list[str], config: str | None, expected: str) -> None:
    _, files = choose_files("o/d", paths, None, config, ["test"])
    assert files == {"test": [expected]}


def test_a_split_without_files_or_of_another_format_is_refused() -> None:
    with pytest.raises(BadInput, match="no parquet or JSON files for split 'validation'"):
        choose_files("o/d", PATHS, front_matter(CARD), "ARC-Easy", ["validation"])
    with pytest.raises(BadInput, match="labctl reads parquet and JSON lines only"):
        choose_files("o/d", ["test.csv"], None, None, ["test"])
    with pytest.raises(BadInput, match="mix formats"):
        choose_files("o/d", ["test.jsonl", "train.parquet"], None, None, ["test", "train"])


@pytest.mark.parametrize("card", [b"no header", b"---\n: [unclosed\n---\n", b"---\n- a list\n---\n", b"---\nno end"])
def test_a_card_without_a_usable_header_is_none(card: bytes) -> None:
    assert front_matter(card) is None
