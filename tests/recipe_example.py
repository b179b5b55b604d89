"""The example recipe of the documentation's "Writing a recipe" page, cut out of the page (shared by the tests that
run it registered in-process and installed as a plugin; importable because pyproject's pytest settings put
``tests/`` on the path)."""

import re
from pathlib import Path

PAGE = Path(__file__).parents[1] / "docs" / "guide" / "writing-a-recipe.md"


def example_source() -> str:
    section = PAGE.read_text()
    (source,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return source
