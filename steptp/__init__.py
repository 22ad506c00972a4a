"""steptp: Step-TP dataset builder."""
__version__ = "0.1.0"
