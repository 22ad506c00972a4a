"""The standalone GPU runner (``runner.py`` imports nothing from steptp; it travels alone)."""
