"""The example recipe of README.md's "Writing a recipe" section, cut out of the README (shared by the tests that
run it registered in-process and installed as a plugin; importable because pyproject's pytest settings put
``tests/`` on the path)."""

import re
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def example_source() -> str:
    section = README.read_text().split("## Writing a recipe\n", 1)[1].split("\n## ", 1)[0]
    (source,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    return source
