"""The specgate plugin is loaded through its pytest11 entry point (specgate.plugin.entry),
installed with the package: `pip install -e .` (tox does this). Nothing else is needed here."""
