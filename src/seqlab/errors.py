"""Exceptions that the command line turns into one clear line and their ``exit_code`` (2, or 3 for a diverged run).

Every message names what is wrong and where (file and line, argument, or directory), so the CLI can print
``seqlab: error: <message>`` and nothing else.
"""


class SeqlabError(Exception):
    """Base class: a problem with the user's input, reported as one line without a traceback."""

    exit_code = 2  # what ``seqlab`` exits with after printing the message


class DataError(SeqlabError, ValueError):
    """A data file is missing, empty, binary or malformed; the message names the file and line."""


class ConfigError(SeqlabError, ValueError):
    """A bad recipe name, ``--set`` key or value, or configuration file."""


class CheckpointError(SeqlabError, ValueError):
    """A checkpoint directory is missing, incomplete or was not written by seqlab."""


class UnknownSymbolError(SeqlabError, KeyError):
    """A symbol that the vocabulary never saw (for example a letter absent from the training words)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else ""


class StorageError(SeqlabError, OSError):
    """A file could not be written (a full disk, no permission); the message names the file and the reason."""


class DivergenceError(SeqlabError, FloatingPointError):
    """Training diverged: too many optimizer steps in a row had a non-finite loss or gradient norm, or no
    validation ever had a finite loss. The run directory keeps its last good checkpoint; ``seqlab`` exits 3."""

    exit_code = 3
