"""Model ids and revisions as the Hugging Face Hub names them. Both become parts of URLs, cache folders
(`models--ORG--NAME`, `refs/<revision>`, `snapshots/<commit>`) and engine arguments, so they are checked
as names, never trusted as paths.

A repo id follows huggingface_hub's own `validate_repo_id`: `org/name`, ASCII letters, digits, `-`, `_`
and `.`, neither part starting or ending with `-` or `.`, no `--` or `..`, no `.git` ending, at most 96
characters per part. A revision is a 40-hex commit or a git ref name as the Hub serves them: parts of
letters, digits, `-`, `_`, `.` and `+` separated by single `/` (a branch `release/v2`, the Hub's pull request
refs `refs/pr/1`), no part starting with `.` or `-`, no `..`, no `.lock` ending, at most 128 characters.
"""

from __future__ import annotations

import re

COMMIT = re.compile(r"[0-9a-f]{40}")
_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?")
_REF_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]*")
MAX_REVISION = 128

REPO_ID_RULE = (
    "a Hub repo id like Qwen/Qwen3-32B: org/name of ASCII letters, digits, '-', '_' and '.' (each part at most "
    "96 characters, not starting or ending with '-' or '.'; no '--', '..' or '.git' ending)"
)
REVISION_RULE = (
    "a 40-hex commit, or a branch or tag name like main, v1.0 or refs/pr/1 (letters, digits, '-', '_', '.', "
    f"'+' and single '/'; no part starting with '.' or '-', no '..'; at most {MAX_REVISION} characters)"
)


def is_repo_id(text: str) -> bool:
    parts = text.split("/")
    return (
        len(parts) == 2
        and all(_PART.fullmatch(p) for p in parts)
        and "--" not in text
        and ".." not in text
        and not text.endswith(".git")
    )


def is_revision(text: str) -> bool:
    if COMMIT.fullmatch(text):
        return True
    if not 0 < len(text) <= MAX_REVISION or ".." in text:
        return False
    return all(_REF_PART.fullmatch(p) and not p.endswith(".lock") for p in text.split("/"))
