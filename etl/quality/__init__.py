"""Data quality: the Great Expectations gate after each load, and the windowed quality report."""
