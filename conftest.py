"""Loads the specgate plugin for every pytest run from this checkout."""

pytest_plugins = ["fixtures.plugin", "fixtures.live"]
