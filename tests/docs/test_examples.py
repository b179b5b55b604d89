"""Every Python example of the documentation runs as written, so a page cannot go stale.

Each ```python block of ``docs/course/*.md`` is executed in a fresh namespace; its assertions are the page's claims
(weights of padded positions are zero, self-attention is permutation-equivariant, the sinusoidal wavelength).
"""

import re
from pathlib import Path

import pytest

COURSE = Path(__file__).parents[2] / "docs" / "course"
EXAMPLES = [
    pytest.param(source, id=f"{page.stem}-{index}")
    for page in sorted(COURSE.glob("*.md"))
    for index, source in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.DOTALL))
]


def test_the_course_pages_have_examples():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("source", EXAMPLES)
def test_example_runs(source, capsys):
    exec(compile(source, "<docs example>", "exec"), {})
