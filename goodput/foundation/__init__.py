"""The floor every part stands on: errors, YAML loading, histograms, progress bars, HTTP serving.

Nothing here imports from the simulator, the exporters, the analyzer or the command line; they all
import from here (``tests/test_layers.py`` keeps it that way).
"""

from goodput.foundation.errors import ConfigError

__all__ = ["ConfigError"]
