"""A matrix file's space (``results.verdict.space.Space``): its axes of two or more values as settings,
the full cross ``exclude`` left as configurations, and the matrix cell of each configuration."""
