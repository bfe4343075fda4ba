"""The pytest plugin: options, session hooks, the verdict it writes; the one part of specgate
that imports pytest (its fixtures are the package specgate_fixtures)."""
