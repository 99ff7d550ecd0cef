"""Task data: WikiText-2, HellaSwag and BoolQ from the Hub, local files, or offline stand-ins."""

from accelstudy.data.sources import REQUIRED_COLUMNS, DataSourceError, load_split, prepare_split

__all__ = ["REQUIRED_COLUMNS", "DataSourceError", "load_split", "prepare_split"]
