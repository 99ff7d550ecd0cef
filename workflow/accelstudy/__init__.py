"""accelstudy: the science behind the Snakemake pipeline that reproduces the UCSD/SDSC study."""

__version__ = "0.1.0"
