"""The chaos suite's fixtures come from the project's pytest plugin (chaos/pytest_plugin.py):
``chaos_toxiproxy``, ``run_chaos`` and a session baseline cache."""
