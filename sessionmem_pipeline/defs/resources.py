"""The one Dagster resource: the project's configuration, built by the single loader (INTERFACES.md)."""


import dagster as dg

from sessionmem_pipeline.config import Settings, load_settings
from sessionmem_pipeline.providers import Embedder, embedder_from_settings


class SessionmemResource(dg.ConfigurableResource):
    """Where the warehouse and the sources are, and which models to use (config file and SESSIONMEM_* variables)."""

    config_file: str | None = None
    warehouse: str | None = None

    def settings(self) -> Settings:
        return load_settings(self.config_file, {"warehouse": self.warehouse})

    def embedder(self) -> Embedder:
        return embedder_from_settings(self.settings())
