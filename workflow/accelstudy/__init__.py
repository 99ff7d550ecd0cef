"""accelstudy: the science behind the Snakemake pipeline that reproduces the UCSD/SDSC study.

A site's own tasks, recipes, strategies or device kinds live outside the package: modules that
installed distributions name under the `accelstudy.plugins` entry points, each adding its entries
to the registries. They load with the package, so every process sees them alike (Snakemake's
parse, each job's CLI, each rank), on any executor."""

from importlib.metadata import entry_points

__version__ = "0.1.0"

for _plugin in entry_points(group="accelstudy.plugins"):
    try:
        _plugin.load()
    except Exception as error:  # its error's last line names the plugin and its module
        named = f"accelstudy plugin '{_plugin.name}' ({_plugin.value})"
        raise ImportError(f"{named} failed to load: {error}") from error
