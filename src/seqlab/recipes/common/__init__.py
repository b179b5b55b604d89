"""What several recipes share and no lower layer should hold: config sections and task pieces of the recipe layer.

Recipes import from here and from the layers below (data, models, training, decoding, analysis), never from one
another (an import-linter contract in pyproject.toml keeps them independent).
"""
