"""The README's Python examples are real: each ```python block that the
README follows with a plain ``` block of output is run in a fresh
directory, and what it prints must be that output."""

import os
import re
import subprocess
import sys

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")


def examples():
    """(line, code, expected output) for each ```python block followed,
    after blank lines only, by a plain ``` block."""
    text = open(README, encoding="utf-8").read()
    blocks = [(text.count("\n", 0, m.start()) + 1, m.group(1), m.group(2), m.end())
              for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M)]
    out = []
    for (line, lang, code, end), (_, next_lang, body, _) in zip(blocks, blocks[1:]):
        gap = text[end:text.find("```", end)]
        if lang == "python" and next_lang == "" and not gap.strip():
            out.append((line, code, body))
    return out


def test_the_readme_has_examples_with_output():
    assert len(examples()) >= 1


@pytest.mark.parametrize("line,code,expected", examples(), ids=[f"README.md:{e[0]}" for e in examples()])
def test_readme_example_prints_what_the_readme_shows(tmp_path, line, code, expected):
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"README.md:{line}: the example failed:\n{r.stderr}"
    assert r.stdout == expected, f"README.md:{line}: the example printed\n{r.stdout}\nbut the README shows\n{expected}"
