"""The ``tether`` command line: a thin typer layer over importable functions."""
