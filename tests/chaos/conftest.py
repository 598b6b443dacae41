"""The chaos suite's fixtures come from the project's pytest plugin (chaos/pytest_plugin.py): ``run_chaos`` and
a session baseline cache; its ``chaos_toxiproxy`` is the module's Toxiproxy server (tests/conftest.py)."""
