"""The one benchmark runner: ``python -m opendnn.bench <family>``."""
