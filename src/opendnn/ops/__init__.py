"""Operation definitions: the math of each operation family and its float64 reference."""
