"""Engines: implementation strategies, one folder per family, in one ordered registry."""
