"""gpuwaste: where do a shared GPU cluster's GPU hours go?

Importing the package defines names and changes nothing in the process: the allocator settings
are made where a gpuwaste process starts (gpuwaste/process.py)."""

__version__ = "0.1.0"
