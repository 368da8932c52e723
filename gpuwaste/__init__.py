"""gpuwaste: where do a shared GPU cluster's GPU hours go?"""

__version__ = "0.1.0"
