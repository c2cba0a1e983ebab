"""Data files llm-bench reads at run time, shipped inside the package (``engines/*.toml``: the engine
profiles). Read them with ``importlib.resources.files("configs")``, never by a path beside the code:
a wheel installs them wherever its packages go."""
