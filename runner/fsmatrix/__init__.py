"""fsmatrix: which filesystem, mount options and database settings make a database fastest."""

__version__ = "0.1.0"
