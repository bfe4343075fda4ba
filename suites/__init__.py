"""specgate's claims, one test per claim id, grouped by phase (installed as specgate_suites)."""
